"""Every option of every command, fed values nobody listed: the CLI answers with exit 0, or
with exit 1/2 and exactly one `error:` line, never a traceback, and creates or changes nothing.

The commands and their options are read from the CLI itself (as tests/test_options.py walks
them), so a command added later is fuzzed with no new test. Each example runs in a temporary
working directory holding a small world (a store, its archive manifests, and a virtual repo
backfilled from a simulated GFS archive, which every `virtual` command is pointed at so its
options are reached rather than stopped at "no repo"), restored after an example changed it;
values that could reach outside it (absolute paths, `..`, URLs) are not generated, so whatever
a failing command makes or changes is seen there. Every option and argument of every command
is fuzzed with the same number of values, half of them of the kind its own check reads.
"""

from __future__ import annotations

import atexit
import builtins
import functools
import json
import os
import re
import shutil
import string
import tempfile
import typing
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.test_options import _commands, _kinds, _valid
from toolkit import options
from toolkit.cli import app

EXAMPLES = 3  # per option and argument (about 700 runs, 30 s: most end in the option layer)
SKIP = {("demo",)}  # builds a whole world (about a minute); its options are paths and a choice
FIXED = {"--executor": "sync"}  # never start a cluster; --cluster is never given (no network)
UNSET = {"--cluster"}

NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(min_value=-1e6, max_value=1e6).map(str),
    st.integers(-(2**80), 2**80).map(str),
    st.integers(-5, 100).map(str),
    st.sampled_from(["nan", "-nan", "inf", "-inf", "Infinity", "1e400", "-1e400", "1e-400",
                     "-0", "0x10", "1_000", "٣", "1,5", "2**31"]),
)  # fmt: skip
UNITS = st.builds(
    "{}{}{}".format,
    st.sampled_from(["0", "1", "-1", "1.5", ".5", "1e400", "99999999999", "nan", "inf", ""]),
    st.sampled_from(["", " ", "\t"]),
    st.sampled_from(["s", "m", "h", "d", "w", "y", "ms", "B", "KB", "GiB", "EiB", "MB/s",
                     "TB/s", "/s", "parsecs", "%", "μs", "Ki"]),
)  # fmt: skip
TIMES = st.one_of(
    st.sampled_from(["now", "today", "NaT", "2025-08-01T00", "2025-08-01T00+14:00",
                     "2025-08-01T00-12:30", "2025-08-01T06:00Z", "9999-12-31", "0001-01-01",
                     "1677-09-21T00:12:43", "2262-04-12", "2025-13-01", "2025-08-01T25",
                     "2025-08", "20250801T06"]),
    st.datetimes(timezones=st.one_of(st.none(), st.timezones())).map(lambda t: t.isoformat()),
)  # fmt: skip
RANGES = st.builds("{},{}".format, NUMBERS, NUMBERS)


def _inside(text: str) -> bool:
    """A value that cannot name anything outside the working directory or on the network."""
    return not (
        text.startswith(("/", "~", "\\")) or ".." in text or "://" in text or "\x00" in text
    )


TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
).filter(_inside)
PRINTABLE = st.text(string.ascii_letters + string.digits + "=:,._-", min_size=1, max_size=10)
VALUE = st.one_of(NUMBERS, UNITS, TIMES, RANGES, TEXT, PRINTABLE, st.just(""))
# What an option's own check reads, drawn half the time, so its bounds are reached and not
# only its syntax. Hypothesis draws the simplest value first: each kind's far edge leads.
BIG = st.one_of(
    st.sampled_from(["99999999999", "1" + "0" * 30, "0.5", "0"]), st.integers(0, 10**24).map(str)
)
BY_CHECK = {
    options.DURATION: st.builds("{}{}".format, BIG, st.sampled_from("wdhms")),
    options.SIZE: st.builds("{}{}".format, BIG, st.sampled_from(["PiB", "GB", "KiB", "B", ""])),
    options.RATE: st.builds("{}{}/s".format, BIG, st.sampled_from(["PiB", "MB", "B", ""])),
    options.RANGE: st.one_of(st.sampled_from(["0,inf", "nan,1", "1,1", "-1e400,0"]), RANGES),
    options.positions: st.one_of(st.sampled_from([str(2**64), "0", "-1", "nan"]), NUMBERS),
}
OWN_NUMBER = st.one_of(st.sampled_from(["1e400", "nan", "-inf", str(2**64), "-1"]), NUMBERS)
OWN_TIME = st.one_of(
    st.sampled_from(["9999-12-31", "0001-01-01", "2262-04-12", "2025-08-01T00-12:30"]), TIMES
)

