"""One voice for storage errors (issue 49): what the operating system, obstore or Icechunk
refused is said by `storage.explain` as one line naming the path as typed (decoded, never a
placeholder), the cause in words and the fix; their context frames only with --debug.

Real folders and real refusals: a read-only folder (chmod; as root, the process that runs the
command first drops the capability that lets root write anyway), a file where a folder is
needed, a symlink loop, the file-size limit (RLIMIT_FSIZE) of the command's process, and an
Icechunk repo built by the toolkit with one of its objects deleted.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import obstore
import pytest
from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def _without_root_override() -> None:
    """In the child, before exec: drop the capabilities that let root ignore a folder's mode,
    so chmod denies as it does everyone else (the exec'd process keeps only its bounding set)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _run(
    argv: list[str], cwd: Path, before: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    """`toolkit ARGV` in its own process (so that a limit or a dropped capability is its own)."""
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "-q", *argv],
        cwd=cwd,
        preexec_fn=before,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "250"},
    )


def _one_line(res: subprocess.CompletedProcess[str] | object) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in res.stderr and "context:" not in res.stderr  # type: ignore[attr-defined]
    return lines[0]


def _in_order(line: str, *fragments: str) -> None:
    at = 0
    for fragment in fragments:
        found = line.find(fragment, at)
        assert found >= 0, f"{fragment!r} not in (after col {at}): {line}"
        at = found


@pytest.fixture
def denying(tmp_path: Path) -> Callable[[], None] | None:
    """What a command's process runs first so that a chmod-ed folder refuses it: nothing for
    a user; for root, dropping its override (skipped where that is not allowed)."""
    if os.geteuid() != 0:
        return None
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o555)
    try:
        res = subprocess.run(
            [sys.executable, "-c", f"open({str(probe / 'x')!r}, 'w')"],
            preexec_fn=_without_root_override,
            capture_output=True,
        )
    except subprocess.SubprocessError as err:
        pytest.skip(f"running as root, which chmod does not deny, and cannot drop it: {err}")
    finally:
        probe.chmod(0o755)
    if res.returncode == 0:
        pytest.skip("running as root, which chmod does not deny, and dropping it did not help")
    return _without_root_override


def _source(path: Path) -> None:
    """A simulated GFS archive (two cycles, two leads), published."""
    from toolkit.examples.simulate import make_archive

    inits = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(2)]
    make_archive(storage.open_store(str(path)), kind="gfs", leads=[0, 3], inits=inits)


def _store(path: Path) -> Path:
    synthetic.write_store(storage.open_store(str(path)), shape=(40, 60), shards=(16, 16))
    return path


# ------------------------------------------------------------------------ read-only folders


def test_a_read_only_output_folder_is_named_with_the_fix(tmp_path: Path, denying) -> None:
    _store(tmp_path / "in.zarr")
    ro = tmp_path / "ro dir ü"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        res = _run(["pyramid", "build", "in.zarr", "--output", "ro dir ü/out", "--executor",
                    "sync"], tmp_path, denying)  # fmt: skip
    finally:
        ro.chmod(0o755)
    assert res.returncode == 2, res.stderr
    line = _one_line(res)
    _in_order(line, "read-only", str(ro), "out", "make it writable")
    assert "check credentials" not in line and "%20" not in line
    assert list(ro.iterdir()) == []


def test_a_read_only_repo_folder_is_named_with_the_fix(tmp_path: Path, denying) -> None:
    _source(tmp_path / "src")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        res = _run(["virtual", "backfill", "sim-gfs", "--repo", "ro/repo", "--source", "src",
                    "--start", "2025-08-01T00", "--executor", "sync"], tmp_path, denying)  # fmt: skip
    finally:
        ro.chmod(0o755)
    assert res.returncode == 2, res.stderr
    _in_order(_one_line(res), "read-only", str(ro), "repo", "make it writable")


