"""Outages within the retry budget (issue: reliability, transient outages).

The real S3 server (SeaweedFS) is killed mid-run and restarted on the same port with the same
data: a server back inside the budget costs only time (the run exits 0 with the bytes of a
clean run); one that stays away past it ends the run with one line naming the endpoint and the
budget, exit 2, and the rerun converges.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import numpy as np
import pytest

from tests.conftest import make_bucket, s3_options
from tests.seaweed import Weed
from toolkit import storage
from toolkit.examples import synthetic

pytestmark = pytest.mark.slow

OUTAGE = 4.0  # seconds the server stays dead: the fault itself, not a wait for an event
SHAPE, SHARDS = (1024, 2048), (64, 64)


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    server = Weed(tmp_path / "weed")
    server.start()
    yield server
    server.stop()


def _await(done: Callable[[], bool], what: str, within: float = 120) -> None:
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def _objects(endpoint: str, bucket: str, prefix: str) -> dict[str, bytes]:
    """Every object under `prefix`, by key relative to it (what a clean run is compared on;
    `.pyramid/prints/` holds the store's own ETags, which differ between stores)."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    found: dict[str, bytes] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(prefix) + 1 :]
            if not rel.startswith(".pyramid/prints/"):
                found[rel] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return found


def _has(endpoint: str, bucket: str, prefix: str) -> bool:
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    return s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1).get("KeyCount", 0) > 0


def _build(url: str, endpoint: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "toolkit.cli", "pyramid", "build", url, "--executor", "sync",
         "--endpoint", endpoint, "--region", "us-east-1", "--allow-http", "--path-style", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _source(weed: Weed, bucket: str, name: str) -> str:
    url = f"s3://{bucket}/{name}"
    synthetic.write_store(
        storage.open_store(url, **s3_options(weed.endpoint)), shape=SHAPE, shards=SHARDS
    )
    return url


def _clean(weed: Weed, bucket: str) -> dict[str, bytes]:
    """The peer: the same source built while nothing fails."""
    proc = _build(_source(weed, bucket, "clean.zarr"), weed.endpoint)
    _out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return _objects(weed.endpoint, bucket, "clean.zarr")


def _killed_mid_build(weed: Weed, bucket: str, proc: subprocess.Popen[str]) -> None:
    _await(lambda: _has(weed.endpoint, bucket, "field.zarr/4x/"), "the build's first 4x object")
    assert proc.poll() is None, "the build ended before the outage: make the source larger"
    weed.kill()


def test_a_server_back_within_the_budget_costs_only_time(weed: Weed) -> None:
    bucket = make_bucket(weed.endpoint)
    # a budget a loaded machine's server restart fits in (it took over 60 s on a busy CI)
    proc = _build(_source(weed, bucket, "field.zarr"), weed.endpoint, "--retry-seconds", "300")
    _killed_mid_build(weed, bucket, proc)
    time.sleep(OUTAGE)
    weed.start(within=200)
    _out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    got = _objects(weed.endpoint, bucket, "field.zarr")
    assert got == _clean(weed, bucket)


def test_past_the_budget_one_line_exit_2_and_the_rerun_converges(weed: Weed) -> None:
    bucket = make_bucket(weed.endpoint)
    url = _source(weed, bucket, "field.zarr")
    proc = _build(url, weed.endpoint, "--retry-seconds", "3")
    _killed_mid_build(weed, bucket, proc)
    started = time.monotonic()
    _out, err = proc.communicate(timeout=600)
    took = time.monotonic() - started
    lines = err.strip().splitlines()
    assert proc.returncode == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: ") and "unreachable" in lines[0]
    assert f"{weed.endpoint} did not answer within the 3 s retry budget" in lines[0]
    assert "--retry-seconds" in lines[0]
    assert took < 60, f"the budget was 3 s, the run went on for {took:.0f} s"
    weed.start()
    proc = _build(url, weed.endpoint)
    _out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert _objects(weed.endpoint, bucket, "field.zarr") == _clean(weed, bucket)


@pytest.mark.parametrize(
    "at",
    [
        pytest.param(lambda m, p: m == "GET" and p.endswith(".idx"), id="ingest-reads"),
        pytest.param(lambda m, p: m == "PUT" and "/repo/manifests/" in p, id="commit"),
    ],
)
def test_a_backfill_survives_a_server_restart(weed: Weed, at: Callable[[str, str], bool]) -> None:
    """Source and repo on the server, reached through a proxy that stops at the first
    request of one phase (the ingest's index reads through obstore, the commit's manifest
    writes through Icechunk): the server dies there and comes back after the outage; the
    backfill ends with every value exact."""
    import threading
    from datetime import datetime, timedelta

    import xarray as xr

    from tests.faults import FaultProxy
    from tests.virtual.test_job import assert_exact
    from toolkit import icechunk as R
    from toolkit.examples.datasets import sim_gfs
    from toolkit.examples.simulate import make_archive
    from toolkit.virtual.backfill import backfill
    from toolkit.virtual.write import Job

    bucket = make_bucket(weed.endpoint)
    inits = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)]
    direct = storage.open_store(f"s3://{bucket}/src", **s3_options(weed.endpoint))
    files = make_archive(direct, kind="gfs", inits=inits, leads=[0, 3, 6]).files()
    outcome: list[object] = []
    with FaultProxy(weed.endpoint) as proxy:
        opts = s3_options(proxy.url)
        src = storage.open_store(f"s3://{bucket}/src", **opts)
        job = Job(sim_gfs(src), R.RepoRef(storage.open_store(f"s3://{bucket}/repo", **opts)))

        def go() -> None:
            try:
                outcome.append(backfill(job, start=np.datetime64(inits[0], "ns"), executor="sync"))
            except Exception as err:  # reported below, with the thread's own error
                outcome.append(err)

        proxy.hold(at)
        worker = threading.Thread(target=go)
        worker.start()
        assert proxy.held.wait(timeout=120), "the backfill never reached the held request"
        weed.kill()
        proxy.release(forward=False)  # cut off with the server
        time.sleep(OUTAGE)
        weed.start()
        worker.join(timeout=600)
        assert outcome and not isinstance(outcome[0], Exception), outcome
        repo = job.repo.open(fresh=True)
        x = xr.open_zarr(R.readonly(repo).store, consolidated=False)
        assert x.sizes["init_time"] == len(inits)
        assert_exact(x, files)
