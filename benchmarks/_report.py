"""Write a benchmark's results as JSON and a markdown table under benchmarks/results/."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"

# The environment the benchmarks started with, for the commands they time. Once a LocalCluster
# of processes has started in a process, distributed's nanny has written its pre-spawn-environ
# (MALLOC_TRIM_THRESHOLD_=65536, OMP/MKL/OPENBLAS_NUM_THREADS=1) into that process's own
# environment, and every command run from it afterwards inherits them: glibc then hands freed
# memory back at once and a build faults its arrays in again. Measured in pyramid_build after
# its in-process rows: toolkit's command 3.1 -> 4.4 s, topozarr's 4.2 -> 5.4 s.
STARTED_ENV = dict(os.environ)


def commit() -> str:
    """The commit the measured code is at (`+dirty` when toolkit/ differs from it). Run from the
    repo root: a pathspec is relative to git's working directory."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=RESULTS.parent.parent, capture_output=True, text=True
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--", "toolkit") else "")


def write(
    name: str,
    rows: list[dict[str, Any]],
    notes: str = "",
    more: dict[str, tuple[str, list[dict[str, Any]]]] | None = None,
) -> Path:
    """`rows` as the first table; `more` adds titled tables: title -> (notes, rows)."""
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "benchmark": name,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "notes": notes,
    }
    extra = {title: {"notes": n, "rows": r} for title, (n, r) in (more or {}).items()}
    doc = {**meta, "rows": rows, **({"tables": extra} if extra else {})}
    (RESULTS / f"{name}.json").write_text(json.dumps(doc, indent=2))
    lines = [f"# {name}", "", f"{meta['when']} at commit {meta['commit']}. {notes}", ""]
    lines += _table(rows)
    for title, (n, r) in (more or {}).items():
        lines += ["", f"## {title}", "", n, "", *_table(r)]
    path = RESULTS / f"{name}.md"
    path.write_text("\n".join(lines) + "\n")
    print(path.read_text())
    return path


def _table(rows: list[dict[str, Any]]) -> list[str]:
    cols = list(rows[0]) if rows else []
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return out + ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
