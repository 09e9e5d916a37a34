"""What a tile must show, written for the tests from textbook formulas: pixel centres of a
Web Mercator or CRS84 tile, the level a zoom reads (brute force over the levels' cell sizes),
the nearest cell by argmin over the level's own coordinates, the colour through matplotlib's
own colormap. Nothing here calls toolkit.webmap."""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps

T = 256


def mercator_centres(z: int, x: int, y: int) -> tuple[np.ndarray, np.ndarray]:
    """(lon, lat) of each pixel centre, shape (256, 256), rows north first."""
    n = T * 2**z
    i = x * T + np.arange(T) + 0.5
    j = y * T + np.arange(T) + 0.5
    lon = i / n * 360.0 - 180.0
    lat = np.degrees(np.arctan(np.sinh(np.pi * (1 - 2 * j / n))))
    return np.meshgrid(lon, lat)


def crs84_centres(z: int, x: int, y: int) -> tuple[np.ndarray, np.ndarray]:
    """WorldCRS84Quad: 2 x 1 tiles at zoom 0, each 180 degrees square."""
    size = 180.0 / 2**z
    lon = -180.0 + x * size + (np.arange(T) + 0.5) * size / T
    lat = 90.0 - y * size - (np.arange(T) + 0.5) * size / T
    return np.meshgrid(lon, lat)


def level_for(cells: dict[str, float], pixel: float) -> str:
    """The coarsest level whose cell is no larger than the pixel; the finest if none is."""
    fit = {name: c for name, c in cells.items() if c <= pixel + 1e-12}
    pool = fit or {min(cells, key=cells.get): 0}
    return max(pool, key=lambda name: cells.get(name, 0))


def nearest(
    coord: np.ndarray, values: np.ndarray, step: float, wrap: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(index of the nearest centre, whether it is within half a step) by brute force."""
    v = np.asarray(values, dtype=np.float64).ravel()
    d = np.abs(v[:, None] - coord[None, :])
    if wrap:
        d = np.minimum(d, 360.0 - d)
    i = d.argmin(axis=1)
    ok = d[np.arange(v.size), i] <= abs(step) / 2
    return i.reshape(values.shape), ok.reshape(values.shape)


def expected_values(level, name: str, lon: np.ndarray, lat: np.ndarray, sel: dict) -> np.ndarray:
    """The level's values (xarray's decoding) at the cell nearest each (lon, lat); NaN outside."""
    da = level[name].isel(sel) if sel else level[name]
    lats, lons = level["lat"].values, level["lon"].values
    iy, oky = nearest(lats, lat, lats[1] - lats[0])
    ix, okx = nearest(lons, lon, lons[1] - lons[0], wrap=True)
    a = da.values.astype(np.float64)
    out = a[iy, ix]
    out[~(oky & okx)] = np.nan
    return out


def colour_ok(
    rgba: np.ndarray, values: np.ndarray, vmin: float, vmax: float, cmap: str = "viridis"
) -> np.ndarray:
    """Per pixel: transparent where the value is NaN; else the colormap's colour of the value,
    within one step of its 256 (the quantization of any 8-bit colormap)."""
    lut = np.asarray(colormaps[cmap](np.linspace(0, 1, 256), bytes=True), dtype=np.int64)
    t = np.clip((values - vmin) / (vmax - vmin), 0, 1)
    k = np.where(np.isnan(t), 0, np.floor(t * 255.999)).astype(int)
    ok = np.zeros(values.shape, bool)
    for dk in (-1, 0, 1):
        kk = np.clip(k + dk, 0, 255)
        ok |= np.all(rgba.astype(np.int64) == lut[kk], axis=-1)
    nodata = np.isnan(values)
    ok[nodata] = rgba[nodata][:, 3] == 0
    return ok
