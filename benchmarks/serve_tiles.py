"""Map tile latency of `toolkit serve`, side by side with titiler-xarray on the same Zarr store,
and alone on a virtual (GRIB-backed) forecast that titiler cannot read.

1. Side by side. One synthetic level-0 store (toolkit.examples.synthetic: a sparse float32
   global lat/lon field, EPSG:4326 cell centres, CF attributes and grid_mapping, NaN nodata over
   the "ocean", 1024x1024 shards of 256x256 chunks) is written once per run, and its pyramid
   built by `toolkit.pyramid.build` (timed apart: not part of any tile figure). Two real uvicorn
   servers run on 127.0.0.1, each in its own fresh process:
   - toolkit: `toolkit.serve(store)`, which draws each tile from the level its zoom needs
     (X-Level names it) and caches tiles by (version, variable, selection, tile);
   - titiler-xarray: a FastAPI app of `titiler.xarray.factory.TilerFactory` (its Zarr reader,
     no middleware), given the same store's level 0 (`url=`): it reads level 0 and resamples
     it per tile (nearest), which is what a dynamic tiler does.
   Both paint with the same colormap and range (viridis over VALUE_RANGE; NaN transparent).
   One client (http.client, a kept-alive connection per server) asks for the same tiles from
   each, one request at a time, interleaved tile by tile: per zoom 0..6, up to PER_ZOOM Web
   Mercator tiles over the data (spread evenly over the tiles that hold any data). "cold" is
   the first request of each tile on a freshly started process (after one untimed request of
   another tile, so neither pays its imports or its dataset open there); "warm" is the same
   tiles again on the same process. Times are wall times of a whole HTTP request as the client
   sees it (PNG body read). The store is on local disk, just written: the OS page cache is
   warm for both; "cold" means no server-side cache.

2. Alone. The simulated GFS (toolkit.examples.simulate, its grid enlarged to VIRTUAL_GRID;
   real GRIB2 by ecCodes) backfilled as refs into an Icechunk repo, its map levels built in the
   repo; `toolkit serve REPO` for temperature_2m (newest init, first lead), cold and warm as
   above, then once more after a new cycle is committed (refs and levels, a new snapshot): the
   first request of each tile after the server saw the commit, each checked to be from the new
   snapshot (X-Version) and to differ from the tile the old snapshot served.

    .venv/bin/python -m benchmarks serve_tiles            # 8192x16384
    .venv/bin/python -m benchmarks.serve_tiles 2048x4096  # a quicker look
Writes benchmarks/results/serve_tiles.{json,md}. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import http.client
import io
import multiprocessing
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import numpy as np

from benchmarks._report import write

SHAPE = (8192, 16384)
SHARDS = (1024, 1024)
CHUNKS = (256, 256)
ZOOMS = tuple(range(7))  # 0..6: at 6 a Web Mercator pixel is a level-0 cell of 8192x16384
PER_ZOOM = 16
VARIABLE = "field"
VALUE_RANGE = (10.0, 40.0)  # the synthetic field is ~20..30 with noise of 2
COLORMAP = "viridis"
GOAL_COARSE = 0.2  # toolkit's p95 / titiler's, where toolkit reads a coarse level
GOAL_FINEST = 1.0  # ... where both read level 0
VIRTUAL_GRID = (320, 480)  # the simulator's 0.25-degree patch, enlarged from its 32x48
VIRTUAL_VARIABLE = "temperature_2m"
VIRTUAL_LEVELS = 3
REFRESH = 0.5  # seconds between the toolkit server's looks at the repo's branch

TOOLKIT_SERVER = """
import sys
import toolkit
lo, hi = (float(v) for v in sys.argv[3].split(","))
toolkit.serve(sys.argv[1], variable=sys.argv[2], port=0, colormap=sys.argv[4], value_range=(lo, hi),
      refresh=float(sys.argv[5]), on_ready=lambda url: print(url, flush=True))
