"""Where a pyramid lives is decided once (`toolkit.pyramid.home.open_home`), each location is
opened once, and the pyramid's functions stay short (issue 51, items 2, 3 and 6)."""

from __future__ import annotations

import ast
import collections
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples.synthetic import write_store
from toolkit.pyramid.geometry import PlanError
from toolkit.pyramid.home import open_home

TOOLKIT = Path(__file__).resolve().parents[2] / "toolkit"


def _calls(tree: ast.AST, name: str) -> int:
    return sum(
        1
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and name in (getattr(n.func, "id", None), getattr(n.func, "attr", None))
    )


def _modules() -> dict[str, ast.AST]:
    return {
        p.relative_to(TOOLKIT.parent).as_posix(): ast.parse(p.read_text())
        for p in sorted(TOOLKIT.rglob("*.py"))
    }


@pytest.mark.parametrize("output", [False, True], ids=["in-place", "--output"])
def test_a_build_opens_each_location_once(tmp_path, monkeypatch, output):
    """`pyramid build` (and `--output`) opens the source, and the output, one time each: the
    opened store travels, never the URL (it was opened two to four times)."""
    src = tmp_path / "s.zarr"
    write_store(storage.open_store(str(src)), shape=(64, 64), shards=(32, 32))
    opened: collections.Counter[str] = collections.Counter()
    real = storage.open_store

    def counted(url: Any, *args: Any, **kwargs: Any) -> storage.Store:
        if isinstance(url, str):
            opened[url] += 1
        return real(url, *args, **kwargs)

    monkeypatch.setattr(storage, "open_store", counted)
    more = ["--output", str(tmp_path / "out")] if output else []
    args = ["pyramid", "build", str(src), "--levels", "1", "--executor", "sync", *more]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    want = {str(src): 1, **({str(tmp_path / "out"): 1} if output else {})}
    assert dict(opened) == want


def test_the_home_is_where_the_pyramid_is(tmp_path):
    """A Zarr store is a Zarr home (positions refused as typed), an empty folder one too (its
    reads name that nothing is there), and neither asks the caller which it is."""
    src = tmp_path / "s.zarr"
    write_store(storage.open_store(str(src)), shape=(64, 64), shards=(32, 32))
    home = open_home(str(src))
    assert home.exists() and home.version()[0] == "pyramid"
    with pytest.raises(PlanError, match=r"--latest: .*s\.zarr is a Zarr store"):
        open_home(str(src), latest=True)
    (tmp_path / "empty").mkdir()
    assert not open_home(str(tmp_path / "empty")).exists()


def test_one_module_decides_repo_or_store():
    """Only `open_home` asks for the repo at a location (`repo_at`), and outside the virtual
    job and the Icechunk edge only the pyramid's repo and output modules ask `is_repo` (the
    output: whether to create its repo)."""
    modules = _modules()
    deciders = {m for m, tree in modules.items() if _calls(tree, "repo_at")}
    assert deciders == {"toolkit/pyramid/home.py"}
    edge = ("toolkit/virtual/", "toolkit/icechunk/", "toolkit/icechunk.py", "toolkit/archive/")
    asking = {
        m for m, tree in modules.items() if _calls(tree, "is_repo") and not m.startswith(edge)
    }
    assert asking <= {"toolkit/pyramid/repo.py", "toolkit/pyramid/output.py"}


def test_storage_options_travel_as_one_value_and_pyramid_functions_stay_short():
    """At most two functions take `**options` (`storage.open_store` is one); no function of
    the pyramid over 100 lines, none outside its CLI over 12 parameters."""
    relayed, long, wide = [], [], []
    for module, tree in _modules().items():
        for f in ast.walk(tree):
            if not isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = f.args
            if a.kwarg is not None and a.kwarg.arg == "options":
                relayed.append(f"{module}:{f.name}")
            if not module.startswith("toolkit/pyramid/"):
                continue
            if f.end_lineno - f.lineno + 1 > 100:
                long.append(f"{module}:{f.name}")
            n = len(a.posonlyargs + a.args + a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
            n -= bool(a.args) and a.args[0].arg in ("self", "cls")
            if n > 12 and not module.endswith("/cli.py"):
                wide.append(f"{module}:{f.name} ({n})")
    assert len(relayed) <= 2, relayed
    assert not long, long
    assert not wide, wide
