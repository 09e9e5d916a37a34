"""Which cells of which level a map tile shows: pure arithmetic, no I/O.

A tile's 256x256 pixel centres are placed in the tile matrix set's CRS (Web Mercator, or
CRS84 for geographic data), carried to the data's own CRS with pyproj, and each is given the
index of the cell that contains it. The level is the coarsest whose cells are no larger than a
tile pixel: the pyramid already holds that window's mean (or mode), so nearest from it is exact
for the zoom, and reading level 0 to downsample per tile (what dynamic tilers do) is avoided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import morecantile
import numpy as np
from pyproj import CRS, Transformer

__all__ = ["TILE", "Axis", "Grid", "choose_level", "point_cells", "tile_grid", "tms_named"]

TILE = 256  # pixels on a side, as every XYZ client asks
TMS = ("WebMercatorQuad", "WorldCRS84Quad")


class BadTile(ValueError):
    """A tile that no tile matrix has (z out of range, x or y outside the matrix)."""


@dataclass(frozen=True)
class Axis:
    """One horizontal axis of one level: its cell centres, and whether it wraps (longitude:
    -170 degrees finds the cell at 190 on an axis that runs 0..360)."""

    centres: np.ndarray
    wraps: bool = False

    @property
    def size(self) -> float:
        """The cell size (the mean step; 0 for a single cell)."""
        c = self.centres
        return float(abs(c[-1] - c[0]) / (len(c) - 1)) if len(c) > 1 else 0.0

    @cached_property
    def _uniform(self) -> bool:
        return len(self.centres) > 1 and _uniform(np.asarray(self.centres, dtype=np.float64))

    def index(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index of the cell holding each value, whether it lies inside the axis)."""
        c = np.asarray(self.centres, dtype=np.float64)
        n = len(c)
        if n == 1:
            return np.zeros(v.shape, np.int64), np.isfinite(v)
        step = (c[-1] - c[0]) / (n - 1)
        edge = c[0] - step / 2
        if self.wraps:  # into [west edge, west edge + 360)
            west = min(edge, edge + step * n)
            v = west + np.mod(v - west, 360.0)
        if self._uniform:
            f = np.floor((v - edge) / step)
            ok = np.isfinite(f) & (f >= 0) & (f < n)
            return np.where(ok, f, 0).astype(np.int64), ok
        order = np.argsort(c)
        s = c[order]
        mids = (s[1:] + s[:-1]) / 2
        i = order[np.searchsorted(mids, v)]
        half = np.abs(np.diff(s)).max() / 2
        ok = np.isfinite(v) & (v >= s[0] - half) & (v <= s[-1] + half)
        return np.where(ok, i, 0).astype(np.int64), ok


@dataclass(frozen=True)
class Grid:
    """The level's horizontal grid: its x and y axes in the data's CRS."""

    x: Axis
    y: Axis
    crs: CRS
    # transformers into this grid's CRS, by source CRS: building one costs ~25 ms, more than
    # the rest of a tile; pyproj's are thread-safe, and they live as long as the grid
    _into: dict[str, Transformer] = field(default_factory=dict, repr=False, compare=False)

    @property
    def cell(self) -> float:
        """The cell size along x, in the CRS's units: what a level is chosen by."""
        return self.x.size

    def transformer(self, source: str) -> Transformer:
        """From `source` (a CRS as pyproj reads it) into this grid's CRS, x/y ordered."""
        t = self._into.get(source)
        if t is None:
            t = self._into[source] = Transformer.from_crs(
                CRS.from_user_input(source), self.crs, always_xy=True
            )
        return t


def _uniform(c: np.ndarray, rtol: float = 1e-6) -> bool:
    d = np.diff(c)
    mean = (c[-1] - c[0]) / (len(c) - 1)
    return bool(mean != 0 and np.all(np.abs(d - mean) <= rtol * abs(mean)))


def tms_named(name: str) -> Any:
    """The morecantile tile matrix set by name (one of `TMS`)."""
    if name not in TMS:
        raise BadTile(f"unknown tile matrix set {name!r}: use one of {', '.join(TMS)}")
    return morecantile.tms.get(name)


def _checked(tms: Any, z: int, x: int, y: int) -> Any:
    if not tms.minzoom <= z <= min(tms.maxzoom, 30):
        raise BadTile(f"zoom {z} is outside {tms.minzoom}..{min(tms.maxzoom, 30)}")
    m = tms.matrix(z)
    if not (0 <= x < m.matrixWidth and 0 <= y < m.matrixHeight):
        raise BadTile(
            f"tile {z}/{x}/{y} is outside the zoom-{z} matrix "
            f"({m.matrixWidth}x{m.matrixHeight} tiles)"
        )
    return morecantile.Tile(x, y, z)


