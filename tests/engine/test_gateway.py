"""connect() with a dask-gateway cluster (a real gateway server on loopback, local backend)."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from toolkit import storage
from toolkit.engine import Each, run
from toolkit.examples.demo import foundation_plan

pytest.importorskip("dask_gateway_server")

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gateway(tmp_path: Path):
    config = tmp_path / "gateway_config.py"
    config.write_text(
        'c.DaskGateway.backend_class = "dask_gateway_server.backends.local.UnsafeLocalBackend"\n'
        'c.DaskGateway.address = "127.0.0.1:0"\n'
        'c.Proxy.address = "127.0.0.1:0"\n'
        'c.DaskGateway.authenticator_class = "dask_gateway_server.auth.SimpleAuthenticator"\n'
        f'c.ClusterConfig.scheduler_cmd = ["{BIN / "dask"}", "scheduler"]\n'
        f'c.ClusterConfig.worker_cmd = ["{BIN / "dask"}", "worker"]\n'
        f'c.ClusterConfig.environment = {{"PYTHONPATH": "{ROOT}"}}\n'  # tests' services
    )
    proc = subprocess.Popen(
        [str(BIN / "dask-gateway-server"), "-f", str(config)],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def drain() -> None:  # keep reading so the server never blocks on a full pipe
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)

    threading.Thread(target=drain, daemon=True).start()
    address = None
    while True:  # the proxy serves the API once it has fetched its routing table
        line = lines.get(timeout=60)
        if m := re.search(r"HTTP routes listening at (http://\S+)", line):
            address = m.group(1)
        if "200 GET /api/v1/routes" in line:
            break
    assert address, "gateway did not start"
    routed(address)
    yield address
    proc.terminate()
    proc.wait(timeout=30)


def routed(address: str, within: float = 60.0) -> None:
    """Wait until the proxy routes the API. The gateway logs the proxy's fetch of its routing
    table, but the proxy applies it a moment later (a request in between gets the proxy's 404,
    seen under load in CI), and no line says when: ask through the proxy until the API answers."""
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(f"{address}/api/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)


@pytest.mark.slow
def test_plan_runs_on_a_dask_gateway_cluster(gateway: str, tmp_path: Path) -> None:
    from dask_gateway import Gateway

    gw = Gateway(address=gateway, auth="basic")
    cluster = gw.new_cluster()
    try:
        cluster.scale(1)
        store = storage.open_store(str(tmp_path / "out"))
        report = run(foundation_plan(store, tiles=8, levels=2), cluster=cluster)
        assert [s.gate_have for s in report.stages] == [8, 4]
        again = run(foundation_plan(store, tiles=8, levels=2), cluster=cluster)
        assert again.written == 0
        assert gw.get_cluster(cluster.name).status.name == "RUNNING"  # connect() left it running
        # dask-gateway makes a new client per get_client(): each run closed the one it made
        with cluster.get_client(set_as_default=False) as watcher:
            connected = watcher.run_on_scheduler(
                lambda dask_scheduler: sorted(dask_scheduler.clients)
            )
        assert [c for c in connected if c != "fire-and-forget"] == [watcher.id], connected
    finally:
        cluster.shutdown()
        gw.close()


@pytest.mark.slow
def test_an_adaptive_cluster_scales_up_for_a_striped_stage(gateway: str, tmp_path: Path) -> None:
    """`adapt(minimum=1, maximum=4)`: the stage starts on one worker with one thread, and its
    stripe nodes (four per thread in flight, not one) leave queued work that the cluster adds
    workers for; more than one worker process ends up running them."""
    from dask_gateway import Gateway

    from tests.engine.services import Item, SlowWrite
    from toolkit.engine import AUTO, Gate, ListedKeys, Plan, Stage
    from toolkit.tasks import stable

    gw = Gateway(address=gateway, auth="basic")
    cluster = gw.new_cluster()
    try:
        cluster.adapt(minimum=1, maximum=4)
        with cluster.get_client(set_as_default=False) as watcher:
            watcher.wait_for_workers(1, timeout=120)
            assert sum(watcher.nthreads().values()) == 1
        store = storage.open_store(str(tmp_path / "out"))
        tasks = stable(Item("ingest", i) for i in range(48))
        gate = Gate(ListedKeys(store, "ingest"), want=tuple(tasks.keys))
        stage = Stage("ingest", tasks, Each(SlowWrite(store, 0.5)), gate, workers=AUTO)
        report = run(Plan("adaptive", (stage,)), cluster=cluster)
        assert report.stages[0].nodes > 4 and report.stages[0].gate_have == 48  # cut as it grew
        writers = {storage.get(store, k).data for k in tasks.keys}
        assert len(writers) > 1, "one worker ran every stripe: the cluster never scaled"
    finally:
        cluster.shutdown()
        gw.close()
