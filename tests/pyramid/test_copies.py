"""A faithful copy of a built store stays verified (issue 50, item 5).

Level-0 fingerprints are content, not inode: `cp -a` and `shutil.copy2` keep a file's size and
modification time (the fast key); an object written within a second of the build's listing
(racy) is recognised by its bytes. The copy verifies and its next build writes nothing; an
in-place edit of the copy is still caught. Oracles: file bytes and mtimes, xarray's coarsen.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from typer.testing import CliRunner

from toolkit.cli import app

LEVELS = ["--levels", "2", "--executor", "sync"]


def _store(path: Path) -> Path:
    """A 128x192 float field in 32x32 chunks, uncompressed (every chunk object one size)."""
    rng = np.random.default_rng(5)
    t = (280 + rng.standard_normal((128, 192))).astype("float32")
    ds = xr.Dataset(
        {"t": (("y", "x"), t, {"units": "K"})},
        coords={"y": np.linspace(50, 40, 128), "x": np.linspace(0, 12, 192)},
    )
    enc = {"t": {"chunks": (32, 32), "compressors": None}}
    ds.to_zarr(path, zarr_format=3, mode="w", encoding=enc, consolidated=False)
    return path


def _chunks(path: Path) -> list[Path]:
    return sorted(p for p in (path / "t" / "c").rglob("*") if p.is_file())


def _age(path: Path, when: float) -> None:
    """Every level-0 chunk file modified at `when` (the past: settled; the future: racy)."""
    for p in _chunks(path):
        os.utime(p, (when, when))


def _level_chunks(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every chunk object of the levels: its bytes and modification time (ns)."""
    out = {}
    for level in ("2x", "4x"):
        for p in sorted((path / level).rglob("*")):
            if p.is_file() and "/c/" in p.as_posix():
                out[p.relative_to(path).as_posix()] = (p.read_bytes(), p.stat().st_mtime_ns)
    return out


def _cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["pyramid", *args])
    return r.exit_code, r.output


def _build_json(path: Path) -> dict:
    code, out = _cli("build", str(path), *LEVELS, "--json")
    assert code == 0, out
    return json.loads(out[out.index("{") :])


def _written(report: dict) -> int:
    return sum(s["written"] for s in report["stages"])


def _assert_levels_are_window_means(path: Path) -> None:
    base = xr.open_zarr(path, consolidated=False)["t"].astype("float64")
    for f in (2, 4):
        want = base.coarsen(y=f, x=f, boundary="pad").mean()
        got = xr.open_zarr(path, group=f"{f}x", consolidated=False)["t"]
        np.testing.assert_allclose(got.values, want.values, rtol=2e-6)


def _copy_with_copy2(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, copy_function=shutil.copy2)


def _copy_with_cp_a(src: Path, dst: Path) -> None:
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


@pytest.mark.parametrize("copy", [_copy_with_copy2, _copy_with_cp_a], ids=["copy2", "cp-a"])
@pytest.mark.parametrize("age", ["settled", "racy"])
def test_a_faithful_copy_verifies_rebuilds_nothing_and_still_catches_an_edit(tmp_path, copy, age):
    src = _store(tmp_path / "src.zarr")
    # settled: written long ago (the fast key decides); racy: modified within the listing's
    # second (its bytes decide, so the digest is what the copy is recognised by)
    _age(src, time.time() - 86400 if age == "settled" else time.time() + 5)
    assert _written(_build_json(src)) > 0
    dst = tmp_path / "copy.zarr"
    copy(src, dst)

    code, out = _cli("verify", str(dst), "--executor", "sync")
    assert code == 0, out
    before = _level_chunks(dst)
    assert before
    report = _build_json(dst)
    assert _written(report) == 0, report
    assert _level_chunks(dst) == before  # same bytes, same mtimes: nothing rewritten
    assert _cli("verify", str(dst), "--executor", "sync")[0] == 0

    # an edit in place of the copy: one chunk object's values
    zarr.open_array(str(dst / "t"), mode="r+")[40:50, 70:80] = 1000.0  # chunk (1, 2)
    code, out = _cli("verify", str(dst), "--executor", "sync")
    assert code == 1 and "changed in place since the build (1 object(s))" in out, out
    report = _build_json(dst)
    assert any("changed in place (1 object(s))" in n for n in report["notes"]), report
    assert _written(report) > 0
    _assert_levels_are_window_means(dst)
    assert _cli("verify", str(dst), "--executor", "sync")[0] == 0


def test_a_rewrite_in_the_second_of_the_build_keeping_size_and_mtime_is_caught(tmp_path):
    """git's racy case: a chunk rewritten in the same second the build listed it, same size,
    same mtime (restored here to the nanosecond) has the same fast key; its bytes tell."""
    path = _store(tmp_path / "s.zarr")
    _age(path, time.time() + 5)  # the build's listing sees every chunk as just modified
    assert _written(_build_json(path)) > 0
    chunk = path / "t" / "c" / "2" / "3"
    st = chunk.stat()
    zarr.open_array(str(path / "t"), mode="r+")[70:80, 100:110] = 1000.0  # chunk (2, 3)
    os.utime(chunk, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert chunk.stat().st_size == st.st_size and chunk.stat().st_mtime_ns == st.st_mtime_ns

    code, out = _cli("verify", str(path), "--executor", "sync")
    assert code == 1 and "changed in place since the build (1 object(s))" in out, out
    report = _build_json(path)
    assert any("changed in place (1 object(s))" in n for n in report["notes"]), report
    _assert_levels_are_window_means(path)
    assert _cli("verify", str(path), "--executor", "sync")[0] == 0


def test_a_store_recorded_with_inode_etags_upgrades_without_a_rebuild(tmp_path):
    """A build by an earlier toolkit recorded each object's size and local ETag (inode and
    mtime): its store is no edit now, and the next build records the copy-proof keys."""
    from toolkit import storage
    from toolkit.pyramid import records
    from toolkit.pyramid.source import fingerprint

    path = _store(tmp_path / "s.zarr")
    _age(path, time.time() - 86400)
    _build_json(path)
    store = storage.open_store(str(path))
    infos = storage.list_objects(store, "t/c/")
    legacy = {i.key.removeprefix("t/c/").replace("/", "."): fingerprint(i) for i in infos}
    records.put(store, records.PRINTS, json.dumps({"t": legacy}, sort_keys=True).encode())
    assert _cli("verify", str(path), "--executor", "sync")[0] == 0
    before = _level_chunks(path)
    assert _written(_build_json(path)) == 0 and _level_chunks(path) == before
    copy = tmp_path / "copy.zarr"
    _copy_with_cp_a(path, copy)
    assert _cli("verify", str(copy), "--executor", "sync")[0] == 0
