"""glibc's allocator while a node runs on a distributed worker.

distributed's nanny starts process workers with `MALLOC_TRIM_THRESHOLD_=65536`, so that freed
memory goes back to the system. Setting it also freezes glibc's mmap threshold at 128 KiB: every
larger block is mapped and unmapped on each use, and its pages faulted in again. An Icechunk
commit of 160,000 refs took 0.78 s that way against 0.29 s with glibc's own defaults.

`roomy()` gives glibc's defaults back (large blocks from the heap, freed memory kept up to
64 MiB) around what allocates large transient buffers and holds little: a commit node's merge
and commit, a done-set probe and a gate (they load manifests). When the last of them ends, the
worker's settings return and what was freed is handed back (`malloc_trim`), which is what the
setting is for. Work nodes keep the worker's settings: around a pyramid's shard nodes it made
builds 10-15% faster but added 50-115 MiB to each worker's peak, more for larger levels
(benchmarks/pyramid_scale.py), where a flat peak is the point. A process that did not start
with the variable (a client, an in-process run, a thread worker of the embedded cluster) is
left alone: its allocator already adjusts itself.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
ROOMY_TRIM = 64 << 20  # glibc's own ceilings on 64-bit for the two thresholds it adjusts
ROOMY_MMAP = 32 << 20
GLIBC_MMAP = 128 << 10  # the mmap threshold a fixed trim threshold leaves in place

_lock = threading.Lock()
_running = [0]  # blocks inside roomy() in this process


def started_with() -> dict[str, int]:
    """The MALLOC_*_ settings this process started with (what glibc read), from
    /proc/self/environ: `os.environ` also holds what was set later (a LocalCluster's nanny
    writes its workers' settings into the process that starts it)."""
    try:
        with open("/proc/self/environ", "rb") as f:
            pairs = [kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv]
    except OSError:
        return {}
    wanted = (b"MALLOC_TRIM_THRESHOLD_", b"MALLOC_MMAP_THRESHOLD_")
    out = {}
    for k, v in pairs:
        if k in wanted and v.strip().isdigit():
            out[k.decode()] = int(v)
    return out


def _glibc() -> ctypes.CDLL | None:
    """The C library this process runs on, if it is glibc (the symbols of the process itself:
    no library search, which would start a subprocess)."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 - glibc only
    except (OSError, AttributeError):
        return None
    return libc


@contextmanager
def roomy() -> Iterator[None]:
    """glibc's default thresholds while the block runs, in a process that started with a fixed
    trim threshold; elsewhere nothing changes."""
    settings = started_with()
    trim = settings.get("MALLOC_TRIM_THRESHOLD_")
    libc = _glibc() if trim is not None else None
    if libc is None:
        yield
        return
    with _lock:
        _running[0] += 1
        if _running[0] == 1:
            libc.mallopt(M_MMAP_THRESHOLD, ROOMY_MMAP)
            libc.mallopt(M_TRIM_THRESHOLD, ROOMY_TRIM)
    try:
        yield
    finally:
        with _lock:
            _running[0] -= 1
            if _running[0] == 0:
                libc.mallopt(M_TRIM_THRESHOLD, trim)
                libc.mallopt(M_MMAP_THRESHOLD, settings.get("MALLOC_MMAP_THRESHOLD_", GLIBC_MMAP))
                libc.malloc_trim(0)
