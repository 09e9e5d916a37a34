"""Elastic by construction (issue 52, item 4): a striped stage started on one worker runs on
every worker that joins while it runs, and its blocks are the same for the same inputs and
cluster size."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.engine.services import Item, SlowWrite
from toolkit import storage
from toolkit.engine import AUTO, Each, Gate, ListedKeys, Plan, Stage, run
from toolkit.tasks import guided_blocks, stable


@given(
    n=st.integers(0, 5000),
    sizes=st.lists(st.integers(1, 64), min_size=1, max_size=50),
    share=st.integers(1, 8),
    floor=st.integers(1, 50),
)
def test_guided_blocks_cover_the_list_in_order_and_shrink_as_the_cluster_grows(
    n: int, sizes: list[int], share: int, floor: int
) -> None:
    seen = iter(sizes * (n + 1))
    threads: list[int] = []

    def now() -> int:
        threads.append(next(seen))
        return threads[-1]

    blocks = list(guided_blocks(n, now, share, floor, cap=max(floor, 100)))
    assert [b for b in blocks if b[0] >= b[1]] == []
    if blocks:  # contiguous, in order
        assert [b[0] for b in blocks] == [0, *(b[1] for b in blocks[:-1])]
    assert (blocks[-1][1] if blocks else 0) == n
    start = 0
    for (a, b), t in zip(blocks, threads, strict=True):  # each cut for the cluster it saw
        want = min(max(floor, -(-(n - start) // (share * t))), max(floor, 100))
        assert b - a == min(want, n - start)
        start = b
    # the same inputs and cluster size: the same blocks
    again = list(guided_blocks(n, lambda: sizes[0], share, floor, cap=max(floor, 100)))
    assert again == list(guided_blocks(n, lambda: sizes[0], share, floor, cap=max(floor, 100)))


@pytest.mark.cluster
@pytest.mark.slow
def test_a_stage_started_on_one_worker_runs_on_all_four_that_join(tmp_path: Path) -> None:
    from distributed import LocalCluster

    store = storage.open_store(str(tmp_path / "out"))
    tasks = stable(Item("ingest", i) for i in range(96))
    gate = Gate(ListedKeys(store, "ingest"), want=tuple(tasks.keys))
    stage = Stage("ingest", tasks, Each(SlowWrite(store, 0.25)), gate, workers=AUTO)
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        grown: list[int] = []

        def grow(stage: str, done: int, total: int) -> None:
            if not grown and done > 0:
                grown.append(done)
                threading.Thread(target=cluster.scale, args=(4,)).start()

        report = run(Plan("elastic", (stage,)), cluster=cluster, progress=grow)
    assert report.stage("ingest").gate_have == 96
    assert grown and grown[0] < 24, "the stage was mostly done before the cluster grew"
    writers = {storage.get(store, k).data for k in tasks.keys}
    assert len(writers) == 4, f"{len(writers)} of 4 workers ran the stage"