def test_a_read_only_store_is_not_told_to_check_credentials(tmp_path: Path, denying) -> None:
    store = _store(tmp_path / "s.zarr")
    modes = {p: p.stat().st_mode for p in [store, *store.rglob("*")]}
    for p in modes:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        res = _run(["pyramid", "build", "s.zarr", "--executor", "sync"], tmp_path, denying)
    finally:
        for p, mode in modes.items():
            p.chmod(mode)
    assert res.returncode == 2, res.stderr
    line = _one_line(res)
    _in_order(line, "read-only", str(store), "make it writable")
    assert "check credentials" not in line


def test_an_unreadable_folder_is_named(tmp_path: Path, denying) -> None:
    store = _store(tmp_path / "s.zarr")
    (store / "field").chmod(0)
    try:
        res = _run(["pyramid", "plan", "s.zarr"], tmp_path, denying)
    finally:
        (store / "field").chmod(0o755)
    assert res.returncode == 2, res.stderr
    line = _one_line(res)
    _in_order(line, "permission denied", str(store / "field"), "make it readable")
    assert "memory://unknown" not in line


# ------------------------------------------------------------------------ other refusals


def test_the_file_size_limit_is_named(tmp_path: Path) -> None:
    _store(tmp_path / "s.zarr")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    res = _run(["pyramid", "build", "s.zarr", "--executor", "sync"], tmp_path, small_files)
    assert res.returncode == 1, res.stderr
    line = _one_line(res)
    _in_order(line, "file too large", str(tmp_path / "s.zarr"), "ulimit -f")
    assert "memory://unknown" not in line


def test_a_file_where_a_folder_is_needed_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    store = storage.open_store(str(tmp_path / "notes.txt" / "sub"))
    with pytest.raises(storage.NotADirectory) as caught:
        storage.put(store, "a/b", b"x")
    _in_order(str(caught.value), "not a directory", str(tmp_path / "notes.txt"), "pass a folder")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_symlink_loop_inside_a_store_is_named_not_a_placeholder(tmp_path: Path) -> None:
    root = tmp_path / "dir ü"
    root.mkdir()
    (root / "a").symlink_to("a")
    with pytest.raises(Exception) as raw:  # obstore's own error, as zarr's adapter lets it out
        obstore.list(obstore.store.LocalStore(root)).collect()
    named = storage.explain(raw.value)
    assert isinstance(named, storage.SymlinkLoop), raw.value
    _in_order(str(named), "symlink loop", str(root / "a"), "repair or remove the link")
    with pytest.raises(storage.SymlinkLoop):
        storage.open_store(str(root / "a"))


