"""Where and how a plan runs, as one value: `Runner(cluster, executor, progress).run(plan)`.

A job function takes a `Runner` and hands it on; nothing else about the cluster travels with
it. The executors are small objects behind one protocol, as rechunker's are: `InProcess` (this
process, threads where the services release the GIL) and `OnDask` (a cluster: embedded,
an address, a `Client`, a `Session`, a dask-gateway or Coiled cluster). A third (one that kills
nodes for a test, a remote one) is a class with `name` and `stages(plan, run_id, counter)`,
passed as `Runner(executor=...)`: no job and no line of `run.py` changes for it.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, Unpack

from toolkit.engine.cluster import ClusterLike
from toolkit.engine.graph import StageSummary
from toolkit.engine.run import Counter, run_dask, run_sync
from toolkit.plan import Plan, Report, StageReport

Named = Literal["auto", "dask", "sync"]
IN_PROCESS_BYTES = 1 << 30  # `auto`: a plan reading less runs in this process


class Executor(Protocol):
    """Runs a plan's stages in order and returns each stage's certified summary."""

    name: str

    def stages(self, plan: Plan, run_id: str, counter: Counter) -> list[StageSummary]: ...


@dataclass(frozen=True)
class InProcess:
    """This process: no cluster, no dashboard."""

    name: str = "sync"

    def stages(self, plan: Plan, run_id: str, counter: Counter) -> list[StageSummary]:
        return run_sync(plan, run_id, counter)


@dataclass(frozen=True)
class OnDask:
    """A Dask cluster, one graph per stage (`cluster` None: the embedded one)."""

    cluster: ClusterLike = None
    name: str = "dask"

    def stages(self, plan: Plan, run_id: str, counter: Counter) -> list[StageSummary]:
        return run_dask(plan, self.cluster, run_id, counter)


def choose_executor(plan: Plan, cluster: ClusterLike, executor: str) -> str:
    """`auto` is `sync` (this process: nothing to start, no dashboard) when no cluster was given
    or started and the plan says it reads under IN_PROCESS_BYTES, a few seconds of work that a
    cluster's start-up and per-stage round trips would only slow; otherwise `dask`."""
    if executor != "auto":
        return executor
    from toolkit.engine.cluster import Session

    nothing_given = cluster is None or (isinstance(cluster, Session) and cluster.embedded_unstarted)
    small = plan.work_bytes is not None and plan.work_bytes < IN_PROCESS_BYTES
    return "sync" if nothing_given and small else "dask"


@dataclass(frozen=True)
class Capacity:
    """Threads a plan would run on, and the smallest worker's memory limit in bytes (None:
    unknown, or the plan runs in the command's own process)."""

    threads: int
    memory: int | None


