"""The documentation site's code blocks, as the tests read them.

A block is fenced with a language (```python, ```bash, ...). Blocks in the languages of
RUNNABLE are code a reader copies; every page that holds one names the test that runs them
in RUNNERS (tests/test_docs_site.py checks the map is whole). A Python block with a title
(```python title="mymodel.py") is a file the reader saves, not code they run."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import typer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUNNABLE = {"python", "bash", "sh", "console", "yaml", "dockerfile"}
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```", re.S | re.M)

# page -> the test module that runs its code blocks (each runs all of them)
RUNNERS = {
    "tutorial.md": "tests/test_tutorial.py",
    "index.md": "tests/test_install.py",
    "clusters.md": "tests/test_cluster_docs.py",
    "operations.md": "tests/virtual/test_operations_doc.py",
    "stac.md": "tests/test_tutorial.py",
    "xarray.md": "tests/test_tutorial.py",
    "virtual.md": "tests/test_tutorial.py",
    "how-to/own-dataset.md": "tests/virtual/test_user_dataset.py",
    "how-to/recall.md": "tests/test_tutorial.py",
    "archive.md": "tests/test_docs_site.py",
    "development/index.md": "tests/test_docs_site.py",
}


@dataclass(frozen=True)
class Block:
    page: str
    lang: str
    title: str | None
    code: str


def pages() -> list[str]:
    """Every page of the site, relative to docs/."""
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))


def blocks(page: str, lang: str | None = None) -> list[Block]:
    text = (DOCS / page).read_text() if page != "README.md" else (ROOT / page).read_text()
    out = []
    for m in FENCE.finditer(text):
        title = re.search(r'title="([^"]+)"', m[2])
        out.append(Block(page, m[1], title[1] if title else None, m[3]))
    return [b for b in out if lang is None or b.lang == lang]


def command_lines(block: Block) -> list[list[str]]:
    """The `toolkit ...` command lines of a shell block, as argv after `toolkit` (a line
    continued with a backslash is one command; a shell redirection ends it)."""
    text = re.sub(r"\\\n\s*", " ", block.code)
    found = []
    for line in text.splitlines():
        line = re.sub(r"^\s*\$\s*", "", line)
        m = re.match(r"\s*(?:\S*/)?toolkit\s+(.*)", line)
        if not m:
            continue
        words = shlex.split(m[1], comments=True)
        cut = next(
            (i for i, w in enumerate(words) if w in {">", ">>", "2>>", "||", "&&", "|"}), None
        )
        found.append(words[:cut])
    return found


def parse(argv: list[str]) -> click.Command:
    """Parse a command line against the real command tree, as `toolkit` would: an unknown
    command or flag, a bad value or a missing argument raises. Returns the leaf command."""
    from toolkit.cli import app

    cmd: click.Command | None = typer.main.get_command(app)
    ctx, name, args = None, "toolkit", list(argv)
    while True:
        assert cmd is not None, f"no command {name!r} in toolkit {' '.join(argv)}"
        ctx = cmd.make_context(name, args, parent=ctx)
        if not hasattr(cmd, "get_command"):
            return cmd
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        if not rest:  # `toolkit pyramid` alone: a group's help
            return cmd
        name, args = rest[0], rest[1:]
        cmd = cmd.get_command(ctx, name)
