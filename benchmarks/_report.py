"""Write a benchmark's results as JSON and a markdown table under benchmarks/results/."""

from __future__ import annotations

import json
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def write(name: str, rows: list[dict[str, Any]], notes: str = "") -> Path:
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "benchmark": name,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "notes": notes,
    }
    (RESULTS / f"{name}.json").write_text(json.dumps({**meta, "rows": rows}, indent=2))
    cols = list(rows[0]) if rows else []
    lines = [f"# {name}", "", notes, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    path = RESULTS / f"{name}.md"
    path.write_text("\n".join(lines) + "\n")
    print(path.read_text())
    return path


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
