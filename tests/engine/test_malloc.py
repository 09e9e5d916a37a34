"""glibc's allocator on distributed's process workers (toolkit.engine.malloc): their nanny's
fixed trim threshold makes glibc map and unmap every block over 128 KiB; a node runs with
glibc's own thresholds, and the worker gets its settings back between nodes. Measured with
glibc's own counters (mallinfo2) in real spawned workers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.engine.services import Item, WhereBlocksGo, mapped_by_a_block
from toolkit import storage
from toolkit.engine import Gate, ListedKeys, Plan, Stage, run
from toolkit.engine.malloc import started_with
from toolkit.tasks import stable

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator")
BLOCK = 16 << 20


def test_a_node_on_a_process_worker_gets_blocks_from_the_heap(tmp_path: Path, local_cluster):
    from distributed import Client

    store = storage.open_store(str(tmp_path / "objects"))
    with Client(local_cluster) as client:
        settings = client.run(started_with)
        # the premise: distributed's nanny started these workers with a fixed trim threshold
        assert all(s.get("MALLOC_TRIM_THRESHOLD_") == 65536 for s in settings.values())
        # outside a node the worker's own settings hold: a 16 MiB block is mapped...
        assert all(m >= BLOCK for m in client.run(mapped_by_a_block).values())
        tasks = stable(Item("m", i) for i in range(2))
        stage = Stage("m", tasks, WhereBlocksGo(store), Gate(ListedKeys(store, "m")))
        run(Plan("malloc", (stage,)), cluster=client)
        # ...inside one the heap serves it
        for key in tasks.keys:
            assert int(storage.get(store, key).data) < BLOCK // 4, key
        # and after it the worker's settings are back
        assert all(m >= BLOCK for m in client.run(mapped_by_a_block).values())


def test_settings_are_read_as_the_process_started(monkeypatch):
    """A LocalCluster's nanny writes its workers' settings into the environment of the process
    that starts it; glibc there never read them, so neither does `roomy`."""
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "65536"
    assert "MALLOC_TRIM_THRESHOLD_" not in started_with()
