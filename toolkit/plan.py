"""Plans as data (pure): stages, gates, and what a run reports.

A job builds a `Plan` without importing dask; `toolkit.engine.run` compiles it into one graph.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.tasks import StableTasks, TaskList

__all__ = [
    "AUTO",
    "DoneProbe",
    "Each",
    "Gate",
    "GateResult",
    "IncompleteStageError",
    "NodeResult",
    "Plan",
    "Report",
    "Stage",
    "StageReport",
    "TaskContext",
    "TaskError",
    "task_context",
]

AUTO = "auto"  # Stage.workers: one stripe per thread of the cluster the plan runs on


class IncompleteStageError(RuntimeError):
    """A gate counted fewer (or other) objects than its stage must have written."""

    def __init__(
        self, stage: str, have: int, want: int, missing: list[str], extra: str = ""
    ) -> None:
        self.stage, self.have, self.want, self.missing = stage, have, want, missing
        self.extra = extra
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        msg = f"stage {stage!r} incomplete: have {have}/{want} objects"
        if missing:
            msg += f"; first missing: {shown}"
        if extra:
            msg += f"; {extra}"
        msg += ". Rerun the plan: it resumes from what exists."
        super().__init__(msg)

    def __reduce__(self) -> tuple[Any, ...]:
        return (IncompleteStageError, (self.stage, self.have, self.want, self.missing, self.extra))


@dataclass(frozen=True)
class TaskContext:
    """Where a service's exception was raised: its stage, its task, the worker's traceback."""

    stage: str
    task: str
    traceback: str = ""

    def line(self, err: BaseException) -> str:
        """`stage '4x' task '4x/3/7': ValueError: ...` -- what a user reads first."""
        cause = err.cause if isinstance(err, TaskError) else type(err).__name__
        message = err.message if isinstance(err, TaskError) else str(err)
        return f"stage {self.stage!r} task {self.task!r}: {cause}: {message}"


CONTEXT = "toolkit_task"  # the attribute a service's exception carries its TaskContext in


def task_context(err: BaseException) -> TaskContext | None:
    """The stage and task an exception from `run()` came from (None: not from a service)."""
    found = getattr(err, CONTEXT, None)
    return found if isinstance(found, TaskContext) else None


class TaskError(RuntimeError):
    """A node failed with a cause that cannot travel as itself: an exception that does not
    pickle (sent as its type name and message), or a node lost with its workers."""

    def __init__(self, stage: str, task: str, cause: str, message: str, detail: str = "") -> None:
        self.stage, self.task, self.cause, self.message = stage, task, cause, message
        setattr(self, CONTEXT, TaskContext(stage, task, detail))
        super().__init__(f"stage {stage!r} task {task!r}: {cause}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        ctx = task_context(self)
        detail = ctx.traceback if ctx else ""
        return (TaskError, (self.stage, self.task, self.cause, self.message, detail))


@dataclass(frozen=True)
class GateResult:
    stage: str
    have: int
    want: int
    excused: tuple[tuple[str, str], ...] = ()  # (key, why it is absent), accepted by the gate


@dataclass(frozen=True)
class Gate:
    """What must exist once a stage is done, and how to observe it.

    `observe()` returns the keys that exist now (a listing or manifest probes); `want` is what
    must exist, from the plan, never from what the stage's workers say they did. Keys are
    compared as sets, so observe and want must use the same naming.

    `explain(result)` may give, from the stage's combined result, why some wanted keys are absent
    (a source file not published, a file skipped as unreadable). It never makes a key count as
    present: those `excuse` accepts (all, none, or a predicate over keys) the gate reports as
    excused; the rest fail the gate like any other, their reasons named.
    """

    observe: Callable[[], Iterable[str]]
    want: Collection[str] | None = None  # a tuple, or a lazy view (made when checked)
    explain: Callable[[Any], Mapping[str, str]] | None = None
    excuse: bool | Callable[[str, str], bool] = True  # which (key, reason) it accepts

    def check(self, stage: str, combined: Any = None) -> GateResult:
        have = set(self.observe())
        if self.want is None:
            return GateResult(stage, len(have), len(have))
        missing = [k for k in self.want if k not in have]
        reasons = dict(self.explain(combined)) if (self.explain and missing) else {}
        accepts = self.excuse if callable(self.excuse) else (lambda _k, _w: bool(self.excuse))
        excused = [(k, reasons[k]) for k in missing if k in reasons and accepts(k, reasons[k])]
        taken = {k for k, _ in excused}
        unexcused = [k for k in missing if k not in taken]
        want = len(self.want) - len(excused)
        if unexcused:
            why = "; ".join(f"{k}: {reasons[k]}" for k in unexcused[:10] if k in reasons)
            raise IncompleteStageError(stage, want - len(unexcused), want, unexcused, why)
        return GateResult(stage, want, want, tuple(excused))


@dataclass(frozen=True)
class DoneProbe:
    """What a stage's done node observes: the keys that exist already (nothing to observe: none)."""

    source: Callable[[], Iterable[str]] | None

    def __call__(self) -> frozenset[str]:
        return frozenset(self.source()) if self.source is not None else frozenset()


