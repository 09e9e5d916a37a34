"""Records the toolkit keeps for itself can be corrupt: the update lease, the fire record, a
backfill's guard, a pyramid's plan/backup/fingerprints, archive manifests and tier state.

Each one empty, cut short, of another shape or binary junk is one line naming the object and
the command that repairs or replaces it, with nothing changed; a corrupt lease never blocks
fires for good, yet a live holder's lease is never taken; a temp branch deleted under a running
backfill is one line, and the rerun converges.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import xarray as xr
from typer.testing import CliRunner

from tests.archive import zarrgen
from toolkit import icechunk as R
from toolkit import storage
from toolkit import transaction as T
from toolkit.archive.tierstore import TierStore
from toolkit.cli import app
from toolkit.examples import synthetic
from toolkit.examples.simulate import make_archive
from toolkit.virtual.lease import Lease, LeaseHeld

SYNC = ("--executor", "sync")
INITS = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)]
BF = ("virtual", "backfill", "sim-gfs", "--repo", "repo", "--source", "src",
      "--start", "2025-08-01T00", *SYNC)  # fmt: skip
LEASE = "repo/toolkit-update.lease"
FIRE = "repo/toolkit-update.last-fire.json"
UPDATE = ("virtual", "update", "sim-gfs", "--repo", "repo", "--source", "src",
          "--fire-time", "2025-08-01T18:00", "--scheduled-at", "now", "--no-validate")  # fmt: skip


def _invoke(w: Path, *argv: str) -> tuple[int, list[str], str]:
    """Run the CLI in `w`: exit code, stderr's non-blank lines, stdout."""
    cwd = os.getcwd()
    os.chdir(w)
    try:
        res = CliRunner().invoke(app, list(argv))
    finally:
        os.chdir(cwd)
    return res.exit_code, [x for x in res.stderr.splitlines() if x.strip()], res.stdout


def _ok(w: Path, *argv: str) -> str:
    code, lines, out = _invoke(w, *argv)
    assert code == 0, lines
    return out


def _build_world(w: Path) -> None:
    archive = make_archive(storage.open_store(str(w / "src")), kind="gfs", leads=[0, 3, 6],
                           publish=False, inits=INITS)  # fmt: skip
    archive.publish(archive.files())
    _ok(w, *BF)
    _ok(w, *UPDATE)  # the fire record
    synthetic.write_store(storage.open_store(str(w / "good.zarr")), shape=(40, 60), shards=(16, 16))
    zarrgen.cordex_v3(storage.open_store(str(w / "data")))
    _ok(w, "archive", "partition", "--data", "data", "--manifests", "m", "--t-max", "5000",
        "--t-hot", "100", "--t-min", "3000")  # fmt: skip
    tiers = TierStore(storage.open_store(str(w / "m")))
    blob = json.loads((w / "m/cordex/a.zarr/manifest.json").read_text())["blobs"][0]["id"]
    tiers.update("cordex/a.zarr", lambda s: s.mark(blob, "writing", "2026-12-04"))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    w = tmp_path_factory.mktemp("records")
    _build_world(w)
    return w


@pytest.fixture
def w(world: Path, tmp_path: Path) -> Path:
    shutil.copytree(world, tmp_path / "w", symlinks=True)
    return tmp_path / "w"


def _pyramid(w: Path) -> None:
    """good.zarr's pyramid, built in this copy (a copy's level 0 is not the one recorded)."""
    _ok(w, "pyramid", "build", "good.zarr", *SYNC)


def _a_lease(w: Path) -> None:
    """A lease as an update fire writes it (a released fire deletes its own)."""
    body = {"holder": "f" * 32, "host": "elsewhere", "pid": 1, "started": time.time(),
            "fire_time": 1.0, "heartbeat": time.time(), "interval": 5.0, "expires": 0.0}  # fmt: skip
    (w / LEASE).write_text(json.dumps(body))


@dataclass(frozen=True)
class Record:
    name: str
    path: str  # as the user knows it, relative to the world
    argv: tuple[str, ...]
    code: int
    says: tuple[str, ...]  # after the object's path, in order: the cause, the fix
    setup: Callable[[Path], None] | None = None


