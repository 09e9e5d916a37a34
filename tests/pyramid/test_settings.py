"""One plan form (issue 51, item 4): what a build records is written from `Settings` and the
plan, and read back as typed values. The pins below were taken before the records moved to
`toolkit.pyramid.settings`: a plan's digest, the `.pyramid/plan` bytes and a repo's
`pyramid:settings` must not change (a changed digest would rebuild every pyramid built before)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import icechunk
import pytest
import zarr

from tests.pyramid.test_operators import pyramid, write_store
from tests.pyramid.test_usage import one_line_error
from toolkit import storage
from toolkit.examples import synthetic
from toolkit.pyramid import build, records
from toolkit.pyramid.geometry import ArrayMeta, RecordedPlan, plan_pyramid
from toolkit.pyramid.settings import Settings

# (digest, sha256 of the plan record's bytes)[:16], taken at 839f5f1
PINS = {
    "mixed": ("424a79e69eb0541e12c2983a", "dfe4c50788874c69"),  # mode, mean, circular_mean
    "circ": ("4029ac848107f6c041f82092", "b41d2acc2bd8a25b"),  # mean with a direction
}
SYNTHETIC = ("b885430db624566af71d4815", "4d1dfa46ee8eb109")
VARIABLES = {"mixed": (), "circ": ("-v", "t2m", "-v", "wdir")}
REPO_SETTINGS = {
    "mixed": (
        '{"method": "mixed", "band_dim": null, "variables": ["landcover", "t2m", "wdir"], '
        '"levels": 3, "max_shard": 4096, "circular": ["wdir"], "operators": {"landcover": '
        '"mode", "t2m": "mean", "wdir": "circular_mean"}, "spatial_dims": ["lat", "lon"], '
        '"classes": {"landcover": [1, 2, 3, 4]}}'
    ),
    "circ": (
        '{"method": "mean", "band_dim": null, "variables": ["t2m", "wdir"], "levels": 3, '
        '"max_shard": 4096, "circular": ["wdir"], "spatial_dims": ["lat", "lon"], '
        '"classes": {}}'
    ),
}


def plan_record(path) -> bytes:
    return records.get(storage.open_store(str(path)), records.PLAN)[1]


def pinned(raw: bytes) -> tuple[str, str]:
    return json.loads(raw)["digest"], hashlib.sha256(raw).hexdigest()[:16]


def test_the_digest_and_the_records_are_those_of_before(tmp_path):
    for name, pin in PINS.items():
        path = tmp_path / f"{name}.zarr"
        write_store(path, with_wdir=True)
        res = pyramid("build", str(path), "--levels", "3", *VARIABLES[name], "--executor", "sync")
        assert res.exit_code == 0, res.output
        raw = plan_record(path)
        assert pinned(raw) == pin
        # read back typed, written again: the same bytes
        assert RecordedPlan.from_json(json.loads(raw)).to_json().encode() == raw
        out = tmp_path / f"{name}.icechunk"
        res = pyramid("build", str(path), "--output", str(out), "--levels", "3",
                      *VARIABLES[name], "--executor", "sync")  # fmt: skip
        assert res.exit_code == 0, res.output
        repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(out)))
        root = zarr.open_group(repo.readonly_session("main").store, mode="r")
        said = root.attrs["pyramid:settings"]
        assert json.dumps(said) == REPO_SETTINGS[name]
        assert Settings.from_record(said).record() == said
    store = storage.open_store(str(tmp_path / "syn.zarr"))
    synthetic.write_store(store, shape=(300, 500))
    build(store, executor="sync")
    assert pinned(plan_record(tmp_path / "syn.zarr")) == SYNTHETIC


def test_a_record_from_before_operators_per_variable_reads_as_its_operators():
    """One `method`, the directions in `circular`, no `operators` nor a variable's `method`:
    each variable's operator is read from them, and the settings say what they said."""
    t = ArrayMeta("t", (64, 64), ("y", "x"), (16, 16), (16, 16), "float32", -9999.0)
    arrays = {"t": t, "w": replace(t, name="w")}
    plan = plan_pyramid(arrays, {n: ["c/0/0"] for n in arrays}, levels=2, circular=("w",))
    doc = json.loads(plan.to_json())
    assert doc["method"] == "mean" and doc["circular"] == ["w"]
    for key in ("operators", "operators_from"):
        del doc[key]
    doc["method_from"] = "floating point: a quantity"
    for lp in doc["level_plans"]:
        for v in lp["vars"]:
            del v["method"], v["classes_dtype"]
    old = RecordedPlan.from_json(doc)
    assert dict(old.settings.operators) == {"t": "mean", "w": "circular_mean"}
    assert old.settings.accepted() == {
        "t": ("mean", "floating point: a quantity"),
        "w": ("circular_mean", "floating point: a quantity"),
    }
    assert old.settings.core() == plan.settings.core()  # what the digest hashes: unchanged
    assert [v.method for v in old.levels[0].vars] == ["mean", "mean"]
    # the fields filled as planned then (as JSON: an output's NaN fill is no equal of itself)
    assert _levels(old.to_json()) == _levels(plan.to_json())
    assert old.levels[0].keys == ("2x/t/c/0/0", "2x/w/c/0/0")
    repo = {k: doc[k] for k in ("method", "band_dim", "variables", "levels", "circular")}
    assert Settings.from_record(repo).accepted() == {
        "t": ("mean", "given"),
        "w": ("circular_mean", "given"),
    }


def _levels(text: str) -> str:
    return json.dumps(json.loads(text)["level_plans"])


@pytest.mark.parametrize(
    "damage",
    [
        lambda doc: doc["level_plans"][0].update(vars=[["not", "a", "variable"]]),
        lambda doc: doc["level_plans"][0]["vars"][0].pop("shards"),
        lambda doc: doc.update(levels="three"),
    ],
    ids=["vars", "field", "levels"],
)
def test_a_plan_record_with_a_field_this_toolkit_does_not_write_is_one_line(tmp_path, damage):
    path = tmp_path / "t.zarr"
    store = storage.open_store(str(path))
    synthetic.write_store(store, shape=(40, 60))
    build(store, executor="sync")
    doc = json.loads(plan_record(path))
    damage(doc)
    records.put(store, records.PLAN, json.dumps(doc).encode())
    for cmd in ("build", "verify"):
        line = one_line_error(pyramid(cmd, str(path), "--executor", "sync"))
        assert ".pyramid/plan/c/0: a field is not what a build writes" in line, line
        assert "(not a pyramid plan record)" in line and "--rebuild-from 2x" in line
    res = pyramid("build", str(path), "--rebuild-from", "2x", "--executor", "sync")
    assert res.exit_code == 0, res.output
    assert pyramid("verify", str(path), "--executor", "sync").exit_code == 0
