"""Every job on a long-lived external cluster (`dask scheduler` + two `dask worker` processes),
run several times in a row on the same warm workers, the way users run toolkit.

Each output is compared with the `--executor sync` build of the same input: the bytes of every
object (pyramid, archive) or the decoded values (virtual). A warm worker that kept state from
an earlier run, a certified stage recomputed, or a worker killed mid-level would show here.
"""

from __future__ import annotations

import os
import shutil
import signal
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import xarray as xr
from typer.testing import CliRunner

from tests.archive import zarrgen
from toolkit import icechunk as R
from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic
from toolkit.examples.simulate import make_archive
from toolkit.pyramid import build, verify

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

runner = CliRunner()


def cli(*args: str) -> object:
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res


def objects(path: Path) -> dict[str, bytes]:
    """Every object, but the record of level 0's fingerprints: those hash each store's own
    ETags (the plan, the backup and every level are compared)."""
    store = storage.open_store(str(path))
    keys = [k for k in storage.list_keys(store, "") if not k.startswith(".pyramid/prints/")]
    return {k: storage.get(store, k).data for k in keys}


def same_objects(a: Path, b: Path) -> None:
    oa, ob = objects(a), objects(b)
    assert sorted(oa) == sorted(ob)
    differ = [k for k in oa if oa[k] != ob[k]]
    assert not differ, f"{len(differ)} objects differ, first: {differ[:5]}"


def write(path: Path, **kw: object) -> Path:
    synthetic.write_store(storage.open_store(str(path)), **kw)  # type: ignore[arg-type]
    return path


def test_pyramid_on_warm_workers_equals_sync(cluster_address: str, tmp_path: Path) -> None:
    on, twin = tmp_path / "on.zarr", tmp_path / "twin.zarr"
    # 1. build + verify on the cluster; the dashboard link is announced on stderr first
    for p in (on, twin):
        write(p, shape=(256, 384), shards=(32, 32), seed=1)
    res = cli("--cluster", cluster_address, "pyramid", "build", on, "--levels", "3")
    assert "dashboard: http://127.0.0.1:" in res.stderr
    cli("pyramid", "build", twin, "--levels", "3", "--executor", "sync")
    cli("--cluster", cluster_address, "pyramid", "verify", on)
    same_objects(on, twin)

    # 2. the same path recreated with other data and another layout, on the same workers
    for p in (on, twin):
        shutil.rmtree(p)  # recreated at the same path, as a user does
        write(p, shape=(200, 520), shards=(16, 48), chunks=(8, 16), seed=2, kind="bands")
    cli("--cluster", cluster_address, "pyramid", "build", on, "--levels", "3", "--band-dim", "band")
    cli("pyramid", "build", twin, "--levels", "3", "--band-dim", "band", "--executor", "sync")
    cli("--cluster", cluster_address, "pyramid", "verify", on)
    same_objects(on, twin)

    # 3. --rebuild-from with another shard size: the coarser levels change layout
    for p in (on, twin):
        shutil.rmtree(p)  # recreated at the same path, as a user does
        write(p, shape=(512, 768), shards=(64, 64), seed=3)
        cli("pyramid", "build", p, "--levels", "4", "--executor", "sync")
    cli(
        "--cluster",
        cluster_address,
        "pyramid",
        "build",
        on,
        "--levels",
        "4",
        "--rebuild-from",
        "2x",
        "--max-shard",
        "128",
    )
    cli(
        "pyramid",
        "build",
        twin,
        "--levels",
        "4",
        "--rebuild-from",
        "2x",
        "--max-shard",
        "128",
        "--executor",
        "sync",
    )
    cli("--cluster", cluster_address, "pyramid", "verify", on)
    same_objects(on, twin)


def test_worker_sigkilled_mid_level_changes_nothing(external, cluster_address, tmp_path) -> None:
    from distributed import Client

    on, twin = tmp_path / "on.zarr", tmp_path / "twin.zarr"
    for p in (on, twin):
        write(p, shape=(512, 512), shards=(16, 16), seed=4)
    build(storage.open_store(str(twin)), levels=3, max_shard=16, executor="sync")
    victim = next(iter(external.worker_pids().values()))
    killed: list[tuple[int, int]] = []

    def kill_mid_level(stage: str, done: int, total: int) -> None:
        if stage == "4x" and not killed and done < total:
            os.kill(victim, signal.SIGKILL)
            killed.append((done, total))

    with Client(cluster_address) as client:
        report = build(
            storage.open_store(str(on)),
            levels=3,
            max_shard=16,
            cluster=client,
            progress=kill_mid_level,
        )
        assert killed, "the worker was never killed: the test proved nothing"
        with pytest.raises(ProcessLookupError):
            os.kill(victim, 0)
        s = report.stage("4x")
        assert s.gate_have == s.gate_want
        assert verify(storage.open_store(str(on)), cluster=client).ok
    same_objects(on, twin)


def sim_archive(src: Path) -> tuple:
    archive = make_archive(
        storage.open_store(str(src)),
        kind="gfs",
        leads=[0, 3, 6],
        publish=False,
        inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)],
    )
    files = archive.files()
    archive.publish(files[:6])
    return archive, files


def test_virtual_backfill_then_update_equals_sync(cluster_address: str, tmp_path: Path) -> None:
    decoded = []
    for name, engine in (("on", ["--cluster", cluster_address]), ("twin", ["--executor", "sync"])):
        src, repo = tmp_path / name / "src", tmp_path / name / "repo"
        archive, files = sim_archive(src)
        common = ["--repo", repo, "--source", src]
        cli("virtual", "backfill", "sim-gfs", *common, "--start", "2025-08-01T00", *engine)
        archive.publish(files[6:])
        cli(
            "virtual",
            "update",
            "sim-gfs",
            *common,
            "--fire-time",
            "2025-08-01T18",
            "--deadline",
            "2",
        )
        ref = R.RepoRef(storage.open_store(str(repo)))
        ds = xr.open_zarr(R.readonly(ref.open(fresh=True)).store, consolidated=False).load()
        decoded.append(ds)
    on, twin = decoded
    assert on.sizes["init_time"] == 4
    assert on["temperature_2m"].notnull().any()
    xr.testing.assert_identical(on, twin)


def test_archive_scan_equals_sync(cluster_address: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    zarrgen.cordex_v3(storage.open_store(str(data)))
    policy = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]
    for name, engine in (("on", ["--cluster", cluster_address]), ("twin", ["--executor", "sync"])):
        cli("archive", "scan", "--data", data, "--manifests", tmp_path / name, *policy, *engine)
    same_objects(tmp_path / "on", tmp_path / "twin")
