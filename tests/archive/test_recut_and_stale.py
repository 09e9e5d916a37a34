"""Blob ids stay join keys, and tiers notice writes, from the command line on a real store:
`--force` re-cuts under new ids and `resolve` names the retired blob a key was in; writes into a
blob on tape (events, or a scan that finds changed objects) make it stale until it is written
again; a policy other than the manifest's says what it did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.archive import zarrgen
from tests.archive.test_watch import s3_line
from toolkit import storage
from toolkit.archive.manifests import ManifestStore
from toolkit.archive.schema import validate_document
from toolkit.cli import app

SCOPE = "cordex/a.zarr"
POLICY = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]  # tas: 5 shards a bucket


@pytest.fixture
def cx(tmp_path: Path):
    data, manifests = tmp_path / "da ta é", tmp_path / "m"
    store = storage.open_store(str(data))
    zarrgen.cordex_v3(store)
    common = ["--data", str(data), "--manifests", str(manifests)]

    def run(*args: str):
        return CliRunner().invoke(app, ["archive", *args])

    res = run("partition", *common, *POLICY)
    assert res.exit_code == 0, res.output
    return run, common, store, data, manifests


def tiers(manifests: Path) -> dict:
    return json.loads((manifests / SCOPE / "tiers.json").read_text())["blobs"]


def archive(run, common, blob: str) -> None:
    for state in ("writing", "archived"):
        res = run("mark", SCOPE, blob, state, "--manifests", common[3])
        assert res.exit_code == 0, res.output


def test_force_recuts_under_new_ids_and_resolve_names_the_old_blob(cx) -> None:
    run, common, _, _, manifests = cx
    archive(run, common, "b_tas_2")  # shards 10-14 on tape
    res = run("partition", *common, "--t-max", "10000", "--t-hot", "100", "--t-min", "3000",
              "--force")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "retired blob ids (never given again): b_tas" in res.stdout
    res = run("resolve", f"{SCOPE}/tas/c/3/0/0", f"{SCOPE}/tas/c/12/0/0", "--manifests",
              str(manifests), "--json")  # fmt: skip
    a, b = json.loads(res.stdout)
    # the re-cut's ids are new: no key claims a tape copy it never had
    assert (a["blob"], a["tier"], a["recut"]) == (
        "b2_tas_0",
        "hot",
        [{"blob": "b_tas_0", "tier": "hot"}],
    )
    # the archived key is reported as re-cut, with the state its old blob kept
    assert (b["blob"], b["tier"]) == ("b2_tas_1", "hot")
    assert b["recut"] == [{"blob": "b_tas_2", "tier": "archived"}]
    assert tiers(manifests)["b_tas_2"]["state"] == "archived"  # tier state never moved
    text = run("resolve", f"{SCOPE}/tas/c/12/0/0", "--manifests", str(manifests)).stdout
    assert text.rstrip().endswith("re-cut, was in b_tas_2 (archived)")
    stored = ManifestStore(storage.open_store(str(manifests))).read(SCOPE)
    doc = json.loads(stored.manifest.dumps())
    assert validate_document(doc) == []
    assert [c["cut"] for c in doc["cuts"]] == [1, 2]
    assert [c["policy"]["t_max"] for c in doc["cuts"]] == [5000, 10000]
    (retired,) = [r for r in doc["retired"] if r["id"] == "b_tas"]
    assert retired["states"] == {"b_tas_2": "archived"} and retired["retired_at"] == 2
    # the retired id can still be marked (the tape system finishing a recall, say)
    res = run("mark", SCOPE, "b_tas_2", "recalling", "--manifests", str(manifests))
    assert res.exit_code == 0 and "archived -> recalling" in res.output


def test_a_write_event_into_an_archived_blob_makes_it_stale(cx) -> None:
    run, common, _, _, manifests = cx
    archive(run, common, "b_tas_2")
    events = manifests.parent / "events.jsonl"
    events.write_text(
        s3_line(f"{SCOPE}/tas/c/12/0/0", 1) + s3_line(f"{SCOPE}/tas/c/1/0/0", 2)  # b_tas_0: hot
    )
    res = run("watch", *common, "--events", str(events), "--once", "--executor", "sync",
              "--json", *POLICY)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "blob b_tas_2: 1 write(s) into it while on tape: its tape copy is out of date" in (
        res.stderr
    )
    assert json.loads(res.stdout)["stale"] == [{"scope": SCOPE, "blob": "b_tas_2", "writes": 1}]
    t = tiers(manifests)
    assert t["b_tas_2"]["state"] == "stale" and t["b_tas_2"]["stale_writes"] == 1
    assert t["b_tas_0"]["state"] == "hot"  # a write into a hot blob is just a write
    # replayed: counted once, still one write the tape copy misses
    run("watch", *common, "--events", str(events), "--once", "--executor", "sync", *POLICY)
    assert tiers(manifests)["b_tas_2"]["stale_writes"] == 1
    rep = run("report", *common, "--json")
    assert "blob b_tas_2: stale since" in rep.stderr and "misses 1 write(s)" in rep.stderr
    rows = {r["blob"]: r["tier"] for r in json.loads(rep.stdout)["blobs"]}
    assert rows["b_tas_2"]["state"] == "stale"
    # stale -> archived is not a transition: the tape copy must be written again
    bad = run("mark", SCOPE, "b_tas_2", "archived", "--manifests", str(manifests))
    assert bad.exit_code == 1 and "is stale: it can go to writing" in bad.output
    archive(run, common, "b_tas_2")
    t = tiers(manifests)["b_tas_2"]
    assert t["state"] == "archived" and t["stale_writes"] == 0


def test_a_scan_finds_objects_changed_since_the_blob_went_to_tape(cx) -> None:
    run, common, store, _, manifests = cx
    archive(run, common, "b_tas_2")
    archive(run, common, "b_tas_0")
    res = run("partition", *common, *POLICY)
    assert res.exit_code == 0 and "stale" not in res.stderr  # nothing changed yet
    key = f"{SCOPE}/tas/c/11/0/0"
    storage.put(store, key, bytes(1000))  # the same size: only the time tells
    res = run("scan", *common, *POLICY, "--executor", "sync", "--json")
    assert res.exit_code == 0, res.output
    assert "blob b_tas_2: 1 objects changed since it went to tape" in res.stderr
    assert json.loads(res.stdout)[0]["stale"] == [{"blob": "b_tas_2", "changed": 1}]
    t = tiers(manifests)
    assert t["b_tas_2"]["state"] == "stale" and t["b_tas_0"]["state"] == "archived"
    again = run("scan", *common, *POLICY, "--executor", "sync")
    assert "stale" not in again.stderr  # said once; `report` keeps saying it
    assert tiers(manifests)["b_tas_2"]["stale_writes"] == 1


def test_a_new_policy_says_it_applies_to_new_arrays_only(cx) -> None:
    run, common, store, _, manifests = cx
    new = ["--t-hot", "1MiB", "--t-max", "4MiB", "--t-min", "2MiB"]
    before = (manifests / SCOPE / "manifest.json").read_bytes()
    res = run("scan", *common, *new, "--executor", "sync")
    assert res.exit_code == 0 and "unchanged at epoch 1" in res.stdout
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("note:")]
    assert notes == [
        f"note: {SCOPE}: policy differs from cut 1's (t_hot 100 -> 1048576 B, t_max 5000 -> "
        "4194304 B, t_min 3000 -> 2097152 B): it applies to arrays not yet cut only; existing "
        "cuts are frozen; --force re-cuts the scope with it (blobs that change get new ids, "
        "the old ones are retired)"
    ]
    assert (manifests / SCOPE / "manifest.json").read_bytes() == before  # nothing recorded
    zarrgen.v3_array(store, f"{SCOPE}/uas", (10,), (1,), object_bytes=400)
    res = run("scan", *common, *new, "--executor", "sync", "--json")
    (out,) = json.loads(res.stdout)
    assert out["note"] and out["written"]
    doc = json.loads((manifests / SCOPE / "manifest.json").read_text())
    assert [(c["cut"], c["policy"]["t_max"]) for c in doc["cuts"]] == [(1, 5000), (2, 4194304)]
    assert doc["policy"]["t_max"] == 4194304  # the newest cut's
    # under the new policy uas (4000 B) is below t_hot: hot, and cut 1's blobs are untouched
    assert f"{SCOPE}/uas" in doc["hot"]
    assert {b["id"]: b["cut"] for b in doc["blobs"]}["b_tas"] == 1
