"""glibc's allocator on distributed's process workers (toolkit.engine.malloc): their nanny's
fixed trim threshold makes glibc map and unmap every block over 128 KiB; probes and commits run
with glibc's own thresholds, and the worker gets its settings back after them. Measured with
glibc's own counters (mallinfo2) in real spawned workers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.engine.services import Item, MappedInProbe, Write, mapped_by_a_block
from toolkit import storage
from toolkit.engine import Gate, ListedKeys, Plan, Stage, run
from toolkit.engine.malloc import started_with
from toolkit.tasks import stable

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator")
BLOCK = 16 << 20


def test_a_probe_on_a_process_worker_gets_blocks_from_the_heap(tmp_path: Path) -> None:
    """A done-set probe (like a gate, a commit) runs with glibc's own thresholds: its 16 MiB
    block comes from the heap; before it and after it, the worker's own settings map such
    blocks. A fresh worker: a heap that earlier probes left free chunks in could serve a block
    under any settings."""
    from distributed import Client, LocalCluster

    store = storage.open_store(str(tmp_path / "objects"))
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as lc,
        Client(lc) as client,
    ):
        (settings,) = client.run(started_with).values()
        # the premise: distributed's nanny started the worker with a fixed trim threshold
        assert settings.get("MALLOC_TRIM_THRESHOLD_") == 65536
        (before,) = client.run(mapped_by_a_block).values()
        assert before >= BLOCK  # the worker's own settings: a 16 MiB block is mapped
        tasks = stable(Item("m", i) for i in range(2))
        stage = Stage(
            "m",
            tasks,
            Write(store),
            Gate(ListedKeys(store, "m"), want=tuple(tasks.keys)),
            done=MappedInProbe(store),
        )
        run(Plan("malloc", (stage,)), cluster=client)
        assert int(storage.get(store, "probe/mapped").data) < BLOCK // 4  # the heap served it
        # the worker's settings are back: a block larger than any the probe freed is mapped
        (after,) = client.run(mapped_by_a_block, BLOCK + BLOCK // 2).values()
        assert after >= BLOCK + BLOCK // 2


def test_settings_are_read_as_the_process_started(monkeypatch):
    """A LocalCluster's nanny writes its workers' settings into the environment of the process
    that starts it; glibc there never read them, so neither does `roomy`."""
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "65536"
    assert "MALLOC_TRIM_THRESHOLD_" not in started_with()
