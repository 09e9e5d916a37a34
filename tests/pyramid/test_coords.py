"""Level coordinates for any spacing: each is the mean of the level-0 coordinates its window
pools (a uniform axis continued at its spacing past its end, so a partial edge window sits where
`spatial:transform` puts it); the transform is written only for a uniform grid; `verify`
recomputes the coordinates from level 0."""

from __future__ import annotations

import json

import numpy as np
import zarr
from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic
from toolkit.pyramid import build, verify

runner = CliRunner()


def with_axis(tmp_path, name: str, lon: np.ndarray, lat: np.ndarray | None = None):
    path = tmp_path / f"{name}.zarr"
    st = storage.open_store(str(path))
    synthetic.write_store(st, shape=(40, len(lon)), shards=(16, 16))
    root = zarr.open_group(st.zarr(), mode="r+")
    root["lon"][...] = lon
    if lat is not None:
        root["lat"][...] = lat
    return path, st


def means(values: np.ndarray, f: int) -> list[float]:
    return [float(np.mean(values[i : i + f])) for i in range(0, len(values), f)]


def test_an_irregular_axis_gets_window_means_and_no_transform(tmp_path):
    lon = np.cumsum(np.linspace(0.5, 3.0, 60))  # spacing grows from 0.5 to 3
    path, st = with_axis(tmp_path, "irregular", lon)
    build(st, levels=3, executor="sync")
    for f in (2, 4, 8):
        got = zarr.open_array(str(path / f"{f}x" / "lon"))[...]
        np.testing.assert_allclose(got, means(lon, f), rtol=1e-14)  # not endpoint-spaced
    layout = json.loads((path / "zarr.json").read_text())["attributes"]["multiscales"]["layout"]
    assert all("spatial:transform" not in item for item in layout)
    assert [item["transform"]["scale"] for item in layout] == [[1.0, 1.0]] + [[2.0, 2.0]] * 3
    assert verify(st, executor="sync").ok


def test_a_descending_uniform_axis_keeps_its_transform_and_direction(tmp_path):
    lat = 89.5 - 4.5 * np.arange(40)  # north-up, descending
    lon = -179.0 + 6.0 * np.arange(60)
    path, st = with_axis(tmp_path, "descending", lon, lat)
    build(st, levels=3, executor="sync")
    lon8 = zarr.open_array(str(path / "8x" / "lon"))[...]  # 60 / 8: the last window is half
    np.testing.assert_allclose(np.diff(lon8), 48.0)  # ... its centre is where the transform says
    np.testing.assert_allclose(lon8[-1], -182.0 + 48.0 * 7.5, rtol=1e-14)
    got = zarr.open_array(str(path / "4x" / "lat"))[...]
    np.testing.assert_allclose(got, means(lat, 4), rtol=1e-14)
    assert np.all(np.diff(got) < 0)
    layout = json.loads((path / "zarr.json").read_text())["attributes"]["multiscales"]["layout"]
    t = {item["asset"]: item["spatial:transform"] for item in layout}
    assert t["."] == [6.0, 0.0, -182.0, 0.0, -4.5, 91.75]
    assert t["4x"] == [24.0, 0.0, -182.0, 0.0, -18.0, 91.75]
    assert verify(st, executor="sync").ok


def test_verify_recomputes_level_coordinates_from_level_0(tmp_path):
    lon = np.cumsum(np.linspace(0.5, 3.0, 60))
    path, st = with_axis(tmp_path, "tampered", lon)
    build(st, levels=2, executor="sync")
    coord = zarr.open_array(str(path / "2x" / "lon"), mode="r+")
    wrong = coord[...]
    wrong[5] += 0.25
    coord[...] = wrong
    res = runner.invoke(app, ["pyramid", "verify", str(path), "--executor", "sync"])
    assert res.exit_code == 1, res.output
    assert "1 coordinate(s) differ from the mean of their level-0 window (cell 5:" in (
        res.output.replace("\n", "")
    )
