"""`toolkit serve`'s endpoints on a real store as xarray wrote it (CF packing, _FillValue) and
its real pyramid, through starlette's test client: every tile pixel against tests/webmap/oracle.py
(textbook tile arithmetic, brute-force nearest cell, xarray's decoding, matplotlib's colours)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image
from starlette.testclient import TestClient

from tests.webmap import oracle
from tests.webmap.conftest import CLASSES, RES, TIMES
from toolkit.webmap.app import Served, create_app
from toolkit.webmap.view import Source

CELLS = {"0": RES, "2x": 2 * RES, "4x": 4 * RES, "8x": 8 * RES}
LATEST = "2025-08-02T00:00:00Z"


@pytest.fixture(scope="module")
def client(cf_pyramid) -> TestClient:
    return TestClient(create_app(Served(Source(str(cf_pyramid)))))


@pytest.fixture(scope="module")
def levels(cf_pyramid) -> dict[str, xr.Dataset]:
    """Every level as xarray itself decodes it (zarr engine, one group at a time)."""
    out = {"0": xr.open_zarr(cf_pyramid, consolidated=False)}
    for g in ("2x", "4x", "8x"):
        out[g] = xr.open_zarr(cf_pyramid, group=g, consolidated=False)
    return out


def _rgba(body: bytes) -> np.ndarray:
    img = Image.open(io.BytesIO(body))
    assert img.size == (256, 256) and img.mode == "RGBA"
    return np.asarray(img)


def _coarsest_range(level: xr.Dataset, time: int) -> tuple[float, float]:
    v = level["temperature"].isel(time=time).values.astype(np.float64)
    lo, hi = np.percentile(v[np.isfinite(v)], [2, 98])
    return float(lo), float(hi)


def test_meta_names_levels_selectors_and_a_legend_from_the_data(client, levels):
    meta = client.get("/meta").json()
    var = meta["variables"]["temperature"]
    assert var["levels"] == ["0", "2x", "4x", "8x"]
    assert var["units"] == "K" and var["label"] == "air temperature"
    assert var["leading"] == [{"dim": "time", "labels": [
        "2025-08-01T00:00:00Z", LATEST], "default": LATEST}]  # fmt: skip
    lo, hi = _coarsest_range(levels["8x"], time=1)  # the newest time is what opens
    legend = var["legend"]
    assert legend["kind"] == "continuous" and legend["units"] == "K"
    assert legend["vmin"] == pytest.approx(lo) and legend["vmax"] == pytest.approx(hi)
    assert meta["bbox"] == [-180.0, -90.0, 180.0, 90.0]
    assert meta["title"] == "a global test field" and meta["kind"] == "pyramid"


@pytest.mark.parametrize(
    ("tms", "zxy", "level"),
    [
        (
            "WebMercatorQuad",
            (0, 0, 0),
            "4x",
        ),  # 1.41 deg pixels: 4x (1 deg) is the coarsest that fits
        ("WebMercatorQuad", (1, 1, 0), "2x"),
        ("WebMercatorQuad", (2, 2, 1), "0"),
        ("WebMercatorQuad", (3, 4, 3), "0"),  # finer than level 0: level 0
        ("WorldCRS84Quad", (0, 1, 0), "2x"),  # 0.70 deg pixels, in the data's own CRS
        ("WorldCRS84Quad", (1, 2, 0), "0"),
    ],
)
def test_every_pixel_is_the_colour_of_the_nearest_cell_of_the_zooms_level(
    client, levels, tms, zxy, level
):
    z, x, y = zxy
    path = (
        f"/tiles/{z}/{x}/{y}.png" if tms == "WebMercatorQuad" else f"/tiles/{tms}/{z}/{x}/{y}.png"
    )
    r = client.get(path, params={"variable": "temperature"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    centres = oracle.mercator_centres if tms == "WebMercatorQuad" else oracle.crs84_centres
    lon, lat = centres(z, x, y)
    pixel = abs(lon[0, 1] - lon[0, 0])
    assert oracle.level_for(CELLS, pixel) == level == r.headers["x-level"]
    want = oracle.expected_values(levels[level], "temperature", lon, lat, {"time": 1})
    legend = client.get("/meta").json()["variables"]["temperature"]["legend"]
    ok = oracle.colour_ok(_rgba(r.content), want, legend["vmin"], legend["vmax"])
    assert ok.all(), f"{(~ok).sum()} of 65536 pixels differ"
    assert np.isnan(want).any() and np.isfinite(want).any()  # the tile shows both


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lat=st.floats(-84, 84),
    lon=st.floats(-180, 179.99),
    zoom=st.integers(0, 6),
    time=st.sampled_from([0, 1]),
)
def test_point_is_the_nearest_cell_of_the_level_the_zoom_reads(
    client, levels, lat, lon, zoom, time
):
    label = ["2025-08-01T00:00:00Z", LATEST][time]
    p = client.get("/point", params={"variable": "temperature", "lat": lat, "lon": lon,
                                     "zoom": zoom, "time": label}).json()  # fmt: skip
    level = oracle.level_for(CELLS, 360.0 / (256 * 2**zoom))
    cell = CELLS[level]
    # on a cell edge (0 degrees is one) two cells are nearest: either would be right
    assume(all(abs(v / cell - round(v / cell)) > 1e-9 for v in (lat, lon)))
    assert p["level"] == level
    want = oracle.expected_values(levels[level], "temperature", np.array([lon]), np.array([lat]),
                                  {"time": time})[0]  # fmt: skip
    if np.isnan(want):
        assert p["value"] is None
    else:
        assert p["value"] == pytest.approx(want, rel=1e-6)
    assert p["selection"] == {"time": label} and p["units"] == "K"


def test_a_time_selects_its_tiles(client, levels):
    default = client.get("/tiles/2/2/1.png", params={"variable": "temperature"}).content
    latest = client.get("/tiles/2/2/1.png", params={"variable": "temperature", "time": LATEST})
    first = client.get(
        "/tiles/2/2/1.png", params={"variable": "temperature", "time": str(TIMES[0])[:19] + "Z"}
    )
    assert latest.content == default and first.content != default
    lon, lat = oracle.mercator_centres(2, 2, 1)
    want = oracle.expected_values(levels["0"], "temperature", lon, lat, {"time": 0})
    legend = client.get("/meta").json()["variables"]["temperature"]["legend"]
    assert oracle.colour_ok(_rgba(first.content), want, legend["vmin"], legend["vmax"]).all()


def test_a_given_range_paints_the_tiles(cf_pyramid, levels):
    c = TestClient(
        create_app(Served(Source(str(cf_pyramid)), value_range=(250.0, 300.0), colormap="magma"))
    )
    legend = c.get("/meta").json()["variables"]["temperature"]["legend"]
    assert (legend["vmin"], legend["vmax"], legend["colormap"]) == (250.0, 300.0, "magma")
    r = c.get("/tiles/1/0/0.png")
    lon, lat = oracle.mercator_centres(1, 0, 0)
    want = oracle.expected_values(levels["2x"], "temperature", lon, lat, {"time": 1})
    assert oracle.colour_ok(_rgba(r.content), want, 250.0, 300.0, "magma").all()


def test_classes_get_one_colour_each_and_a_legend_of_their_meanings(classes_pyramid):
    from matplotlib import colormaps

    c = TestClient(create_app(Served(Source(str(classes_pyramid)))))
    legend = c.get("/meta").json()["variables"]["cover"]["legend"]
    assert legend["kind"] == "classes"
    assert [(k["value"], k["meaning"]) for k in legend["classes"]] == list(CLASSES.items())
    tab10 = (np.asarray(colormaps["tab10"].colors)[:4] * 255).round().astype(int)
    assert [k["color"] for k in legend["classes"]] == [
        "#{:02x}{:02x}{:02x}".format(*c) for c in tab10
    ]
    r = c.get("/tiles/1/1/0.png")
    assert r.headers["x-level"] == "2x"
    level = xr.open_zarr(classes_pyramid, group="2x", consolidated=False)
    lon, lat = oracle.mercator_centres(1, 1, 0)
    want = oracle.expected_values(level, "cover", lon, lat, {})
    rgba = _rgba(r.content).astype(int)
    assert np.isnan(want).any()  # the unclassified north: transparent
    assert (rgba[np.isnan(want)][:, 3] == 0).all()
    for i, value in enumerate(CLASSES):
        at = want == value
        assert at.any() and (rgba[at][:, :3] == tab10[i]).all() and (rgba[at][:, 3] == 255).all()


def test_bad_requests_get_one_line_and_their_status(client):
    def line(r, status):
        assert r.status_code == status, r.text
        assert "\n" not in r.text.strip() and "Traceback" not in r.text
        return r.text

    assert "outside the zoom-1 matrix" in line(client.get("/tiles/1/2/0.png"), 404)
    assert "zoom 31" in line(client.get("/tiles/31/0/0.png"), 404)
    line(client.get("/tiles/1/-1/0.png"), 404)
    line(client.get("/tiles/1/0/0.jpg"), 404)
    assert "WebMercatorQuad" in line(client.get("/tiles/Nowhere/0/0/0.png"), 404)
    said = line(client.get("/tiles/0/0/0.png", params={"variable": "salinity"}), 400)
    assert "salinity" in said and "temperature" in said
    said = line(client.get("/tiles/0/0/0.png", params={"time": "1999-01-01"}), 400)
    assert "time='1999-01-01'" in said and LATEST in said
    assert "lat" in line(client.get("/point", params={"lat": "north", "lon": 0}), 400)
    line(client.get("/point", params={"lat": 95, "lon": 0}), 400)
    line(client.post("/meta"), 405)
    line(client.delete("/tiles/0/0/0.png"), 405)
    line(client.get("/static/../view.py"), 404)
    line(client.get("/static/%2e%2e/view.py"), 404)
    line(client.get("/zarr.json"), 404)  # the store itself is never served
    assert client.get("/static/map.js").status_code == 200


def test_the_page_is_served_with_its_script(client):
    page = client.get("/")
    assert page.status_code == 200 and 'src="/static/map.js"' in page.text
    assert "http://" not in page.text and "https://" not in page.text  # nothing from a CDN
    script = client.get("/static/map.js").text
    assert "/tiles/" in script and "/point?" in script and "/meta" in script
