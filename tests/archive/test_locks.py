"""Local manifest locks are leases: an owner and an expiry. A lock left by a killed writer is
taken over once its lease has run out (or at once with --break-lock), with a line saying so; a
live one is named, with its owner and the way out, and nothing is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.archive import zarrgen
from toolkit import storage
from toolkit.cli import app

SCOPE = "cordex/a.zarr"
POLICY = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]


@pytest.fixture
def partitioned(tmp_path: Path) -> Path:
    data, manifests = tmp_path / "data", tmp_path / "manifests"
    zarrgen.cordex_v3(storage.open_store(str(data)))
    res = CliRunner().invoke(
        app, ["archive", "partition", "--data", str(data), "--manifests", str(manifests), *POLICY]
    )
    assert res.exit_code == 0, res.output
    return manifests


def _manifest(manifests: Path) -> Path:
    return manifests / SCOPE / "manifest.json"


def _lock(manifests: Path) -> Path:
    return manifests / SCOPE / "manifest.json.toolkit-lock"


def _pin(manifests: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "toolkit"
    return subprocess.run(
        [str(exe), "archive", "pin", "add", SCOPE, f"{SCOPE}/tas", "--who", "me", "--why", "test",
         "--manifests", str(manifests), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


def _epoch(manifests: Path) -> int:
    return json.loads(_manifest(manifests).read_text())["epoch"]


def test_an_expired_lease_is_taken_over_saying_so(partitioned: Path) -> None:
    _lock(partitioned).write_text(
        json.dumps({"owner": "gone-host:4242", "expires": time.time() - 60})
    )
    proc = _pin(partitioned)
    assert proc.returncode == 0, proc.stderr
    assert "gone-host:4242" in proc.stderr and "expired" in proc.stderr
    assert "taken over" in proc.stderr
    assert _epoch(partitioned) == 2 and not _lock(partitioned).exists()


def test_a_bare_pid_lock_of_a_killed_writer_expires_by_its_age(partitioned: Path) -> None:
    """Locks written before leases held only a pid: their mtime gives the lease."""
    lock = _lock(partitioned)
    lock.write_text("12345")
    old = time.time() - 120
    os.utime(lock, (old, old))
    proc = _pin(partitioned)
    assert proc.returncode == 0, proc.stderr
    assert "pid 12345" in proc.stderr and "taken over" in proc.stderr
    assert _epoch(partitioned) == 2


def test_a_live_lease_is_named_and_nothing_is_written(partitioned: Path) -> None:
    before = _manifest(partitioned).read_bytes()
    _lock(partitioned).write_text(
        json.dumps({"owner": "busy-host:7", "expires": time.time() + 600})
    )
    proc = _pin(partitioned)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "busy-host:7" in lines[0] and "--break-lock" in lines[0] and SCOPE in lines[0]
    assert "changed since" not in lines[0]  # it did not change: somebody holds it
    assert _manifest(partitioned).read_bytes() == before
    assert _lock(partitioned).exists()  # not ours to remove


def test_break_lock_takes_a_live_lease_over_saying_so(partitioned: Path) -> None:
    _lock(partitioned).write_text(
        json.dumps({"owner": "busy-host:7", "expires": time.time() + 600})
    )
    proc = _pin(partitioned, "--break-lock")
    assert proc.returncode == 0, proc.stderr
    assert "busy-host:7" in proc.stderr and "--break-lock" in proc.stderr
    assert _epoch(partitioned) == 2 and not _lock(partitioned).exists()
