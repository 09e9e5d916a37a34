"""The engine: compiles plans into Dask graphs and runs them. The only dask/distributed import."""

from toolkit.engine.cluster import ClusterUnreachable, connect, default_workers
from toolkit.engine.graph import Node, compile_plan
from toolkit.engine.listing import ListedKeys
from toolkit.engine.run import run
from toolkit.plan import Gate, IncompleteStageError, Plan, Report, Stage, StageReport

__all__ = [
    "ClusterUnreachable",
    "Gate",
    "IncompleteStageError",
    "ListedKeys",
    "Node",
    "Plan",
    "Report",
    "Stage",
    "StageReport",
    "compile_plan",
    "connect",
    "default_workers",
    "run",
]
