"""Tier state: the state machine, counts that survive replays, conditional writes that lose
nothing, and the documents on disk."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.archive import zarrgen
from toolkit import storage
from toolkit.archive.model import Blob, Bucket, Manifest, Policy
from toolkit.archive.tiers import (
    STATES,
    TRANSITIONS,
    TierError,
    TierState,
    TransitionRefused,
    Usage,
    blob_of,
)
from toolkit.archive.tierstore import TierStore
from toolkit.cli import app

NOW = "2026-12-02T00:00:00+00:00"
SCOPE = "cordex/a.zarr"


@pytest.mark.parametrize("start", STATES)
@pytest.mark.parametrize("to", STATES)
def test_marks_follow_the_state_machine(start: str, to: str) -> None:
    state = TierState(SCOPE)
    if start != "hot":
        state = state.mark("w_x", start, NOW, force=True)
    if to == start:
        assert state.mark("w_x", to, NOW) is state  # a retried hook writes nothing
    elif to in TRANSITIONS[start]:
        moved = state.mark("w_x", to, NOW, bytes=7, objects=1)
        assert moved.tier("w_x").state == to
        assert moved.version == state.version + 1
        assert (moved.tier("w_x").bytes, moved.tier("w_x").since) == (7, NOW)
    else:
        with pytest.raises(TransitionRefused, match=f"is {start}: it can go to"):
            state.mark("w_x", to, NOW)
        assert state.mark("w_x", to, NOW, force=True).tier("w_x").state == to


def test_unknown_figures_keep_what_was_recorded() -> None:
    state = TierState(SCOPE).mark("b_tas_3", "writing", NOW, bytes=500, objects=5)
    archived = state.mark("b_tas_3", "archived", NOW)
    assert (archived.tier("b_tas_3").bytes, archived.tier("b_tas_3").objects) == (500, 5)


rows = st.lists(
    st.tuples(
        st.text("abc", min_size=1, max_size=3),  # event identity (repeats are replays)
        st.sampled_from(["w_x", "g_y", "b_tas_0", "b_tas_1"]),
        st.builds(Usage, st.integers(0, 2), st.integers(0, 2), st.integers(0, 9)),
    ),
    max_size=30,
)


def _once(rows: list[tuple[str, str, Usage]]) -> dict[str, Usage]:
    """The oracle: every identity counted once, its first delivery's usage."""
    seen: set[str] = set()
    out: dict[str, Usage] = {}
    for ident, blob, usage in rows:
        if ident not in seen:
            seen.add(ident)
            out[blob] = out.get(blob, Usage()) + usage
    return out


@given(rows, st.integers(0, 30))
def test_counts_are_exactly_once_under_replays_and_any_batching(rows, cut) -> None:
    one = TierState(SCOPE).count(rows)
    split = TierState(SCOPE).count(rows[:cut]).count(rows[cut:])
    replayed = one.count(rows)
    want = _once(rows)
    for state in (one, split, replayed):
        assert {b: t.usage for b, t in state.blobs.items()} == want
    assert replayed is one  # a full replay writes nothing


@given(rows)
def test_documents_round_trip(rows) -> None:
    state = TierState(SCOPE).count(rows).mark("w_x", "writing", NOW, bytes=3, objects=1)
    assert TierState.loads(state.dumps(), "t") == state


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        (b"{", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"format": "toolkit-archive-tiers/1", "scope": "s", "version": 0}', "'blobs'"),
        (
            b'{"format": "toolkit-archive-tiers/1", "scope": "s", "version": 0,'
            b' "blobs": {"w_x": {"state": "frozen"}}}',
            "'frozen' is not one of",
        ),
        (
            b'{"format": "toolkit-archive-tiers/1", "scope": "s", "version": 0,'
            b' "blobs": {"w_x": {"state": "hot", "reads": -1}}}',
            "reads must be an integer",
        ),
        (b'{"format": "other/1", "scope": "s", "version": 0, "blobs": {}}', "format must be"),
    ],
)
def test_a_broken_document_is_named_with_the_fix(doc: bytes, words: str) -> None:
    with pytest.raises(TierError, match=words) as err:
        TierState.loads(doc, "m/s/tiers.json")
    assert "m/s/tiers.json" in str(err.value) and "restore it or delete it" in str(err.value)


