"""Every option of every command, fed values nobody listed: the CLI answers with exit 0, or
with exit 1/2 and exactly one `error:` line, never a traceback, and creates or changes nothing.

The commands and their options are read from the CLI itself (as tests/test_options.py walks
them), so a command added later is fuzzed with no new test. Each example runs in an empty
temporary working directory holding a small world (a store and its archive manifests);
values that could reach outside it (absolute paths, `..`, URLs) are not generated, so whatever
a failing command makes or changes is seen there. Derandomized and without a
database, so CI runs the same examples every time.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import string
import tempfile
import typing
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.test_options import _commands, _kinds, _valid
from toolkit.cli import app

EXAMPLES = 600  # about 20 s: most values are answered by the option layer
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

COMMANDS = [(p, c) for p, c in _commands() if p not in SKIP]
STORE = "s.zarr"  # the world's store: a pyramid source and an archive scope
WORLD_VALUES = {"source": STORE, "scope": STORE, "scopes": STORE, "data": ".", "state": "hot"}


@functools.cache
def _world() -> Path:
    """A small world the commands can run through: a 64x64 CF store and its archive
    manifests (copied for each example, which may change it only when it exits 0)."""
    import numpy as np
    import xarray as xr

    root = Path(tempfile.mkdtemp(prefix="fuzz-world-"))
    atexit.register(shutil.rmtree, root, True)
    lat, lon = np.linspace(89, -89, 64), np.linspace(-179, 179, 64)
    field = np.random.default_rng(0).normal(280, 5, (64, 64)).astype("float32")
    xr.Dataset(
        {"t": (("lat", "lon"), field, {"units": "K"})}, coords={"lat": lat, "lon": lon}
    ).to_zarr(root / STORE, zarr_format=3, consolidated=False)
    here = Path.cwd()
    os.chdir(root)
    try:
        done = CliRunner().invoke(
            app, ["archive", "partition", "--t-min", "1KiB", "--t-max", "64KiB"]
        )
    finally:
        os.chdir(here)
    assert done.exit_code == 0, done.output
    return root


def _is_flag(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False) or getattr(param, "count", False))


def _safe(param: Any) -> str:
    choices = [a for k in _kinds(param) for a in typing.get_args(k) if isinstance(a, str)]
    if choices:
        return choices[0]
    return WORLD_VALUES.get(param.name) or _valid(param, Path("missing")).lstrip("/")


@st.composite
def command_lines(draw: Any) -> list[str]:
    """A command with one of its options or arguments fuzzed and the others valid (the
    required ones) or left out, so a run gets as far as that value takes it."""
    path, cmd = draw(st.sampled_from(COMMANDS))
    params = [p for p in cmd.params if p.opts[0] not in UNSET]
    valued = [p for p in params if not _is_flag(p) and p.opts[0] not in FIXED]
    target = draw(st.sampled_from(valued)) if valued else None
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
            values = draw(st.lists(VALUE, min_size=1, max_size=2 if many else 1))
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


RUNS: list[tuple[list[str], int]] = []


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(argv=command_lines())
def test_any_option_value_ends_in_a_result_or_one_line(argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_")}
    here = Path.cwd()
    with tempfile.TemporaryDirectory() as tmp:
        place = Path(tmp) / "w"
        shutil.copytree(_world(), place)
        before = _snapshot(place)
        os.chdir(place)
        try:
            res = CliRunner(env={**env, "TOOLKIT_CLUSTER": None}).invoke(app, argv)  # type: ignore[dict-item]
        finally:
            os.chdir(here)
        after = _snapshot(place)
    RUNS.append((argv, res.exit_code))
    said = res.stderr.strip().splitlines()
    assert res.exception is None or isinstance(res.exception, SystemExit), (argv, res.exception)
    assert "Traceback" not in res.output + res.stderr, (argv, res.stderr)
    assert res.exit_code in (0, 1, 2), (argv, res.exit_code, res.stderr)
    if res.exit_code:
        errors = [line for line in said if line.startswith("error:")]
        if not (res.exit_code == 1 and "--json" in argv and not errors):  # its failures in JSON
            assert len(errors) == 1 and said[-1] == errors[0], (argv, res.stderr)
        else:
            json.loads(res.stdout)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        assert not changed, (argv, res.exit_code, res.stderr, sorted(changed))
