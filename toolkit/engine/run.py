"""The two executors' loops: in-process (`sync`) or on a Dask cluster (`dask`), stage by stage
(`toolkit.engine.runner` chooses between them).

On Dask each stage goes to the scheduler as one graph in one call (its done node, work nodes,
combine tree and gate). The client waits for the gate, keeps only its summary, and releases
every future of the stage: a certified stage is never recomputed when a later worker dies,
because the scheduler no longer holds anything to recompute it from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, Literal

from toolkit.engine.cluster import ClusterLike, connect, default_workers, total_threads
from toolkit.engine.graph import Key, Node, StageSummary, Tick, compile_stage, gate_key, plan_key
from toolkit.plan import (
    AUTO,
    IncompleteStageError,
    Plan,
    Stage,
    TaskError,
    task_context,
)

Progress = Callable[[str, int, int], None]
Executor = Literal["auto", "dask", "sync"]
TICK_SECONDS = 0.2  # a stripe node reports its progress at most this often (and when done)


class Counter:
    """Tasks done per stage: finished nodes count whole, running stripes count what they report."""

    def __init__(self, plan: Plan, progress: Progress | None) -> None:
        self.total = {s.name: len(s.tasks) for s in plan.stages}
        self.by_node: dict[str, dict[int, int]] = {s.name: {} for s in plan.stages}
        self.progress = progress
        self.lock = threading.Lock()

    def node(self, stage: str, index: int, done: int) -> None:
        if self.progress is None:
            return
        with self.lock:
            nodes = self.by_node[stage]
            if done <= nodes.get(index, 0):
                return  # a late or repeated report: nothing new to say
            nodes[index] = done
            count = sum(nodes.values())
        self.progress(stage, count, self.total[stage])


# `workers=AUTO` on a cluster: stripe nodes per thread it has when the stage starts. More
# nodes than threads give an adaptive cluster queued work to scale up for (dask-gateway's and
# Coiled's `adapt(maximum=...)` add workers for it) and a cluster that grows under the run
# something to hand its new workers; the task count caps it.
NODES_PER_THREAD = 4


def _resolve(stage: Stage, stripes: int, previous: StageSummary | None) -> Stage:
    """The stage as it runs: `workers=AUTO` becomes `stripes` nodes (capped by its tasks), and
    tasks made from the previous stage's certified result (`tasks_from`) are made now."""
    if stage.workers == AUTO:
        stage = dataclasses.replace(stage, workers=max(1, stripes))
    if stage.tasks_from is not None:
        stage = dataclasses.replace(
            stage, tasks=stage.tasks_from(previous.value if previous else None), tasks_from=None
        )
    return stage


# ----------------------------------------------------------------------------- sync


def run_sync(plan: Plan, run_id: str, counter: Counter) -> list[StageSummary]:
    """The plan in this process. A stage's work nodes run side by side on `default_workers()`
    threads when its services do not hold the GIL (numba kernels, zarr I/O: what the embedded
    cluster would run in threads), else one after another; every other node runs in this
    thread. The first failure is raised as itself once the running nodes end; the nodes still
    queued when it is seen are cancelled."""

    def ticker(stage: str, index: int) -> Tick:
        return lambda done: counter.node(stage, index, done)

    digest = plan_key(plan, run_id)
    results: dict[Key, Any] = {}
    summaries: list[StageSummary] = []
    previous: tuple[Key, ...] = ()
    threads = 1 if plan.holds_gil else default_workers()
    with ThreadPoolExecutor(threads, thread_name_prefix="toolkit-sync") as pool:
        for planned in plan.stages:
            stage = _resolve(planned, default_workers(), summaries[-1] if summaries else None)
            counter.total[stage.name] = len(stage.tasks)
            for wave in _waves(compile_stage(stage, digest, previous, ticker)):
                if len(wave) == 1 or threads == 1:
                    for node in wave:
                        results[node.key] = _call(node, results, counter)
                else:
                    results.update(_side_by_side(pool, wave, results, counter))
            previous = (gate_key(stage, digest),)
            summaries.append(results[previous[0]])
    return summaries


def _waves(nodes: list[Node]) -> list[list[Node]]:
    """The nodes in order, a stage's consecutive work nodes together: they depend on its done
    node and the service, never on each other."""
    out: list[list[Node]] = []
    for n in nodes:
        if n.kind == "work" and out and out[-1][0].kind == "work":
            out[-1].append(n)
        else:
            out.append([n])
    return out


def _call(node: Node, results: dict[Key, Any], counter: Counter) -> Any:
    args = node.args + tuple(results[d] for d in node.deps)
    for attempt in range(node.retries + 1):
        try:
            value = node.fn(*args)
            break
        except Exception:
            if attempt == node.retries:
                raise
    if node.kind == "work":
        counter.node(node.stage, node.key[1], node.tasks)  # type: ignore[index]
    return value


def _side_by_side(
    pool: ThreadPoolExecutor, wave: list[Node], results: dict[Key, Any], counter: Counter
) -> dict[Key, Any]:
    futures = {pool.submit(_call, n, results, counter): n.key for n in wave}
    try:
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in finished if f.exception() is not None]
        if failed:
            raise failed[0].exception()  # type: ignore[misc]
        return {key: f.result() for f, key in futures.items()}
    finally:
        for f in futures:  # a failure or an interrupt: the queued nodes are dropped
            f.cancel()


