"""Execute the notebooks in notebooks/ and save them with their outputs (`make notebooks`).

    .venv/bin/python -m tests.notebooks [NAME ...]    # every notebook, or those named

Each runs top to bottom on a fresh kernel of this venv (`python3`), in a temporary directory
(what a notebook writes beside itself, such as the quickstart's performance report, stays out
of the repo). What would make a re-run differ for no reason is left out: no per-cell timing
metadata, no saved widget state (the progress bars of `toolkit.engine.notebook` end as plain
outputs), cell ids kept, and the execution counts run 1, 2, 3, ... as a fresh kernel numbers them.
tests/test_notebooks.py executes each notebook the same way and compares it with the committed
one (`structure`), so a notebook edited without re-running this fails the suite.
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 600  # seconds; the slowest cell (a backfill on a fresh cluster) takes ~30


def read(path: Path) -> Any:
    import nbformat

    return nbformat.read(path, as_version=4)


def execute(path: Path, workdir: Path) -> Any:
    """The notebook at `path`, executed top to bottom in `workdir` and normalised."""
    from nbclient import NotebookClient

    nb = read(path)
    for cell in nb.cells:
        cell.setdefault("id", uuid.uuid4().hex[:8])  # kept from then on
    nb.nbformat_minor = max(nb.nbformat_minor, 5)  # cell ids are nbformat 4.5
    NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        record_timing=False,
        store_widget_state=False,
        resources={"metadata": {"path": str(workdir)}},
    ).execute()
    return normalise(nb)


def normalise(nb: Any) -> Any:
    """Drop what differs between two runs of the same notebook for no reason of its own."""
    nb.metadata.pop("widgets", None)
    count = 0
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        count += 1
        cell.execution_count = count
        for output in cell.outputs:
            if output.output_type == "execute_result":
                output.execution_count = count
    return nb


def errors(nb: Any) -> list[str]:
    """Each error output of `nb`, as `cell ID: ename: evalue`."""
    return [
        f"cell {cell.get('id')}: {o.get('ename')}: {o.get('evalue')}"
        for cell in nb.cells
        for o in cell.get("outputs", [])
        if o.get("output_type") == "error"
    ]


def structure(nb: Any) -> list[tuple[str | None, str, str, bool]]:
    """What a re-run must keep of the committed notebook: per cell its id, type and source, and
    whether a code cell has outputs (not the outputs: ports, paths and timings differ)."""
    return [
        (cell.get("id"), cell.cell_type, cell.source, bool(cell.get("outputs")))
        for cell in nb.cells
    ]


def main(names: list[str]) -> int:
    import nbformat

    paths = [p for p in NOTEBOOKS if not names or p.stem in names or p.name in names]
    if not paths:
        print(f"no notebook named {names} in notebooks/", file=sys.stderr)
        return 2
    for path in paths:
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"toolkit-{path.stem}-") as workdir:
            nb = execute(path, Path(workdir))
        if bad := errors(nb):
            print(f"{path.name}: {'; '.join(bad)}", file=sys.stderr)
            return 1
        nbformat.write(nb, path)
        print(f"{path.relative_to(ROOT)}: executed in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
