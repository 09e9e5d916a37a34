"""The map's pure decisions (toolkit.webmap.tiles, toolkit.webmap.colors) against brute force:
the cell under a value (any direction, uneven spacing, longitudes that wrap), the level a pixel
size picks, a tile's pixel grid on a projected CRS, and colours from CF attributes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pyproj import CRS, Transformer

from toolkit.webmap import colors, tiles

LCC = CRS.from_proj4(  # HRRR's Lambert conformal grid
    "+proj=lcc +lat_0=38.5 +lon_0=-97.5 +lat_1=38.5 +lat_2=38.5 +R=6371229 +units=m +no_defs"
)


def brute_index(centres: np.ndarray, v: float, wrap: bool) -> int | None:
    """The cell whose centre is nearest `v`, if `v` is within half a cell of it."""
    d = np.abs(centres - v)
    if wrap:
        d = np.minimum(d, np.abs(360 - d))
    i = int(d.argmin())
    half = np.abs(np.diff(centres)).max() / 2 if len(centres) > 1 else np.inf
    return i if d[i] <= half else None


def _on_edge(v: float, edge0: float, step: float) -> bool:
    e = (v - edge0) / step
    return abs(e - round(e)) <= 1e-6


@settings(max_examples=200, deadline=None)
@given(
    start=st.floats(-200, 200),
    step=st.sampled_from([0.25, -0.25, 1.0, -0.5, 3.0]),
    n=st.integers(2, 60),
    v=st.floats(-400, 400),
    wrap=st.booleans(),
)
def test_a_uniform_axis_finds_the_brute_force_cell(start, step, n, v, wrap):
    c = start + step * np.arange(n)
    assume(not wrap or n * abs(step) <= 360)
    got, ok = tiles.Axis(c, wraps=wrap).index(np.array([v]))
    want = brute_index(c, v, wrap)
    # exactly on a cell edge two cells are nearest: either is right (a wrapped value is
    # compared 360 degrees along too)
    shifts = (0.0, 360.0, -360.0) if wrap else (0.0,)
    assume(all(not _on_edge(v + k, c[0] - step / 2, step) for k in shifts))
    assert (int(got[0]) if ok[0] else None) == want


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(st.floats(0.1, 5), min_size=2, max_size=30),
    v=st.floats(-10, 100),
    descending=st.booleans(),
)
def test_an_uneven_axis_finds_the_nearest_centre(steps, v, descending):
    c = np.concatenate([[0.0], np.cumsum(steps)])
    if descending:
        c = c[::-1].copy()
    d = np.sort(np.abs(c - v))
    assume(d[1] - d[0] > 1e-9)  # no tie between two centres
    got, ok = tiles.Axis(c).index(np.array([v]))
    half = np.abs(np.diff(c)).max() / 2
    inside = c.min() - half <= v <= c.max() + half
    assert bool(ok[0]) == inside
    if inside:
        assert int(got[0]) == int(np.abs(c - v).argmin())


@given(
    cells=st.lists(st.floats(0.01, 100), min_size=1, max_size=8, unique=True),
    pixel=st.floats(0.001, 1000),
)
def test_the_level_is_the_coarsest_no_larger_than_a_pixel(cells, pixel):
    k = tiles.choose_level(cells, pixel)
    fit = [c for c in cells if c <= pixel * (1 + 1e-6)]
    assert cells[k] == (max(fit) if fit else min(cells))


def test_a_projected_grid_is_carried_pixel_by_pixel():
    """HRRR's Lambert grid (3 km) under a Web Mercator tile: not separable, so every pixel
    centre is carried; each index equals the brute-force nearest cell of its own transform."""
    x = -2_699_020.0 + 3000.0 * np.arange(1799)
    y = -1_588_806.0 + 3000.0 * np.arange(1059)
    grid = tiles.Grid(tiles.Axis(x), tiles.Axis(y), LCC)
    tms = tiles.tms_named("WebMercatorQuad")
    iy, ix, inside = tiles.tile_grid(tms, 5, 7, 12, grid)  # over Kansas
    assert inside.all()
    gx, gy = tiles.pixel_centres(tms, 5, 7, 12)
    t = Transformer.from_crs("EPSG:3857", LCC, always_xy=True)
    for r, c in [(0, 0), (0, 255), (255, 0), (255, 255), (128, 77), (31, 200)]:
        px, py = t.transform(gx[r, c], gy[r, c])
        assert ix[r, c] == int(np.abs(x - px).argmin()) and iy[r, c] == int(np.abs(y - py).argmin())
    assert len(np.unique(ix[0] - ix[-1])) > 1  # columns bend: the grid is not separable


def test_a_geographic_grid_is_separable_and_equals_the_full_transform():
    lon = np.arange(0.125, 360, 0.25)  # 0..360, as GFS writes it
    lat = np.arange(89.875, -90, -0.25)
    grid = tiles.Grid(tiles.Axis(lon, wraps=True), tiles.Axis(lat), CRS.from_epsg(4326))
    tms = tiles.tms_named("WebMercatorQuad")
    iy, ix, inside = tiles.tile_grid(tms, 3, 1, 2, grid)
    gx, gy = tiles.pixel_centres(tms, 3, 1, 2)
    plon, plat = Transformer.from_crs("EPSG:3857", "EPSG:4326", always_xy=True).transform(gx, gy)
    want_x = np.abs(lon[None, :] - (plon.ravel()[:, None] % 360)).argmin(axis=1).reshape(gx.shape)
    want_y = np.abs(lat[None, :] - plat.ravel()[:, None]).argmin(axis=1).reshape(gx.shape)
    assert inside.all() and (ix == want_x).all() and (iy == want_y).all()


@pytest.mark.parametrize(
    ("z", "x", "y"), [(-1, 0, 0), (31, 0, 0), (2, 4, 0), (2, 0, 4), (0, -1, 0)]
)
def test_a_tile_outside_the_matrix_is_refused(z, x, y):
    with pytest.raises(tiles.BadTile):
        tiles.pixel_centres(tiles.tms_named("WebMercatorQuad"), z, x, y)


def test_cf_attributes_set_the_range_and_the_classes():
    sample = np.array([1.0, 2.0, np.nan, 100.0])
    assert (colors.style_of({"valid_range": [0, 50]}, sample).vmin,
            colors.style_of({"valid_range": [0, 50]}, sample).vmax) == (0.0, 50.0)  # fmt: skip
    s = colors.style_of({"valid_min": -5, "valid_max": 5.5, "units": "m s-1"}, sample)
    assert (s.vmin, s.vmax, s.units) == (-5.0, 5.5, "m s-1")
    s = colors.style_of({}, sample)
    assert (s.vmin, s.vmax) == pytest.approx(tuple(np.nanpercentile(sample, [2, 98])))
    s = colors.style_of({"valid_range": [0, 50]}, sample, value_range=(1.0, 2.0))
    assert (s.vmin, s.vmax) == (1.0, 2.0)  # the caller's range wins
    s = colors.style_of({"flag_values": "1 2 4", "flag_meanings": "sea land ice"}, None)
    assert s.categorical and s.classes == ((1.0, "sea"), (2.0, "land"), (4.0, "ice"))
    rgba = colors.paint(np.array([[1.0, 4.0, np.nan, 3.0]]), s)
    assert (rgba[0, 0] == s.lut[0]).all() and (rgba[0, 1] == s.lut[2]).all()
    assert rgba[0, 2, 3] == 0 and tuple(rgba[0, 3]) == colors.OTHER_CLASS
    with pytest.raises(ValueError, match="unknown colormap 'nope'"):
        colors.lookup("nope")


@given(
    v=st.one_of(st.floats(-1e6, 1e6), st.just(float("nan"))),
    vmin=st.floats(-100, 0),
    span=st.floats(1e-3, 500),
)
def test_a_value_gets_the_lut_entry_of_its_place_in_the_range(v, vmin, span):
    s = colors.style_of({}, None, value_range=(vmin, vmin + span))
    got = colors.paint(np.array([[v]]), s)[0, 0]
    if np.isnan(v):
        assert got[3] == 0
        return
    k = int(np.clip(np.rint((v - vmin) / span * 255), 0, 255))
    assert (got == s.lut[k]).all()
