"""Services for engine tests; importable by spawned worker processes."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from toolkit import storage


@dataclass(frozen=True)
class Item:
    stage: str
    n: int

    @property
    def key(self) -> str:
        return f"{self.stage}/{self.n:04d}"


@dataclass(frozen=True)
class Write:
    """Writes the task's object; optionally 'succeeds' without writing some keys (the bug a gate catches)."""

    store: storage.Store
    skip_writing: frozenset[str] = frozenset()

    def __call__(self, item: Item) -> str:
        if item.key not in self.skip_writing:
            storage.put(self.store, item.key, item.key.encode())
        return item.key


@dataclass(frozen=True)
class KillOnce:
    """Kills its own worker process (SIGKILL) the first time it meets `victim`, then writes."""

    store: storage.Store
    victim: str

    def __call__(self, item: Item) -> str:
        if item.key == self.victim:
            try:
                storage.put(self.store, "markers/killed", b"1", mode="create")
            except storage.AlreadyExists:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        storage.put(self.store, item.key, b"x")
        return item.key


@dataclass(frozen=True)
class FailOnce:
    """Raises the first time per key (a transient error), succeeds on retry."""

    store: storage.Store

    def __call__(self, item: Item) -> str:
        try:
            storage.put(self.store, f"markers/{item.key}", b"1", mode="create")
        except storage.AlreadyExists:
            storage.put(self.store, item.key, b"x")
            return item.key
        raise RuntimeError(f"transient failure on {item.key}")


def write_block(store: storage.Store, items: list[Item]) -> list[str]:
    for item in items:
        storage.put(store, item.key, b"x")
    return [i.key for i in items]


@dataclass(frozen=True)
class BlockWriter:
    store: storage.Store

    def __call__(self, items: list[Item], tick: Callable[[int], None]) -> list[str]:
        return write_block(self.store, items)


def concat(values: list[list[str]]) -> list[str]:
    return sorted(k for v in values for k in v)


@dataclass(frozen=True)
class CountingWrite:
    """Writes the task's object and appends its key to `<calls>/<stage>.log`: every call counts,
    on whichever worker process it ran (O_APPEND lines from several processes do not mix)."""

    store: storage.Store
    calls: str

    def __call__(self, item: Item) -> str:
        with open(os.path.join(self.calls, f"{item.stage}.log"), "a") as log:
            log.write(item.key + "\n")
        storage.put(self.store, item.key, b"x")
        return item.key


@dataclass(frozen=True)
class Explode:
    """Raises a plain ValueError on `victim` (a bug in a service, as users meet them)."""

    store: storage.Store
    victim: str

    def __call__(self, item: Item) -> str:
        if item.key == self.victim:
            raise ValueError(f"cannot reshape array of size 0 into shape (1,256,0) at {item.key}")
        storage.put(self.store, item.key, b"x")
        return item.key


@dataclass(frozen=True)
class SlowWrite:
    """A task of `seconds` of work (I/O-bound, as an index read is), then its object, whose
    body names the process that wrote it."""

    store: storage.Store
    seconds: float

    def __call__(self, item: Item) -> str:
        import time

        time.sleep(self.seconds)  # the work itself, not a wait for anything
        storage.put(self.store, item.key, str(os.getpid()).encode())
        return item.key


@dataclass(frozen=True)
class Heavy(Item):
    """A task carrying its data (as a commit stage's group carries its forks)."""

    payload: bytes = b""


@dataclass(frozen=True)
class WriteSize:
    store: storage.Store

    def __call__(self, task: Heavy) -> str:
        storage.put(self.store, task.key, str(len(task.payload)).encode())
        return task.key


def mapped_by_a_block(nbytes: int = 16 << 20) -> int:
    """How many more bytes glibc holds in mmapped regions while a fresh `nbytes` block is
    alive (mallinfo2's hblkhd): the block's size when glibc maps it, ~0 when the heap serves it."""
    import ctypes

    import numpy as np

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
            )
        ]  # fmt: skip

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    before = libc.mallinfo2().hblkhd
    block = np.ones(nbytes, dtype=np.uint8)
    during = libc.mallinfo2().hblkhd
    del block
    return int(during) - int(before)


@dataclass(frozen=True)
class MappedInProbe:
    """A done-set probe that records, under `probe/mapped`, how much of a 16 MiB block glibc
    mapped while it ran; it finds nothing done."""

    store: storage.Store

    def __call__(self) -> frozenset[str]:
        storage.put(self.store, "probe/mapped", str(mapped_by_a_block()).encode())
        return frozenset()


@dataclass(frozen=True)
class Together:
    """Writes its task's object once every task named in `keys` has started (a distributed
    `Event` each): a node placed behind another on a busy single-thread worker never sees the
    other start, and fails after `timeout` seconds."""

    store: storage.Store
    run: str  # the events' prefix: one run's
    keys: tuple[str, ...]
    timeout: float = 30.0

    def __call__(self, item: Item) -> str:
        from distributed import Event

        Event(f"{self.run}/{item.key}").set()
        for key in self.keys:
            if not Event(f"{self.run}/{key}").wait(self.timeout):
                raise TimeoutError(f"{item.key} started, {key} did not within {self.timeout} s")
        storage.put(self.store, item.key, item.key.encode())
        return item.key


@dataclass(frozen=True)
class Overlap:
    """Writes its task's object and counts how many tasks run at once (`most`); with `meet`,
    each task first waits at a barrier of that many parties: tasks run one after another
    break it after `timeout` seconds. In-process runs only (it holds a lock)."""

    store: storage.Store
    meet: int = 0
    timeout: float = 20.0
    state: dict = field(default_factory=lambda: {"now": 0, "most": 0, "lock": threading.Lock()})

    def __post_init__(self) -> None:
        if self.meet:
            self.state["barrier"] = threading.Barrier(self.meet, timeout=self.timeout)

    def __call__(self, item: Item) -> str:
        s = self.state
        with s["lock"]:
            s["now"] += 1
            s["most"] = max(s["most"], s["now"])
        try:
            if self.meet:
                s["barrier"].wait()
            storage.put(self.store, item.key, item.key.encode())
        finally:
            with s["lock"]:
                s["now"] -= 1
        return item.key


def keys_of(values: list[object]) -> tuple[object, ...]:
    """A fold of keys side by side (associative over its own outputs)."""
    out: list[object] = []
    for v in values:
        out.extend(v if isinstance(v, tuple) else (v,))
    return tuple(out)


@dataclass(frozen=True)
class Settle:
    """A settle that records where it ran and what it saw, and hands on only a count: the
    keys of its window's results never travel to the client."""

    store: storage.Store

    def __call__(self, keys: tuple[str, ...]) -> int:
        name = f"settled/{os.getpid()}-{min(keys)}"
        storage.put(self.store, name, "\n".join(sorted(keys)).encode())
        return len(keys)
