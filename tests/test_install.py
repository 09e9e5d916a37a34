"""The install line of the README (and the site's home page) works into an environment that
has nothing of ours: a fresh venv gets the checkout, not editable, with the `serve` and
`docs` extras, and its `toolkit --version` answers. Pins come from requirements/docs.txt (as
constraints, so the resolution is the lock's); packages come from the index pip is set up
with."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docsite import ROOT, blocks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def install_lines() -> set[str]:
    found = set()
    for page in ("README.md", "index.md", "tutorial.md"):
        for b in blocks(page, "bash"):
            found |= {line for line in b.code.splitlines() if line.startswith("pip install")}
    return found


def test_the_docs_give_one_install_line_from_a_clone() -> None:
    assert install_lines() == {'pip install ".[serve]"'}


def test_the_checkout_installs_into_a_fresh_venv(tmp_path: Path) -> None:
    clone = tmp_path / "toolkit clone"  # a folder name with a space, as users have them
    shutil.copytree(
        ROOT, clone, ignore=shutil.ignore_patterns(".venv*", ".git", "site", "*.egg-info",
                                                    "__pycache__", ".pytest_cache", ".hypothesis",
                                                    ".ruff_cache", "benchmarks"),
    )  # fmt: skip
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    (line,) = install_lines()
    target = re.search(r'"(\.\[[^\]]+\])"', line)[1].replace("serve", "serve,docs")
    res = subprocess.run(
        [*pip, "-c", str(ROOT / "requirements" / "docs.txt"), target],
        cwd=clone, capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    version = subprocess.run(
        [str(venv / "bin" / "toolkit"), "--version"], capture_output=True, text=True, cwd=tmp_path
    )
    assert version.returncode == 0, version.stderr
    assert re.fullmatch(r"toolkit \d+\.\d+\S* \(zarr-toolkit\)\n", version.stdout), version.stdout
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import toolkit, mkdocs, material, uvicorn; print(toolkit.__file__)"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert site.returncode == 0, site.stderr
    assert str(venv) in site.stdout  # installed, not the checkout found on a path
