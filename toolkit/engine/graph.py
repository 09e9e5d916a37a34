"""Compile a Plan into graph nodes (no dask here: the executors consume this).

Per stage: a `done` node (what exists already, observed once, after the previous gate),
work nodes (one per task, or one per worker stripe), an optional combine tree of bounded fan-in,
and a gate node that depends on all of them. Every node of stage k+1 depends on gate k.
Keys are deterministic: `<stage>-<plan hash>` plus an index.

A service's exception leaves its node carrying a `TaskContext` (stage, task, the worker's
traceback), so the user reads one line naming the task and `--debug` shows where it broke.
"""

from __future__ import annotations

import dataclasses
import pickle
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolkit import storage
from toolkit.engine.malloc import roomy
from toolkit.plan import (
    CONTEXT,
    Gate,
    IncompleteStageError,
    NodeResult,
    Plan,
    Stage,
    TaskContext,
    TaskError,
    task_context,
)
from toolkit.tasks import remaining, stripe

Tick = Callable[[int], None]  # a stripe node reports how many of its tasks are done so far
Ticker = Callable[[str, int], Tick | None]  # (stage, node index) -> that node's Tick

Key = str | tuple[str, int] | tuple[str, int, int]

# A gate reads at most this many node results: a wider stage folds its counts in a tree first,
# each fold next to its nodes' results, so no one worker fetches 10,000 of them.
GATE_FAN_IN = 64
COMBINE_FAN_IN = 8  # a stage's combine folds this many values per node


@dataclass(frozen=True)
class Node:
    key: Key
    stage: str
    kind: str  # "done" | "work" | "combine" | "settle" | "gate"
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    deps: tuple[Key, ...]  # keys whose results are appended to args, in order
    retries: int = 0
    tasks: int = 0  # work nodes: how many of the stage's tasks this node runs
    shared: tuple[int, ...] = ()  # args every work node of the stage holds (its service)


@dataclass(frozen=True)
class Partial:
    """A folded slice of a stage: counts and the combined value so far."""

    written: int
    skipped: int
    started: float
    finished: float
    value: Any


@dataclass(frozen=True)
class StageSummary:
    stage: str
    tasks: int
    written: int
    skipped: int
    started: float
    finished: float
    gate_have: int | None
    gate_want: int | None
    value: Any
    nodes: int = 0  # work nodes the stage ran as (tasks, or stripes of them)
    excused: tuple[tuple[str, str], ...] = ()  # wanted keys absent for a reason the gate took


@dataclass(frozen=True)
class Packed:
    """A stage's service, pickled once by the client and carried by each of its nodes as bytes:
    a service that pickles by value (defined in a notebook) is serialized once per stage, not
    once per node, and a worker unpickles it once (`unpacked`)."""

    digest: str
    blob: bytes

    @staticmethod
    def of(value: Any) -> Packed:
        import hashlib

        import cloudpickle

        blob = cloudpickle.dumps(value)
        return Packed(hashlib.sha256(blob).hexdigest(), blob)


_UNPACKED: dict[str, Any] = {}  # digest -> service, in this worker process (a few at a time)


def unpacked(service: Any) -> Any:
    if not isinstance(service, Packed):
        return service
    found = _UNPACKED.get(service.digest)
    if found is None:
        if len(_UNPACKED) >= 8:
            _UNPACKED.pop(next(iter(_UNPACKED)))
        found = _UNPACKED[service.digest] = pickle.loads(service.blob)
    return found


# ----------------------------------------------------------------------------- node functions
# Module-level so they pickle by reference; they receive only what one node needs.


def observe_done(observe: Callable[[], frozenset[str]], *_after: Any) -> frozenset[str]:
    with roomy():  # probes load manifests: glibc's own thresholds (toolkit.engine.malloc)
        return observe()


