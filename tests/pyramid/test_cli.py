"""`toolkit pyramid plan|build|verify` through the real CLI entry point."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic

runner = CliRunner()


def test_plan_build_verify_and_exit_codes(tmp_path):
    path = tmp_path / "s.zarr"
    store = storage.open_store(str(path))
    synthetic.write_store(store, shape=(100, 140), shards=(32, 32))
    r = runner.invoke(app, ["pyramid", "plan", str(path), "--levels", "2"])
    assert r.exit_code == 0, r.output
    assert "2x" in r.output and "4x" in r.output
    r = runner.invoke(app, ["pyramid", "build", str(path), "--levels", "2", "--executor", "sync"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["pyramid", "verify", str(path), "--executor", "sync"])
    assert r.exit_code == 0, r.output
    doc = json.loads(storage.get(store, "field/zarr.json").data)
    doc["attributes"]["x"] = 1
    storage.put(store, "field/zarr.json", json.dumps(doc).encode())
    r = runner.invoke(app, ["pyramid", "verify", str(path), "--executor", "sync"])
    assert r.exit_code == 1
    assert "level0-metadata" in r.output


def test_bad_usage_exit_2(tmp_path):
    path = tmp_path / "s.zarr"
    synthetic.write_store(storage.open_store(str(path)), shape=(40, 40), shards=(16, 16))
    r = runner.invoke(app, ["pyramid", "build", str(path), "--method", "nearest"])
    assert r.exit_code == 2
    assert "nearest" in r.output
    r = runner.invoke(app, ["pyramid", "plan", str(path), "--variable", "missing"])
    assert r.exit_code == 2 and "missing" in r.output


def test_executor_dask_starts_the_embedded_cluster_even_for_small_work(tmp_path):
    path = tmp_path / "s.zarr"
    synthetic.write_store(storage.open_store(str(path)), shape=(40, 60), shards=(16, 16))
    r = runner.invoke(app, ["pyramid", "build", str(path), "--executor", "dask"])
    assert r.exit_code == 0, r.output
    assert "dashboard: http" in r.output and "small build" not in r.output
    r = runner.invoke(app, ["pyramid", "verify", str(path)])  # auto: samples are small work
    assert r.exit_code == 0, r.output
    assert "dashboard:" not in r.output


def _one_object(stdout: str) -> dict:
    """`--json` writes exactly one JSON object on one line of stdout."""
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    doc = json.loads(lines[0])
    assert isinstance(doc, dict)
    return doc


def test_json_plan_build_verify_and_the_verify_table(tmp_path):
    path = tmp_path / "données s.zarr"
    store = storage.open_store(str(path))
    synthetic.write_store(store, shape=(100, 140), shards=(32, 32))
    split = CliRunner()  # stdout alone, as a script reads it
    r = split.invoke(app, ["pyramid", "plan", str(path), "--levels", "2", "--json"])
    assert r.exit_code == 0, r.output
    plan = _one_object(r.stdout)
    assert [lvl["group"] for lvl in plan["levels"]] == ["2x", "4x"]
    assert all(lvl["tasks"] + lvl["pruned"] == lvl["naive"] for lvl in plan["levels"])
    argv = ["pyramid", "build", str(path), "--levels", "2", "--executor", "sync", "--json"]
    r = split.invoke(app, argv)
    assert r.exit_code == 0, r.output
    built = _one_object(r.stdout)
    stages = {s["stage"]: s for s in built["stages"]}
    assert stages["2x"]["tasks"] == plan["levels"][0]["tasks"]
    assert stages["2x"]["gate_have"] == stages["2x"]["gate_want"] == plan["levels"][0]["targets"]

    r = split.invoke(app, ["pyramid", "verify", str(path), "--executor", "sync"])
    assert r.exit_code == 0, r.output
    assert "{" not in r.stdout  # a table, not a Python dict
    assert "samples" in r.stdout and "every check passed" in r.stdout
    r = split.invoke(app, ["pyramid", "verify", str(path), "--executor", "sync", "--json"])
    assert r.exit_code == 0
    good = _one_object(r.stdout)
    assert good["ok"] is True and good["failures"] == [] and good["checked"]

    gone = next(k for k in storage.list_keys(store, "4x/field/c/"))
    storage.delete(store, gone)
    r = split.invoke(app, ["pyramid", "verify", str(path), "--executor", "sync", "--json"])
    assert r.exit_code == 1
    bad = _one_object(r.stdout)
    assert bad["ok"] is False
    assert any(f["shard"] == gone and f["level"] == "4x" for f in bad["failures"])
    r = split.invoke(app, ["pyramid", "verify", str(path), "--executor", "sync"])
    assert r.exit_code == 1
    assert gone in r.stderr and "check(s) failed" in r.stderr
