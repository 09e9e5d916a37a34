"""Write a benchmark's results as JSON and a markdown table under benchmarks/results/."""

from __future__ import annotations

import json
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def commit() -> str:
    """The commit the measured code is at (`+dirty` when the work tree differs)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=RESULTS.parent, capture_output=True, text=True
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--", "toolkit") else "")


def write(name: str, rows: list[dict[str, Any]], notes: str = "") -> Path:
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "benchmark": name,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "notes": notes,
    }
    (RESULTS / f"{name}.json").write_text(json.dumps({**meta, "rows": rows}, indent=2))
    cols = list(rows[0]) if rows else []
    lines = [
        f"# {name}",
        "",
        f"{meta['when']} at commit {meta['commit']}. {notes}",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
    ]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    path = RESULTS / f"{name}.md"
    path.write_text("\n".join(lines) + "\n")
    print(path.read_text())
    return path


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
