"""The operator comes from what the data means, and inputs a pyramid cannot pool are refused
with one line naming the array and the fix (exit 2), before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from tests.pyramid.test_usage import one_line_error
from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic
from toolkit.pyramid import build, plan
from toolkit.pyramid.geometry import ArrayMeta, PlanError, choose_methods, max_levels, plan_pyramid

runner = CliRunner()


def pyramid(*args: str):
    return runner.invoke(app, ["pyramid", *args])


def store_with(tmp_path, name: str, values: np.ndarray, attrs: dict | None = None, **kw):
    """A small level-0 store holding `values` as array `name` (lat, lon) on a global grid."""
    path = tmp_path / f"{name}.zarr"
    st = storage.open_store(str(path))
    synthetic.write_store(st, shape=values.shape, shards=(16, 16))  # the grid and its coords
    root = zarr.open_group(st.zarr(), mode="r+")
    del root["field"]
    kw.setdefault("dtype", values.dtype)
    arr = root.create_array(
        name, shape=values.shape, chunks=(16, 16),
        dimension_names=["lat", "lon"], attributes=attrs or {}, **kw,
    )  # fmt: skip
    arr[...] = values
    return path


def test_classes_get_mode_floats_mean_and_other_integers_must_say(tmp_path):
    classes = tmp_path / "lc.zarr"
    synthetic.write_store(storage.open_store(str(classes)), shape=(40, 60), kind="categorical")
    p = plan(str(classes))
    assert p.method == "mode" and "flag_values" in p.method_from
    floats = tmp_path / "t.zarr"
    synthetic.write_store(storage.open_store(str(floats)), shape=(40, 60))
    assert plan(str(floats)).method == "mean"

    counts = store_with(tmp_path, "counts", np.arange(40 * 60, dtype="int32").reshape(40, 60))
    line = one_line_error(pyramid("build", str(counts), "--executor", "sync"))
    assert "array 'counts' is int32 with no CF flag_values/flag_meanings" in line
    assert "--method mode for classes, or mean|min|max|sum" in line
    assert not (counts / "2x").exists()  # refused before anything was written
    assert pyramid("build", str(counts), "--method", "sum", "--executor", "sync").exit_code == 0

    res = pyramid("build", str(classes), "--executor", "sync")
    assert res.exit_code == 0, res.output
    group = json.loads((classes / "2x" / "zarr.json").read_text())["attributes"]
    assert group["pyramid:method"] == "mode" and "flag_values" in group["pyramid:method_from"]
    recorded = json.loads((classes / ".pyramid" / "plan" / "c" / "0").read_text())
    assert recorded["method"] == "mode" and "flag_values" in recorded["method_from"]
    assert pyramid("verify", str(classes), "--executor", "sync").exit_code == 0


def test_averaging_classes_needs_force(tmp_path):
    classes = tmp_path / "lc.zarr"
    synthetic.write_store(storage.open_store(str(classes)), shape=(40, 60), kind="categorical")
    line = one_line_error(pyramid("build", str(classes), "--method", "mean", "--executor", "sync"))
    assert "array 'field' has CF flag_values, flag_meanings: it holds classes" in line
    assert "use --method mode, or --force-method" in line
    res = pyramid("build", str(classes), "--method", "mean", "--force-method", "--executor", "sync")
    assert res.exit_code == 0, res.output
    assert zarr.open_array(str(classes / "2x" / "field")).dtype == np.float32
    assert pyramid("verify", str(classes), "--executor", "sync").exit_code == 0


def test_arrays_needing_different_operators_each_get_theirs():
    meta = dict(shape=(32, 32), dims=("y", "x"), grid=(16, 16), chunks=(16, 16), fill_value=0)
    arrays = {
        "lc": ArrayMeta("lc", dtype="uint8", **meta),
        "t": ArrayMeta("t", dtype="float32", **meta),
    }
    chosen = choose_methods(arrays, {"lc": {"flag_values": [1, 2]}, "t": {}})
    assert {n: m for n, (m, _) in chosen.items()} == {"lc": "mode", "t": "mean"}
    forced = choose_methods(arrays, {"lc": {"flag_masks": [1, 2]}}, "max", force=True)
    assert {m for m, _ in forced.values()} == {"max"}


@pytest.mark.parametrize(
    ("values", "why"),
    [
        (np.zeros((32, 48), dtype="complex64"), "is complex64 (complex)"),
        (np.zeros((32, 48), dtype=bool), "is bool (boolean)"),
    ],
)
def test_dtypes_a_pyramid_cannot_pool_are_one_line(tmp_path, values, why):
    path = store_with(tmp_path, "odd", values)
    line = one_line_error(pyramid("plan", str(path), "--method", "max"))
    assert f"array 'odd' {why}" in line and "cast it" in line


def test_strings_are_one_line(tmp_path):
    path = store_with(tmp_path, "names", np.full((32, 48), "a", dtype=object), dtype=str)
    line = one_line_error(pyramid("build", str(path), "--method", "mode", "--executor", "sync"))
    assert "array 'names' is" in line and "(string)" in line and "cast it" in line


def test_levels_past_one_pixel_and_tasks_over_budget_are_refused(tmp_path):
    floats = tmp_path / "t.zarr"
    synthetic.write_store(storage.open_store(str(floats)), shape=(40, 60))
    line = one_line_error(pyramid("plan", str(floats), "--levels", "40"))
    assert "the 40x60 array is one pixel at level 6 (64x)" in line and "--levels 6" in line
    assert max_levels((40, 60)) == 6 and max_levels((1, 2)) == 1 and max_levels((1, 1)) == 1
    res = pyramid("plan", str(floats), "--levels", "6")
    assert res.exit_code == 0 and "1x1" in res.output  # the deepest level is one pixel
    # mode re-reads level 0: at 32x a 4096 px shard covers 131072 px squared (16 GiB of uint8)
    big = ArrayMeta("lc", (200_000, 400_000), ("y", "x"), (4096, 4096), (512, 512), "uint8", 0)
    plan_pyramid({"lc": big}, {"lc": []}, method="mode", levels=4)  # 4 GiB at 16x: the budget
    with pytest.raises(PlanError, match=r"level 32x of 'lc': one mode task would read 16\.0 GiB"):
        plan_pyramid({"lc": big}, {"lc": []}, method="mode", levels=5)
    assert plan_pyramid({"lc": big}, {"lc": []}, method="mode", levels=5, max_shard=1024)


@pytest.mark.parametrize(
    "body", [b"{not json", b'{"digest": "x"}', b"[1, 2]"], ids=["corrupt", "foreign", "list"]
)
def test_a_corrupt_or_foreign_recorded_plan_is_one_line_naming_the_way_out(tmp_path, body):
    floats = tmp_path / "t.zarr"
    synthetic.write_store(storage.open_store(str(floats)), shape=(40, 60))
    build(str(floats), executor="sync")
    (floats / ".pyramid" / "plan" / "c" / "0").write_bytes(body)
    for cmd in ("build", "verify"):
        line = one_line_error(pyramid(cmd, str(floats), "--executor", "sync"))
        assert ".pyramid/plan/c/0: " in line and "(not a pyramid plan record)" in line
        assert "--rebuild-from 2x" in line
    res = pyramid("build", str(floats), "--rebuild-from", "2x", "--executor", "sync")
    assert res.exit_code == 0, res.output
    assert pyramid("verify", str(floats), "--executor", "sync").exit_code == 0


def test_an_unpoolable_array_beside_good_ones_is_refused_only_when_chosen(tmp_path):
    path = tmp_path / "mixed.zarr"
    st = storage.open_store(str(path))
    synthetic.write_store(st, shape=(40, 60), shards=(16, 16))
    root = zarr.open_group(st.zarr(), mode="r+")
    odd = root.create_array(
        "odd", shape=(40, 60), dtype="complex64", dimension_names=["lat", "lon"]
    )
    odd[...] = 1j
    assert plan(str(path)).variables == ("field",)  # the float field alone
    line = one_line_error(pyramid("plan", str(path), "--variable", "odd", "--method", "max"))
    assert "variable 'odd': is complex64 (complex)" in line and "cast it" in line
