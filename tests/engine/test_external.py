"""The engine on the session's external cluster (`dask scheduler` + two `dask worker` processes):
certified stages stay certified through a lost worker, progress counts tasks, stripes follow
the cluster's size, and a failing service reaches the user as one line naming its task."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from distributed import Client

from tests.engine.services import CountingWrite, Explode, Item
from toolkit import storage
from toolkit.engine import AUTO, Each, Gate, ListedKeys, Plan, Stage, run, task_context
from toolkit.engine.stream import cut
from toolkit.tasks import stable

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def plan_of(store: storage.Store, service_for, sizes: dict[str, int], **kw) -> Plan:
    stages = []
    for name, size in sizes.items():
        tasks = stable(Item(name, i) for i in range(size))
        gate = Gate(ListedKeys(store, name), want=tuple(tasks.keys))
        stages.append(Stage(name, tasks, service_for(name), gate, **kw))
    return Plan("external", tuple(stages))


def calls(where: Path, stage: str) -> list[str]:
    log = where / f"{stage}.log"
    return log.read_text().split() if log.exists() else []


def test_workers_lost_in_stage_3_never_rerun_stages_1_and_2(
    external, cluster_address: str, tmp_path: Path
) -> None:
    store = storage.open_store(str(tmp_path / "objects"))
    where = tmp_path / "calls"
    where.mkdir()
    sizes = {"a": 20, "b": 10, "c": 200}
    # resume=False: a recomputed task would call its service again, not skip its object
    plan = plan_of(store, lambda _: CountingWrite(store, str(where)), sizes, resume=False)
    # Every worker dies in stage c, so no replica of an earlier stage's results survives
    # anywhere: anything that still referenced them would make the scheduler recompute them.
    victims = list(external.worker_pids().values())
    killed: list[int] = []

    def kill_in_c(stage: str, done: int, total: int) -> None:
        if stage == "c" and not killed and done < total:
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
            killed.append(done)

    with Client(cluster_address) as client:
        report = run(plan, cluster=client, progress=kill_in_c)
    assert killed, "no worker was killed during stage c: the test proved nothing"
    for pid in victims:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert [(s.gate_have, s.gate_want) for s in report.stages] == [(20, 20), (10, 10), (200, 200)]
    for stage in ("a", "b"):  # each task of a certified stage ran exactly once
        assert sorted(calls(where, stage)) == [f"{stage}/{i:04d}" for i in range(sizes[stage])]
    assert len(calls(where, "c")) >= 200  # the lost worker's tasks of c may run twice


def test_progress_counts_tasks_and_stripes_follow_the_cluster(cluster_address, tmp_path) -> None:
    store = storage.open_store(str(tmp_path / "objects"))
    where = tmp_path / "calls"
    where.mkdir()
    plan = plan_of(
        store,
        lambda _: Each(CountingWrite(store, str(where))),
        {"a": 64, "b": 6},
        workers=AUTO,
    )
    heard: list[tuple[str, int, int]] = []
    with Client(cluster_address) as client:
        threads = sum(client.nthreads().values())
        report = run(plan, cluster=client, progress=lambda *a: heard.append(a))
    assert threads == 2
    # guided stripes cut for the cluster's two threads, capped by the stage's tasks: the same
    # blocks on every run on a cluster of this size
    blocks = {s.name: list(cut(s, lambda: threads)) for s in plan.stages}
    assert [s.nodes for s in report.stages] == [len(blocks["a"]), 6]
    assert blocks["a"][0] == (0, 8) and len(blocks["a"]) > 8  # a quarter per thread, then less
    for stage, total in (("a", 64), ("b", 6)):
        mine = [(done, t) for s, done, t in heard if s == stage]
        assert {t for _, t in mine} == {total}  # tasks, not nodes
        assert mine[-1][0] == total
        assert [d for d, _ in mine] == sorted(d for d, _ in mine)


def test_sync_progress_hears_every_task_of_a_stripe(tmp_path: Path) -> None:
    store = storage.open_store(str(tmp_path / "objects"))
    where = tmp_path / "calls"
    where.mkdir()
    plan = plan_of(store, lambda _: Each(CountingWrite(store, str(where))), {"a": 12}, workers=1)
    heard: list[int] = []
    run(plan, executor="sync", progress=lambda s, done, total: heard.append(done))
    assert heard == list(range(1, 13))


@pytest.mark.parametrize("executor", ["sync", "dask"])
def test_a_failing_service_raises_its_own_error_naming_stage_and_task(
    executor: str, cluster_address: str, tmp_path: Path
) -> None:
    store = storage.open_store(str(tmp_path / "objects"))
    plan = plan_of(store, lambda n: Explode(store, "b/0003"), {"a": 4, "b": 8})
    with pytest.raises(ValueError, match="cannot reshape") as caught:
        run(plan, cluster=cluster_address, executor=executor)
    context = task_context(caught.value)
    assert context is not None
    assert (context.stage, context.task) == ("b", "b/0003")
    assert "services.py" in context.traceback  # the worker's traceback, for --debug
    assert context.line(caught.value).startswith("stage 'b' task 'b/0003': ValueError: cannot")
    assert not storage.list_keys(store, "c")
