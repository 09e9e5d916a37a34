"""Every notebook in notebooks/ executes top to bottom, and is committed as it executes.

A re-run (tests/notebooks.py, what `make notebooks` saves) must give the committed notebook's
cells: the same ids, types and sources, outputs in the same code cells, no error; and every
progress bar ends as a plain output of its final counts, not a widget a saved notebook loses.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.notebooks import NOTEBOOKS, errors, execute, read, structure

WIDGET = "application/vnd.jupyter.widget-view+json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_every_notebook_is_committed_executed_with_cell_ids() -> None:
    """Without a kernel: what the committed files hold (`make notebooks` writes them)."""
    for path in NOTEBOOKS:
        raw = json.loads(path.read_text())
        assert (raw["nbformat"], raw["nbformat_minor"]) >= (4, 5), path.name
        cells = raw["cells"]
        assert all(c.get("id") for c in cells), f"{path.name}: a cell without an id"
        assert len({c["id"] for c in cells}) == len(cells), f"{path.name}: duplicate cell ids"
        code = [c for c in cells if c["cell_type"] == "code"]
        unrun = [c["id"] for c in code if c.get("execution_count") is None]
        assert not unrun, f"{path.name}: cells {unrun} not executed: run `make notebooks`"
        counts = [c["execution_count"] for c in code]
        assert counts == list(range(1, len(code) + 1)), f"{path.name}: not run top to bottom"
        outputs = [o for c in code for o in c.get("outputs", [])]
        assert not [o for o in outputs if WIDGET in o.get("data", {})], f"{path.name}: a widget"
        assert "widgets" not in raw["metadata"], f"{path.name}: saved widget state"
        assert not [o for o in outputs if o["output_type"] == "error"], path.name


def _bars(outputs: list) -> list[str]:
    """The plain text of each progress-bar output (a rich rendering: bar glyphs, n/m)."""
    texts = [ANSI.sub("", o.get("data", {}).get("text/plain", "")) for o in outputs]
    return [t for t in texts if "━" in t]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    nb = execute(path, tmp_path)
    assert not errors(nb)
    assert structure(nb) == structure(read(path)), (
        f"{path.name} re-executed differs from the committed one (cells, ids, sources, or "
        "which cells have outputs): run `make notebooks` and commit it"
    )
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    for bar in _bars(outputs):  # each bar ends complete: every stage at n/n
        counts = re.findall(r"(\d+)/(\d+)", bar)
        assert counts and all(done == total for done, total in counts), bar
    if path.stem == "quickstart":
        text = "".join(o.get("text", "") for o in outputs)
        assert "http://" in text and "/status" in text  # the dashboard link was printed
        bars = _bars(outputs)
        assert len(bars) == 1 and "level2" in bars[0], "no progress bar, or not its final state"
        html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
        assert any("32/32" in h for h in html), "the bars' final state is not in the HTML"
        assert (tmp_path / "quickstart-report.html").exists()
    if path.stem == "virtual":
        text = "".join(o.get("text", "") for o in outputs)
        assert "validation passed" in text
        assert "/status" in text  # the one cluster's dashboard link
        maps = [o for o in outputs if "image/png" in o.get("data", {})]
        # a map before and after the update, then level 0 beside its 2x and 4x levels
        assert len(maps) == 3, "want a map before and after the update, and the levels"
        assert "True" in text  # the levels in the repo verified
    if path.stem == "pyramid":
        text = "".join(o.get("text", "") for o in outputs)
        assert "operator: mean" in text and "verified" in text and "/status" in text
        assert any("image/png" in o.get("data", {}) for o in outputs), "no levels were drawn"
    if path.stem == "archive":
        text = "".join(o.get("text", "") for o in outputs)
        assert "-> blob" in text and "-> unmanaged" in text and "/status" in text
        assert any("image/png" in o.get("data", {}) for o in outputs), "no blob chart was drawn"