@dataclass(frozen=True)
class Runner:
    """Where a job's plans run (`cluster`), by which executor (`auto`, `dask`, `sync` or an
    `Executor` object) and who hears progress (`progress(stage, tasks_done, tasks_total)`).
    The default is the embedded choice: small plans in this process, others on an embedded
    cluster started when first needed."""

    cluster: ClusterLike = None
    executor: Named | Executor = "auto"
    progress: Any = None  # Callable[[str, int, int], None] | None

    def __post_init__(self) -> None:
        if isinstance(self.executor, str) and self.executor not in ("auto", "dask", "sync"):
            raise ValueError(f"executor must be 'auto', 'dask' or 'sync', not {self.executor!r}")

    def executor_for(self, plan: Plan) -> Executor:
        """The executor that runs `plan` (`auto` decided by the plan's size)."""
        if not isinstance(self.executor, str):
            return self.executor
        chosen = choose_executor(plan, self.cluster, self.executor)
        return InProcess() if chosen == "sync" else OnDask(self.cluster)

    def capacity(self, plan: Plan) -> Capacity:
        """What `plan` would run on now: the cluster's threads and its smallest worker's
        memory (reached to ask; the embedded one as it would start), or this process's
        threads (`memory` None: the command's own). A job sizes its rounds by it."""
        from toolkit.engine.cluster import Session, connect, default_workers, total_threads

        executor = self.executor_for(plan)
        if isinstance(executor, InProcess):
            return Capacity(1 if plan.holds_gil else default_workers(), None)
        if not isinstance(executor, OnDask):
            return Capacity(default_workers(), None)
        cluster = executor.cluster
        if cluster is None or (isinstance(cluster, Session) and cluster.embedded_unstarted):
            return Capacity(default_workers(), None)  # not started for a count
        with connect(cluster, holds_gil=plan.holds_gil, check=False) as client:
            workers = client.scheduler_info(n_workers=-1).get("workers", {}).values()
            limits = [int(w.get("memory_limit") or 0) for w in workers]
            return Capacity(total_threads(client), min((m for m in limits if m), default=None))

    def with_progress(self, progress: Any) -> Runner:
        return dataclasses.replace(self, progress=progress)

    def run(self, plan: Plan, run_id: str | None = None) -> Report:
        """Run a plan and report per stage: tasks, skipped, written, seconds, gate have/want
        (`toolkit.engine.run` says what is raised)."""
        if not isinstance(plan, Plan):
            raise TypeError(
                f"run() takes a toolkit.plan.Plan, not {type(plan).__name__}: a job's own entry "
                "point takes the cluster itself (toolkit.pyramid.build(source, cluster=...), "
                "toolkit.virtual.backfill.backfill(dataset, cluster=...))"
            )
        t0 = time.time()
        run_id = run_id if run_id is not None else uuid.uuid4().hex[:8]
        counter = Counter(plan, self.progress)
        executor = self.executor_for(plan)
        return report(plan, executor.name, executor.stages(plan, run_id, counter), t0)


class RunKeywords(TypedDict, total=False):
    """The documented keywords a job function takes instead of a `Runner`."""

    cluster: ClusterLike
    executor: Named | Executor
    progress: Any  # Callable[[str, int, int], None] | None


def runner_of(
    runner: Runner | None = None, default: Named = "auto", **run: Unpack[RunKeywords]
) -> Runner:
    """The runner a job function was given, or the one its documented keywords make
    (`build(source, cluster=client, progress=bar)`; no `executor`: the job's `default`);
    both at once is refused."""
    unknown = set(run) - set(RunKeywords.__annotations__)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    given = {k: v for k, v in run.items() if v is not None}
    if runner is None:
        return Runner(**{"executor": default, **given})  # type: ignore[arg-type]
    if given:
        raise TypeError(f"give runner= or {'/'.join(given)}=, not both")
    return runner


def report(plan: Plan, executor: str, summaries: list[StageSummary], t0: float) -> Report:
    stages = tuple(
        StageReport(
            name=s.stage,
            tasks=s.tasks,
            skipped=s.skipped,
            written=s.written,
            seconds=max(0.0, s.finished - s.started) if s.written or s.skipped else 0.0,
            gate_have=s.gate_have,
            gate_want=s.gate_want,
            nodes=s.nodes,
            excused=s.excused,
            result=s.value,
        )
        for s in summaries
    )
    return Report(plan.name, plan.digest, executor, stages, time.time() - t0)


def run(
    plan: Plan,
    cluster: ClusterLike = None,
    executor: Named | Executor = "dask",
    progress: Any = None,
    run_id: str | None = None,
) -> Report:
    """Run a plan and report per stage: tasks, skipped, written, seconds, gate have/want
    (`Runner(cluster, executor, progress).run(plan)`).

    `cluster`: None (an embedded cluster, threads or processes as the plan's services need), a
    scheduler address, a `Client`, a `Session`, or anything with `.get_client()` (dask-gateway,
    Coiled). `progress(stage, tasks_done, tasks_total)` hears tasks, not nodes: stripe nodes
    report as they go. Node keys are `<stage>-<plan hash>-<run id>` and an index.
    A service's exception is raised as itself, carrying `toolkit.plan.task_context(err)` (stage,
    task, the worker's traceback); a gate that finds missing objects raises
    `IncompleteStageError`; no node of a later stage runs after either.
    """
    return Runner(cluster, executor, progress).run(plan, run_id)