# ----------------------------------------------------------------------------- dask


class EventTick:
    """A stripe node's progress, sent from its worker as a Dask event (throttled)."""

    def __init__(self, topic: str, stage: str, index: int, size: int) -> None:
        self.topic, self.stage, self.index, self.size = topic, stage, index, size
        self.last = 0.0

    def __call__(self, done: int) -> None:
        from distributed import get_worker

        now = time.monotonic()
        if done < self.size and now - self.last < TICK_SECONDS:
            return
        self.last = now
        with contextlib.suppress(ValueError):  # not on a worker: nobody listens
            get_worker().log_event(self.topic, [self.stage, self.index, done])


def _stage_graph(stage_nodes: list[Node], previous: StageSummary | None) -> dict[Key, Any]:
    """One stage as a task-spec graph. Its dependency on the previous stage's gate becomes that
    gate's summary, gathered by the client and sent as data (counts, without the stage's value):
    nothing in this graph refers to a key of a certified stage, so none is ever recomputed."""
    from dask.task_spec import DataNode, Task, TaskRef  # public since dask 2025.1

    own = {n.key for n in stage_nodes}
    before = dataclasses.replace(previous, value=None) if previous is not None else None
    graph: dict[Key, Any] = {}
    sent: dict[int, TaskRef] = {}

    def once(node: Node, value: Any) -> TaskRef:
        """The stage's service goes in the graph once, as data its nodes refer to: one that
        pickles by value (defined in a notebook or `__main__`) is then serialized once per
        stage, and fetched once per worker, instead of once per node."""
        ref = sent.get(id(value))
        if ref is None:
            key = (f"{node.key[0]}-shared", len(sent))  # type: ignore[index]
            graph[key] = DataNode(key, value)
            ref = sent[id(value)] = TaskRef(key)
        return ref

    for n in stage_nodes:
        args = tuple(once(n, a) if i in n.shared else a for i, a in enumerate(n.args))
        deps = (TaskRef(d) if d in own else before for d in n.deps)
        # work nodes go to whichever worker is free, not to the one that holds the done-set
        # and the service (small, and fetched once per worker): distributed's data producers
        graph[n.key] = Task(n.key, n.fn, *args, *deps, _data_producer=n.kind == "work")
    return graph


def _node_failure(node: Node, err: BaseException) -> BaseException:
    """A failure the service did not raise itself (a worker killed too often) still names the
    stage and the node."""
    if task_context(err) is not None or isinstance(err, IncompleteStageError):
        return err
    what = f"node {node.key[1]} of {node.stage}" if isinstance(node.key, tuple) else str(node.key)
    return TaskError(node.stage, what, type(err).__name__, str(err))


def _run_stage(
    client: Any, stage_nodes: list[Node], counter: Counter, previous: StageSummary | None
) -> StageSummary:
    from distributed import as_completed

    stage_nodes = list(stage_nodes)
    gate = stage_nodes[-1]
    watched = [n for n in stage_nodes if n.kind == "work"] if counter.progress else []
    retries = max(n.retries for n in stage_nodes)
    with warnings.catch_warnings():
        # A commit stage's tasks carry the forks its work stage returned (packed, yet megabytes
        # for a large backfill), and they ride in the graph on purpose: a node retried after its
        # worker died finds them there. distributed's advice to load large data with Dask does
        # not apply.
        warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
        futures = client.get(
            _stage_graph(stage_nodes, previous),
            [n.key for n in watched] + [gate.key],
            sync=False,
            retries=retries,
        )
    try:
        node_of = {f.key: n for f, n in zip(futures, watched, strict=False)}
        for fut in as_completed(futures[:-1]):
            node = node_of[fut.key]
            if fut.status == "error":
                raise _node_failure(node, fut.exception()) from None
            counter.node(node.stage, node.key[1], node.tasks)  # type: ignore[index]
        try:
            return futures[-1].result()
        except Exception as err:
            raise _node_failure(gate, err) from None
    finally:
        for f in futures:  # certified (or failed): nothing of this stage stays on the cluster
            f.release()


def run_dask(plan: Plan, cluster: ClusterLike, run_id: str, counter: Counter) -> list[StageSummary]:
    topic = f"toolkit-progress-{run_id}"
    digest = plan_key(plan, run_id)
    with connect(cluster, holds_gil=plan.holds_gil) as client:

        def ticker(stage: str, index: int) -> Tick:
            return EventTick(topic, stage, index, counter.total[stage])

        def heard(event: tuple[float, list[Any]]) -> None:
            stage, index, done = event[1]
            counter.node(stage, index, done)

        if counter.progress:
            client.subscribe_topic(topic, heard)
        summaries: list[StageSummary] = []
        try:
            gate: tuple[Key, ...] = ()
            for planned in plan.stages:
                previous = summaries[-1] if summaries else None
                stage = _resolve(planned, NODES_PER_THREAD * total_threads(client), previous)
                counter.total[stage.name] = len(stage.tasks)
                nodes = compile_stage(stage, digest, gate, ticker if counter.progress else None)
                summaries.append(_run_stage(client, nodes, counter, previous))
                gate = (gate_key(stage, digest),)
            return summaries
        finally:
            if counter.progress:
                client.unsubscribe_topic(topic)
