"""Crash hooks and a manifest fingerprint for the virtual crash tests.

The write loop announces each step of a commit's life as an audit event
(`toolkit.transaction.AUDIT_EVENT`); `at_steps` hooks it in this process, `StepPlugin` in
every worker of a Dask cluster. Importable by spawned Dask workers and by the crash
subprocess. The hooks die for real (`os._exit` or SIGKILL of the calling process): nothing in
Icechunk is mocked.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.datasets import sim_gfs
from toolkit.transaction import AUDIT_EVENT
from toolkit.virtual.refs import ArrayGeometry
from toolkit.virtual.write import Job

CRASH_EXIT = 17
INITS = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)]


@dataclass(frozen=True)
class ExitAt:
    """`os._exit(CRASH_EXIT)` the first time the job reaches `point` (the process dies there)."""

    point: str

    def __call__(self, point: str) -> None:
        if point == self.point:
            os._exit(CRASH_EXIT)


@dataclass(frozen=True)
class ExitAtNth:
    """`os._exit(CRASH_EXIT)` the `nth` time the job reaches `point` (a round boundary, a fork
    inside a later round)."""

    point: str
    nth: int
    seen: list[int]

    def __call__(self, point: str) -> None:
        if point == self.point:
            self.seen.append(1)
            if len(self.seen) == self.nth:
                os._exit(CRASH_EXIT)


@dataclass(frozen=True)
class SleepAt:
    """Sleep `seconds` each time the job reaches `point` (a round slow enough to be cut)."""

    point: str
    seconds: float

    def __call__(self, point: str) -> None:
        if point == self.point:
            import time

            time.sleep(self.seconds)


@dataclass(frozen=True)
class KillOnceAt:
    """SIGKILL the calling (worker) process the first time any process reaches `point`.

    "First" is decided by a marker object created with mode="create": exactly one caller wins.
    """

    store: storage.Store
    point: str

    def __call__(self, point: str) -> None:
        if point != self.point:
            return
        try:
            storage.put(self.store, f"killed-at-{point}", str(os.getpid()).encode(), mode="create")
        except storage.AlreadyExists:
            return
        os.kill(os.getpid(), signal.SIGKILL)


_ACTIVE: list[Callable[[str], None]] = []


def _dispatch(event: str, args: tuple[Any, ...]) -> None:
    if event == AUDIT_EVENT:
        for hook in list(_ACTIVE):
            hook(args[0])


def _install() -> None:
    # Audit hooks cannot be removed: one dispatcher per process, hooks come and go in _ACTIVE.
    if not getattr(sys, "_toolkit_step_dispatch", False):
        sys.addaudithook(_dispatch)
        sys._toolkit_step_dispatch = True  # type: ignore[attr-defined]


@contextmanager
def at_steps(hook: Callable[[str], None]) -> Iterator[None]:
    """Call `hook(step)` at each step of a commit's life in this process, inside the block."""
    _install()
    _ACTIVE.append(hook)
    try:
        yield
    finally:
        _ACTIVE.remove(hook)


class StepPlugin(WorkerPlugin):
    """`hook(step)` at each step in every worker (a restarted worker gets it again)."""

    def __init__(self, hook: Callable[[str], None]) -> None:
        self.hook = hook

    def setup(self, worker: Any) -> None:
        _install()
        _ACTIVE.append(self.hook)

    def teardown(self, worker: Any) -> None:
        if self.hook in _ACTIVE:
            _ACTIVE.remove(self.hook)


def sim_job(src: str, repo: str, replica: str | None = None) -> Job:
    return Job(
        sim_gfs(storage.open_store(src)),
        R.RepoRef(storage.open_store(repo)),
        replicas=(R.RepoRef(storage.open_store(replica)),) if replica else (),
    )


def fingerprint(ref: R.RepoRef, variables: Any, branch: str = "main") -> dict[str, Any]:
    """What a branch's manifests hold, independent of commit history.

    refs: {(variable, chunk index, length, sha256 of the referenced bytes)} -- the bytes pin
    location+offset+length to the exact GRIB message; locations: every source URL referenced;
    manifest_refs: the live manifests' total ref count (a duplicate would show here).
    """
    from zarr.core.buffer import default_buffer_prototype

    repo = ref.open(fresh=True)
    session = R.readonly(repo, branch)
    refs = set()

    async def read(key: str) -> bytes:
        buf = await session.store.get(key, prototype=default_buffer_prototype())
        return buf.to_bytes()

    for name in sorted(variables):
        for idx in R.chunk_coordinates(session, name):
            key = ArrayGeometry(name, ("x",) * len(idx), (1,) * len(idx), (1,) * len(idx)).encode(
                idx
            )
            data = asyncio.run(read(key))
            refs.add((name, idx, len(data), hashlib.sha256(data).hexdigest()))
    return {
        "refs": refs,
        "locations": R.virtual_locations(session),
        "manifest_refs": R.manifest_report(repo, branch).refs,
    }
