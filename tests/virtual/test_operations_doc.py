"""docs/operations.md's command lines are the interface: every one parses as written (its
command exists, its flags exist, its values pass their types and ranges)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
import typer
import yaml

from toolkit.cli import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _commands() -> list[list[str]]:
    text = DOC.read_text()
    found = []
    for block in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
        lang, body = block
        if lang == "yaml":
            spec = yaml.safe_load(body)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
            found += [c["args"] for c in spec["containers"]]
            continue
        for line in body.splitlines():
            if "toolkit " not in line:
                continue
            words = shlex.split(line[line.index("toolkit ") :])
            cut = next((i for i, w in enumerate(words) if w in {">", ">>", "2>>", "||"}), None)
            found.append(words[1:cut])
    return found


def test_the_page_has_its_command_lines() -> None:
    kinds = {tuple(c[:2]) for c in _commands()}
    assert {("virtual", "update"), ("virtual", "expire"), ("virtual", "status")} <= kinds


@pytest.mark.parametrize("argv", _commands(), ids=lambda a: " ".join(a[:3]))
def test_each_command_line_parses(argv: list[str]) -> None:
    cmd: click.Command | None = typer.main.get_command(app)
    ctx, name, args = None, "toolkit", list(argv)
    while True:
        assert cmd is not None, f"no command {name!r} in {' '.join(argv)}"
        ctx = cmd.make_context(name, args, parent=ctx)  # raises on an unknown flag or bad value
        if not hasattr(cmd, "get_command"):
            break
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        name, args = rest[0], rest[1:]
        cmd = cmd.get_command(ctx, name)
    assert cmd.name in argv  # a command, reached by its own name
