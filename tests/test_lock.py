"""The committed lock files (requirements/*.txt, written by `make lock`) still answer
pyproject.toml, and agree with one another.

`make demo`, `make test` and the worker image of docs/clusters.md install from them, so a
dependency added to pyproject.toml without `make lock` would never reach them: this fails
instead, naming the requirement. No network: it reads the files only."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements"
# each lock file and the extras of pyproject.toml it holds (besides the core dependencies)
FILES = {
    "core": (),
    "demo": ("examples",),
    "test": ("examples", "serve", "test", "docs"),
    "bench": ("examples", "serve", "test", "docs", "bench"),
    "notebooks": ("examples", "notebooks"),
    "docs": ("serve", "docs"),
}
# the lock is solved for Linux / CPython 3.12 (the Makefile's `lock` target)
ENV = default_environment() | {
    "python_version": "3.12",
    "python_full_version": "3.12.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def pins(name: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (LOCK / f"{name}.txt").read_text().splitlines():
        if m := PIN.match(line):
            out[canonicalize_name(m[1])] = m[2]
        else:
            assert not line.strip() or line.lstrip().startswith("#"), f"{name}.txt: {line!r}"
    return out


def wanted(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return [r for r in map(Requirement, reqs) if r.marker is None or r.marker.evaluate(ENV)]


@pytest.mark.parametrize("name", FILES)
def test_every_requirement_is_pinned_within_its_range(name: str) -> None:
    pinned = pins(name)
    wrong = []
    for req in wanted(FILES[name]):
        version = pinned.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            wrong.append(f"{req} (locked: {version})")
    assert not wrong, f"requirements/{name}.txt is stale, run `make lock`: {wrong}"


def test_a_package_has_one_version_in_every_file() -> None:
    """A worker image built from core.txt runs what a client built from any other file runs."""
    test = pins("test")
    for name in FILES:
        for pkg, version in pins(name).items():
            assert test.get(pkg, version) == version, (name, pkg, version, test[pkg])


def test_the_sets_nest() -> None:
    core, demo, test = pins("core"), pins("demo"), pins("test")
    assert core.keys() <= demo.keys() <= test.keys()
    assert "zarr-toolkit" not in test  # the project itself is installed from the checkout


def test_make_and_the_worker_recipe_install_from_the_lock() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "$(LOCK)/%.txt" in makefile and "pip install -q --no-deps -e ." in makefile
    assert "requirements/core.txt" in (ROOT / "docs" / "clusters.md").read_text()