VERIFY = ("pyramid", "verify", "good.zarr")
RECORDS = (
    Record(
        "update lease",
        LEASE,
        UPDATE,
        1,
        ("not a lease", "rerun in", "this update takes it over"),
        _a_lease,
    ),
    Record(
        "update lease (expire)",
        LEASE,
        ("virtual", "expire", "repo", "--older-than", "30d"),
        1,
        ("not a lease", "rerun in", "takes it over"),
        _a_lease,
    ),
    Record(
        "fire record",
        FIRE,
        ("virtual", "status", "repo"),
        1,
        ("not a fire record", "the next `toolkit virtual update` fire rewrites it"),
    ),
    Record(
        "pyramid plan",
        "good.zarr/.pyramid/plan/c/0",
        VERIFY,
        1,
        ("not a pyramid plan record", "toolkit pyramid build", "--rebuild-from 2x"),
        _pyramid,
    ),
    Record(
        "pyramid backup",
        "good.zarr/.pyramid/backup/c/0",
        VERIFY,
        1,
        ("not a pyramid backup record", "toolkit pyramid build", "--rebuild-from 2x"),
        _pyramid,
    ),
    Record(
        "pyramid fingerprints",
        "good.zarr/.pyramid/prints/c/0",
        VERIFY,
        1,
        ("not a pyramid prints record", "toolkit pyramid build", "--rebuild-from 2x"),
        _pyramid,
    ),
    Record(
        "archive manifest (resolve)",
        "m/cordex/a.zarr/manifest.json",
        ("archive", "resolve", "--manifests", "m", "cordex/a.zarr/tas/c/0/0/0"),
        1,
        ("not an archive manifest", "delete it and partition the scope again"),
    ),
    Record(
        "archive manifest (partition)",
        "m/cordex/a.zarr/manifest.json",
        (
            "archive",
            "partition",
            "--data",
            "data",
            "--manifests",
            "m",
            "--t-max",
            "5000",
            "--t-hot",
            "100",
            "--t-min",
            "3000",
        ),
        1,
        ("not an archive manifest", "restore its previous version", "`toolkit archive partition`"),
    ),
    Record(
        "tier state",
        "m/cordex/a.zarr/tiers.json",
        ("archive", "report", "--manifests", "m", "--data", "data"),
        1,
        ("not tier state", "restore its previous version", "toolkit archive mark"),
    ),
)

