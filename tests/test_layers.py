"""The layering of docs/architecture.md holds: its import-linter contracts, Dask's public
interfaces only, and the page naming every module of the package."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "broken" in proc.stdout and " 0 broken" in proc.stdout


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_no_private_dask_module_is_imported() -> None:
    """A private module (`dask._task_spec`) can change in any release; the engine uses the
    public ones (`dask.task_spec`, distributed's documented API)."""
    private = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "toolkit").rglob("*.py")
        for name in _imported(path)
        if name.split(".")[0] in ("dask", "distributed")
        and any(part.startswith("_") for part in name.split(".")[1:])
    }
    assert not private, sorted(private)


def test_the_architecture_page_names_every_module() -> None:
    """A module added to the package appears on docs/architecture.md (its own line, or its
    package's), so the page stays the map of the code."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    tops = sorted(
        f"toolkit.{p.stem}" if p.is_file() else f"toolkit.{p.name}"
        for p in (ROOT / "toolkit").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    )
    engine = sorted(p.stem for p in (ROOT / "toolkit" / "engine").glob("*.py"))
    missing = [m for m in tops if f"`{m}`" not in page]
    missing += [f"engine/{m}.py" for m in engine if m != "__init__" and f"`{m}.py`" not in page]
    assert not missing, f"docs/architecture.md does not name {missing}"


# What moves a branch: only `toolkit.transaction` calls these on the Icechunk edge.
BRANCH_MOVES = {"commit", "fork", "merge", "create_branch", "delete_branch", "reset_branch",
                "finalize_branch"}  # fmt: skip


def test_no_job_commits_or_moves_a_branch_itself() -> None:
    """Every commit goes through the branch transaction: a job module that called Icechunk's
    commit (or forked, merged, created, deleted or reset a branch) would have its own rules."""
    found = []
    for package in ("virtual", "pyramid", "archive"):
        for path in sorted((ROOT / "toolkit" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                f = node.func if isinstance(node, ast.Call) else None
                if isinstance(f, ast.Attribute) and f.attr in BRANCH_MOVES:
                    on = f.value.id if isinstance(f.value, ast.Name) else ""
                    ours = on not in {"T", "heapq"}  # heapq.merge merges sorted key streams
                    if on == "R" or (f.attr in {"commit", "fork", "merge"} and ours):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {on}.{f.attr}")
    assert found == []


def _tops() -> list[str]:
    """Every top-level module and package of toolkit, by dotted name."""
    return sorted(
        f"toolkit.{p.stem}" if p.is_file() else f"toolkit.{p.name}"
        for p in (ROOT / "toolkit").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    )


def test_the_examples_contract_names_the_whole_library() -> None:
    """A module added to the library is held to "the library does not import toolkit.examples"
    too: the contract's sources are every top-level module but the examples."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["name"].startswith("the library does not")]
    assert contract["forbidden_modules"] == ["toolkit.examples"]
    assert sorted(contract["source_modules"]) == [m for m in _tops() if m != "toolkit.examples"]


def test_the_library_loads_the_examples_only_when_asked() -> None:
    """toolkit.examples stands beside the library: importing the library and its CLI loads
    none of it; a simulated dataset's name, or `toolkit demo`, loads it by name."""
    code = (
        "import sys\n"
        "import toolkit.archive, toolkit.cli, toolkit.pyramid, toolkit.virtual\n"
        "from toolkit.virtual.builtin import DATASETS, build\n"
        "loaded = lambda: sorted(m for m in sys.modules if m.startswith('toolkit.examples'))\n"
        "assert build('gfs').name == 'gfs' and not loaded(), loaded()\n"
        "assert DATASETS['sim-gfs'].__module__ == 'toolkit.examples.datasets', loaded()\n"
        "from toolkit.cli import app\n"
        "from typer.main import get_command\n"
        "assert get_command(app).get_command(None, 'demo').name == 'demo'\n"
        "assert 'toolkit.examples.cli' in loaded(), loaded()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
