"""No secret leaks: every job run with secret S3 credentials, the secret looked for everywhere.

A LocalCluster of spawned process workers is started with the secret in its environment (as a
user's cluster gets it) and a scheduler plugin records every task it is sent, pickled as it
travels, with its key. The pyramid, virtual and archive command lines run against an S3 server
on loopback through that cluster, with `--debug`, a performance report and JSON reports; one
command fails on purpose. Then the secret (and the session token) must appear in none of: the
pickled tasks, the graph keys, any object written to the bucket (Zarr metadata, manifests, tier
state, the Icechunk repo's config and snapshots), stdout, stderr, the scheduler's and workers'
logs, the performance report, the JSON reports, or the failure's message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import SchedulerPlugin

from tests.archive import zarrgen
from tests.conftest import make_bucket, s3_options
from toolkit import storage
from toolkit.examples import synthetic

EXE = str(Path(sys.executable).parent / "toolkit")


class Recorder(SchedulerPlugin):
    """Every task the scheduler receives: its key and its pickled run spec."""

    def __init__(self) -> None:
        self.blobs: list[bytes] = []
        self.count = 0

    def update_graph(self, scheduler, *, keys, tasks, **kwargs) -> None:  # type: ignore[override]
        for key in tasks:
            self.count += 1
            self.blobs.append(repr(key).encode())
            ts = scheduler.tasks.get(key)
            if ts is not None and ts.run_spec is not None:
                self.blobs.append(cloudpickle.dumps(ts.run_spec))


@pytest.mark.slow
def test_no_job_leaks_its_credentials(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"tkSECRET{uuid.uuid4().hex}"
    token = f"tkTOKEN{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", f"AKIATK{uuid.uuid4().hex[:12].upper()}")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    bucket = make_bucket(s3_endpoint)
    where = s3_options(s3_endpoint)
    opts = ["--endpoint", s3_endpoint, "--region", "us-east-1", "--allow-http", "--path-style"]
    vopts = ["--endpoint", s3_endpoint, "--allow-http", "--path-style"]  # region: from the env
    synthetic.write_store(storage.open_store(f"s3://{bucket}/p.zarr", **where), shape=(64, 96),
                          shards=(32, 32))  # fmt: skip
    zarrgen.cordex_v3(storage.open_store(f"s3://{bucket}/data", **where))
    from toolkit.examples.simulate import make_archive

    archive = make_archive(
        storage.open_store(f"s3://{bucket}/src", **where), kind="gfs", leads=[0, 3],
        publish=False, inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(2)],
    )  # fmt: skip
    archive.publish()
    events = tmp_path / "events.jsonl"
    events.write_text(
        "".join(
            json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "s3": {
                "bucket": {"name": bucket}, "object": {"key": f"data/{k}", "sequencer": str(i)}}}]})
            + "\n"
            for i, k in enumerate(storage.list_keys(storage.open_store(f"s3://{bucket}/data",
                                                                        **where)))
        )
    )  # fmt: skip
    recorder = Recorder()
    texts: list[str] = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster:  # fmt: skip
        cluster.scheduler.add_plugin(recorder)
        addr = cluster.scheduler_address
        build = ["pyramid", "build", f"s3://{bucket}/p.zarr", "--levels", "2",
                 "--performance-report", str(tmp_path / "perf.html"), *opts]  # fmt: skip
        verify = ["pyramid", "verify", f"s3://{bucket}/p.zarr", "--private", *opts]
        backfill = ["virtual", "backfill", "sim-gfs", "--repo", f"s3://{bucket}/repo",
                    "--source", f"s3://{bucket}/src", "--start", "2025-08-01T00", *vopts]  # fmt: skip
        inspect = ["virtual", "inspect", f"s3://{bucket}/repo", *vopts]
        at = ["--data", f"s3://{bucket}/data", "--manifests", f"s3://{bucket}/m", *opts]
        scan = ["archive", "scan", *at, "--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]
        watch = ["archive", "watch", *at, "--events", str(events), "--once"]
        mark = ["archive", "mark", "cordex/a.zarr", "b_tas_1", "writing", *at]
        report = ["archive", "report", *at, "--json"]
        missing = ["pyramid", "build", f"s3://{bucket}/missing.zarr", *opts]
        # each chain in order (a command reads what the one before wrote); the chains at once,
        # as a team's jobs share a cluster
        chains = [[build, verify], [backfill, inspect], [scan, watch, mark, report], [missing]]

        def chain(argvs: list[list[str]]) -> list[tuple[list[str], Any]]:
            return [
                (argv, subprocess.run(
                    [EXE, *(["--debug"] if argv is not missing else []), "--cluster", addr,
                     *argv], capture_output=True, text=True, timeout=300,
                    env=os.environ | {"TOOLKIT_CLUSTER": addr},
                ))
                for argv in argvs
            ]  # fmt: skip

        with ThreadPoolExecutor(len(chains)) as pool:
            done = [r for rs in pool.map(chain, chains) for r in rs]
        for argv, res in done:
            if argv is missing:
                assert res.returncode == 2 and "missing.zarr" in res.stderr
            else:
                assert res.returncode == 0, (argv[:2], res.stderr[-2000:])
            texts += [res.stdout, res.stderr]
        with Client(addr) as client:
            logs = client.get_worker_logs()
            texts += [line for lines in logs.values() for _, line in lines]
            texts += [line for _, line in client.get_scheduler_logs()]
    assert recorder.count > 20  # every job's graph went through the scheduler
    written = {
        k: storage.get(storage.open_store(f"s3://{bucket}", **where), k).data
        for k in storage.list_keys(storage.open_store(f"s3://{bucket}", **where))
    }
    assert any(k.startswith("repo/") for k in written) and "m/cordex/a.zarr/tiers.json" in written
    texts.append((tmp_path / "perf.html").read_text())
    for needle in (secret, token):
        raw = needle.encode()
        assert not any(raw in b for b in recorder.blobs), "a pickled task or key holds it"
        leaked = [k for k, data in written.items() if raw in data]
        assert not leaked, f"written objects hold it: {leaked[:5]}"
        assert not any(needle in t for t in texts), "output, logs or reports hold it"