COMMANDS = [(p, c) for p, c in _commands() if p not in SKIP]
PLACE = "w"  # where the world is built and every example runs
STORE = "s.zarr"  # the world's store: a pyramid source and an archive scope
WORLD_VALUES = {"source": STORE, "scope": STORE, "scopes": STORE, "data": ".", "state": "hot"}
# Given to every `virtual` command that takes them (unless fuzzed): the world's repo and its
# archive (never the dataset's own bucket: no network), a fire whose window is all published
# (an update that gets through its options never polls for files to come), one decode sample.
VIRTUAL_VALUES = {"dataset": "sim-gfs", "repo": "repo", "source": "src",
                  "fire_time": "2025-08-01T06", "sample": "1"}  # fmt: skip
# A job that ran and whose checks failed (its exit 1 is a verdict, not a refusal) keeps what
# it made, as one that exits 0: a fire its record, a replica it was asked to create.
VERDICT = "validation failure(s)"


@functools.cache
def _world() -> Path:
    """A small world the commands can run through: a 64x64 CF store, its archive manifests
    and a virtual repo. Built in `PLACE` and kept aside in `world/`; each example runs on a
    fresh copy at `PLACE` (it may change it only when it exits 0), since the repo's virtual
    chunk container names its source by absolute path."""
    from datetime import datetime, timedelta

    import numpy as np
    import xarray as xr

    from toolkit import storage
    from toolkit.examples.simulate import make_archive

    top = Path(tempfile.mkdtemp(prefix="fuzz-world-"))
    atexit.register(shutil.rmtree, top, True)
    root = top / PLACE
    lat, lon = np.linspace(89, -89, 64), np.linspace(-179, 179, 64)
    field = np.random.default_rng(0).normal(280, 5, (64, 64)).astype("float32")
    xr.Dataset(
        {"t": (("lat", "lon"), field, {"units": "K"})}, coords={"lat": lat, "lon": lon}
    ).to_zarr(root / STORE, zarr_format=3, consolidated=False)
    inits = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)]  # sim-gfs's
    make_archive(storage.open_store(str(root / "src")), kind="gfs", inits=inits, leads=[0, 3, 6])
    here = Path.cwd()
    os.chdir(root)
    try:
        for argv in (
            ["archive", "partition", "--t-min", "1KiB", "--t-max", "64KiB"],
            ["virtual", "backfill", "sim-gfs", "--repo", "repo", "--source", "src",
             "--start", "2025-08-01T00", "--executor", "sync"],
        ):  # fmt: skip
            done = CliRunner().invoke(app, argv)
            assert done.exit_code == 0, done.output
    finally:
        os.chdir(here)
    shutil.copytree(root, top / "world")
    return top


def _is_flag(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False) or getattr(param, "count", False))


def _safe(param: Any) -> str:
    choices = [a for k in _kinds(param) for a in typing.get_args(k) if isinstance(a, str)]
    if choices:
        return choices[0]
    return WORLD_VALUES.get(param.name) or _valid(param, Path("missing")).lstrip("/")


def _values(param: Any) -> st.SearchStrategy[str]:
    """Any value, or (half the time) one of the kind the parameter's check reads."""
    check = param.type_descriptor.parameter_info.parser
    if isinstance(check, options.Bounded):
        own = OWN_NUMBER
    elif getattr(check, "__qualname__", "").startswith("time."):
        own = OWN_TIME
    else:
        own = BY_CHECK.get(check)
    return VALUE if own is None else st.one_of(own, VALUE)


def _valued(cmd: Any) -> list[Any]:
    """The parameters of `cmd` that take a value the fuzz may choose."""
    return [p for p in cmd.params if p.opts[0] not in UNSET | FIXED.keys() and not _is_flag(p)]


# every option and argument of every command (a command with none: once, for its flags)
TARGETS = [(path, n) for path, cmd in COMMANDS for n in [p.name for p in _valued(cmd)] or [None]]


