"""Two `archive partition` processes on one store at once: each exits 0, or the loser exits 1 in
one line; the manifest stays schema-valid and no blob or pin is lost.

Real processes (the CLI, started together), on a local manifests directory: its conditional
writes go through the lock lease, the path object stores replace with if-match.
"""

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
from toolkit.archive.schema import validate_document
from toolkit.cli import app

ROOT = Path(__file__).resolve().parents[2]
SCOPE = "cordex/a.zarr"
POLICY = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]


def _start(data: Path, manifests: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    argv = [sys.executable, "-m", "toolkit.cli", "archive", "partition", "--data", str(data),
            "--manifests", str(manifests), *POLICY, *extra]  # fmt: skip
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )


def _race(
    data: Path,
    manifests: Path,
    *extra: str,
    each: tuple[tuple[str, ...], ...] = ((), ()),
    held: float = 0.0,
) -> list[tuple[int, str]]:
    """Both processes started before either is waited for; (exit code, stderr) of each.

    `held`: seconds the scope's manifest lock is held (a live lease, as a third writer would)
    from the start, so both read the same manifest and then queue at its conditional write:
    the race happens however slowly each process starts (released before their 5 s wait ends).
    """
    lock = manifests / SCOPE / "manifest.json.toolkit-lock"
    if held:
        lock.write_text(json.dumps({"owner": "test:0", "expires": time.time() + 60}))
    procs = [_start(data, manifests, *extra, *more) for more in each]
    if held:
        time.sleep(held)
        lock.unlink()
    out = []
    for p in procs:
        _, err = p.communicate(timeout=300)
        out.append((p.returncode, err))
    return out


def _assert_each_ok_or_one_line_loser(results: list[tuple[int, str]]) -> None:
    assert any(code == 0 for code, _ in results), results
    for code, err in results:
        assert code in (0, 1), results
        assert "Traceback" not in err, err
        if code == 1:
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("error: "), err
            assert SCOPE in lines[0], err


def _manifest(manifests: Path) -> dict:
    doc = json.loads((manifests / SCOPE / "manifest.json").read_text())
    assert validate_document(doc) == [], validate_document(doc)
    return doc


def _prefixes(doc: dict) -> set[str]:
    return {p for b in doc["blobs"] for p in b["prefixes"]} | set(doc["hot"])


@pytest.mark.parametrize("round_", range(2))
def test_two_first_partitions_at_once(tmp_path: Path, round_: int) -> None:
    data, manifests = tmp_path / "data", tmp_path / "manifests"
    arrays = zarrgen.cordex_v3(storage.open_store(str(data)))
    _assert_each_ok_or_one_line_loser(_race(data, manifests))
    doc = _manifest(manifests)
    assert doc["epoch"] == 1
    assert _prefixes(doc) == {f"{SCOPE}/{'sub/ps' if a == 'ps' else a}" for a in arrays}
    assert not list(manifests.rglob("*.toolkit-lock"))


def test_two_repartitions_at_once_keep_every_blob_and_pin(tmp_path: Path) -> None:
    data, manifests = tmp_path / "data", tmp_path / "manifests"
    zarrgen.cordex_v3(storage.open_store(str(data)))
    base = ["archive", "partition", "--data", str(data), "--manifests", str(manifests), *POLICY]
    assert CliRunner().invoke(app, base).exit_code == 0
    pin = ["archive", "pin", "add", SCOPE, f"{SCOPE}/pr", "--who", "ana", "--why", "paper"]
    assert CliRunner().invoke(app, [*pin, "--manifests", str(manifests)]).exit_code == 0
    before = _manifest(manifests)
    # a new array: both processes cut it, each from epoch 2
    zarrgen.v3_array(storage.open_store(str(data)), f"{SCOPE}/uas", (40, 4), (10, 4),
                     dims=("time", "lat"), object_bytes=700)  # fmt: skip
    _assert_each_ok_or_one_line_loser(_race(data, manifests, held=3.5))
    after = _manifest(manifests)
    assert after["epoch"] == before["epoch"] + 1  # the same successor: written once
    assert _prefixes(after) == _prefixes(before) | {f"{SCOPE}/uas"}
    assert all(b in after["blobs"] for b in before["blobs"])  # kept verbatim
    assert after["pins"] == before["pins"]
    assert not list(manifests.rglob("*.toolkit-lock"))


def test_two_forced_recuts_at_once_keep_the_pins(tmp_path: Path) -> None:
    data, manifests = tmp_path / "data", tmp_path / "manifests"
    zarrgen.cordex_v3(storage.open_store(str(data)))
    base = ["archive", "partition", "--data", str(data), "--manifests", str(manifests), *POLICY]
    assert CliRunner().invoke(app, base).exit_code == 0
    pin = ["archive", "pin", "add", SCOPE, f"{SCOPE}/tas", "--who", "bo", "--why", "campaign"]
    assert CliRunner().invoke(app, [*pin, "--manifests", str(manifests)]).exit_code == 0
    before = _manifest(manifests)
    _assert_each_ok_or_one_line_loser(_race(data, manifests, "--force", held=3.5))
    after = _manifest(manifests)
    assert after["epoch"] in (before["epoch"] + 1, before["epoch"] + 2)
    assert after["pins"] == before["pins"]
    assert _prefixes(after) == _prefixes(before)


def test_two_different_changes_at_once_lose_nothing_but_the_losers(tmp_path: Path) -> None:
    """Different successors of one epoch: the loser exits 1 in one line having written nothing
    (or, had they not overlapped, both are applied)."""
    data, manifests = tmp_path / "data", tmp_path / "manifests"
    zarrgen.cordex_v3(storage.open_store(str(data)))
    base = ["archive", "partition", "--data", str(data), "--manifests", str(manifests), *POLICY]
    assert CliRunner().invoke(app, base).exit_code == 0
    pin = ["archive", "pin", "add", SCOPE, f"{SCOPE}/pr", "--who", "ana", "--why", "paper"]
    assert CliRunner().invoke(app, [*pin, "--manifests", str(manifests)]).exit_code == 0
    before = _manifest(manifests)
    names = ("one.bin", "two.bin")
    results = _race(data, manifests, each=tuple(("--hot-always", n) for n in names), held=3.5)
    _assert_each_ok_or_one_line_loser(results)
    after = _manifest(manifests)
    for (code, err), name in zip(results, names, strict=True):
        assert (name in after["hot_always"]) == (code == 0), (name, err)
        if code == 1:
            assert "nothing was written" in err
    assert after["epoch"] == before["epoch"] + sum(code == 0 for code, _ in results)
    assert after["blobs"] == before["blobs"] and after["pins"] == before["pins"]
