"""The gated engine on a real LocalCluster with process workers, and in-process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from distributed import Client

from tests.engine.services import (
    BlockWriter,
    Explode,
    FailOnce,
    Heavy,
    Item,
    KillOnce,
    Overlap,
    Together,
    Write,
    WriteSize,
    concat,
)
from toolkit import storage
from toolkit.engine import (
    Each,
    Gate,
    IncompleteStageError,
    ListedKeys,
    Plan,
    Stage,
    compile_plan,
    connect,
    run,
)
from toolkit.engine.graph import COMBINE_FAN_IN
from toolkit.tasks import stable


def three_stages(store: storage.Store, service_for=None, sizes=(20, 10, 5), **stage_kw) -> Plan:
    stages = []
    for name, size in zip(("a", "b", "c"), sizes, strict=True):
        tasks = stable(Item(name, i) for i in range(size))
        service = service_for(name) if service_for else Write(store)
        gate = Gate(ListedKeys(store, name), want=tuple(tasks.keys))
        stages.append(Stage(name, tasks, service, gate, **stage_kw))
    return Plan("three", tuple(stages))


@pytest.fixture
def store(tmp_path: Path) -> storage.Store:
    return storage.open_store(str(tmp_path / "objects"))


def test_compiled_graph_shape_and_deterministic_keys(store) -> None:
    plan = three_stages(store)
    nodes = compile_plan(plan, "r1")
    again = compile_plan(three_stages(store), "r1")
    assert [n.key for n in nodes] == [n.key for n in again]
    assert {n.key for n in compile_plan(plan, "r2")}.isdisjoint(n.key for n in nodes)
    by_key = {n.key: n for n in nodes}
    h = f"{plan.digest}-r1"
    gate_a = f"a-gate-{h}"
    assert set(by_key[gate_a].deps) == {(f"a-{h}", i) for i in range(20)}
    done_b = by_key[f"b-done-{h}"]
    assert done_b.deps == (gate_a,)
    assert all(n.deps == (done_b.key,) for n in nodes if n.stage == "b" and n.kind == "work")


def test_combine_tree_has_bounded_fan_in(store) -> None:
    tasks = stable(Item("a", i) for i in range(37))
    stage = Stage("a", tasks, BlockWriter(store), workers=37, combine=concat)
    nodes = compile_plan(Plan("tree", (stage,)))
    combines = [n for n in nodes if n.kind == "combine"]
    assert combines and all(len(n.deps) <= COMBINE_FAN_IN for n in combines)
    assert len(combines) > 1  # a tree: 37 values need more than one fold
    gate = next(n for n in nodes if n.kind == "gate")
    assert len(gate.deps) == 1
    report = run(Plan("tree", (stage,)), executor="sync")
    assert report.stage("a").result == sorted(t.key for t in tasks)


def test_a_wide_stage_folds_its_counts_before_the_gate(store) -> None:
    tasks = stable(Item("a", i) for i in range(1000))
    stage = Stage("a", tasks, Write(store), Gate(ListedKeys(store, "a"), want=tuple(tasks.keys)))
    nodes = compile_plan(Plan("wide", (stage,)))
    gate = next(n for n in nodes if n.kind == "gate")
    folds = [n for n in nodes if n.kind == "combine"]
    assert len(gate.deps) <= 64 and all(len(n.deps) <= 64 for n in folds)
    assert len(folds) <= 1000 // 64 + 2  # a few percent more nodes, not a second stage
    report = run(Plan("wide", (stage,)), executor="sync")
    assert (report.stage("a").written, report.stage("a").gate_have) == (1000, 1000)


@pytest.mark.parametrize("executor", ["sync", "dask"])
def test_three_stage_plan_completes_then_rerun_writes_nothing(
    store, executor, local_cluster
) -> None:
    plan = three_stages(store)
    cluster = local_cluster if executor == "dask" else None
    calls: list[tuple[str, int, int]] = []
    report = run(plan, cluster=cluster, executor=executor, progress=lambda *a: calls.append(a))
    assert [(s.name, s.written, s.skipped) for s in report.stages] == [
        ("a", 20, 0),
        ("b", 10, 0),
        ("c", 5, 0),
    ]
    assert [(s.gate_have, s.gate_want) for s in report.stages] == [(20, 20), (10, 10), (5, 5)]
    assert len(storage.list_keys(store)) == 35
    assert ("a", 20, 20) in calls
    stamps = {i.key: i.last_modified for i in storage.list_objects(store)}
    again = run(plan, cluster=cluster, executor=executor)
    assert again.written == 0 and sum(s.skipped for s in again.stages) == 35
    assert {i.key: i.last_modified for i in storage.list_objects(store)} == stamps


@pytest.mark.parametrize("executor", ["sync", "dask"])
def test_success_without_object_fails_the_gate_and_stops_the_next_stage(
    store, executor, local_cluster
) -> None:
    def service_for(name):
        return Write(store, frozenset({"b/0003", "b/0007"}) if name == "b" else frozenset())

    plan = three_stages(store, service_for)
    with pytest.raises(IncompleteStageError) as err:
        run(plan, cluster=local_cluster if executor == "dask" else None, executor=executor)
    assert err.value.stage == "b" and (err.value.have, err.value.want) == (8, 10)
    assert err.value.missing == ["b/0003", "b/0007"]
    assert "have 8/10" in str(err.value) and "b/0003" in str(err.value)
    assert storage.list_keys(store, "c") == []


def test_block_stage_stripes_then_filters(store) -> None:
    tasks = stable(Item("a", i) for i in range(10))
    for k in ("a/0001", "a/0008"):
        storage.put(store, k, b"old")
    gate = Gate(ListedKeys(store, "a"), want=tuple(tasks.keys))
    stage = Stage("a", tasks, BlockWriter(store), gate, workers=3, combine=concat)
    report = run(Plan("blocks", (stage,)), executor="sync")
    s = report.stage("a")
    assert (s.written, s.skipped) == (8, 2)
    assert "a/0001" not in s.result and len(s.result) == 8
    assert storage.get(store, "a/0001").data == b"old"


@pytest.mark.slow
def test_sigkilled_worker_loses_no_task(store) -> None:
    from distributed import LocalCluster

    def service_for(name):
        return KillOnce(store, "b/0004") if name == "b" else Write(store)

    plan = three_stages(store, service_for, sizes=(8, 8, 4))
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as lc:
        report = run(plan, cluster=lc)
    assert storage.exists(store, "markers/killed"), "the victim task never killed its worker"
    assert [s.gate_have for s in report.stages] == [8, 8, 4]
    assert len(storage.list_keys(store, "b")) == 8


@pytest.mark.parametrize("executor", ["sync", "dask"])
def test_retries_recover_transient_failures(store, executor, local_cluster) -> None:
    tasks = stable(Item("a", i) for i in range(4))
    gate = Gate(ListedKeys(store, "a"), want=tuple(tasks.keys))
    ok = Plan("retry", (Stage("a", tasks, FailOnce(store), gate, retries=1),))
    report = run(ok, cluster=local_cluster if executor == "dask" else None, executor=executor)
    assert report.stage("a").gate_have == 4


def test_no_retries_surface_the_error(store) -> None:
    tasks = stable(Item("a", i) for i in range(2))
    plan = Plan("noretry", (Stage("a", tasks, FailOnce(store), retries=0),))
    with pytest.raises(RuntimeError, match="transient failure on a/0000"):
        run(plan, executor="sync")


def test_connect_accepts_client_address_and_get_client(local_cluster) -> None:
    with Client(local_cluster) as client:
        with connect(client) as c:
            assert c is client
        assert client.status == "running"  # not closed: we did not create it
        with connect(local_cluster.scheduler_address) as c:
            assert c.scheduler_info()["workers"]
        with connect(local_cluster) as c:  # has .get_client()
            assert c.scheduler_info()["workers"]
    assert local_cluster.status.name == "running"
    with pytest.raises(TypeError, match="get_client"), connect(42):
        pass


def test_unknown_executor_is_refused(store) -> None:
    with pytest.raises(ValueError, match="executor"):
        run(three_stages(store), executor="threads")  # type: ignore[arg-type]


@pytest.mark.parametrize("executor", ["sync", "dask"])
def test_a_stage_made_from_the_certified_result_of_the_one_before(store, executor, local_cluster):
    """Stage b's tasks are the keys stage a's services returned (tasks_from): b is planned
    only once a's gate has passed, from its combined result, and gated like any stage."""
    a_tasks = stable(Item("a", i) for i in range(6))
    a = Stage(
        "a",
        a_tasks,
        BlockWriter(store),
        Gate(ListedKeys(store, "a"), want=tuple(a_tasks.keys)),
        workers=2,
        combine=concat,
    )

    def from_a(result: list[str]):
        return stable(Item("b", int(k.split("/")[1])) for k in result if int(k[-1]) % 2 == 0)

    b = Stage("b", stable([]), Write(store), Gate(ListedKeys(store, "b")), tasks_from=from_a)
    cluster = local_cluster if executor == "dask" else None
    heard: list[tuple[str, int, int]] = []
    report = run(
        Plan("derived", (a, b)),
        cluster=cluster,
        executor=executor,
        progress=lambda *x: heard.append(x),
    )
    assert report.stage("b").tasks == 3 and report.stage("b").written == 3
    assert storage.list_keys(store, "b") == ["b/0000", "b/0002", "b/0004"]
    assert {t for s, _, t in heard if s == "b"} == {3}


