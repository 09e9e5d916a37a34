"""One version of a served dataset: its levels, variables, selectors and styles, and the reads
a tile or a point makes.

A pyramid store's version is the digest of its root metadata (a build rewrites it); a repo's
is the snapshot main points at: the home there (`toolkit.pyramid.home`) says which, and reads
the levels of that version. A `View` is opened for exactly one version and never changes,
so everything cached under its version (styles here, tiles in the app) is true of that data.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from toolkit import storage
from toolkit.stac import axis_of, crs_of, geographic, label_of
from toolkit.webmap import colors, tiles

__all__ = ["SelectionError", "Source", "View", "open_view", "version_of"]

Credentials = Literal["anonymous", "env"]
BASE = "1x"  # the tree's name for level 0 (toolkit's xarray engine)


class SelectionError(ValueError):
    """A query that names no variable of the dataset, or a label a dimension does not have."""


@dataclass(frozen=True)
class Source:
    """Where the data is and how to open it: never shown to a browser (it may hold options)."""

    location: str
    credentials: Credentials = "anonymous"
    store_options: Mapping[str, Any] = field(default_factory=dict)
    branch: str = "main"

    @property
    def name(self) -> str:
        """What the page may show: the location without any user, password or query."""
        text = self.location
        if "://" in text:
            scheme, rest = text.split("://", 1)
            host, _, path = rest.partition("/")
            text = f"{scheme}://{host.rpartition('@')[2]}/{path.split('?', 1)[0]}"
        return text.rstrip("/")

    def store(self) -> storage.Store:
        return storage.open_store(self.location, must_exist=True, **dict(self.store_options))


def _home(source: Source) -> Any:
    """Where the data lives (`toolkit.pyramid.home.open_home`: a pyramid's Zarr store or a
    repo), its location opened once."""
    from toolkit.pyramid.home import open_home

    try:
        store = source.store()
    except storage.NotFound:
        raise SelectionError(f"{source.name}: does not exist; check the path") from None
    return open_home(store, storage.Options(credentials=source.credentials))


def version_of(source: Source, kind: str | None = None) -> tuple[str, str]:
    """("pyramid", digest of the root zarr.json) or ("repo", snapshot id of the branch), as
    the home there says; a location that holds neither is named in one line. (`kind`, what
    the caller saw last, is the home's to know: kept for callers.)"""
    try:
        return _home(source).version(source.branch)
    except storage.NotFound:  # no root zarr.json, and no repo either
        raise SelectionError(
            f"{source.name}: holds no zarr.json at its root and no Icechunk repo; "
            "serve a pyramid built by `toolkit pyramid build` or a virtual repo"
        ) from None


@dataclass(frozen=True)
class Leading:
    """A dimension other than y and x: one value is shown at a time."""

    dim: str
    labels: tuple[str, ...]
    default: int

    def index(self, given: str | None) -> int:
        if given is None:
            return self.default
        if given in self.labels:
            return self.labels.index(given)
        try:  # 3 for "3.0", 850 for "850"
            wanted = float(given)
            return next(i for i, v in enumerate(self.labels) if _number(v) == wanted)
        except (ValueError, StopIteration):
            pass
        few = ", ".join(self.labels[:3]) + (
            f", ... {self.labels[-1]}" if len(self.labels) > 3 else ""
        )
        raise SelectionError(
            f"{self.dim}={given!r} is none of its {len(self.labels)} values ({few})"
        )


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class Level:
    name: str  # "0" for level 0, else the group ("2x", "4x", ...)
    ds: Any  # xarray Dataset, lazily indexed (nothing read until a tile asks)
    grid: tiles.Grid
    y: str
    x: str


@dataclass(frozen=True)
class Variable:
    name: str
    attrs: Mapping[str, Any]
    leading: tuple[Leading, ...]  # level 0's labels: what the page offers
    levels: tuple[Level, ...]  # finest first: the levels that hold this variable
    # per level, each leading dim's {label: index}: a level built before the append dim grew
    # lacks the newest labels, and a selection it lacks is served from a finer level
    indexes: tuple[dict[str, dict[str, int]], ...] = ()

    @property
    def units(self) -> str:
        return str(self.attrs.get("units", ""))

    def holding(self, sel: tuple[int, ...]) -> list[tuple[Level, dict[str, int]]]:
        """The levels that hold the selection (level 0 always does), with its indexes there."""
        out = []
        for level, index in zip(self.levels, self.indexes, strict=True):
            at = {}
            for lead, i in zip(self.leading, sel, strict=True):
                j = index.get(lead.dim, {}).get(lead.labels[i])
                if j is None:
                    break
                at[lead.dim] = j
            else:
                out.append((level, at))
        return out


@dataclass
class View:
    """The dataset at one version."""

    source: Source
    kind: str  # "pyramid" or "repo"
    version: str
    attrs: Mapping[str, Any]
    variables: dict[str, Variable]
    bbox: list[float] | None
    colormap: str | None = None
    value_range: tuple[float, float] | None = None
    styles: dict[str, colors.Style] = field(default_factory=dict, repr=False)  # by variable
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def variable(self, name: str | None) -> Variable:
        if name is None:
            return next(iter(self.variables.values()))
        try:
            return self.variables[name]
        except KeyError:
            raise SelectionError(
                f"{self.source.name} has no variable {name!r}; it has {', '.join(self.variables)}"
            ) from None

    def selection(self, var: Variable, given: Mapping[str, str]) -> tuple[int, ...]:
        """The index along each leading dim: the query's label, else the default."""
        return tuple(lead.index(given.get(lead.dim)) for lead in var.leading)

    def style(self, var: Variable) -> colors.Style:
        """The variable's colours, from its CF metadata or its coarsest level (computed once
        per version and variable)."""
        with self._lock:
            if var.name in self.styles:
                return self.styles[var.name]
        sample = None
        if self.value_range is None and "flag_values" not in var.attrs:
            sample = self._read(var, *var.holding(self.selection(var, {}))[-1], None)
        style = colors.style_of(var.attrs, sample, self.colormap, self.value_range)
        with self._lock:
            return self.styles.setdefault(var.name, style)

    def _read(
        self, var: Variable, level: Level, at: Mapping[str, int], window: tuple[slice, slice] | None
    ) -> np.ndarray:
        """Decoded values (NaN for nodata) of one 2-D window at the level's indexes `at`."""
        da = level.ds[var.name].isel(dict(at))
        if window is not None:
            da = da.isel({level.y: window[0], level.x: window[1]})
        a = np.asarray(da.transpose(level.y, level.x).values)
        return a if a.dtype.kind == "f" else a.astype(np.float64)

    def level_for(
        self, var: Variable, sel: tuple[int, ...], tms: Any, z: int, x: int, y: int
    ) -> tuple[Level, dict[str, int]]:
        """The level tile z/x/y is drawn from (of those holding the selection), and the
        selection's indexes in it."""
        held = var.holding(sel)
        pixel = tiles.tile_pixel_size(tms, z, x, y, var.levels[0].grid)
        return held[tiles.choose_level([lv.grid.cell for lv, _ in held], pixel)]

    def tile(
        self, var: Variable, sel: tuple[int, ...], tms: Any, z: int, x: int, y: int
    ) -> tuple[bytes, str]:
        """(PNG bytes, the level that served it) of tile z/x/y."""
        level, at = self.level_for(var, sel, tms, z, x, y)
        iy, ix, inside = tiles.tile_grid(tms, z, x, y, level.grid)
        values = np.full(iy.shape, np.nan)
        if inside.any():
            r0, r1 = int(iy[inside].min()), int(iy[inside].max()) + 1
            c0, c1 = int(ix[inside].min()), int(ix[inside].max()) + 1
            slab = self._read(var, level, at, (slice(r0, r1), slice(c0, c1)))
            values[inside] = slab[iy[inside] - r0, ix[inside] - c0]
        return colors.png(colors.paint(values, self.style(var), inside)), level.name

    def point(
        self, var: Variable, sel: tuple[int, ...], tms: Any, lat: float, lon: float, zoom: int
    ) -> dict[str, Any]:
        """The value of the cell nearest (lat, lon) in the level the zoom's tile is drawn from."""
        level, at = self.level_for(var, sel, tms, *tiles.point_tile(tms, lon, lat, zoom))
        cell = tiles.point_cells(lon, lat, level.grid)
        out: dict[str, Any] = {
            "variable": var.name,
            "level": level.name,
            "units": var.units,
            "version": self.version,
            "selection": {
                lead.dim: lead.labels[i] for lead, i in zip(var.leading, sel, strict=True)
            },
            "value": None,
        }
        if cell is not None:
            r, c = cell
            v = float(self._read(var, level, at, (slice(r, r + 1), slice(c, c + 1)))[0, 0])
            out["value"] = v if np.isfinite(v) else None
            out[level.y] = float(level.grid.y.centres[r])
            out[level.x] = float(level.grid.x.centres[c])
        return out

    def describe(self, legends: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
        """What the page needs: variables with their selectors and levels, and the legends of
        `legends` and of every variable styled already (null for the others: a style may read
        a whole coarsest level, and a GFS repo has a hundred variables)."""
        out = {}
        for name, var in self.variables.items():
            styled = name in legends or name in self.styles
            out[name] = {
                "label": str(var.attrs.get("long_name") or var.attrs.get("standard_name") or name),
                "units": var.units,
                "levels": [lv.name for lv in var.levels],
                "leading": [
                    {
                        "dim": lead.dim,
                        "labels": list(lead.labels),
                        "default": lead.labels[lead.default],
                    }
                    for lead in var.leading
                ],
                "legend": colors.legend(self.style(var)) if styled else None,
            }
        return {
            "source": self.source.name,
            "kind": self.kind,
            "version": self.version,
            "title": str(self.attrs.get("title") or self.source.name),
            "bbox": self.bbox,
            "variables": out,
        }


def _tree(source: Source, version: str) -> Any:
    """The dataset's levels from its home, a repo pinned to `version` (a Zarr store is read as
    it is: its version is the digest of what is read)."""
    return _home(source).open_tree(source.branch, version)


def _grid(ds: Any, crs: Any, where: str) -> tuple[tiles.Grid, str, str] | None:
    dims = [d for d in ds.dims if d in ds.coords and ds[d].ndim == 1]
    xs = [d for d in dims if axis_of(ds, d) == "x"]
    ys = [d for d in dims if axis_of(ds, d) == "y"]
    if not xs or not ys:
        return None
    x, y = xs[0], ys[0]
    if crs is None:
        from pyproj import CRS

        if not geographic(None, ds, x):
            raise SelectionError(
                f"{where}: {x}/{y} are not longitude/latitude and no CF grid_mapping names "
                "their CRS; add one (a spatial_ref variable with crs_wkt) to map it"
            )
        crs = CRS.from_epsg(4326)
    xc = np.asarray(ds[x].values, dtype=np.float64)
    yc = np.asarray(ds[y].values, dtype=np.float64)
    return tiles.Grid(tiles.Axis(xc, wraps=bool(crs.is_geographic)), tiles.Axis(yc), crs), y, x


def _leading(da: Any, y: str, x: str) -> tuple[Leading, ...]:
    out = []
    for dim in da.dims:
        if dim in (y, x):
            continue
        if dim in da.coords:
            values = np.asarray(da[dim].values)
            labels = tuple(str(label_of(v)) for v in values)
            latest = values.dtype.kind == "M"  # times: the newest is what a map is opened for
        else:
            labels, latest = tuple(str(i) for i in range(da.sizes[dim])), False
        out.append(Leading(dim, labels, len(labels) - 1 if latest else 0))
    return tuple(out)


def open_view(
    source: Source,
    colormap: str | None = None,
    value_range: tuple[float, float] | None = None,
    known: tuple[str, str] | None = None,
    styles: dict[str, colors.Style] | None = None,
) -> View:
    """The dataset at its current version (or `known`, a (kind, version) just read).
    `styles`: the colours already chosen per variable (a refresh keeps them: the same value
    keeps its colour when a new snapshot lands)."""
    from toolkit.stac import wgs84_bbox

    kind, version = known or version_of(source)
    tree = _tree(source, version)
    nodes = [(name, node.to_dataset()) for name, node in tree.children.items()]
    if not nodes:
        nodes = [(BASE, tree.to_dataset())]
    base = nodes[0][1]
    crs = crs_of(base)
    found = _grid(base, crs, source.name)
    if found is None:
        raise SelectionError(
            f"{source.name}: no variable has x and y dimensions (longitude/latitude, or "
            "projection_x/y_coordinate) to map"
        )
    levels = [Level("0", base, *found)]  # level 0 first: the levels that follow are coarser
    for name, ds in nodes[1:]:
        g = _grid(ds, crs, f"{source.name} level {name}")
        if g is not None:
            levels.append(Level(name, ds, *g))
    variables = {}
    for name, da in base.data_vars.items():
        lv0 = levels[0]
        if lv0.y not in da.dims or lv0.x not in da.dims:
            continue
        have = tuple(lv for lv in levels if name in lv.ds.data_vars)
        indexes = tuple(
            {lead.dim: {label: i for i, label in enumerate(lead.labels)}
             for lead in _leading(lv.ds[name], lv.y, lv.x)}
            for lv in have
        )  # fmt: skip
        variables[str(name)] = Variable(
            str(name), dict(da.attrs), _leading(da, lv0.y, lv0.x), have, indexes
        )
    if not variables:
        raise SelectionError(f"{source.name}: no variable has both {levels[0].y} and {levels[0].x}")
    try:
        bbox = wgs84_bbox(base, levels[0].x, levels[0].y, crs)
    except Exception:  # a bbox only centres the first view
        bbox = None
    return View(source, kind, version, dict(tree.attrs) or dict(base.attrs), variables, bbox,
                colormap, value_range, {} if styles is None else styles)  # fmt: skip
