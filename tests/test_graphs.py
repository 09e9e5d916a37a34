"""The scripted batch graphs in graphs/ run as users run them (in-process here, to stay fast)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GRAPHS = Path(__file__).resolve().parents[1] / "graphs"


def run_graph(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GRAPHS / name), *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_pyramid_then_archive_graphs(tmp_path: Path) -> None:
    built = run_graph("pyramid_sparse_global.py", str(tmp_path), "--sync", "--shape", "700x1100")
    assert built.returncode == 0, built.stderr[-2000:]
    assert '"verified": true' in built.stdout
    again = run_graph("pyramid_sparse_global.py", str(tmp_path), "--sync", "--shape", "700x1100")
    assert again.returncode == 0
    first_stage = json.loads(again.stdout[: again.stdout.index("\n}\n") + 2])["stages"][0]
    assert first_stage["written"] == 0 and first_stage["skipped"] == first_stage["tasks"]

    args = (
        str(tmp_path),
        str(tmp_path / "manifests"),
        "--t-max",
        "1MiB",
        "--t-hot",
        "4KiB",
        "--t-min",
        "64KiB",
        "--sync",
    )
    scanned = run_graph("archive_scan.py", *args)
    assert scanned.returncode == 0, scanned.stderr[-2000:]
    outcome = json.loads(scanned.stdout)
    assert [o["scope"] for o in outcome] == ["global.zarr"] and outcome[0]["written"]
    rerun = json.loads(run_graph("archive_scan.py", *args).stdout)
    assert rerun[0]["epoch"] == 1 and not rerun[0]["written"]  # frozen cuts: nothing changes


@pytest.mark.slow
def test_every_graph_runs_on_a_running_cluster(tmp_path: Path, cluster_address: str) -> None:
    """`--cluster ADDR`: each script connects once (one dashboard line) and runs there."""
    built = run_graph(
        "pyramid_sparse_global.py",
        str(tmp_path),
        "--shape",
        "300x500",
        "--cluster",
        cluster_address,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    assert '"verified": true' in built.stdout
    assert built.stderr.count("dashboard: ") == 1  # build and verify shared one cluster
    scanned = run_graph(
        "archive_scan.py", str(tmp_path), str(tmp_path / "manifests"), "--t-max", "1MiB",
        "--t-hot", "4KiB", "--t-min", "64KiB", "--cluster", cluster_address,
    )  # fmt: skip
    assert scanned.returncode == 0, scanned.stderr[-2000:]
    assert json.loads(scanned.stdout)[0]["written"]
    maps = run_graph("forecast_maps.py", str(tmp_path / "maps"), "--cluster", cluster_address)
    assert maps.returncode == 0, maps.stderr[-2000:]
    assert maps.stderr.count("dashboard: ") == 1  # backfill, levels, export, archive: one cluster
    assert '"verified": true' in maps.stdout
    virtual = run_graph("virtual_sim_gfs.py", str(tmp_path / "v"), "--cluster", cluster_address)
    assert virtual.returncode == 0, virtual.stderr[-2000:]
    assert virtual.stderr.count("dashboard: ") == 1
    assert virtual.stdout.count('"plan": ') >= 2  # the backfill's report and the update's


@pytest.mark.slow
def test_forecast_maps_graph(tmp_path: Path) -> None:
    """Backfill, levels of two variables in the repo, verify, the levels copied to a Zarr store
    (byte for byte, xarray opens it) and partitioned into archive blobs; a rerun resumes."""
    import numpy as np
    import xarray as xr

    from toolkit import icechunk as R
    from toolkit import storage

    ran = run_graph("forecast_maps.py", str(tmp_path), "--sync", "--cycles", "2")
    assert ran.returncode == 0, ran.stderr[-2000:]
    tail = documents(ran.stdout)[-1]
    assert tail["verified"] and [o["scope"] for o in tail["archive"]] == ["forecast.zarr"]
    assert tail["archive"][0]["blobs"] >= 1
    handle = R.open_repo(storage.open_store(str(tmp_path / "repo")), fresh=True)
    for level in ("2x", "4x"):
        inside = xr.open_zarr(R.readonly(handle).store, group=level, consolidated=False)
        copy = xr.open_zarr(tmp_path / "maps" / "forecast.zarr", group=level, consolidated=False)
        for v in ("temperature_2m", "pressure_reduced_to_mean_sea_level"):
            np.testing.assert_array_equal(copy[v].values, inside[v].values)
            assert not np.isnan(copy[v].values).all()
    again = run_graph("forecast_maps.py", str(tmp_path), "--sync", "--cycles", "2")
    assert again.returncode == 0, again.stderr[-2000:]
    docs = documents(again.stdout)
    levels = next(d for d in docs if d.get("plan", "").startswith("pyramid-mean"))
    assert all(s["written"] == 0 for s in levels["stages"] if s["stage"] in ("2x", "4x"))
    export = next(d for d in docs if d.get("plan") == "pyramid-export")["stages"][0]
    assert 0 < export["written"] < export["tasks"]  # only the metadata is copied again
    assert docs[-1]["archive"][0]["written"] is False  # frozen cuts: nothing changes


def documents(text: str) -> list[dict]:
    """Every JSON document a graph printed, in order."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while (i := text.find("{", i)) >= 0:
        doc, end = decoder.raw_decode(text, i)
        out.append(doc)
        i = end
    return out