PICKLED: list[str] = []


@dataclass(frozen=True)
class CountedWrite(Write):
    """`Write` that notes each time this process pickles it."""

    def __reduce__(self):  # type: ignore[override]
        PICKLED.append("service")
        return (CountedWrite, (self.store, self.skip_writing))


@pytest.mark.cluster
def test_a_stage_sends_its_service_once_whatever_its_node_count(local_cluster, tmp_path) -> None:
    """Every work node refers to one data node holding the service: a service that pickles by
    value (defined in a notebook) is serialized once for the stage, not once per node or per
    window of nodes."""
    store = storage.open_store(str(tmp_path / "s"))
    tasks = stable(Item("s", i) for i in range(50))
    seen = []
    for workers in (None, 5, 1):
        PICKLED.clear()
        service = CountedWrite(store) if workers is None else Each(CountedWrite(store))
        stage = Stage("s", tasks, service, workers=workers)
        report = run(Plan(f"p{workers}", (stage,)), local_cluster)
        assert report.stage("s").nodes == (50 if workers is None else workers)
        seen.append(len(PICKLED))
    assert seen[0] == seen[1] == seen[2] <= 2  # once sent (and once tokenized by dask)


def test_a_done_node_carries_its_probe_not_the_stages_tasks(store) -> None:
    """The done node runs the stage's done-set probe; it must not drag the task list along (a
    commit stage's tasks hold every fork of the round)."""
    import pickle

    from toolkit.engine.graph import compile_stage

    def done_bytes(n: int) -> int:
        stage = Stage("s", stable(Item("s", i) for i in range(n)), Write(store), workers=2)
        (done,) = [node for node in compile_stage(stage, "d") if node.kind == "done"]
        return len(pickle.dumps(done.args))

    assert done_bytes(20_000) == done_bytes(10)
    stage = Stage("s", stable(Item("s", i) for i in range(3)), Write(store), done=lambda: {"s/1"})
    (done,) = [node for node in compile_stage(stage, "d") if node.kind == "done"]
    assert done.fn(*done.args) == {"s/1"}
    assert stage.observe_done() == {"s/1"}
    assert (
        Stage("s", stage.tasks, Write(store), done=lambda: {"s/1"}, resume=False).done_probe()
        == frozenset()
    )


