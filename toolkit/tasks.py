"""Stable task lists and striping (pure).

A task is a frozen dataclass with a string `key`. A worker's share is always computed from the
stable list first (`stripe`) and only then narrowed by what it sees done (`remaining`): workers
observe "done" at different moments, and filtering first would give them lists of different
lengths, whose stripes overlap and leave tasks unclaimed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar, runtime_checkable

__all__ = [
    "Named",
    "StableTasks",
    "Task",
    "TaskList",
    "block_bounds",
    "guided_blocks",
    "remaining",
    "stable",
    "stripe",
]


@runtime_checkable
class Task(Protocol):
    @property
    def key(self) -> str: ...


@dataclass(frozen=True)
class Named:
    """A task that is its name: a one-off step (setup, finalize) or one object's key."""

    name: str

    @property
    def key(self) -> str:
        return self.name


T = TypeVar("T", bound=Task)
T_co = TypeVar("T_co", covariant=True)

StripeMode = Literal["strided", "contiguous"]


class TaskList(Protocol[T_co]):
    """What a stage's task list must be: a fixed-order, duplicate-free sequence whose slices are
    blocks, and a digest of what it names. `StableTasks` holds objects; a columnar list (e.g.
    `toolkit.virtual.filetable.FileTable`) holds positions and makes its tasks when iterated."""

    @property
    def digest(self) -> str: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[T_co]: ...
    def __getitem__(self, i: slice, /) -> Sequence[T_co]: ...


@dataclass(frozen=True)
class StableTasks(Sequence[T]):
    """A sorted, duplicate-free task list and the hash of its keys."""

    tasks: tuple[T, ...]
    digest: str

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, i):  # type: ignore[override]
        return self.tasks[i]

    def __iter__(self):
        return iter(self.tasks)

    @property
    def keys(self) -> list[str]:
        return [t.key for t in self.tasks]


def stable[T: Task](tasks: Iterable[T]) -> StableTasks[T]:
    """Sort by key, reject duplicate keys, hash the key list."""
    items = sorted(tasks, key=lambda t: t.key)
    h = hashlib.sha256()
    previous: str | None = None
    for t in items:
        key = t.key
        if not isinstance(key, str):
            raise TypeError(f"task key must be a str, got {type(key).__name__} in {t!r}")
        if key == previous:
            raise ValueError(f"duplicate task key {key!r}: every task must own one object")
        previous = key
        h.update(key.encode())
        h.update(b"\0")
    return StableTasks(tuple(items), h.hexdigest())


def block_bounds(n: int, index: int, count: int) -> tuple[int, int]:
    """[start, stop) of contiguous block `index` of `count` over n items (sizes differ by <= 1)."""
    if count < 1:
        raise ValueError(f"stripe count must be >= 1, got {count}")
    if not 0 <= index < count:
        raise ValueError(f"stripe index {index} outside 0..{count - 1}")
    base, extra = divmod(n, count)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def stripe[T: Task](
    tasks: Sequence[T], index: int, count: int, mode: StripeMode = "strided"
) -> Sequence[T]:
    """Worker `index`'s share of the stable list: strided (i::n) or a contiguous block.

    A slice of `tasks`: a columnar list (`TaskList`) gives a columnar block, which its worker
    turns into tasks, so a block ships as a few arrays rather than an object per task."""
    if mode == "strided":
        block_bounds(len(tasks), index, count)  # validates index/count
        return tasks[index::count]
    if mode == "contiguous":
        start, stop = block_bounds(len(tasks), index, count)
        return tasks[start:stop]
    raise ValueError(f"stripe mode must be 'strided' or 'contiguous', not {mode!r}")


def remaining[T: Task](mine: Iterable[T], done: Collection[str]) -> list[T]:
    """The tasks of one stripe whose objects are not yet there. Apply after `stripe`."""
    done_set = done if isinstance(done, (set, frozenset)) else set(done)
    return [t for t in mine if t.key not in done_set]


def guided_blocks(
    n: int, threads: Callable[[], int], share: int = 4, floor: int = 1, cap: int | None = None
) -> Iterator[tuple[int, int]]:
    """[start, stop) blocks covering range(n) in order, each cut when it is asked for: a
    `share`-th of what remains per thread the cluster has then (`threads()`), at least `floor`
    and at most `cap` tasks (guided self-scheduling). Blocks cut later are smaller, and cut for
    the cluster as it is by then: a cluster that grows mid-stage gets blocks for its new
    workers; one of a constant size always gets the same blocks for the same `n`."""
    if share < 1 or floor < 1 or (cap is not None and cap < floor):
        raise ValueError(
            f"guided blocks need share >= 1 and 1 <= floor <= cap, not {share}, {floor}, {cap}"
        )
    start = 0
    while start < n:
        size = max(floor, -(-(n - start) // (share * max(1, threads()))))
        size = min(size, cap) if cap is not None else size
        stop = min(n, start + size)
        yield start, stop
        start = stop
