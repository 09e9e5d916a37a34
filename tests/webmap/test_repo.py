"""`toolkit serve` on a virtual forecast: real GRIB2 (ecCodes) behind a virtual Icechunk repo,
decoded per tile by gribberish, levels built inside the repo; the values against xarray's read
of main, and a fire's commit served as soon as the branch moves, never mixed with the old."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from starlette.testclient import TestClient

from tests.webmap.conftest import FIRE, forecast_repo
from toolkit import icechunk as R
from toolkit import storage
from toolkit.virtual.update import update
from toolkit.webmap.app import Served, create_app
from toolkit.webmap.view import Source

INITS = ["2025-08-01T00:00:00Z", "2025-08-01T06:00:00Z"]


def main(repo) -> xr.Dataset:
    handle = R.open_repo(storage.open_store(str(repo)), fresh=True)
    return xr.open_zarr(R.readonly(handle).store, consolidated=False)


def level(repo, group: str) -> xr.Dataset:
    handle = R.open_repo(storage.open_store(str(repo)), fresh=True)
    return xr.open_zarr(R.readonly(handle).store, group=group, consolidated=False)


def _nearest(ds: xr.Dataset, name: str, lat: float, lon: float, **sel) -> float:
    """The value of the cell nearest (lat, lon) by argmin over the coordinates (0..360 lon)."""
    da = ds[name].sel(sel)
    i = int(np.abs(ds["latitude"].values - lat).argmin())
    j = int(np.abs(ds["longitude"].values - lon % 360).argmin())
    return float(da.isel(latitude=i, longitude=j).values)


def test_a_forecast_repo_serves_every_variable_and_the_levels_it_has(forecast):
    c = TestClient(create_app(Served(Source(str(forecast)), variable="temperature_2m")))
    meta = c.get("/meta").json()
    snapshot = R.snapshot_of(R.open_repo(storage.open_store(str(forecast)), fresh=True))
    assert meta["kind"] == "repo" and meta["version"] == snapshot
    assert meta["default_variable"] == "temperature_2m"
    t2m = meta["variables"]["temperature_2m"]
    assert t2m["levels"] == ["0", "2x", "4x"] and t2m["units"] == "K"
    assert meta["variables"]["precipitation_surface"]["levels"] == ["0"]
    dims = {lead["dim"]: lead for lead in t2m["leading"]}
    assert dims["init_time"]["labels"] == INITS and dims["init_time"]["default"] == INITS[-1]
    assert dims["lead_time"]["labels"] == ["PT0H", "PT3H", "PT6H"]
    assert meta["variables"]["temperature"]["leading"][-1]["dim"] == "level"
    # legends come for the variable asked for (and the default): a style may read a level
    assert meta["variables"]["precipitation_surface"]["legend"] is None
    asked = c.get("/meta", params={"variable": "precipitation_surface"}).json()["variables"]
    precip = asked["precipitation_surface"]
    assert precip["legend"]["kind"] == "continuous" and precip["legend"]["units"] == precip["units"]
    assert precip["units"]  # CF units, shown on the legend
    assert asked["temperature_2m"]["legend"] == t2m["legend"]
    assert c.get("/meta", params={"variable": "salinity"}).status_code == 400
    ds = main(forecast)
    lat, lon = 46.1, -104.1  # inside the simulated domain (250..262 E, 42..50 N)
    for lead in ("PT0H", "PT3H"):
        p = c.get("/point", params={"variable": "temperature_2m", "lat": lat, "lon": lon,
                                    "zoom": 6, "lead_time": lead}).json()  # fmt: skip
        want = _nearest(ds, "temperature_2m", lat, lon, init_time=np.datetime64(INITS[-1][:-1]),
                        lead_time=np.timedelta64(int(lead[2:-1]), "h"))  # fmt: skip
        assert p["level"] == "0" and p["value"] == pytest.approx(want)
    p = c.get("/point", params={"variable": "temperature_2m", "lat": lat, "lon": lon,
                                "zoom": 0}).json()  # fmt: skip
    want = _nearest(level(forecast, "4x"), "temperature_2m", lat, lon,
                    init_time=np.datetime64(INITS[-1][:-1]), lead_time=np.timedelta64(0, "h"))  # fmt: skip
    assert p["level"] == "4x" and p["value"] == pytest.approx(want)
    p = c.get("/point", params={"variable": "temperature", "lat": lat, "lon": lon, "zoom": 3,
                                "level": "500"}).json()  # fmt: skip
    want = _nearest(ds, "temperature", lat, lon, init_time=np.datetime64(INITS[-1][:-1]),
                    lead_time=np.timedelta64(0, "h"), level=500.0)  # fmt: skip
    assert p["selection"]["level"] == "500.0" and p["value"] == pytest.approx(want)
    tile = c.get("/tiles/0/0/0.png", params={"variable": "temperature_2m"})
    assert tile.headers["x-level"] == "4x" and tile.headers["x-version"] == snapshot


def test_a_fire_moves_the_map_to_the_new_snapshot_and_its_new_init_time(tmp_path):
    archive, files, job = forecast_repo(tmp_path)
    repo = tmp_path / "repo"
    c = TestClient(create_app(Served(Source(str(repo)), variable="temperature_2m", refresh=0)))
    before = c.get("/meta").json()
    old_tile = c.get("/tiles/0/0/0.png", params={"variable": "temperature_2m"})
    archive.publish(files[6:])
    update(job, fire_time=FIRE, deadline_seconds=60)
    after = c.get("/meta").json()
    snapshot = R.snapshot_of(R.open_repo(storage.open_store(str(repo)), fresh=True))
    assert before["version"] != after["version"] == snapshot
    legend = [m["variables"]["temperature_2m"]["legend"] for m in (before, after)]
    assert legend[0] == legend[1]  # a value keeps its colour across the refresh
    inits = after["variables"]["temperature_2m"]["leading"][0]
    assert inits["labels"][-1] == inits["default"] == "2025-08-01T18:00:00Z"
    new_tile = c.get("/tiles/0/0/0.png", params={"variable": "temperature_2m"})
    assert new_tile.headers["x-version"] == snapshot
    # the levels were built before the fire: the new init time is served from level 0,
    # the old ones still from their level
    assert old_tile.headers["x-level"] == "4x" and new_tile.headers["x-level"] == "0"
    again = c.get("/tiles/0/0/0.png", params={"variable": "temperature_2m", "init_time": INITS[-1]})
    assert again.headers["x-level"] == "4x" and again.content == old_tile.content
    lat, lon = 44.3, -101.7
    p = c.get(
        "/point", params={"variable": "temperature_2m", "lat": lat, "lon": lon, "zoom": 5}
    ).json()
    want = _nearest(main(repo), "temperature_2m", lat, lon,
                    init_time=np.datetime64("2025-08-01T18"), lead_time=np.timedelta64(0, "h"))  # fmt: skip
    assert p["version"] == snapshot and p["value"] == pytest.approx(want)
