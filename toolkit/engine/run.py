"""Execute a compiled plan: in-process (`sync`) or as one Dask graph (`dask`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

from toolkit.engine.cluster import ClusterLike, connect
from toolkit.engine.graph import Key, Node, StageSummary, compile_plan
from toolkit.plan import Plan, Report, StageReport

Progress = Callable[[str, int, int], None]
Executor = Literal["dask", "sync"]


def _report(plan: Plan, executor: str, summaries: list[StageSummary], t0: float) -> Report:
    stages = tuple(
        StageReport(
            name=s.stage,
            tasks=s.tasks,
            skipped=s.skipped,
            written=s.written,
            seconds=max(0.0, s.finished - s.started) if s.written or s.skipped else 0.0,
            gate_have=s.gate_have,
            gate_want=s.gate_want,
            result=s.value,
        )
        for s in summaries
    )
    return Report(plan.name, plan.digest, executor, stages, time.time() - t0)


def _totals(nodes: list[Node]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for n in nodes:
        if n.kind == "work":
            totals[n.stage] = totals.get(n.stage, 0) + 1
    return totals


def _run_sync(nodes: list[Node], progress: Progress | None) -> list[StageSummary]:
    results: dict[Key, Any] = {}
    totals, seen = _totals(nodes), {}
    summaries = []
    for node in nodes:
        args = node.args + tuple(results[d] for d in node.deps)
        for attempt in range(node.retries + 1):
            try:
                results[node.key] = node.fn(*args)
                break
            except Exception:
                if attempt == node.retries:
                    raise
        if node.kind == "work" and progress:
            seen[node.stage] = seen.get(node.stage, 0) + 1
            progress(node.stage, seen[node.stage], totals[node.stage])
        if node.kind == "gate":
            summaries.append(results[node.key])
    return summaries


def _run_dask(
    nodes: list[Node], cluster: ClusterLike, progress: Progress | None
) -> list[StageSummary]:
    from distributed import as_completed

    totals, seen = _totals(nodes), {}
    with connect(cluster) as client:
        futures: dict[Key, Any] = {}
        for node in nodes:
            deps = [futures[d] for d in node.deps]
            futures[node.key] = client.submit(
                node.fn, *node.args, *deps, key=node.key, retries=node.retries, pure=False
            )
        stage_of = {futures[n.key]: n.stage for n in nodes if n.kind == "work"}
        gates = [futures[n.key] for n in nodes if n.kind == "gate"]
        for fut in as_completed(list(stage_of) + gates):
            if fut.status == "error":
                fut.result()  # raises the node's exception (a gate's IncompleteStageError too)
            stage = stage_of.get(fut)
            if stage is not None and progress:
                seen[stage] = seen.get(stage, 0) + 1
                progress(stage, seen[stage], totals[stage])
        return client.gather(gates)


def run(
    plan: Plan,
    cluster: ClusterLike = None,
    executor: Executor = "dask",
    progress: Progress | None = None,
    run_id: str | None = None,
) -> Report:
    """Run a plan and report per stage: tasks, skipped, written, seconds, gate have/want.

    Node keys are `<stage>-<plan hash>-<run id>` and an index; pass the same `run_id` to
    resubmit idempotently (a reconnecting client attaches to the nodes in flight).
    Raises the first failing node's exception; a gate that finds missing objects raises
    `IncompleteStageError` and no node of a later stage runs.
    """
    t0 = time.time()
    nodes = compile_plan(plan, run_id if run_id is not None else uuid.uuid4().hex[:8])
    if executor == "sync":
        summaries = _run_sync(nodes, progress)
    elif executor == "dask":
        summaries = _run_dask(nodes, cluster, progress)
    else:
        raise ValueError(f"executor must be 'dask' or 'sync', not {executor!r}")
    return _report(plan, executor, summaries, t0)
