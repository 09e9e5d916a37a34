"""The root metadata a pyramid adds, key by key against the multiscales store GDAL's Zarr reader
is tested on (tests/data/gdal). The conventions are registered at their published tag, v0.1
(GDAL's copy still names the never-published v1 URLs); GDAL finds them by uuid."""

from __future__ import annotations

import json
from pathlib import Path

from toolkit import storage
from toolkit.examples import synthetic
from toolkit.pyramid import build

GDAL = Path(__file__).parents[1] / "data" / "gdal" / "simple_multiscales_spatial" / "zarr.json"


def test_root_metadata_matches_gdal_key_by_key(tmp_path):
    theirs = json.loads(GDAL.read_text())["attributes"]
    path = tmp_path / "t.zarr"
    synthetic.write_store(storage.open_store(str(path)), shape=(40, 60), shards=(16, 16))
    build(str(path), levels=2, executor="sync")
    ours = json.loads((path / "zarr.json").read_text())["attributes"]

    by_uuid = {c["uuid"]: c for c in ours["zarr_conventions"]}
    for entry in theirs["zarr_conventions"]:  # every convention GDAL registers, we register
        mine = by_uuid[entry["uuid"]]
        assert set(mine) == set(entry)  # the same keys
        assert mine["name"] == entry["name"].rstrip(":")  # v0.1's name has no colon
        for url in ("schema_url", "spec_url"):
            assert entry[url].replace("/v1/", "/v0.1/") == mine[url]  # the published tag
    for key in ("spatial:dimensions", "spatial:bbox", "spatial:registration"):
        assert key in ours and type(ours[key]) is type(theirs[key])
    assert ours["spatial:registration"] == theirs["spatial:registration"] == "pixel"
    assert ours["spatial:dimensions"] == ["lat", "lon"]
    assert ours["spatial:bbox"] == [-180.0, -90.0, 180.0, 90.0]  # [xmin, ymin, xmax, ymax]

    base, *levels = ours["multiscales"]["layout"]
    gbase, *glevels = theirs["multiscales"]["layout"]
    assert set(gbase) <= set(base)  # asset, spatial:shape, spatial:transform (+ our scale 1)
    for mine, gdal in zip(levels, glevels[:1], strict=False):
        assert set(gdal) <= set(mine)  # asset, derived_from, transform, spatial:*
        assert set(mine["transform"]) == set(gdal["transform"]) == {"scale", "translation"}
        assert len(mine["spatial:transform"]) == len(gdal["spatial:transform"]) == 6
    assert [x["asset"] for x in levels] == ["2x", "4x"]
