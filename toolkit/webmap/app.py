"""The ASGI app behind `toolkit serve`: the page, its tiles, points and metadata, read-only.

Endpoints (GET only): `/` the map page; `/meta?variable=V` the variables, selectors and levels
as JSON, with V's legend (and the default variable's); `/tiles/{z}/{x}/{y}.png?variable=V&DIM=VALUE` a 256x256 Web Mercator PNG (and
`/tiles/WorldCRS84Quad/{z}/{x}/{y}.png` in the data's own geographic CRS); `/point?variable=V
&lat=..&lon=..&zoom=Z` the value of the cell nearest (lat, lon) in the level that zoom is drawn
from, and that level's name. A tile no matrix has is a 404, a query naming nothing the data
has a 400, each with one line of text.

What is served is one version of the data at a time (`Served.view`): a repo's branch is looked
up again at most every `refresh` seconds, and tiles are cached under the version they were
read from, so a refresh never serves a stale tile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from importlib.resources import files
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from toolkit import options
from toolkit.webmap import colors, tiles
from toolkit.webmap.view import SelectionError, Source, View, open_view, version_of

__all__ = ["Served", "create_app"]

log = logging.getLogger(__name__)
RESERVED = frozenset({"variable", "v", "lat", "lon", "zoom"})  # query keys that are not dims


class LRU:
    """A bounded map, least recently used out first; owned by one app (never module-level)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class Served:
    """The dataset being served, at its newest version (looked up at most every `refresh` s)."""

    def __init__(
        self,
        source: Source,
        *,
        variable: str | None = None,
        colormap: str | None = None,
        value_range: tuple[float, float] | None = None,
        refresh: float = 2.0,
        cached_tiles: int = 4096,
    ) -> None:
        self.source = source
        if colormap is not None:
            colors.lookup(colormap)  # an unknown name is refused before anything is served
        if value_range is not None:  # finite, MIN < MAX: refused before anything is served
            value_range = options.parse_range(",".join(map(str, value_range)))
        self.colormap, self.value_range, self.refresh = colormap, value_range, refresh
        self.tiles = LRU(cached_tiles)
        self._lock = threading.Lock()
        self._view = open_view(source, colormap, value_range)
        self._checked = time.monotonic()
        self.default_variable = self._view.variable(variable).name

    def view(self) -> View:
        """The current version: reopened when the branch (or the root metadata) moved."""
        with self._lock:
            if time.monotonic() - self._checked < self.refresh:
                return self._view
            self._checked = time.monotonic()
            known = version_of(self.source, self._view.kind)
            if known[1] != self._view.version:
                log.info("%s moved to %s", self.source.name, known[1])
                self._view = open_view(
                    self.source, self.colormap, self.value_range, known, self._view.styles
                )
            return self._view


def _one_line(status: int, text: str) -> PlainTextResponse:
    return PlainTextResponse(text.splitlines()[0] if text else "error", status_code=status)


def _query(request: Request) -> tuple[str | None, dict[str, str]]:
    q = request.query_params
    return q.get("variable"), {k: v for k, v in q.items() if k not in RESERVED}


LAT = options.Bounded(float, -90, 90, "a latitude in degrees")
LON = options.Bounded(float, -360, 360, "a longitude in degrees")
ZOOM = options.Bounded(float, 0, 30, "a zoom level")  # the page may ask 3.5: its tiles are 3's


def _number(request: Request, name: str, check: options.Bounded, default: Any = None) -> Any:
    """A query parameter through the option layer's check: a bad one is a 400 naming it."""
    text = request.query_params.get(name, default)
    if text is None:
        raise options.BadValue(f"{request.url.path} wants {name}=, {check.what}")
    try:
        return check(text)
    except options.BadValue as err:
        raise options.BadValue(f"{request.url.path} {name}=: {err}") from None


def create_app(served: Served) -> Starlette:
    """The Starlette app serving `served` (run it with uvicorn, or `toolkit.webmap.serve`)."""
    static = files("toolkit.webmap") / "static"

    def index(request: Request) -> Response:
        return Response((static / "index.html").read_bytes(), media_type="text/html")

    def meta(request: Request) -> Response:
        view = served.view()
        wanted = {served.default_variable}
        if "variable" in request.query_params:  # the page's variable: its legend too
            wanted.add(view.variable(request.query_params["variable"]).name)
        body = view.describe(wanted)
        body.update(default_variable=served.default_variable, refresh=served.refresh,
                    tile_matrix_sets=list(tiles.TMS))  # fmt: skip
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    def tile(request: Request) -> Response:
        p = request.path_params
        tms_name = p.get("tms", "WebMercatorQuad")
        z, x, y = p["z"], p["x"], p["y"]
        view = served.view()
        name, given = _query(request)
        var = view.variable(name)
        sel = view.selection(var, given)
        key = (view.version, var.name, sel, tms_name, z, x, y)  # the level follows from these
        hit = served.tiles.get(key)
        if hit is None:
            hit = view.tile(var, sel, tiles.tms_named(tms_name), z, x, y)
            served.tiles.put(key, hit)
        body, level = hit
        pinned = request.query_params.get("v") == view.version
        cache = "public, max-age=86400, immutable" if pinned else "no-cache"
        return Response(body, media_type="image/png",
                        headers={"X-Level": level, "X-Version": view.version, "Cache-Control": cache})  # fmt: skip

    def point(request: Request) -> Response:
        view = served.view()
        name, given = _query(request)
        var = view.variable(name)
        lat, lon = _number(request, "lat", LAT), _number(request, "lon", LON)
        zoom = int(_number(request, "zoom", ZOOM, default=0))
        body = view.point(var, view.selection(var, given), tiles.tms_named("WebMercatorQuad"),
                          lat, lon, zoom)  # fmt: skip
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    async def bad_selection(request: Request, exc: Exception) -> Response:
        return _one_line(400, str(exc))

    async def bad_tile(request: Request, exc: Exception) -> Response:
        return _one_line(404, str(exc))

    async def not_found(request: Request, exc: Exception) -> Response:
        return _one_line(404, f"{request.url.path}: no such page, tile or endpoint")

    async def failed(request: Request, exc: Exception) -> Response:
        log.error("%s failed: %s", request.url.path, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        return _one_line(500, f"{request.url.path}: {type(exc).__name__}: {exc}")

    methods = ["GET", "HEAD"]
    routes = [
        Route("/", index, methods=methods),
        Route("/favicon.ico", lambda request: Response(status_code=204), methods=methods),
        Route("/meta", meta, methods=methods),
        Route("/point", point, methods=methods),
        Route("/tiles/{z:int}/{x:int}/{y:int}.png", tile, methods=methods),
        Route("/tiles/{tms}/{z:int}/{x:int}/{y:int}.png", tile, methods=methods),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]
    handlers: dict[Any, Any] = {
        SelectionError: bad_selection,
        options.BadValue: bad_selection,
        tiles.BadTile: bad_tile,
        404: not_found,
        Exception: failed,
    }
    return Starlette(routes=routes, exception_handlers=handlers)