def serve(stage: str, label: str, service: Callable[[Any], Any], arg: Any) -> Any:
    """Call a service. Its exception is re-raised as itself (callers keep `except` on its type)
    carrying a `TaskContext` (stage, task, traceback); one that cannot travel with its context
    (it does not pickle, or its class pickles without its instance's attributes) becomes a
    `TaskError` with its type name and message, so the context reaches the client either way."""
    try:
        return service(arg)
    except Exception as raised:
        if task_context(raised) is not None or isinstance(raised, IncompleteStageError):
            raise
        detail = traceback.format_exc()
        err = storage.explain(raised) or raised  # an obstore error from inside zarr: named
        setattr(err, CONTEXT, TaskContext(stage, label, detail))
        if not _travels(err):
            raise TaskError(stage, label, type(err).__name__, str(err), detail) from None
        if err is raised:
            raise
        raise err from None


def _travels(err: BaseException) -> bool:
    """`err` reaches the client as its class, still carrying its task context."""
    try:
        back = pickle.loads(pickle.dumps(err))
    except Exception:
        return False
    return type(back) is type(err) and task_context(back) is not None


def run_task(
    stage: str, service: Callable[[Any], Any], task: Any, done: frozenset[str]
) -> NodeResult:
    started = time.time()
    if task.key in done:
        return NodeResult(0, 1, (), started, time.time())
    value = serve(stage, task.key, unpacked(service), task)
    return NodeResult(1, 0, (value,), started, time.time())


def run_block(
    stage: str,
    service: Callable[..., Any],
    block: list[Any],
    tick: Tick | None,
    done: frozenset[str],
) -> NodeResult:
    """One worker's stripe: the stripe was cut from the stable list; now drop what is done.

    The service is called as `service(todo, tick=...)` and tells how many of `todo` it has
    finished (heard by `tick`, when progress is drawn)."""
    started = time.time()
    service = unpacked(service)
    todo = remaining(block, done)
    skipped = len(block) - len(todo)

    def call(tasks: list[Any]) -> Any:
        return service(tasks, tick=lambda n: tick(skipped + n) if tick is not None else None)

    values = (serve(stage, _span(todo), call, todo),) if todo else ()
    # a service that says how many of its tasks it wrote (a file unpublished is not) is believed
    # for the count; the gate still decides what exists
    wrote = getattr(values[0], "written", None) if values else None
    written = len(todo) if not isinstance(wrote, int) else wrote
    return NodeResult(written, skipped, values, started, time.time())


def _span(block: list[Any]) -> str:
    first, last = block[0].key, block[-1].key
    return first if first == last else f"{first}..{last} ({len(block)} tasks)"


def fold(combine: Callable[[list[Any]], Any] | None, *parts: NodeResult | Partial) -> Partial:
    values: list[Any] = []
    for p in parts:
        if isinstance(p, NodeResult):
            values.extend(p.values)
        elif p.value is not None:
            values.append(p.value)
    value = combine(values) if (combine is not None and values) else None
    return Partial(
        written=sum(p.written for p in parts),
        skipped=sum(p.skipped for p in parts),
        started=min((p.started for p in parts), default=time.time()),
        finished=max((p.finished for p in parts), default=time.time()),
        value=value,
    )


def settled(
    settle: Callable[[Any], Any], combine: Callable[[list[Any]], Any] | None, *parts: Any
) -> Partial:
    """A window's results folded and settled where they were folded (`Stage.settle`): only
    what `settle` returns travels on."""
    part = fold(combine, *parts)
    if part.value is None:
        return part
    with roomy():  # a settle may merge and commit forks: glibc's own thresholds on a worker
        value = settle(part.value)
    return dataclasses.replace(part, value=value)


def check_gate(
    stage: str, tasks: int, nodes: int, gate: Gate | None, combine: Any, *parts: Any
) -> StageSummary:
    if len(parts) == 1 and isinstance(parts[0], Partial) and combine is None:
        folded = parts[0]  # folded already (by the client, from a streamed stage's windows)
    elif parts:
        folded = fold(combine, *parts)
    else:
        folded = Partial(0, 0, time.time(), time.time(), None)
    have = want = None
    excused: tuple[tuple[str, str], ...] = ()
    if gate is not None:
        with roomy():
            result = gate.check(stage, folded.value)
        have, want, excused = result.have, result.want, result.excused
    return StageSummary(
        stage,
        tasks,
        folded.written,
        folded.skipped,
        folded.started,
        folded.finished,
        have,
        want,
        folded.value,
        nodes,
        excused,
    )


