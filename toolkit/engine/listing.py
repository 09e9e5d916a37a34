"""Observers for gates and resume: what objects exist, named as the tasks name them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
