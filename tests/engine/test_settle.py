"""A settled stage (`Stage.settle`): each window's folded value is settled where it was folded
and only what the settle returns reaches the client (a backfill round's commit)."""

from __future__ import annotations

import os

import pytest
from distributed import Client, get_task_stream

from tests.engine.services import Item, Settle, Write, keys_of
from toolkit import storage
from toolkit.engine import Gate, ListedKeys, Plan, Stage, run, stream
from toolkit.plan import Each
from toolkit.tasks import stable


def plan_of(store: storage.Store, n: int = 40) -> Plan:
    tasks = stable(Item("t", i) for i in range(n))
    gate = Gate(ListedKeys(store, "t"), want=tuple(tasks.keys))
    stage = Stage(
        "t", tasks, Each(Write(store)), gate, workers=4, combine=keys_of, settle=Settle(store)
    )
    return Plan("settled", (stage,))


def settles(store: storage.Store) -> dict[str, list[str]]:
    return {
        k: storage.get(store, k).data.decode().split("\n")
        for k in storage.list_keys(store, "settled")
    }


def test_in_process_the_stage_settles_once_and_reports_the_settled_value(tmp_path) -> None:
    store = storage.open_store(str(tmp_path / "w"))
    report = run(plan_of(store), executor="sync")
    (seen,) = settles(store).values()
    assert sorted(seen) == [f"t/{i:04d}" for i in range(40)]
    assert report.stage("t").result == (40,)  # the settle's count, not the keys
    assert report.stage("t").gate_have == 40


@pytest.mark.cluster
def test_on_a_cluster_each_window_settles_on_a_worker_one_at_a_time(
    tmp_path, local_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "WINDOW_NODES", 3)  # 4 stripes: a window of 3, then one of 1
    store = storage.open_store(str(tmp_path / "w"))
    with Client(local_cluster) as client, get_task_stream(client) as ts:
        report = run(plan_of(store), cluster=client)
    done = settles(store)
    assert len(done) == 2 and all(not k.startswith(f"settled/{os.getpid()}-") for k in done)
    assert sorted(k for v in done.values() for k in v) == [f"t/{i:04d}" for i in range(40)]
    assert sorted(report.stage("t").result) == [10, 30]  # the two windows' counts
    tasks = {str(t["key"]): t for t in ts.data}
    spans = sorted(
        (t["startstops"][0]["start"], t["startstops"][-1]["stop"])
        for k, t in tasks.items()
        if "-settle-" in k
    )
    assert len(spans) == 2
    first_settle_end = spans[0][1]
    second_window = [
        t["startstops"][0]["start"]
        for k, t in tasks.items()
        if k.startswith("('t-") and "-combine-" not in k and "-settle-" not in k
    ]
    assert max(second_window) >= first_settle_end  # the next window waited for the settle
