"""Graphs bounded at any size (issue 52, item 5): a stage goes to the cluster in windows, each
with the done-set of its own key range, and its gate checks the wanted keys page by page, each
page listing only its range; counts are combined, never key lists."""

from __future__ import annotations

import json
import re

import pytest
from distributed import Client, get_task_stream
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import make_bucket, s3_options
from tests.engine.services import Item, Write
from toolkit import storage
from toolkit.engine import Gate, IncompleteStageError, ListedKeys, Plan, Stage, run, stream
from toolkit.tasks import stable

KEYS = ["a/1", "a/10", "a/1x", "a/2", "a/é 3", "a/z", "ab", "b/1", "a/\U0001f600", "a/0"]


@pytest.mark.parametrize(
    ("first", "last"),
    [("a/1", "a/2"), ("a/0", "a/0"), ("a/10", "a/z"), ("a/é 3", "a/\U0001f600"), ("a/3", "a/4")],
)
def test_a_key_range_lists_what_a_filtered_listing_holds(any_store, first: str, last: str) -> None:
    for k in KEYS:
        storage.put(any_store, k, b"x")
    brute = sorted(k for k in storage.list_keys(any_store, "a") if first <= k <= last)
    assert storage.list_between(any_store, "a", first, last) == brute


def bucket_store(endpoint: str) -> storage.Store:
    return storage.open_store(f"s3://{make_bucket(endpoint)}/w", **s3_options(endpoint))


@pytest.mark.cluster
def test_a_stage_on_a_cloud_store_runs_in_windows_with_ranged_done_sets_and_gate_pages(
    s3_endpoint: str, local_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "WINDOW_NODES", 16)  # small sizes, the same mechanism
    monkeypatch.setattr(stream, "GATE_PAGE", 25)
    store = bucket_store(s3_endpoint)
    tasks = stable(Item("t", i) for i in range(120))
    gate = Gate(ListedKeys(store, "t"), want=tuple(tasks.keys))
    plan = Plan("windows", (Stage("t", tasks, Write(store), gate),))
    with Client(local_cluster) as client, get_task_stream(client) as stream_of:
        report = run(plan, cluster=client)
    s = report.stage("t")
    assert (s.written, s.skipped, s.gate_have, s.gate_want, s.nodes) == (120, 0, 120, 120, 120)
    keys = [str(t["key"]) for t in stream_of.data]
    gates = [k for k in keys if "-gate-" in k]
    dones = [k for k in keys if "-done-" in k]
    assert len(gates) == 120 // 25 + 1  # a page of 25 wanted keys per gate node
    assert len(dones) >= 120 // 16  # each window observed its own range
    assert all(re.search(r"'t-[0-9a-f]", k) or "-" in k for k in keys)

    again = run(plan, cluster=local_cluster).stage("t")  # resume: every window finds its range
    assert (again.written, again.skipped) == (0, 120)


@pytest.mark.cluster
def test_a_gate_page_names_what_is_missing_in_its_range(
    s3_endpoint: str, local_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "GATE_PAGE", 10)
    store = bucket_store(s3_endpoint)
    tasks = stable(Item("t", i) for i in range(40))
    lost = frozenset({"t/0013", "t/0031"})
    gate = Gate(ListedKeys(store, "t"), want=tuple(tasks.keys))
    stage = Stage("t", tasks, Write(store, skip_writing=lost), gate, retries=0)
    with pytest.raises(IncompleteStageError) as caught:
        run(Plan("lying", (stage,)), cluster=local_cluster)
    err = caught.value
    assert (err.have, err.want) == (38, 40)
    assert err.missing == ["t/0013", "t/0031"]


@given(
    st.lists(
        st.text(alphabet="a0.é \U0001f600\ue000", min_size=1, max_size=4), min_size=1, max_size=4
    )
)
def test_a_range_listing_starts_just_before_its_first_key(segments: list[str]) -> None:
    """The offset a range listing starts after sorts below its first key and is itself a valid
    object path (no empty segment), so the first key is always listed."""
    from toolkit.storage import _before

    key = "/".join(segments)
    offset = _before(key)
    assert offset is None or (offset < key and "" not in offset.split("/"))


@pytest.mark.cluster
def test_a_pyramid_on_a_cloud_store_resumes_window_by_window(
    s3_endpoint: str, cluster_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node per output shard, each window's done shards listed from its own key range: a
    level with a shard deleted rebuilds that shard alone, and the result equals the first."""
    from typer.testing import CliRunner

    from toolkit.cli import app
    from toolkit.examples import synthetic

    store = bucket_store(s3_endpoint)
    synthetic.write_store(store, shape=(256, 384), shards=(32, 32))
    flags = ["--endpoint", s3_endpoint, "--region", "us-east-1", "--allow-http", "--path-style"]
    build = ["--cluster", cluster_address, "pyramid", "build", store.url, *flags, "--json"]
    first = CliRunner().invoke(app, [*build, "--levels", "2"])
    assert first.exit_code == 0, first.output
    before = {k: storage.get(store, k).data for k in storage.list_keys(store, "2x/")}
    lost = sorted(k for k in before if "/c/" in k and "_count" not in k)[3]
    storage.delete(store, lost)
    again = CliRunner().invoke(app, [*build, "--levels", "2"])
    assert again.exit_code == 0, again.output
    stages = {s["stage"]: s for s in json.loads(again.stdout)["stages"]}
    assert (stages["2x"]["written"], stages["2x"]["skipped"]) == (1, stages["2x"]["tasks"] - 1)
    assert {k: storage.get(store, k).data for k in storage.list_keys(store, "2x/")} == before