@st.composite
def command_lines(draw: Any, path: tuple[str, ...], name: str | None) -> list[str]:
    """`path` with its parameter `name` fuzzed and the others valid (the required ones) or
    left out, so a run gets as far as that value takes it."""
    cmd = dict(COMMANDS)[path]
    virtual = VIRTUAL_VALUES if path[0] == "virtual" else {}
    params = [p for p in cmd.params if p.opts[0] not in UNSET]
    target = next((p for p in params if p.name == name), None)
    argv, positional = [*path], []
    for param in params:
        flag = param.opts[0]
        if flag in FIXED:
            argv += [flag, FIXED[flag]]
            continue
        if _is_flag(param):
            argv += [flag] if draw(st.integers(0, 3)) == 0 else []
            continue
        if param is target:
            many = param.multiple or getattr(param, "nargs", 1) == -1
            values = draw(st.lists(_values(param), min_size=1, max_size=2 if many else 1))
        elif param.name in virtual:
            values = [virtual[param.name]]
        elif param.required or (param.name in WORLD_VALUES and draw(st.booleans())):
            values = [_safe(param)]
        else:
            continue
        if flag.startswith("-"):
            for v in values:
                argv += [flag, v]
        else:
            positional += values
    return [*argv, "--", *positional] if positional else argv


def _snapshot(where: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(where)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in where.rglob("*")
    }


@functools.cache
def _pristine() -> dict[str, tuple[int, int]]:
    return _snapshot(_world() / "world")


def _fresh() -> Path:
    """The world at `PLACE` as built: copied afresh only after an example changed it (most
    change nothing, and a copy would be most of their time)."""
    place = _world() / PLACE
    if _snapshot(place) != _pristine():
        shutil.rmtree(place)
        shutil.copytree(_world() / "world", place)
    return place


# An error line in the voice of an exception nobody expected (`error: OverflowError: ...`):
# a value got past every check to where Python itself refused it.
BUILTIN_ERRORS = [
    n for n, t in vars(builtins).items() if isinstance(t, type) and issubclass(t, BaseException)
]
RAW = re.compile(rf"\b({'|'.join(BUILTIN_ERRORS)}): ")


RUNS: list[tuple[list[str], int, str]] = []  # argv, exit code, last line: what the fuzz reached


@pytest.mark.parametrize(
    ("path", "name"), TARGETS, ids=[" ".join((*p, n or "-")) for p, n in TARGETS]
)
def test_any_option_value_ends_in_a_result_or_one_line(path: tuple[str, ...], name: str) -> None:
    """EXAMPLES values for each option: every one is reached, however many a command has.
    Seeded by the option's name, so CI runs the same examples every time."""

    @seed(zlib.crc32(" ".join((*path, name or "")).encode()))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(argv=command_lines(path, name))
    def fuzz(argv: list[str]) -> None:
        _one_run(argv)

    fuzz()


def _one_run(argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_")}
    here = Path.cwd()
    place = _fresh()
    before = _snapshot(place)
    os.chdir(place)
    try:
        res = CliRunner(env={**env, "TOOLKIT_CLUSTER": None}).invoke(app, argv)  # type: ignore[dict-item]
    finally:
        os.chdir(here)
    after = _snapshot(place)
    said = res.stderr.strip().splitlines()
    RUNS.append((argv, res.exit_code, said[-1] if said else ""))
    assert res.exception is None or isinstance(res.exception, SystemExit), (argv, res.exception)
    assert "Traceback" not in res.output + res.stderr, (argv, res.stderr)
    assert res.exit_code in (0, 1, 2), (argv, res.exit_code, res.stderr)
    if res.exit_code:
        errors = [line for line in said if line.startswith("error:")]
        if not (res.exit_code == 1 and "--json" in argv and not errors):  # its failures in JSON
            assert len(errors) == 1 and said[-1] == errors[0], (argv, res.stderr)
            assert not RAW.search(errors[0]), (argv, errors[0])
        else:
            json.loads(res.stdout)
    if res.exit_code and not (said and said[-1].endswith(VERDICT)):
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        assert not changed, (argv, res.exit_code, res.stderr, sorted(changed))
