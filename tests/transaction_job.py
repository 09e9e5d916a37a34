"""A toy job on `toolkit.transaction`: two rounds of forked work over two repos (a replica
and the primary), small enough to run in a test and to die at each step of in a subprocess.

    python -m tests.transaction_job DIR POINT

runs the job on the repos under DIR and `os._exit(CRASH_EXIT)`s the first time the
transaction announces POINT (exit 0 when it never does). Nothing in Icechunk is mocked.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.errors

from toolkit import icechunk as R
from toolkit import storage
from toolkit import transaction as T
from toolkit.engine import run
from toolkit.plan import Gate, Plan, Report, Stage
from toolkit.tasks import Named, stable

CRASH_EXIT = 17
N = 8  # cells per array
ARRAYS = ("v", "w")  # one per round
FILL = -1


def value(array: str, i: int) -> int:
    return (ARRAYS.index(array) + 1) * 100 + i


def refs(root: Path) -> tuple[R.RepoRef, ...]:
    """The replica, then the primary: created on first use."""
    out = []
    for name in ("replica", "primary"):
        store = storage.open_store(str(root / name))
        if not R.is_repo(store):
            R.create_repo(store, R.VirtualConfig([R.local_container(str(root))]))
        out.append(R.RepoRef(store))
    return tuple(out)


@dataclass(frozen=True)
class MakeArrays:
    """The setup change: both rounds' arrays on the branch, filled with nothing yet."""

    def __call__(self, _ref: R.RepoRef, session: Any, _main: str) -> None:
        root = zarr.open_group(session.store, mode="a")
        for name in ARRAYS:
            if name not in root:
                root.create_array(name, shape=(N,), chunks=(1,), dtype="i4", fill_value=FILL)


@dataclass(frozen=True)
class Present:
    """The cells of `array` on the primary's branch (or main, once finalized) that hold data."""

    txn: T.Txn
    array: str

    def __call__(self) -> frozenset[str]:
        repo = self.txn.primary.open(fresh=True)
        branch = self.txn.branch if self.txn.branch in R.branches(repo) else "main"
        try:
            root = zarr.open_group(R.readonly(repo, branch).store, mode="r")
        except zarr.errors.GroupNotFoundError:
            return frozenset()
        if self.array not in root:
            return frozenset()
        data = root[self.array][:]
        return frozenset(f"{self.array}/{i}" for i in np.flatnonzero(data != FILL))


@dataclass(frozen=True)
class Write:
    """One work node: its cells written into a fork of each repo, nothing committed."""

    txn: T.Txn
    array: str
    lose: str = ""  # a key written as nothing, yet reported done (a bug the gate must catch)

    def __call__(self, tasks: list[Named], tick: Callable[[int], None]) -> T.Forked | None:
        if not tasks:
            return None
        forks = []
        for ref in self.txn.refs:
            fork = T.fork_of(ref, self.txn.branch)
            arr = zarr.open_array(fork.store, path=self.array, mode="r+")
            for t in tasks:
                i = int(t.key.split("/")[1])
                arr[i] = FILL if t.key == self.lose else value(self.array, i)
            forks.append((ref.url, fork))
        T.step("worker_forked")
        return T.Forked(tuple(forks), tuple(t.key for t in tasks))


def describe(group: T.Group) -> tuple[str, dict[str, Any]]:
    cells = sum(len(o.done) for o in group.outs)
    return f"toy: {cells} cell(s)", {"cells": cells}


def moved(url: str) -> str:
    return f"{url}: main moved under the toy transaction"


def plan(root: Path, branch: str = "toy-1", group_size: int = 2, lose: str = "") -> Plan:
    txn = T.Txn(refs(root), branch)
    rounds = []
    for name in ARRAYS:
        keys = [f"{name}/{i}" for i in range(N)]
        work = Stage(
            name,
            stable(Named(k) for k in keys),
            Write(txn, name, lose),
            None,
            workers=4,
            done=Present(txn, name),
            combine=T.gather,
        )
        gate = Gate(Present(txn, name), want=tuple(keys))
        rounds.append(T.Round(work, f"{name}-commit", gate, describe, group_size=group_size))
    setup = T.Setup(txn, MakeArrays(), "toy setup", {"toy": "setup"}, replaces="toy-")
    return Plan("toy-transaction", T.stages(txn, setup, rounds, moved))


def build(root: Path, **kwargs: Any) -> Report:
    return run(plan(root, **kwargs), executor="sync")


def main_values(ref: R.RepoRef) -> dict[str, list[int]]:
    try:
        root = zarr.open_group(R.readonly(ref.open(fresh=True), "main").store, mode="r")
    except zarr.errors.GroupNotFoundError:  # a main with nothing on it yet
        return {}
    return {name: root[name][:].tolist() for name in ARRAYS if name in root}


def exit_at(point: str) -> Callable[[str, tuple[Any, ...]], None]:
    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == T.AUDIT_EVENT and args[0] == point:
            os._exit(CRASH_EXIT)

    return hook


if __name__ == "__main__":
    root, point = Path(sys.argv[1]), sys.argv[2]
    sys.addaudithook(exit_at(point))
    build(root)
    sys.exit(0)
