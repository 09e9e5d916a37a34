"""The repo stands alone: no test, benchmark, script or module reaches outside it for data.

A fresh clone with nothing beside it must test itself (`git clone` + `make test`), so every file
the suite reads is under the repo (real GRIB2, `.idx` and GDAL fixtures in tests/data, with their
licences). This fails if any source names a path above the repo, as the early tests did when
they read fixtures from a folder beside it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"""(\.\./+shared|["'/]shared/(data|spec|notes)\b|parents\[[3-9]\])""")


def sources() -> list[Path]:
    out = [ROOT / "Makefile", ROOT / ".ci" / "run"]
    for folder in ("toolkit", "tests", "benchmarks", "graphs", "notebooks"):
        out += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".ipynb", ".sh")]
    return [p for p in out if p.is_file() and p != Path(__file__).resolve()]


def test_no_source_reads_outside_the_repo():
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in sources()
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), start=1)
        if OUTSIDE.search(line)
    ]
    assert not found, "reads outside the repo:\n" + "\n".join(found)


def test_the_fixtures_the_suite_names_are_in_the_repo_with_their_licences():
    data = ROOT / "tests" / "data"
    for folder, licence in (
        ("grib", "LICENSE.gribberish-test-data"),
        ("idx", "LICENSE.reformatters-fixtures"),
        ("gdal", "LICENSE.gdal"),
    ):
        assert (data / folder / licence).is_file(), f"tests/data/{folder} lacks {licence}"
        assert any((data / folder).iterdir())


def test_the_readme_names_only_what_the_repo_has():
    """The README's tour points a newcomer at files (its picture, docs, notebooks, graphs): each
    is in the repo, and nothing it names lies outside it."""
    readme = (ROOT / "README.md").read_text()
    assert not OUTSIDE.search(readme), "README.md names a path outside the repo"
    named = set(re.findall(r"(?<![\w/.])((?:docs|notebooks|graphs|benchmarks)/[\w./-]+\w)", readme))
    named |= set(re.findall(r"\]\(([^)\s]+)\)", readme))  # markdown links and images
    assert "docs/img/demo-pyramid-levels.png" in named
    missing = sorted(n for n in named if "://" not in n and not (ROOT / n).exists())
    assert not missing, f"README.md names files the repo lacks: {missing}"