"""

TITILER_SERVER = """
import socket
import uvicorn
from fastapi import FastAPI
from titiler.core.errors import DEFAULT_STATUS_CODES, add_exception_handlers
from titiler.xarray.factory import TilerFactory
app = FastAPI()
app.include_router(TilerFactory().router)
add_exception_handlers(app, DEFAULT_STATUS_CODES)
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # as uvicorn's own
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
sock.listen(128)
print(f"http://127.0.0.1:{sock.getsockname()[1]}/", flush=True)
config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
uvicorn.Server(config).run(sockets=[sock])
"""

# ------------------------------------------------------------------------------ the servers


@dataclass
class Reply:
    seconds: float
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    """A server in its own process, and a kept-alive connection to it."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Any
    conn: http.client.HTTPConnection = field(init=False)
    first: float = 0.0  # seconds of the untimed first request

    def __post_init__(self) -> None:
        lines: queue.Queue[bytes] = queue.Queue()
        out = self.proc.stdout
        assert out is not None
        threading.Thread(target=lambda: lines.put(out.readline()), daemon=True).start()
        try:
            url = lines.get(timeout=180).decode().strip()
        except queue.Empty:
            url = ""
        if not url.startswith("http"):
            self.close()
            raise RuntimeError(f"{self.name} server did not start: {self.stderr()[-2000:]}")
        where = urlsplit(url)
        self.conn = http.client.HTTPConnection(where.hostname, where.port, timeout=600)

    @classmethod
    def start(cls, name: str, script: str, *args: str) -> Server:
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=log, env=env
        )
        return cls(name, proc, log)

    def get(self, path: str) -> Reply:
        t = time.perf_counter()
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        body = r.read()
        seconds = time.perf_counter() - t
        reply = Reply(seconds, r.status, {k.lower(): v for k, v in r.getheaders()}, body)
        if r.status != 200:
            raise RuntimeError(f"{self.name} {path}: {r.status} {body[:300]!r}")
        return reply

    def peak_rss(self) -> int:
        """The server process's own peak RSS (VmHWM), bytes."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def close(self) -> None:
        if hasattr(self, "conn"):
            self.conn.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def toolkit_path(z: int, x: int, y: int, variable: str) -> str:
    return f"/tiles/{z}/{x}/{y}.png?variable={variable}"


def titiler_path(store: Path, z: int, x: int, y: int) -> str:
    lo, hi = VALUE_RANGE
    return (
        f"/tiles/WebMercatorQuad/{z}/{x}/{y}.png?url={quote(str(store))}&variable={VARIABLE}"
        f"&rescale={lo:g},{hi:g}&colormap_name={COLORMAP}&nodata=nan"
    )


# ---------------------------------------------------------------------------- the inputs


def _write_source(path: str, shape: tuple[int, int]) -> None:
    from toolkit import storage
    from toolkit.examples import synthetic

    synthetic.write_store(
        storage.open_store(path), shape=shape, shards=SHARDS, chunks=CHUNKS, kind="sparse", seed=0
    )


def make_store(root: Path, shape: tuple[int, int]) -> tuple[Path, float]:
    """The level-0 store, written in a child process (generating it takes GBs); its path and
    the seconds it took."""
    path = root / "field.zarr"
    t = time.perf_counter()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(_write_source, str(path), shape).result()
    return path, time.perf_counter() - t


def tiles_over(
    valid: np.ndarray, lat: np.ndarray, lon: np.ndarray, zooms: Sequence[int], per_zoom: int
) -> tuple[dict[int, list[tuple[int, int]]], dict[int, list[tuple[int, int]]]]:
    """Per zoom, up to `per_zoom` Web Mercator tiles holding data (`valid` on the lat/lon cell
    centres given), spread evenly over all that do; and the ones left over."""
    import morecantile

    tms = morecantile.tms.get("WebMercatorQuad")
    picked, rest = {}, {}
    for z in zooms:
        over = []
        for y in range(2**z):
            for x in range(2**z):
                b = tms.bounds(morecantile.Tile(x, y, z))
                rows = (lat >= b.bottom) & (lat <= b.top)
                cols = (lon >= b.left) & (lon <= b.right)
                if rows.any() and cols.any() and valid[np.ix_(rows, cols)].any():
                    over.append((x, y))
        keep = np.unique(np.rint(np.linspace(0, len(over) - 1, per_zoom)).astype(int)).tolist()
        keep = keep if over else []
        picked[z] = [over[i] for i in keep]
        rest[z] = [t for i, t in enumerate(over) if i not in set(keep)]
    return picked, rest


def store_tiles(
    store: Path, coarsest: str
) -> tuple[dict[int, list[tuple[int, int]]], tuple[int, int, int]]:
    """The tiles to ask for (from the coarsest level's data mask), and one more tile at the
    finest zoom, not among them, for the untimed first request."""
    import xarray as xr

    ds = xr.open_zarr(str(store), group=coarsest, consolidated=False)
    valid = np.isfinite(ds[VARIABLE].values)
    picked, rest = tiles_over(valid, ds["lat"].values, ds["lon"].values, ZOOMS, PER_ZOOM)
    z = ZOOMS[-1]
    return picked, (z, *rest[z][len(rest[z]) // 2])


# ---------------------------------------------------------------------------- the figures


def pct(seconds: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(seconds) * 1000, q)), 1) if seconds else 0.0


def agreement(a: bytes, b: bytes) -> tuple[float, float]:
    """(share of pixels both draw or both leave transparent, share of the pixels both draw
    whose colours are within 8/255 in every channel) of two RGBA PNGs."""
    from PIL import Image

    x = np.asarray(Image.open(io.BytesIO(a)).convert("RGBA")).astype(np.int16)
    y = np.asarray(Image.open(io.BytesIO(b)).convert("RGBA")).astype(np.int16)
    xa, ya = x[..., 3] > 0, y[..., 3] > 0
    both = xa & ya
    close = (np.abs(x[..., :3] - y[..., :3]) <= 8).all(axis=-1)
    return float((xa == ya).mean()), float(close[both].mean()) if both.any() else 1.0


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


Tiles = dict[int, list[tuple[int, int]]]


def side_by_side(
    store: Path, tiles: Tiles, first: tuple[int, int, int]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Both servers over the same tiles, cold then warm; one row per zoom and pass."""
    lo, hi = VALUE_RANGE
    tk = Server.start("toolkit", TOOLKIT_SERVER, str(store), VARIABLE, f"{lo},{hi}", COLORMAP, "2")
    try:
        ti = Server.start("titiler", TITILER_SERVER)
    except BaseException:
        tk.close()
        raise
    times: dict[tuple[str, str, int], list[float]] = {}
    levels: dict[int, set[str]] = {}
    agree: dict[int, list[tuple[float, float]]] = {}
    try:
        tk.first = tk.get(toolkit_path(*first, VARIABLE)).seconds
        ti.first = ti.get(titiler_path(store, *first)).seconds
        for phase in ("cold", "warm"):
            for z in ZOOMS:
                for x, y in tiles[z]:
                    a = tk.get(toolkit_path(z, x, y, VARIABLE))
                    b = ti.get(titiler_path(store, z, x, y))
                    times.setdefault(("toolkit", phase, z), []).append(a.seconds)
                    times.setdefault(("titiler", phase, z), []).append(b.seconds)
                    levels.setdefault(z, set()).add(a.headers["x-level"])
                    if phase == "cold":
                        agree.setdefault(z, []).append(agreement(a.body, b.body))
                print(f"  {phase} zoom {z}: {len(tiles[z])} tiles", flush=True)
        rss = {"toolkit": tk.peak_rss(), "titiler": ti.peak_rss()}
        titiler = {z: pct(times[("titiler", "cold", z)], 95) for z in ZOOMS if tiles[z]}
        first_ms = {"toolkit": tk.first * 1000, "titiler": ti.first * 1000}
    finally:
        tk.close()
        ti.close()
    finest = ZOOMS[-1]
    rows = []
    for phase in ("cold", "warm"):
        for z in ZOOMS:
            t, r = times.get(("toolkit", phase, z), []), times.get(("titiler", phase, z), [])
            level = "/".join(sorted(levels.get(z, set())))
            p50, p95 = _ratio(pct(t, 50), pct(r, 50)), _ratio(pct(t, 95), pct(r, 95))
            if z == finest:
                goal = f"never slower (p95 <= {GOAL_FINEST:g}x)"
                met = p95 <= GOAL_FINEST
            elif level != "0":
                goal, met = f"p95 <= {GOAL_COARSE:g}x", p95 <= GOAL_COARSE
            else:
                goal, met = "", None
            ok = [p for p, _ in agree.get(z, [])]
            col = [c for _, c in agree.get(z, [])]
            rows.append(
                {
                    "pass": phase,
                    "zoom": z,
                    "tiles": len(t),
                    "toolkit level": level,
                    "toolkit p50 ms": pct(t, 50),
                    "toolkit p95 ms": pct(t, 95),
                    "titiler p50 ms": pct(r, 50),
                    "titiler p95 ms": pct(r, 95),
                    "p50 ratio (toolkit/titiler)": p50,
                    "p95 ratio (toolkit/titiler)": p95,
                    "goal": goal,
                    "met": "" if met is None else ("yes" if met else "NO"),
                    "same mask %": round(100 * float(np.mean(ok)), 1) if ok else "",
                    "same colour % (both drawn)": round(100 * float(np.mean(col)), 1)
                    if col
                    else "",
                }
            )
    return rows, {"rss": rss, "first_ms": first_ms, "titiler_cold_p95": titiler}


def back_to_back(
    store: Path, tiles: Tiles, first: tuple[int, int, int], titiler: dict[int, float]
) -> list[dict[str, Any]]:
    """toolkit alone, each request right after the last on one connection, as a browser asks
    for a map's tiles (a server without TCP_NODELAY stalls ~40 ms per response there)."""
    lo, hi = VALUE_RANGE
    times: dict[tuple[str, int], list[float]] = {}
    levels: dict[int, set[str]] = {}
    srv = Server.start("toolkit", TOOLKIT_SERVER, str(store), VARIABLE, f"{lo},{hi}", COLORMAP, "2")
    try:
        srv.get(toolkit_path(*first, VARIABLE))
        for phase in ("cold", "warm"):
            for z in ZOOMS:
                for x, y in tiles[z]:
                    r = srv.get(toolkit_path(z, x, y, VARIABLE))
                    times.setdefault((phase, z), []).append(r.seconds)
                    levels.setdefault(z, set()).add(r.headers["x-level"])
    finally:
        srv.close()
    rows = []
    for z in ZOOMS:
        row: dict[str, Any] = {"zoom": z, "tiles": len(tiles[z])}
        row["toolkit level"] = "/".join(sorted(levels.get(z, set())))
        for phase in ("cold", "warm"):
            t = times.get((phase, z), [])
            row[f"{phase} p50 ms"] = pct(t, 50)
            row[f"{phase} p95 ms"] = pct(t, 95)
        cold = pct(times.get(("cold", z), []), 95)
        row["cold p95 / titiler cold p95"] = _ratio(cold, titiler.get(z, 0.0))
        rows.append(row)
    return rows


# ------------------------------------------------------------------ the virtual forecast


@contextmanager
def larger_grid() -> Iterator[None]:
    """The simulator's grid enlarged to VIRTUAL_GRID (read at call time when it encodes a
    file and by sim_gfs's template): its own 32x48 would be a handful of tiles."""
    from toolkit.examples import simulate

    was, simulate.GRID_SHAPE = simulate.GRID_SHAPE, VIRTUAL_GRID
    try:
        yield
    finally:
        simulate.GRID_SHAPE = was


def virtual(root: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """toolkit alone on a simulated GFS virtual repo with levels: cold, warm, and after a new
    cycle lands (a new snapshot), per zoom."""
    from toolkit import icechunk as R
    from toolkit import storage
    from toolkit.examples import simulate
    from toolkit.examples.datasets import sim_gfs
    from toolkit.pyramid import build
    from toolkit.virtual.backfill import backfill
    from toolkit.virtual.write import Job

    info: dict[str, Any] = {}
    with larger_grid():
        src = storage.open_store(str(root / "src"))
        inits = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)]
        t = time.perf_counter()
        archive = simulate.make_archive(
            src, kind="gfs", inits=inits, leads=[0, 3, 6], publish=False
        )
        files = archive.files()
        archive.publish([f for f in files if f.init < inits[-1]])
        job = Job(sim_gfs(src), R.RepoRef(storage.open_store(str(root / "repo"))))
        start = np.datetime64(inits[0], "ns")
        backfill(job, start=start, executor="sync")
        info["refs_s"] = time.perf_counter() - t
        t = time.perf_counter()
        build(str(root / "repo"), [VIRTUAL_VARIABLE], levels=VIRTUAL_LEVELS, executor="sync")
        info["build_s"] = time.perf_counter() - t
        lat, lon = simulate.lats_lons()
    lon = (lon + 180) % 360 - 180
    order = np.argsort(lon)
    valid = np.ones((len(lat), len(lon)), bool)
    tiles, _ = tiles_over(valid, lat, lon[order], ZOOMS, PER_ZOOM)
    repo = str(root / "repo")
    lo, hi = 270.0, 300.0  # the simulator's 2 m temperature: 280 +- 12 K
    srv = Server.start("toolkit", TOOLKIT_SERVER, repo, VIRTUAL_VARIABLE, f"{lo},{hi}", COLORMAP,
                       str(REFRESH))  # fmt: skip
    times: dict[tuple[str, int], list[float]] = {}
    levels: dict[tuple[str, int], set[str]] = {}
    try:
        srv.first = srv.get("/meta").seconds
        old: dict[tuple[int, int, int], Reply] = {}
        for phase in ("cold", "warm", "after a commit"):
            if phase == "after a commit":
                with larger_grid():
                    archive.publish([f for f in files if f.init == inits[-1]])
                backfill(job, start=start, executor="sync")
                build(repo, [VIRTUAL_VARIABLE], levels=VIRTUAL_LEVELS, executor="sync")
                time.sleep(2 * REFRESH)  # the server looks at the branch every REFRESH s
            for z in ZOOMS:
                for x, y in tiles[z]:
                    r = srv.get(toolkit_path(z, x, y, VIRTUAL_VARIABLE))
                    times.setdefault((phase, z), []).append(r.seconds)
                    levels.setdefault((phase, z), set()).add(r.headers["x-level"])
                    if phase == "warm":
                        old[(z, x, y)] = r
                    elif phase == "after a commit":
                        was = old[(z, x, y)]
                        if r.headers["x-version"] == was.headers["x-version"] or r.body == was.body:
                            raise RuntimeError(f"tile {z}/{x}/{y} served from the old snapshot")
        info["rss"] = srv.peak_rss()
        info["first_ms"] = srv.first * 1000
    finally:
        srv.close()
    rows = []
    for z in ZOOMS:
        row: dict[str, Any] = {"zoom": z, "tiles": len(tiles[z])}
        for phase in ("cold", "warm", "after a commit"):
            t = times.get((phase, z), [])
            row[f"{phase} level"] = "/".join(sorted(levels.get((phase, z), set())))
            row[f"{phase} p50 ms"] = pct(t, 50)
            row[f"{phase} p95 ms"] = pct(t, 95)
        rows.append(row)
    return rows, info