# ----------------------------------------------------------------------------- compiler


def _blocks(stage: Stage) -> list[list[Any]]:
    n = stage.node_count
    return [stripe(stage.tasks, i, n, "contiguous") for i in range(n)]


def compile_plan(plan: Plan, run_id: str = "", ticker: Ticker | None = None) -> list[Node]:
    """Nodes in a valid execution order (stages whose tasks come from the previous stage's
    result, `Stage.tasks_from`, compile with no tasks here: the runner compiles them with
    `compile_stage` once that result is certified).

    Keys are `<stage>-<plan hash>` (+ `-<run_id>` when given) and an index. The run id keeps a
    rerun from reusing the previous run's observations (done-sets, gates) while the scheduler
    still holds them; resubmitting with the same run id attaches to the graph in flight.
    `ticker` gives each stripe node the callable it reports progress to (per task).
    """
    digest = plan_key(plan, run_id)
    nodes: list[Node] = []
    previous_gate: tuple[Key, ...] = ()
    for stage in plan.stages:
        nodes += compile_stage(stage, digest, previous_gate, ticker)
        previous_gate = (gate_key(stage, digest),)
    return nodes


def plan_key(plan: Plan, run_id: str = "") -> str:
    return f"{plan.digest}-{run_id}" if run_id else plan.digest


def gate_key(stage: Stage, digest: str) -> str:
    return f"{stage.name}-gate-{digest}"


def compile_stage(
    stage: Stage, digest: str, previous_gate: tuple[Key, ...] = (), ticker: Ticker | None = None
) -> list[Node]:
    """One stage's nodes: done, work, folds, gate; the done node waits for `previous_gate`."""
    nodes: list[Node] = []
    base = f"{stage.name}-{digest}"
    done_key: Key = f"{stage.name}-done-{digest}"
    nodes.append(
        Node(
            done_key,
            stage.name,
            "done",
            observe_done,
            (stage.done_probe,),  # not the stage: its task list would travel with the node
            previous_gate,
            stage.retries,
        )
    )
    work_keys: list[Key] = []
    if stage.workers is None:
        for i, task in enumerate(stage.tasks):
            key = (base, i)
            nodes.append(
                Node(
                    key,
                    stage.name,
                    "work",
                    run_task,
                    (stage.name, stage.service, task),
                    (done_key,),
                    stage.retries,
                    1,
                    (1,),
                )
            )
            work_keys.append(key)
    else:
        for i, block in enumerate(_blocks(stage)):
            key = (base, i)
            tick = ticker(stage.name, i) if ticker is not None else None
            nodes.append(
                Node(
                    key,
                    stage.name,
                    "work",
                    run_block,
                    (stage.name, stage.service, block, tick),
                    (done_key,),
                    stage.retries,
                    len(block),
                    (1,),
                )
            )
            work_keys.append(key)
    level_keys = work_keys
    if stage.combine is not None or len(work_keys) > GATE_FAN_IN:
        level = 0
        fan_in = COMBINE_FAN_IN if stage.combine is not None else GATE_FAN_IN
        while len(level_keys) > 1:
            next_keys: list[Key] = []
            for j in range(0, len(level_keys), fan_in):
                key = (f"{stage.name}-combine-{digest}", level, j // fan_in)
                nodes.append(
                    Node(
                        key,
                        stage.name,
                        "combine",
                        fold,
                        (stage.combine,),
                        tuple(level_keys[j : j + fan_in]),
                        stage.retries,
                    )
                )
                next_keys.append(key)
            level_keys, level = next_keys, level + 1
    if stage.settle is not None and level_keys:
        key = f"{stage.name}-settle-{digest}"
        nodes.append(
            Node(
                key,
                stage.name,
                "settle",
                settled,
                (stage.settle, stage.combine),
                tuple(level_keys),
                stage.retries,
            )
        )
        level_keys = [key]
    nodes.append(
        Node(
            gate_key(stage, digest),
            stage.name,
            "gate",
            check_gate,
            (stage.name, len(stage.tasks), len(work_keys), stage.gate, stage.combine),
            tuple(level_keys),
            0,
        )
    )
    return nodes