def pixel_centres(tms: Any, z: int, x: int, y: int, n: int = TILE) -> tuple[np.ndarray, np.ndarray]:
    """The n x n pixel centres of tile z/x/y in the tile matrix set's CRS (rows north first)."""
    b = tms.xy_bounds(_checked(tms, z, x, y))
    px = b.left + (np.arange(n) + 0.5) * (b.right - b.left) / n
    py = b.top - (np.arange(n) + 0.5) * (b.top - b.bottom) / n
    return np.meshgrid(px, py)


def tile_pixel_size(tms: Any, z: int, x: int, y: int, grid: Grid) -> float:
    """A tile pixel's width in the grid CRS's units, across the tile's middle row."""
    gx, gy = pixel_centres(tms, z, x, y)
    row = TILE // 2
    dx, _ = grid.transformer(tms.crs.root).transform(gx[row], gy[row])
    d = np.abs(np.diff(np.asarray(dx, dtype=np.float64)))
    d = d[np.isfinite(d)]
    return float(np.median(d)) if d.size else float("inf")


def choose_level(cells: Sequence[float], pixel: float) -> int:
    """The coarsest level whose cell is no larger than a tile pixel (level 0 when the tile is
    finer than the data; the coarsest when every level is finer than the tile)."""
    fit = [k for k, c in enumerate(cells) if c <= pixel * (1 + 1e-6)]
    return (
        max(fit, key=lambda k: cells[k]) if fit else min(range(len(cells)), key=lambda k: cells[k])
    )


def tile_grid(
    tms: Any, z: int, x: int, y: int, grid: Grid
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row index, column index, inside) of the level's cell under each tile pixel."""
    gx, gy = pixel_centres(tms, z, x, y)
    t = grid.transformer(tms.crs.root)
    row, col = _separable(t, gx, gy)
    if row is not None:  # one index per column and one per row, broadcast
        ix, okx = grid.x.index(row)
        iy, oky = grid.y.index(col)
        shape = gx.shape
        return (np.broadcast_to(iy[:, None], shape), np.broadcast_to(ix[None, :], shape),
                oky[:, None] & okx[None, :])  # fmt: skip
    dx, dy = t.transform(gx, gy)  # a projected grid: every pixel carried on its own
    ix, okx = grid.x.index(np.asarray(dx, dtype=np.float64))
    iy, oky = grid.y.index(np.asarray(dy, dtype=np.float64))
    return iy, ix, okx & oky


def _separable(t: Transformer, gx: np.ndarray, gy: np.ndarray) -> tuple[Any, Any]:
    """(target x of each column, target y of each row) when x depends on the column alone and
    y on the row alone (Web Mercator or CRS84 into longitude/latitude): 512 points carried
    instead of 65,536. Checked on the corners and one inner point; (None, None) if not."""
    n = gx.shape[0]
    rx, _ = t.transform(gx[n // 2], gy[n // 2])  # the middle row: x of each column
    _, cy = t.transform(gx[:, n // 2], gy[:, n // 2])  # the middle column: y of each row
    pick = (np.array([0, 0, n - 1, n - 1, n // 3]), np.array([0, n - 1, 0, n - 1, 2 * n // 3]))
    px, py = t.transform(gx[pick], gy[pick])
    ax, ay = np.asarray(rx)[pick[1]], np.asarray(cy)[pick[0]]
    scale = max(float(np.nanmax(np.abs(np.diff(rx)))), 1e-12)
    if not (np.allclose(px, ax, rtol=0, atol=1e-6 * scale, equal_nan=True)
            and np.allclose(py, ay, rtol=0, atol=1e-6 * scale, equal_nan=True)):  # fmt: skip
        return None, None
    return np.asarray(rx, dtype=np.float64), np.asarray(cy, dtype=np.float64)


def point_cells(lon: float, lat: float, grid: Grid) -> tuple[int, int] | None:
    """(row, column) of the level's cell nearest (lon, lat), or None outside the grid."""
    dx, dy = grid.transformer("EPSG:4326").transform(
        np.array([lon], np.float64), np.array([lat], np.float64)
    )
    ix, okx = grid.x.index(np.asarray(dx, dtype=np.float64))
    iy, oky = grid.y.index(np.asarray(dy, dtype=np.float64))
    return (int(iy[0]), int(ix[0])) if okx[0] and oky[0] else None


def point_tile(tms: Any, lon: float, lat: float, z: int) -> tuple[int, int, int]:
    """The z/x/y of the tile that holds (lon, lat) at zoom z."""
    _checked(tms, z, 0, 0)
    t = tms.tile(lon, lat, z)
    return t.z, t.x, t.y
