"""A worker SIGKILLed in the middle of a level: the build still completes and verifies."""

from __future__ import annotations

import os

import pytest

from tests.pyramid.killer import KillOnStage
from toolkit import storage
from toolkit.examples import synthetic
from toolkit.pyramid import build, verify


@pytest.mark.slow
def test_worker_killed_mid_level(tmp_path):
    from distributed import Client, LocalCluster

    store = storage.open_store((tmp_path / "s.zarr").as_uri())
    synthetic.write_store(store, shape=(128, 192), shards=(16, 16))
    marker = tmp_path / "killed.pid"
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(KillOnStage("4x", str(marker)))
        report = build(store, levels=3, cluster=client, max_shard=16)  # 6 shards at 4x
        assert marker.exists(), "no worker was killed: the test proved nothing"
        pid = int(marker.read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        s = report.stage("4x")
        assert s.gate_have == s.gate_want and s.written + s.skipped == s.tasks
        result = verify(store, cluster=client)
    assert result.ok, [str(f) for f in result.failures]
