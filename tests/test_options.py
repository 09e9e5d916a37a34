"""Every numeric option of every command declares its range, and a value outside it is refused
when the command line is read: exit 2, one line naming the option, nothing created.

The walk reads the commands from the CLI itself, so an option added later is covered (or fails
the first test until it says what range it takes)."""

from __future__ import annotations

import os
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from toolkit.cli import app


def _commands() -> Iterator[tuple[tuple[str, ...], Any]]:
    def walk(cmd: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        if hasattr(cmd, "commands"):  # a group: its commands, those loaded by name too (demo)
            for name in sorted(cmd.list_commands(None)):
                yield from walk(cmd.get_command(None, name), (*path, name))
        else:
            yield path, cmd

    yield from walk(get_command(app), ())


def _kinds(param: Any) -> set[Any]:
    annotation = param.type_descriptor.annotation
    return set(typing.get_args(annotation)) | {annotation}


NUMERIC = [
    (path, param)
    for path, cmd in _commands()
    for param in cmd.params
    if _kinds(param) & {int, float} and param.opts[0].startswith("--")
]


def _required(path: tuple[str, ...], cmd: Any, place: Path) -> list[str]:
    """Values for the command's required parameters, so that only the option under test can
    be wrong: a choice's first value, a number's least, else a path that does not exist."""
    argv: list[str] = []
    for param in cmd.params:
        if not param.required:
            continue
        choices = [a for k in _kinds(param) for a in typing.get_args(k) if isinstance(a, str)]
        least = getattr(param, "min", None)  # a required number: its least valid value
        value = choices[0] if choices else str(place / "missing") if least is None else str(least)
        argv += [value] if not param.opts[0].startswith("-") else [param.opts[0], value]
    return argv


def test_every_numeric_option_declares_its_range() -> None:
    assert len(NUMERIC) > 20  # the walk found the commands
    loose = [f"{' '.join(p)} {o.opts[0]}" for p, o in NUMERIC if o.min is None and o.max is None]
    assert not loose, f"numeric options without a declared range: {loose}"


@pytest.mark.parametrize(
    ("path", "param"), NUMERIC, ids=[f"{'-'.join(p)}:{o.opts[0]}" for p, o in NUMERIC]
)
def test_out_of_range_is_refused_before_anything(
    path: tuple[str, ...], param: Any, tmp_path: Path
) -> None:
    cmd = dict(_commands())[path]
    bad = param.min - 1 if param.min is not None else param.max + 1
    argv = [*path, *_required(path, cmd, tmp_path), param.opts[0], str(bad)]
    here = Path.cwd()
    os.chdir(tmp_path)
    try:
        res = CliRunner().invoke(app, argv)
    finally:
        os.chdir(here)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2, (argv, res.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert param.opts[0] in lines[0] and "Traceback" not in res.output
    assert list(tmp_path.iterdir()) == [], f"{argv} created {list(tmp_path.iterdir())}"


STORAGE_FLAGS = (
    "--endpoint",
    "--retry-seconds",
    "--region",
    "--anonymous",
    "--allow-http",
    "--path-style",
)


def test_the_storage_flags_are_declared_once() -> None:
    """The jobs' commands that open a store take the storage flags from toolkit.console's one
    declaration (one help text each), gathered into one StorageOptions value."""
    from toolkit import console

    declared = {
        name: typing.get_args(annotation)[1].help
        for name, (annotation, _) in console._FLAGS.items()
    }
    seen = 0
    for path, cmd in _commands():
        if path[0] == "grib":  # `grib scan` has flags of its own (an endpoint implies http)
            continue
        flags = {p.name: p for p in cmd.params if p.opts[0] in STORAGE_FLAGS}
        seen += "endpoint" in flags
        for name, param in flags.items():
            if path[0] == "virtual" and name == "anonymous":  # the --source's, not the repos'
                continue
            assert param.help == declared[name], (path, name)
    assert seen == 26  # status, expire and split advise/apply joined the 18; archive plan-read;
    # pyramid stac and virtual stac; serve
