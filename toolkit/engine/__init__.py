"""The engine: compiles plans into Dask graphs and runs them. The only dask/distributed import."""

from toolkit.engine.cluster import (
    BadOption,
    ClusterUnreachable,
    Session,
    connect,
    dashboard,
    default_workers,
    embedded,
)
from toolkit.engine.graph import Node, compile_plan
from toolkit.engine.listing import ListedKeys
from toolkit.engine.progress import progress_bar
from toolkit.engine.runner import Executor, InProcess, OnDask, RunKeywords, Runner, run, runner_of
from toolkit.engine.ship import ship
from toolkit.engine.versions import VersionMismatch, check_versions
from toolkit.plan import (
    AUTO,
    Each,
    Gate,
    IncompleteStageError,
    Plan,
    Report,
    Stage,
    StageReport,
    TaskContext,
    TaskError,
    task_context,
)

__all__ = [
    "AUTO",
    "BadOption",
    "ClusterUnreachable",
    "Each",
    "Executor",
    "Gate",
    "InProcess",
    "IncompleteStageError",
    "ListedKeys",
    "Node",
    "OnDask",
    "Plan",
    "Report",
    "RunKeywords",
    "Runner",
    "Session",
    "Stage",
    "StageReport",
    "TaskContext",
    "TaskError",
    "VersionMismatch",
    "check_versions",
    "compile_plan",
    "connect",
    "dashboard",
    "default_workers",
    "embedded",
    "progress_bar",
    "run",
    "runner_of",
    "ship",
    "task_context",
]
