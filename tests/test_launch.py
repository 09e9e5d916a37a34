"""The console script's first step: one re-execution with glibc's trim threshold set, none
when the user set it, and the command's own arguments and exit code through it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit import launch

# prints the variable as this interpreter started with it, then runs the console script
PROBE = (
    "import os, sys; print(os.environ.get('MALLOC_TRIM_THRESHOLD_'), file=sys.stderr); "
    "sys.argv = ['toolkit', *sys.argv[1:]]; from toolkit.launch import main; main()"
)

pytestmark = pytest.mark.skipif(not launch._glibc(), reason="the setting is glibc's")


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != launch.TRIM}
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=120,
    )


def _starts(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line in ("None", launch.TRIM_BYTES, "0")]


def test_re_executes_once_with_the_threshold_and_keeps_the_arguments() -> None:
    done = _run("--version")
    assert done.returncode == 0, done.stderr
    assert _starts(done) == ["None", launch.TRIM_BYTES]  # started twice, the second time set
    assert "toolkit" in done.stdout


def test_a_value_the_user_set_is_kept_and_nothing_re_executes() -> None:
    done = _run("--version", MALLOC_TRIM_THRESHOLD_="0")
    assert done.returncode == 0, done.stderr
    assert _starts(done) == ["0"]


def test_the_exit_code_and_error_come_through_the_re_execution(tmp_path: Path) -> None:
    missing = tmp_path / "no such store"
    done = _run("pyramid", "verify", str(missing))
    assert done.returncode == 2, done.stderr
    assert _starts(done) == ["None", launch.TRIM_BYTES]
    assert str(missing) in done.stderr