def test_blob_of_takes_blob_and_bucket_ids_only() -> None:
    man = Manifest(
        SCOPE,
        1,
        Policy(10, 0, 5),
        (
            Blob("b_tas", (f"{SCOPE}/tas",), Bucket(4)),
            Blob("g_pr", (f"{SCOPE}/pr",), bytes=9, objects=2),
        ),
    )
    assert blob_of(man, "b_tas_17").id == "b_tas"
    assert blob_of(man, "g_pr").bytes == 9
    for wrong in ("b_tas", "b_tas_x", "g_pr_1", "w_other"):
        with pytest.raises(TierError, match="is not a blob of scope"):
            blob_of(man, wrong)


@pytest.mark.parametrize("kind", ["local", "memory", "seaweed"])
def test_concurrent_counters_lose_nothing(kind: str, tmp_path: Path, request) -> None:
    """Eight writers, each counting its own events through read-modify-write with if-match:
    the stored counts are the sum, however the races fall (on a real S3 server too)."""
    if kind == "seaweed":
        from tests.conftest import make_bucket, s3_options

        endpoint = request.getfixturevalue("seaweed_endpoint")
        store = storage.open_store(f"s3://{make_bucket(endpoint)}/m", **s3_options(endpoint))
    else:
        url = str(tmp_path / "m") if kind == "local" else f"memory://tiers-{tmp_path.name}"
        store = storage.open_store(url)
    ts = TierStore(store)
    per = 6

    def writer(w: int) -> None:
        for i in range(per):
            ts.update(SCOPE, lambda s, i=i: s.count([(f"{w}-{i}", "w_x", Usage(1, 0, 10, 0))]))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    state, _ = ts.read(SCOPE)
    assert state.tier("w_x").usage == Usage(8 * per, 0, 80 * per, 0)
    assert state.version == 8 * per


def test_mark_from_the_command_line(tmp_path: Path) -> None:
    data, manifests = tmp_path / "data", tmp_path / "m"
    zarrgen.cordex_v3(storage.open_store(str(data)))
    run = CliRunner().invoke
    common = ["--manifests", str(manifests)]
    res = run(app, ["archive", "partition", "--data", str(data), *common,
                    "--t-max", "5000", "--t-hot", "100", "--t-min", "3000"])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = run(app, ["archive", "mark", SCOPE, "b_tas_1", "writing", "--data", str(data), *common])
    assert res.exit_code == 0 and "hot -> writing" in res.output
    doc = json.loads((manifests / SCOPE / "tiers.json").read_text())
    assert doc["blobs"]["b_tas_1"]["bytes"] == 5000  # five 1000-byte shards, from the listing
    again = run(app, ["archive", "mark", SCOPE, "b_tas_1", "writing", *common])
    assert again.exit_code == 0 and "nothing written" in again.output
    refused = run(app, ["archive", "mark", SCOPE, "b_tas_1", "recalled", *common])
    assert refused.exit_code == 1
    assert "is writing: it can go to archived, hot, not recalled" in refused.output
    for args, words in (
        ([SCOPE, "b_zz_1", "archived"], "is not a blob of scope"),
        ([SCOPE, "b_tas_1", "frozen"], "choose one of hot, writing"),
        ([SCOPE, "b_tas_99", "writing"], "blob b_tas of scope 'cordex/a.zarr' has buckets 0-"),
        ([SCOPE, "b_tas_99", "writing", "--data", str(data)], "has buckets 0-3 now"),
    ):
        res = run(app, ["archive", "mark", *args, *common])
        assert res.exit_code == 2 and words in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1
    missing = run(app, ["archive", "mark", "cordex/none.zarr", "w_x", "hot", *common])
    assert missing.exit_code == 2 and "no manifest for scope 'cordex/none.zarr'" in missing.output
    assert (
        json.loads((manifests / SCOPE / "tiers.json").read_text()) == doc
    )  # refusals wrote nothing
    res = run(app, ["archive", "resolve", f"{SCOPE}/tas/c/7/0/0", f"{SCOPE}/pr/c.0.0",
                    f"{SCOPE}/zarr.json", *common, "--json"])  # fmt: skip
    answers = [(r["kind"], r["blob"], r["tier"]) for r in json.loads(res.output)]
    assert answers[0] == ("blob", "b_tas_1", "writing")
    assert answers[1][0] == "blob" and answers[1][2] == "hot"  # no record: never archived
    assert answers[2] == ("hot", None, None)
    res = run(app, ["archive", "report", "--data", str(data), *common, "--json"])
    by_blob = {b["blob"]: b["tier"] for b in json.loads(res.output)["blobs"]}
    assert by_blob["b_tas_1"]["state"] == "writing"
    assert by_blob["b_tas_0"]["state"] == "hot" and by_blob[None] is None