SPOILS: dict[str, Callable[[bytes], bytes]] = {
    "empty": lambda body: b"",
    "truncated": lambda body: body[: len(body) // 2],
    "foreign JSON": lambda body: b'{"zarr_format": 3, "node_type": "group", "attributes": {}}',
    "binary junk": lambda body: b"\x8b\x00 junk \xff\xfe" * 40,
}


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("spoil", list(SPOILS))
@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_a_corrupt_record_is_one_line_naming_it_and_its_repair(
    w: Path, record: Record, spoil: str
) -> None:
    if record.setup:
        record.setup(w)
    target = w / record.path
    target.write_bytes(SPOILS[spoil](target.read_bytes()))
    before = _files(w)
    code, lines, _ = _invoke(w, *record.argv)
    assert code == record.code, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Traceback" not in lines[0] and "\\x" not in lines[0]
    at = lines[0].find(str(target))  # the object, as a path (never a file:// URL)
    assert at >= 0, lines[0]
    for fragment in record.says:
        found = lines[0].find(fragment, at)
        assert found >= 0, f"{fragment!r} not in (after col {at}): {lines[0]}"
        at = found
    assert _files(w) == before  # nothing written, nothing gone


# ------------------------------------------------------------------ leases never block forever


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_corrupt_lease_nothing_rewrites_is_taken_over_by_the_next_fire(w: Path) -> None:
    (w / LEASE).write_bytes(b"")
    code, lines, _ = _invoke(w, *UPDATE)
    assert code == 1 and "not a lease" in lines[-1]  # fresh: a live holder may rewrite it
    _age(w / LEASE, 60)
    code, lines, _ = _invoke(w, *UPDATE)
    assert code == 0, lines
    fire = json.loads((w / FIRE).read_text())
    assert "it was not a lease (empty) and nothing rewrote it for 6" in fire["took_over"]
    assert not (w / LEASE).exists()  # the fire released it as any fire does


def test_expire_replaces_a_corrupt_lease_nothing_rewrites(w: Path) -> None:
    (w / LEASE).write_bytes(b"\x00" * 7)
    _age(w / LEASE, 60)
    code, lines, _ = _invoke(w, "virtual", "expire", "repo", "--older-than", "30d")
    assert code == 0, lines
    assert not (w / LEASE).exists()


def test_a_live_holder_keeps_its_lease_when_it_is_damaged(w: Path) -> None:
    """A damaged lease of a running writer is not taken (its object is young), and the holder
    rewrites it at its next check; then the other fire sees a live holder, as always."""
    store = storage.open_store(str(w / "repo"))
    mine = Lease(store, "toolkit-update.lease", fire_time=10.0, interval=0.3).acquire()
    with mine.heartbeat():
        (w / LEASE).write_bytes(b"")
        other = Lease(store, "toolkit-update.lease", fire_time=20.0)  # newer: would take it
        with pytest.raises(LeaseHeld, match=r"toolkit-update\.lease: empty \(not a lease\)"):
            other.acquire()
        mine.check()  # rewritten by its holder
        assert json.loads((w / LEASE).read_text())["holder"] == mine.holder
        _age(w / LEASE, 0)
        time.sleep(0.1)
        with pytest.raises(LeaseHeld, match="another update is running"):
            Lease(store, "toolkit-update.lease", fire_time=5.0).acquire()
    mine.release()


# ------------------------------------------------------------------------ a backfill's guard


def _stop_at(
    point: str, action: Callable[[], None], once: bool = True
) -> Callable[[str, tuple], None]:
    """An audit hook doing `action` when the transaction step `point` is announced (the first
    time only, if `once`) until it is disarmed."""
    done: list[bool] = []

    def hook(event: str, args: tuple) -> None:
        if event == T.AUDIT_EVENT and args[0] == point and armed and not (once and done):
            done.append(True)
            action()

    armed = [True]
    hook.disarm = armed.clear  # type: ignore[attr-defined]
    return hook


@pytest.fixture
def hooks() -> Iterator[list]:
    """Audit hooks cannot be removed: each is disarmed after its test."""
    made: list = []
    yield made
    for hook in made:
        hook.disarm()


class Crash(Exception):
    pass


def _raise() -> None:
    raise Crash("killed at worker_forked")


def _in_flight(w: Path) -> tuple[str, Path]:
    """A fresh repo whose backfill stopped mid-way: its branch and guard stay."""
    shutil.rmtree(w / "repo")
    code, _, _ = _invoke(w, *BF)
    assert code == 1
    repo = R.open_repo(storage.open_store(str(w / "repo")), fresh=True)
    (branch,) = T.branches_of(repo, "backfill-")
    return branch, w / "repo" / f"toolkit-{branch}.lease"


def _main(w: Path, name: str) -> xr.Dataset:
    repo = R.open_repo(storage.open_store(str(w / name)), fresh=True)
    assert R.branches(repo) == ["main"]  # no branch, no marker left behind
    return xr.open_zarr(R.readonly(repo, "main").store, consolidated=False).load()


def _complete(w: Path) -> None:
    """Main holds every file of the source (in the replica too, if any): the same data as an
    uninterrupted backfill."""
    _ok(w, "virtual", "backfill", "sim-gfs", "--repo", "whole", "--source", "src",
        "--start", "2025-08-01T00", *SYNC)  # fmt: skip
    want = _main(w, "whole")
    assert want.sizes["init_time"] == len(INITS)
    for name in ("repo", "replica"):
        if (w / name).exists():
            xr.testing.assert_identical(_main(w, name), want)


def test_a_corrupt_guard_is_named_with_both_ways_out_and_the_rerun_takes_it_over(
    w: Path, hooks: list
) -> None:
    hooks.append(_stop_at("worker_forked", _raise, once=False))  # retried nodes fail too
    sys.addaudithook(hooks[-1])
    branch, guard = _in_flight(w)
    hooks[-1].disarm()
    assert guard.exists()
    guard.write_bytes(b'{"holder": 7}')
    before = _files(w)
    code, lines, _ = _invoke(w, "virtual", "status", "repo")
    assert code == 1 and len(lines) == 1, lines
    assert f"{guard}: a JSON object without a valid holder" in lines[0]
    assert f"rerun the same backfill (it takes the guard over), or drop it: `toolkit virtual " \
           f"abort {w / 'repo'} --branch {branch}`" in lines[0]  # fmt: skip
    code, lines, _ = _invoke(w, *BF)  # young: its holder may still be running
    assert code == 1 and len(lines) == 1 and "rerun in" in lines[0], lines
    assert _files(w) == before
    _age(guard, 60)
    _ok(w, *BF)
    _complete(w)


# ------------------------------------------------------- a temp branch deleted under a backfill


@pytest.mark.parametrize(
    ("point", "replica"),
    [("worker_forked", False), ("after_replica_commit", True), ("finalize_after_replica", True)],
)
def test_a_temp_branch_deleted_mid_backfill_is_one_line_and_the_rerun_converges(
    w: Path, hooks: list, point: str, replica: bool
) -> None:
    shutil.rmtree(w / "repo")
    extra = ("--replica", "replica") if replica else ()

    def delete() -> None:  # the primary's branch, by hand (its marker stays)
        repo = R.open_repo(storage.open_store(str(w / "repo")), fresh=True)
        (branch,) = T.branches_of(repo, "backfill-")
        R.delete_branch(repo, branch)

    hooks.append(_stop_at(point, delete))
    sys.addaudithook(hooks[-1])
    code, lines, _ = _invoke(w, *BF, *extra)
    assert code == 1, lines
    error = [x for x in lines if x.startswith("error: ")]
    assert len(error) == 1 and error == lines[-1:], lines
    assert "Traceback" not in "\n".join(lines) and "RefNotFound" not in error[0]
    assert f"error: {w / 'repo'}: branch 'backfill-" in error[0]
    assert "was deleted while this backfill ran" in error[0]
    assert "rerun the same backfill command" in error[0]
    _ok(w, *BF, *extra)  # the rerun
    _complete(w)
