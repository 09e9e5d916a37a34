"""toolkit.archive.

`toolkit.archive.plan_read(ds_or_path, manifests=...)` says what a selection needs recalled
from tape. It is imported on first use, so `import toolkit.archive` stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plan_read"]


def __getattr__(name: str) -> Any:
    if name == "plan_read":
        from toolkit.archive.recall_plan import plan_read

        return plan_read
    raise AttributeError(f"module 'toolkit.archive' has no attribute {name!r}")