# ---------------------------------------------------------------------------------- main


def main(shape: tuple[int, int] | None = None) -> None:
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    import zarr

    from toolkit.pyramid import build

    shape = shape or SHAPE
    root = Path(tempfile.mkdtemp(prefix="serve-tiles-bench-"))
    try:
        store, write_s = make_store(root, shape)
        t = time.perf_counter()
        build(str(store), executor="auto")
        build_s = time.perf_counter() - t
        layout = zarr.open_group(str(store), mode="r").attrs["multiscales"]["layout"]
        names = [str(x["asset"]) for x in layout if x["asset"] != "."]
        coarsest = names[-1]
        print(f"store {shape} written in {write_s:.1f} s, levels {names} in {build_s:.1f} s")
        tiles, first = store_tiles(store, coarsest)
        rows, side = side_by_side(store, tiles, first)
        b2b = back_to_back(store, tiles, first, side["titiler_cold_p95"])
        vrows, vinfo = virtual(root / "virtual")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mb = 1 << 20
    setup = [
        {"what": f"level-0 store {shape[0]}x{shape[1]} float32 written (synthetic)", "s": write_s},
        {"what": f"pyramid built: {', '.join(names)} (build, executor=auto)", "s": build_s},
        {"what": "toolkit server: first request (untimed tile)", "s": side["first_ms"]["toolkit"] / 1000},
        {"what": "titiler server: first request (untimed tile)", "s": side["first_ms"]["titiler"] / 1000},
        {"what": f"virtual: archive + refs backfilled ({VIRTUAL_GRID[0]}x{VIRTUAL_GRID[1]})", "s": vinfo["refs_s"]},
        {"what": f"virtual: {VIRTUAL_LEVELS} levels built in the repo", "s": vinfo["build_s"]},
        {"what": "virtual server: first request (/meta)", "s": vinfo["first_ms"] / 1000},
    ]  # fmt: skip
    rss = (
        f"Server peak RSS (VmHWM): toolkit {side['rss']['toolkit'] / mb:.0f} MiB, titiler "
        f"{side['rss']['titiler'] / mb:.0f} MiB; virtual toolkit {vinfo['rss'] / mb:.0f} MiB."
    )
    notes = (
        f"Level 0: {shape[0]}x{shape[1]} float32 sparse field (NaN nodata), shards {SHARDS}, "
        f"chunks {CHUNKS}, pyramid {', '.join(names)}. Per zoom up to {PER_ZOOM} Web Mercator "
        "256x256 PNG tiles over the data; each server a fresh uvicorn process on 127.0.0.1, one "
        "client, one request at a time, interleaved tile by tile. cold = first request of each "
        "tile (after one untimed request of another tile: imports and dataset open paid there), "
        "warm = the same tiles again. Times in ms per whole HTTP request. toolkit draws from the "
        "level named (X-Level; '0' = level 0), titiler-xarray always reads level 0 and resamples "
        f"(nearest). Same colormap ({COLORMAP}) and range {VALUE_RANGE}. 'same mask %' / 'same "
        "colour %': agreement of the two cold PNGs (alpha; RGB within 8/255 where both draw): "
        "equal at the finest zoom, where both sample level 0; coarser, toolkit shows each "
        "window's mean, titiler one sample of it. Goals: toolkit p95 <= "
        f"{GOAL_COARSE:g}x titiler's where toolkit reads a coarse level, never slower at the "
        f"finest zoom. {rss} Machine: 2 cores shared with other jobs; absolute times are noisy."
    )
    more = {
        "Virtual forecast (GRIB-backed Icechunk repo; toolkit alone)": (
            f"Simulated GFS, {VIRTUAL_GRID[0]}x{VIRTUAL_GRID[1]} at 0.25 deg, 3 cycles x 3 leads "
            f"backfilled as refs, {VIRTUAL_LEVELS} levels of {VIRTUAL_VARIABLE} built in the "
            "repo; the newest cycle, first lead. Level 0 is decoded from GRIB2 per tile. 'after "
            "a commit': a 4th cycle's refs and levels committed (a new snapshot), the server "
            f"looking at main every {REFRESH:g} s; every tile checked to come from the new "
            "snapshot (X-Version) and to differ from the old one's: no stale tile is served.",
            vrows,
        ),
        "toolkit alone, back to back on one connection": (
            "The same tiles, each request sent as soon as the last one's body is read (as a "
            "browser asks for a map's tiles), toolkit alone, a fresh process. A server whose "
            "connections lack TCP_NODELAY stalls ~40 ms per response here (the client's delayed "
            "ACK), which the interleaved table above hides. The last column compares the cold "
            "p95 with titiler's cold p95 of the first table.",
            b2b,
        ),
        "Set-up (not in the tile figures)": ("Seconds.", setup),
    }
    write("serve_tiles", rows, notes, more)


if __name__ == "__main__":
    main(tuple(int(v) for v in sys.argv[1].split("x")) if len(sys.argv) > 1 else None)  # type: ignore[arg-type]
