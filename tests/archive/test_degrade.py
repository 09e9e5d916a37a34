"""One unreadable manifest costs only its own scope: its keys fail, named, exit 1; every other
key resolves and every other scope reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.archive import zarrgen
from toolkit import storage
from toolkit.cli import app

POLICY = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]
GOOD, BAD = "cordex/a.zarr", "cordex/b.zarr"


@pytest.fixture
def two_scopes(tmp_path: Path) -> tuple[Path, Path]:
    data, manifests = tmp_path / "data", tmp_path / "manifests"
    store = storage.open_store(str(data))
    zarrgen.cordex_v3(store, GOOD)
    zarrgen.cordex_v3(store, BAD)
    res = CliRunner().invoke(
        app, ["archive", "partition", "--data", str(data), "--manifests", str(manifests), *POLICY]
    )
    assert res.exit_code == 0, res.output
    (manifests / BAD / "manifest.json").write_text('{"epoch": 3, "truncated')
    return data, manifests


def _toolkit(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "toolkit"
    return subprocess.run([str(exe), "archive", *args], capture_output=True, text=True, timeout=120)


def test_resolution_degrades_per_scope(two_scopes: tuple[Path, Path]) -> None:
    _, manifests = two_scopes
    keys = [f"{GOOD}/tas/c/0/0/0", f"{BAD}/tas/c/0/0/0", f"{GOOD}/zarr.json", "elsewhere/k"]
    proc = _toolkit("resolve", *keys, "--manifests", str(manifests), "--json")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert BAD in line and "partition the scope again" in line
    rows = {r["key"]: r for r in json.loads(proc.stdout)}
    assert rows[keys[0]]["kind"] == "blob" and rows[keys[0]]["scope"] == GOOD
    assert rows[keys[1]]["kind"] == "error" and rows[keys[1]]["scope"] == BAD
    assert rows[keys[2]]["kind"] == "hot"
    assert rows[keys[3]]["kind"] == "unmanaged"


def test_good_keys_alone_exit_0_beside_a_broken_scope(two_scopes: tuple[Path, Path]) -> None:
    _, manifests = two_scopes
    proc = _toolkit("resolve", f"{GOOD}/tas/c/0/0/0", "--manifests", str(manifests))
    assert proc.returncode == 0, proc.stderr
    assert GOOD in proc.stdout and BAD in proc.stderr  # still named: it is broken


def test_report_degrades_per_scope(two_scopes: tuple[Path, Path]) -> None:
    data, manifests = two_scopes
    proc = _toolkit("report", "--data", str(data), "--manifests", str(manifests), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    scopes = {b["scope"] for b in json.loads(proc.stdout)["blobs"]}
    assert GOOD in scopes and BAD not in scopes
    assert BAD in proc.stderr
    only_good = _toolkit("report", GOOD, "--data", str(data), "--manifests", str(manifests))
    assert only_good.returncode == 0, only_good.stderr


def test_partition_warns_per_blob_whose_objects_exceed_t_max(tmp_path: Path) -> None:
    """Objects larger than t_max cannot be split: each blob that stays over says so, once."""
    data = tmp_path / "data"
    zarrgen.cordex_v3(storage.open_store(str(data)))
    base = ["partition", "--data", str(data), "--t-hot", "10"]
    fits = _toolkit(
        *base, "--manifests", str(tmp_path / "m1"), "--t-max", "5000", "--t-min", "1000"
    )
    assert fits.returncode == 0 and "warning" not in fits.stderr, fits.stderr
    over = _toolkit(*base, "--manifests", str(tmp_path / "m2"), "--t-max", "300", "--t-min", "100")
    assert over.returncode == 0, over.stderr
    warned = [line for line in over.stderr.splitlines() if line.startswith("warning:")]
    manifest = json.loads((tmp_path / "m2" / GOOD / "manifest.json").read_text())
    big = {b["id"] for b in manifest["blobs"] if b["objects"] and b["bytes"] // b["objects"] > 300}
    assert big and {w.split(" blob ")[1].split(":")[0] for w in warned} == big
    assert all("t_max 300 B" in w and "--t-max" in w for w in warned)
