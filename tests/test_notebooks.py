"""Every notebook in notebooks/ executes top to bottom."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors
    if path.stem == "quickstart":
        text = "".join(o.get("text", "") for o in outputs)
        assert "http://" in text and "/status" in text  # the dashboard link was printed
        widgets = [
            o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        ]
        assert widgets, "no live progress bar was drawn"
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
