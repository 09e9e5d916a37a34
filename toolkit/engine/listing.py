"""Observers for gates and resume: what objects exist, named as the tasks name them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toolkit import storage


@dataclass(frozen=True)
class ListedKeys:
    """List `prefix` of `store` and map each key to a task key (drop it when `to_task` gives None).

    Picklable (the store pickles by URL), so it runs on whichever node observes.
    """

    store: storage.Store
    prefix: str = ""
    to_task: Callable[[str], str | None] | None = None

    def __call__(self) -> frozenset[str]:
        keys = storage.list_keys(self.store, self.prefix)
        if self.to_task is None:
            return frozenset(keys)
        return frozenset(k for k in map(self.to_task, keys) if k is not None)

    @property
    def per_range(self) -> KeysBetween | None:
        """How the engine observes this listing one key range at a time (a gate page), when
        that is cheaper than one listing: object keys named as themselves, in a cloud store."""
        return (
            KeysBetween(self.store, self.prefix)
            if self.to_task is None and ranged(self.store)
            else None
        )

    @property
    def per_block(self) -> TasksBetween | None:
        """How the engine observes one contiguous block's done tasks, when a range lists
        cheaply (tasks named by their objects' keys)."""
        between = self.per_range
        return TasksBetween(between) if between is not None else None


def ranged(store: object) -> bool:
    """`store` lists a key range without listing the rest: an object store whose listings come
    sorted (a local folder lists whole, an Icechunk view from its manifests)."""
    return isinstance(store, storage.Store) and not store.is_local


@dataclass(frozen=True)
class KeysBetween:
    """The keys of `prefix` from `first` to `last` that exist (`storage.list_between`)."""

    store: storage.Store
    prefix: str = ""

    def __call__(self, first: str, last: str) -> frozenset[str]:
        return frozenset(storage.list_between(self.store, self.prefix, first, last))


@dataclass(frozen=True)
class TasksBetween:
    """The tasks of one contiguous block whose object exists (a task named by its key)."""

    listing: KeysBetween

    def __call__(self, block: Sequence[Any]) -> frozenset[str]:
        if not block:
            return frozenset()
        have = self.listing(block[0].key, block[-1].key)
        return frozenset(t.key for t in block if t.key in have)
