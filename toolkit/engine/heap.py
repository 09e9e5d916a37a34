"""Python's cyclic collector while a write loop gathers what it keeps.

A backfill's write loop keeps every file's refs until its commit: 160,000 objects for 20,000
GRIB files. While they pile up, each time the survivors grow by a quarter, CPython runs a full
collection, which walks every tracked object of the process (a distributed worker holds
hundreds of thousands of its own) and frees none of the refs. On one worker that was 7 full
collections and 0.48 s of a 4.1 s ingest of 20,016 files (`benchmarks/virtual_throughput.py`).

`gathering()` lets the young generations run as they do (short-lived cycles are still freed
at once) and asks for a full collection only after `FULL_EVERY` collections of the middle
generation instead of CPython's 10. When the last block inside it ends, the process's own
thresholds return; garbage the full collection would have found waits until the next one.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

FULL_EVERY = 100  # middle-generation collections between two full ones (CPython's default: 10)


class _Blocks:
    """The blocks inside `gathering()` in this process, and the thresholds they replaced."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.saved = gc.get_threshold()


_blocks = _Blocks()


@contextmanager
def gathering() -> Iterator[None]:
    """Full collections rarer while the block runs (process-wide; nested and concurrent blocks
    share one setting, and the process's own returns when the last ends)."""
    with _blocks.lock:
        if _blocks.count == 0:
            _blocks.saved = young, middle, full = gc.get_threshold()
            gc.set_threshold(young, middle, max(full, FULL_EVERY))
        _blocks.count += 1
    try:
        yield
    finally:
        with _blocks.lock:
            _blocks.count -= 1
            if _blocks.count == 0:
                gc.set_threshold(*_blocks.saved)
