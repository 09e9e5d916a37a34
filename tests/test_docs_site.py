"""The documentation site (mkdocs.yml, docs/): it builds with `mkdocs build --strict` (a broken
link or anchor, a page left out of the nav, a docstring the API reference cannot render all
fail), its nav has the four parts users look for, its command-line reference is the command
tree as it is, every `toolkit` command line on any page parses against that tree, every page
with code names the test that runs it, and no page tells users to install something the
package index does not have.

`python -m tests.test_docs_site` rewrites docs/reference/cli.md from the command tree."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer
import yaml
from typer.cli import get_docs_for_click

from tests.docsite import DOCS, ROOT, RUNNABLE, RUNNERS, blocks, command_lines, pages, parse

CLI_PAGE = DOCS / "reference" / "cli.md"
GENERATED = {"reference/cli.md"}
# pages whose code is command lines for a user's own buckets and clusters, or output a command
# prints: their command lines are parsed here, against the real tree, not run
PARSED = (
    "archive.md",
    "development/index.md",
)  # its usage lines are synopses, checked against the tree whole
HEADER = """# Command line

Every command, group and option of `toolkit`, generated from the command tree (`python -m
tests.test_docs_site` rewrites this page; a test fails when it differs). Every command also
takes `--help` and `--quiet` / `--verbose` before or after its name; a command that reports
takes `--json` for one JSON object on stdout (`demo --json FILE` writes its report to a file). Exit codes: 0 done, 1 a failed check, 2 bad usage or a store out of reach ([the
engine's guarantees](../explanation/guarantees.md)).

"""


def cli_reference() -> str:
    from toolkit.cli import app

    cmd = typer.main.get_command(app)
    body = get_docs_for_click(obj=cmd, ctx=typer.Context(cmd, info_name="toolkit"), name="toolkit")
    body = body.split("\n", 2)[2].lstrip()  # typer's own title line goes: ours is above
    return HEADER + re.sub(r"\n{3,}", "\n\n", body).rstrip() + "\n"


def _nav() -> list:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader)["nav"]


def test_the_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    res = subprocess.run(
        [str(mkdocs), "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-4000:]
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "grib_forecast" in api and "plan_read" in api  # rendered from the docstrings
    home = (tmp_path / "site" / "index.html").read_text()
    assert "Ten lines" in home and "default_rng" in home  # the README's snippet


def test_the_nav_has_the_four_parts() -> None:
    names = [next(iter(item)) for item in _nav()]
    assert names == ["Home", "Tutorial", "How-to guides", "Explanation", "Reference", "Development"]


def test_every_page_is_in_the_nav() -> None:
    listed = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    assert listed == set(pages())


def test_the_cli_reference_is_the_command_tree() -> None:
    assert CLI_PAGE.read_text() == cli_reference(), "run: python -m tests.test_docs_site"


def test_every_page_with_code_names_its_runner() -> None:
    for page in pages():
        runnable = [b for b in blocks(page) if b.lang in RUNNABLE]
        if not runnable or page in GENERATED:
            continue
        assert page in RUNNERS, f"docs/{page} has code blocks that no test is listed as running"
        runner = (ROOT / RUNNERS[page]).read_text()
        assert page.split("/")[-1] in runner, f"{RUNNERS[page]} does not name docs/{page}"


def _all_command_lines() -> list[tuple[str, list[str]]]:
    found = []
    for page in ["README.md", *pages()]:
        if page in GENERATED:
            continue
        for b in blocks(page):
            if b.lang in {"bash", "sh", "console", ""}:
                found += [(page, argv) for argv in command_lines(b) if "..." not in argv]
    return found


@pytest.mark.parametrize(("page", "argv"), _all_command_lines(), ids=lambda x: str(x)[:60])
def test_every_command_line_parses(page: str, argv: list[str]) -> None:
    argv = [re.sub(r"^\[(.*)\]$", r"\1", w) for w in argv if w not in {"[--json]"}]
    argv = [w for w in argv if not (w.startswith("[") or w.endswith("]"))]
    try:
        parse(argv)
    except (click.exceptions.Exit, typer.Exit) as done:  # `toolkit --help`, `--version`
        assert done.exit_code == 0


def test_no_page_installs_what_the_index_lacks() -> None:
    """`zarr-toolkit` is not on the package index: an install names a path, a clone or a lock."""
    for page in ["README.md", *pages()]:
        text = (ROOT / page).read_text() if page == "README.md" else (DOCS / page).read_text()
        for m in re.finditer(r"pip install ([^\n`]*)", text):
            args = m[1]
            assert "zarr-toolkit" not in args or "@" in args, f"{page}: pip install {args}"
            assert not re.search(r"(?<![\w./-])toolkit\b(?!/)", args.replace("'", "")
                                 .replace('"', "")), f"{page}: pip install {args}"  # fmt: skip


if __name__ == "__main__":
    CLI_PAGE.write_text(cli_reference())
    print(f"wrote {CLI_PAGE.relative_to(ROOT)}")