def test_a_stage_whose_tasks_carry_their_data_runs_without_distributeds_warning(
    store, local_cluster
) -> None:
    """A commit stage's tasks hold the forks they merge, in the graph so that a retried node
    finds them: distributed's "Sending large graph" advice is not the user's to act on, so the
    engine does not pass it on. The data still arrives whole."""
    import warnings

    size = 12 << 20  # over distributed's 10 MB warning threshold
    tasks = stable([Heavy("heavy", 0, b"x" * size)])
    stage = Stage("h", tasks, WriteSize(store), Gate(ListedKeys(store, "heavy")))
    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        report = run(Plan("heavy", (stage,)), cluster=local_cluster)
    assert report.stage("h").written == 1
    assert storage.get(store, "heavy/0000").data == str(size).encode()
    assert not [w for w in heard if "large graph" in str(w.message)]


def test_a_stages_nodes_go_to_every_free_worker_not_where_their_inputs_are(store) -> None:
    """Work nodes depend on the done node and on the stage's service, which sit on one or two
    workers: placed by where their inputs are, three nodes on three single-thread workers
    would queue behind each other there. Work stealing off, so that placement alone spreads
    them: each node waits for the others to start."""
    import uuid

    import dask
    from distributed import LocalCluster

    tasks = stable(Item("t", i) for i in range(3))
    service = Together(store, uuid.uuid4().hex, tuple(tasks.keys), timeout=20.0)
    gate = Gate(ListedKeys(store, "t"), want=tuple(tasks.keys))
    stage = Stage("t", tasks, service, gate, retries=0)  # a node that waited in vain fails
    with (
        dask.config.set({"distributed.scheduler.work-stealing": False}),
        LocalCluster(
            n_workers=3, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        report = run(Plan("together", (stage,)), cluster=client)
    assert report.stage("t").written == 3


def test_in_process_a_stages_nodes_run_side_by_side_unless_they_hold_the_gil(store) -> None:
    """`sync` runs a plan in this process: a stage's work nodes on one thread per core when
    its services release the GIL (they meet at a barrier), one at a time when they hold it."""
    from toolkit.engine.cluster import default_workers

    tasks = stable(Item("s", i) for i in range(6))
    want = tuple(tasks.keys)
    together = Overlap(store, meet=min(2, default_workers()))
    plan = Plan("free", (Stage("s", tasks, together, Gate(ListedKeys(store, "s"), want=want),
                               retries=0),), holds_gil=False)  # fmt: skip
    assert run(plan, executor="sync").stage("s").written == 6
    assert together.state["most"] == min(2, default_workers())
    alone = Overlap(store)
    plan = Plan("held", (Stage("s", tasks, alone, retries=0),), holds_gil=True)
    run(plan, executor="sync")
    assert alone.state["most"] == 1


def test_in_process_nodes_side_by_side_raise_the_first_failure_as_itself(store) -> None:
    tasks = stable(Item("x", i) for i in range(6))
    stage = Stage("x", tasks, Explode(store, "x/0002"), retries=0)
    with pytest.raises(ValueError, match=r"cannot reshape array of size 0 .* at x/0002"):
        run(Plan("explode", (stage,), holds_gil=False), executor="sync")
