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

from toolkit import options
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
    if _kinds(param) & {int, float}
    and param.opts[0].startswith("--")
    and not getattr(param, "count", False)  # --verbose counts its flags: no number is typed
]


def _valid(param: Any, place: Path) -> str:
    """A value the option layer takes for `param` (a number its least, a time a UTC time),
    else a path that does not exist."""
    check = param.type_descriptor.parameter_info.parser
    if isinstance(check, options.Bounded):
        return str(check.lo)
    if getattr(check, "__qualname__", "").startswith("time."):
        return "2025-08-01T00"
    known = {options.DURATION: "30d", options.SIZE: "1GiB", options.RATE: "300MB/s",
             options.RANGE: "0,1", options.positions: "1"}  # fmt: skip
    return known.get(check, str(place / "missing"))


def _required(path: tuple[str, ...], cmd: Any, place: Path) -> list[str]:
    """Values for the command's required parameters, so that only the option under test can
    be wrong: a choice's first value, a number's least, else a path that does not exist."""
    argv: list[str] = []
    for param in cmd.params:
        if not param.required:
            continue
        choices = [a for k in _kinds(param) for a in typing.get_args(k) if isinstance(a, str)]
        value = choices[0] if choices else _valid(param, place)
        argv += [value] if not param.opts[0].startswith("-") else [param.opts[0], value]
    return argv


def _check(param: Any) -> Any:
    return param.type_descriptor.parameter_info.parser


def test_every_numeric_option_goes_through_the_option_layer() -> None:
    """Each is read by a `toolkit.options.Bounded` check (finite, lo..hi), whose range is
    also the declared min/max --help shows."""
    assert len(NUMERIC) > 20  # the walk found the commands
    loose = [
        f"{' '.join(p)} {o.opts[0]}"
        for p, o in NUMERIC
        if not isinstance(_check(o), options.Bounded) or o.min is None or o.max is None
    ]
    assert not loose, f"numeric options not declared through toolkit.options: {loose}"


# The options whose value is text with a meaning (a size, a rate, a duration, a time, a range)
# and the check each goes through, wherever it appears.
TYPED = {
    "--t-max": options.SIZE, "--t-hot": options.SIZE, "--t-min": options.SIZE,
    "--rate": options.RATE, "--older-than": options.DURATION,
    "--expire-older-than": options.DURATION, "--range": options.RANGE,
    "--positions": options.positions,
}  # fmt: skip
TIMES = ("--start", "--end", "--fire-time", "--scheduled-at")


def test_every_size_rate_duration_time_and_range_option_goes_through_the_option_layer() -> None:
    seen, wrong = 0, []
    for path, cmd in _commands():
        for param in cmd.params:
            flag = param.opts[0]
            want = TYPED.get(flag)
            check = _check(param)
            if want is not None or flag in TIMES:
                seen += 1
                ok = check is want if want is not None else getattr(check, "__qualname__", "")
                if ok is False or (want is None and not str(ok).startswith("time.")):
                    wrong.append(f"{' '.join(path)} {flag}")
    assert seen >= 20 and not wrong, (seen, wrong)


VALUES = ("nan", "-nan", "inf", "-inf", "1e400", str(2**64), "", "ten")


@pytest.mark.parametrize(
    ("path", "param"), NUMERIC, ids=[f"{'-'.join(p)}:{o.opts[0]}" for p, o in NUMERIC]
)
def test_non_finite_and_overflowing_numbers_are_refused_by_name(
    path: tuple[str, ...], param: Any
) -> None:
    """NaN passes every `min=` comparison and inf every min-only one: the check refuses them,
    and numbers past what the option's value is handed to, with the accepted range."""
    check = _check(param)
    for text in (*VALUES, str(check.hi + 1)):
        with pytest.raises(options.BadValue, match=r"want .* from .* to "):
            check(text)
    assert check(check.lo) == check.lo and check(str(check.hi)) == check.hi


@pytest.mark.parametrize(
    ("path", "param"), NUMERIC, ids=[f"{'-'.join(p)}:{o.opts[0]}" for p, o in NUMERIC]
)
def test_out_of_range_is_refused_before_anything(
    path: tuple[str, ...], param: Any, tmp_path: Path
) -> None:
    cmd = dict(_commands())[path]
    bad = param.min - 1 if param.min is not None else param.max + 1
    bad = "nan" if isinstance(bad, float) and bad < 0 else bad  # NaN: below every range
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


def test_a_size_with_a_huge_exponent_is_refused_at_once() -> None:
    """`1e1000000` overflows Decimal and `1e999999` would spell a million digits: both are
    refused as out of range, in no time, never a traceback."""
    import time

    from toolkit import options

    for text in ("1e1000000", "1e999999", "1e999999MB"):
        started = time.monotonic()
        with pytest.raises(options.BadValue, match="out of range"):
            options.parse_size(text)
        assert time.monotonic() - started < 0.5
    with pytest.raises(options.BadValue):
        options.parse_rate("1e999999MB/s")