def test_a_store_named_in_latin1_is_refused_by_name(tmp_path: Path) -> None:
    latin1 = os.fsdecode(bytes(tmp_path) + b"/caf\xe9")  # a name whose bytes are not UTF-8
    for spelled in (latin1, "file://" + str(tmp_path) + "/caf%E9"):
        with pytest.raises(storage.NotUtf8) as caught:
            storage.open_store(spelled)
        assert "caf\\xe9" in str(caf := caught.value) and "rename it" in str(caf)
    assert storage.file_path("file:///caf%E9") == Path(os.fsdecode(b"/caf\xe9"))  # not U+FFFD
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------ Icechunk


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual repo backfilled by the toolkit (its source beside it)."""
    root = tmp_path_factory.mktemp("ice")
    _source(root / "src")
    res = CliRunner().invoke(app, ["virtual", "backfill", "sim-gfs", "--repo", str(root / "repo"),
                                   "--source", str(root / "src"), "--start", "2025-08-01T00",
                                   "--executor", "sync"])  # fmt: skip
    assert res.exit_code == 0, res.output
    return root


def _head(repo: Path) -> str:
    from toolkit import icechunk as R

    return R.snapshot_of(R.open_repo(storage.open_store(str(repo)), fresh=True), "main")


def test_a_deleted_snapshot_is_named_with_the_fix(repo: Path, tmp_path: Path) -> None:
    copy = tmp_path / "my repo"
    shutil.copytree(repo / "repo", copy)
    head = _head(copy)
    (copy / "snapshots" / head).unlink()
    for argv in (["virtual", "inspect", str(copy)],
                 ["pyramid", "plan", str(copy), "-v", "temperature_2m"]):  # fmt: skip
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 1, res.output
        _in_order(_one_line(res), "missing", f"{copy}/snapshots/{head}", "restore it from a copy")
    debug = CliRunner().invoke(app, ["--debug", "virtual", "inspect", str(copy)])
    assert "Traceback" in debug.stderr and "context:" in debug.stderr  # the frames, asked for


def test_a_deleted_manifest_is_named_with_the_fix(repo: Path, tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(repo / "repo", copy)
    for manifest in (copy / "manifests").iterdir():
        manifest.unlink()
    res = CliRunner().invoke(app, ["virtual", "validate", "sim-gfs", "--repo", str(copy),
                                   "--source", str(repo / "src"), "--start", "2025-08-01T00"])  # fmt: skip
    assert res.exit_code == 1, res.output
    _in_order(_one_line(res), "missing", f"{copy}/manifests/", "restore it from a copy")


def test_an_icechunk_error_that_escapes_is_said_by_explain(repo: Path, tmp_path: Path) -> None:
    """An Icechunk error raised anywhere (a job reading a session's store) reaches the console
    through `storage.explain`, the one renderer: the repo it came from, not Rust's frames."""
    import zarr

    from toolkit import icechunk as R

    copy = tmp_path / "dir é"
    shutil.copytree(repo / "repo", copy)
    session = R.readonly(R.open_repo(storage.open_store(str(copy)), fresh=True))
    (copy / "snapshots" / session.snapshot_id).unlink()
    R.open_repo(storage.open_store(str(repo / "repo")))  # a second repo this process knows
    fresh = R.readonly(R.open_repo(storage.open_store(str(copy)), fresh=True))
    with pytest.raises(Exception) as raw:
        zarr.open_group(fresh.store, mode="r")
    named = storage.explain(raw.value)
    assert isinstance(named, storage.MissingObject), raw.value
    _in_order(str(named), "missing", f"{copy}/snapshots/", "restore it from a copy")
    assert "context:" not in str(named)


# ------------------------------------------------------------------------ the renderer


def test_readable_decodes_file_urls_and_drops_context_frames() -> None:
    said = storage.readable(
        "bad: file:///tmp/dir%20%C3%BC%20%C3%A9/my%20store.zarr/k: oops\n\ncontext:\n"
        '   0: icechunk::store::get\n           with key="zarr.json"\n'
        "             at icechunk/src/store.rs:183 (--debug shows the traceback)"
    )
    assert said == "bad: /tmp/dir ü é/my store.zarr/k: oops (--debug shows the traceback)"
    assert storage.location("file:///a%20b%25c", "k%20") == "/a b%c/k%20"  # keys are literal


def test_readable_drops_each_context_block_and_keeps_what_stands_between() -> None:
    two = (
        "first failed: x\n context:\n   0: a::b\n      at src/a.rs:10\n   1: c\n      at src/c.rs:3"
        "\nsecond failed: /data/keep me\n context:\n   at src/b.rs:20\nlast words"
    )
    assert storage.readable(two) == "first failed: x\nsecond failed: /data/keep me\nlast words"


def test_an_os_error_about_a_relative_path_is_named_not_a_crash(tmp_path, monkeypatch) -> None:
    """The system reports the path as the call gave it: relative ones have no file URI."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    for code, name, cause in ((13, "out/x.json", "permission denied"),
                              (20, "afile/x.json", "not a directory")):  # fmt: skip
        named = storage.explain(OSError(code, "refused", name))
        assert named is not None and cause in str(named), named
        assert str(tmp_path) in str(named)