@dataclass(frozen=True)
class Stage:
    """One level of work.

    A service is called with what one node does: `service(task)` with a node per task
    (`workers=None`), or `service(tasks, tick=f)` with one worker's stripe (`workers=N` or
    `AUTO`: N nodes, each a contiguous block of the stable list), calling `f(n)` as it finishes
    its n-th task so progress moves inside a long stripe (`Each` makes a stripe service of a
    one-task one). Before running, a node drops the tasks whose keys `done()` (default: the
    gate's `observe`) reports, *after* striping.
    `combine(values)` folds service results in a tree into one final node, whose value the
    gate and the report see; it receives its own outputs at the upper levels, so it must be
    associative over one value type (lists concatenated, forks merged).
    `tasks_from(previous)`: the stage's tasks are made from the previous stage's combined
    result once its gate has passed (e.g. commit the forks the workers returned); `tasks` is
    then ignored.
    `settle(value)`: applied next to the workers to the combined value before it travels to the
    client (merge a round's forks and commit them: the client and the gate see what it
    returns). A settled stage's nodes are submitted together, at most one window at a time,
    so each window settles once and no two settles of one stage run at once.
    """

    name: str
    tasks: TaskList[Any]
    service: Callable[..., Any]
    gate: Gate | None = None
    workers: int | str | None = None  # None: a node per task; N or AUTO: stripe nodes
    done: Callable[[], Iterable[str]] | None = None
    resume: bool = True
    combine: Callable[[list[Any]], Any] | None = None
    retries: int = 2
    tasks_from: Callable[[Any], StableTasks[Any]] | None = None
    settle: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        w = self.workers
        if w is not None and w != AUTO and (not isinstance(w, int) or w < 1):
            raise ValueError(f"stage {self.name!r}: workers must be >= 1 or {AUTO!r}, not {w!r}")

    def observe_done(self) -> frozenset[str]:
        return self.done_probe()

    @property
    def done_probe(self) -> DoneProbe:
        """The done-set observation as a value of its own: the node that runs it carries this,
        not the stage, whose task list may be large (a commit stage's holds the forks)."""
        if not self.resume:
            return DoneProbe(None)
        return DoneProbe(self.done or (self.gate.observe if self.gate else None))

    @property
    def node_count(self) -> int:
        if self.workers is None:
            return len(self.tasks)
        if self.workers == AUTO:
            raise ValueError(f"stage {self.name!r}: workers={AUTO!r} is resolved by the engine")
        return min(int(self.workers), len(self.tasks)) or (1 if self.tasks else 0)


@dataclass(frozen=True)
class Each:
    """A stripe service made of a one-task service: each task in turn, a tick after each."""

    one: Callable[[Any], Any]

    def __call__(self, tasks: list[Any], tick: Callable[[int], None]) -> tuple[Any, ...]:
        out = []
        for i, task in enumerate(tasks):
            out.append(self.one(task))
            tick(i + 1)
        return tuple(out)


@dataclass(frozen=True)
class Plan:
    """Stages run in order, each certified by its gate before the next starts.

    `holds_gil`: the services hold the GIL (GRIB decoding), so the embedded default runs them in
    spawned processes; False (numba kernels, zarr I/O) lets it use threads, which start in
    milliseconds instead of seconds. `work_bytes`: about how much the plan reads, when known;
    the `auto` executor runs a small plan in this process instead of starting a cluster.
    """

    name: str
    stages: tuple[Stage, ...]
    holds_gil: bool = True
    work_bytes: int | None = None

    def __post_init__(self) -> None:
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"plan {self.name!r} has duplicate stage names: {names}")

    @property
    def digest(self) -> str:
        h = hashlib.sha256(self.name.encode())
        for s in self.stages:
            h.update(f"\0{s.name}\0{s.tasks.digest}\0{s.workers}".encode())
        return h.hexdigest()[:12]


@dataclass(frozen=True)
class NodeResult:
    """What one node did: counts, its service's return values, when it ran."""

    written: int
    skipped: int
    values: tuple[Any, ...]
    started: float
    finished: float


@dataclass(frozen=True)
class StageReport:
    name: str
    tasks: int
    skipped: int
    written: int
    seconds: float
    gate_have: int | None = None
    gate_want: int | None = None
    result: Any = field(default=None, compare=False)
    nodes: int = 0  # graph nodes the tasks ran as: one per task, or one per stripe
    excused: tuple[tuple[str, str], ...] = ()  # wanted keys absent, and why (Gate.explain)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.name,
            "tasks": self.tasks,
            "skipped": self.skipped,
            "written": self.written,
            "seconds": round(self.seconds, 4),
            "gate_have": self.gate_have,
            "gate_want": self.gate_want,
            "nodes": self.nodes,
            "excused": [{"key": k, "reason": r} for k, r in self.excused],
        }


@dataclass(frozen=True)
class Report:
    plan: str
    digest: str
    executor: str
    stages: tuple[StageReport, ...]
    seconds: float
    notes: tuple[str, ...] = ()  # what the job wants its user to know (one line each)

    def stage(self, name: str) -> StageReport:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def written(self) -> int:
        return sum(s.written for s in self.stages)

    def as_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "digest": self.digest,
            "executor": self.executor,
            "seconds": round(self.seconds, 4),
            "stages": [s.as_dict() for s in self.stages],
        }
