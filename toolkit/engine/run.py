"""The two executors' loops: in-process (`sync`) or on a Dask cluster (`dask`), stage by stage
(`toolkit.engine.runner` chooses between them).

On Dask each stage is streamed to the scheduler in windows (`toolkit.engine.stream`). The
client waits for the gate, keeps only its summary, and releases every future of the stage: a
certified stage is never recomputed when a later worker dies, because the scheduler no longer
holds anything to recompute it from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from toolkit.engine.cluster import ClusterLike, connect, default_workers
from toolkit.engine.graph import Key, Node, StageSummary, Tick, compile_stage, gate_key, plan_key
from toolkit.engine.ship import run_resources
from toolkit.engine.stream import run_stage
from toolkit.plan import AUTO, Plan, Stage

Progress = Callable[[str, int, int], None]
log = logging.getLogger("toolkit.engine")
TICK_SECONDS = 0.2  # a stripe node reports its progress at most this often (and when done)


class Counter:
    """Tasks done per stage: finished nodes count whole, running stripes count what they report."""

    def __init__(self, plan: Plan, progress: Progress | None) -> None:
        self.total = {s.name: len(s.tasks) for s in plan.stages}
        self.by_node: dict[str, dict[int, int]] = {s.name: {} for s in plan.stages}
        self.closed = {s.name: 0 for s in plan.stages}  # tasks of finished nodes
        self.ended: dict[str, set[int]] = {s.name: set() for s in plan.stages}  # striped ones
        self.progress = progress
        self.lock = threading.Lock()

    def node(self, stage: str, index: int, done: int) -> None:
        """A running node has done `done` of its tasks (or all: a finished one)."""
        if self.progress is None:
            return
        with self.lock:
            nodes = self.by_node[stage]
            if index in self.ended[stage] or done <= nodes.get(index, 0):
                return  # a late or repeated report: nothing new to say
            nodes[index] = done
            count = sum(nodes.values()) + self.closed[stage]
        self.progress(stage, count, self.total[stage])

    def finish(self, stage: str, index: int, tasks: int, ticks: bool = True) -> None:
        """A node finished with its `tasks`: counted whole and forgotten, so a stage of a
        million nodes keeps no entry per node (`ticks`: its node may still have a report of
        its own on the way, which must not count again)."""
        if self.progress is None:
            return
        with self.lock:
            self.by_node[stage].pop(index, None)
            if ticks:
                self.ended[stage].add(index)
            self.closed[stage] += tasks
            count = sum(self.by_node[stage].values()) + self.closed[stage]
        self.progress(stage, count, self.total[stage])


def _resolve(stage: Stage, previous: StageSummary | None, stripes: int | None = None) -> Stage:
    """The stage as it runs: tasks made from the previous stage's certified result
    (`tasks_from`) are made now; with `stripes`, `workers=AUTO` becomes that many nodes (in
    this process; a cluster cuts AUTO stages as it goes, `toolkit.engine.stream.cut`)."""
    if stage.workers == AUTO and stripes is not None:
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
            stage = _resolve(planned, summaries[-1] if summaries else None, default_workers())
            counter.total[stage.name] = len(stage.tasks)
            for wave in _waves(compile_stage(stage, digest, previous, ticker)):
                if len(wave) == 1 or threads == 1:
                    for node in wave:
                        results[node.key] = _call(node, results, counter)
                else:
                    results.update(_side_by_side(pool, wave, results, counter))
            previous = (gate_key(stage, digest),)
            summaries.append(results[previous[0]])
            # the stage is certified: its nodes' values (a round's forks) are spent
            results = {previous[0]: results[previous[0]]}
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


def run_dask(plan: Plan, cluster: ClusterLike, run_id: str, counter: Counter) -> list[StageSummary]:
    """The plan on a cluster, one stage at a time, each streamed in windows
    (`toolkit.engine.stream`); a worker lost with this run's nodes on it is named once."""
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
        client.subscribe_topic("all", _worker_loss(digest))
        summaries: list[StageSummary] = []
        try:
            for planned in plan.stages:
                previous = summaries[-1] if summaries else None
                stage = _resolve(planned, previous)
                counter.total[stage.name] = len(stage.tasks)
                tick = ticker if counter.progress else None
                resources = run_resources(client)
                summaries.append(
                    run_stage(client, stage, digest, previous, counter, tick, resources)
                )
            return summaries
        finally:
            with contextlib.suppress(Exception):  # the scheduler may be gone
                client.unsubscribe_topic("all")
                if counter.progress:
                    client.unsubscribe_topic(topic)


def _worker_loss(digest: str) -> Callable[[tuple[float, dict[str, Any]]], None]:
    """One warning per worker that leaves while running this run's nodes (their tasks rerun
    elsewhere); the scheduler's "all" topic tells of every worker that leaves."""

    def heard(event: tuple[float, dict[str, Any]]) -> None:
        msg = event[1]
        if not isinstance(msg, dict) or msg.get("action") != "remove-worker":
            return
        ours = [k for k in msg.get("processing-tasks", ()) if digest in str(k)]
        if ours:
            log.warning(
                "worker %s left while running %d node(s) of this run; they rerun on the other "
                "workers",
                msg.get("worker", "?"),
                len(ours),
            )

    return heard
