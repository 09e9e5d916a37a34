"""Ship the running toolkit to a cluster for one run, and check every worker that joins it.

Production clusters install toolkit in their image or environment (docs/clusters.md). A
developer's checkout differs from every image, so `ship(client)` packs the package the client
imports (its sources and a dist-info, i.e. an unpacked wheel) and unpacks it into each worker's
and the scheduler's own local directory, first on `sys.path`. Nothing is installed into the
shared environment, and nothing outlives the run: on exit the plugin is unregistered, the
shipped path leaves `sys.path` and the shipped modules leave `sys.modules` on the scheduler and
every worker, so the next run imports what is installed there (and is checked against it).

`guard(client)` registers, for the run, a worker plugin that checks each worker as it joins:
one whose toolkit code or dependencies differ from the client's runs nothing, is retired, and
is named on the client (the `toolkit-identity` event topic).

The installer and the plugin are built inside functions so that cloudpickle sends them by value:
the receiving process cannot import toolkit yet, which is the point.

Why not distributed's `UploadDirectory`: it unpacks into the nanny's directory and needs a worker
restart to reach the worker's path, and leaves an already-imported toolkit in place. Here every
process gets the code on its own `sys.path` at once and forgets the toolkit it imported.
"""

from __future__ import annotations

import io
import logging
import os
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

from toolkit.engine.versions import (
    CODE,
    DISTRIBUTION,
    PACKAGES,
    Identity,
    _identity,
    check_versions,
    local_versions,
    refusal,
)

PLUGIN = "toolkit-identity"  # one name: a run's plugin replaces whatever an earlier one left
TOPIC = "toolkit-identity"  # a joining worker that was refused, as heard by the client
log = logging.getLogger("toolkit.engine")
_guarded: set[str] = set()  # ids of this process's clients whose run is guarded now


def payload() -> tuple[bytes, str]:
    """The running toolkit as a zip (sources, package data, dist-info) and its code digest,
    the digest every process's identity reports (`versions._identity`)."""
    sources, digest, _ = _identity()
    root = str(Path(__file__).resolve().parents[1])  # the toolkit package
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, path in sources(root):
            z.writestr(name, Path(path).read_bytes())
        v = version(DISTRIBUTION)
        dist = DISTRIBUTION.replace("-", "_")  # a dist-info folder's spelling of it
        z.writestr(
            f"{dist}-{v}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {v}\n",
        )
    return buf.getvalue(), digest(root)


def _installer() -> Any:
    """(install, uninstall), run in the receiving process."""

    def forget() -> None:
        import importlib
        import sys

        for name in [m for m in sys.modules if m == "toolkit" or m.startswith("toolkit.")]:
            del sys.modules[name]  # the next unpickle imports from sys.path as it is now
        importlib.invalidate_caches()

    def install(data: bytes, digest: str, base: str, client_pid: int) -> str:
        import io
        import os
        import shutil
        import sys
        import zipfile

        if os.getpid() == client_pid:  # an in-process cluster already runs the client's code
            return ""
        target = os.path.join(base, f"toolkit-shipped-{digest}")
        if not os.path.isdir(target):
            scratch = f"{target}.partial-{os.getpid()}"
            zipfile.ZipFile(io.BytesIO(data)).extractall(scratch)
            try:
                os.replace(scratch, target)
            except OSError:  # another process on this host unpacked it first
                shutil.rmtree(scratch, ignore_errors=True)
        sys.path[:] = [p for p in sys.path if "toolkit-shipped-" not in p]
        sys.path.insert(0, target)
        forget()
        return target

    def uninstall(client_pid: int) -> bool:
        import os
        import sys

        if os.getpid() == client_pid or not any("toolkit-shipped-" in p for p in sys.path):
            return False
        sys.path[:] = [p for p in sys.path if "toolkit-shipped-" not in p]
        forget()
        return True

    return install, uninstall


def _plugin(want: Identity, shipped: tuple[bytes, str] | None, client_pid: int) -> Any:
    """The run's worker plugin: installs the shipped code (if any), then refuses a worker whose
    identity is not the client's. It runs before the worker handles any task (distributed
    sets plugins up before it reads the scheduler's messages)."""
    from distributed import WorkerPlugin

    install, uninstall = _installer()
    identity = _identity()[2]

    async def retire(worker: Any) -> None:
        import time

        try:
            await worker.scheduler.retire_workers(
                workers=[worker.address],
                close_workers=False,
                remove=True,
                stimulus_id=f"toolkit-identity-{time.time()}",
            )
        finally:
            await worker.close(nanny=True, reason="toolkit-identity: other code than the client")

    class CheckIdentity(WorkerPlugin):
        name = PLUGIN

        def setup(self, worker: Any) -> None:
            if shipped is not None:
                install(*shipped, worker.local_directory, client_pid)
            have = identity(tuple(want))
            if have == want:
                return
            from distributed.core import Status

            worker.status = Status.closing_gracefully  # from now on it starts no task
            worker.log_event(TOPIC, {"worker": worker.address, "have": have})
            worker.loop.add_callback(retire, worker)

        def teardown(self, worker: Any) -> None:
            if shipped is not None:
                uninstall(client_pid)

    return CheckIdentity()


def _quietly(what: str, call: Callable[[], object]) -> None:
    try:
        call()
    except Exception as err:  # the cluster may be gone: the next run's check sees any remnant
        log.debug("%s failed: %s", what, err)


@contextmanager
def guard(
    client: Any,
    say: Callable[[str], None] | None = None,
    *,
    shipped: tuple[bytes, str] | None = None,
) -> Iterator[None]:
    """For the run: every worker, now or joining, runs the client's code (installing `shipped`
    first) or is refused and retired; `say` gets one line naming each refused worker. On exit
    the plugin is unregistered (undoing the install) and the topic unsubscribed."""
    if client.id in _guarded:
        if shipped is not None:
            raise RuntimeError("ship before connecting: this client's run is already guarded")
        yield  # an outer run on this client guards it already
        return
    want = local_versions(PACKAGES)
    tell = say or log.warning

    def heard(event: tuple[float, dict[str, Any]]) -> None:
        msg = event[1]
        addr = msg.get("worker", "?")
        line = refusal(want, want, {f"worker {addr}": msg.get("have", {})}, f"retired {addr}")
        tell(line or f"retired {addr}: it differs from the client")

    _guarded.add(client.id)
    pid = os.getpid()
    try:
        client.subscribe_topic(TOPIC, heard)
        client.register_plugin(_plugin(want, shipped, pid))
        yield
    finally:
        _quietly("unregistering the worker plugin", lambda: client.unregister_worker_plugin(PLUGIN))
        if shipped is not None:
            uninstall = _installer()[1]
            _quietly("unshipping the workers", lambda: client.run(uninstall, pid))
        _quietly("unsubscribing", lambda: client.unsubscribe_topic(TOPIC))
        _guarded.discard(client.id)


@contextmanager
def ship(client: Any, say: Callable[[str], None] | None = None) -> Iterator[str]:
    """For the run inside: the scheduler and every (current and joining) worker import the
    running toolkit; afterwards, what they had before. Dependencies are checked first, so a
    cluster that shipping cannot fix is refused before anything is installed. Yields the
    shipped code digest.

        with ship(client):
            run(plan, cluster=client)
    """
    check_versions(client, skip=(CODE,))
    data, digest = payload()
    install, uninstall = _installer()
    pid = os.getpid()
    try:
        client.run_on_scheduler(
            lambda dask_scheduler: install(data, digest, dask_scheduler.local_directory, pid)
        )
        with guard(client, say, shipped=(data, digest)):
            check_versions(client)  # every process imports the client's code now
            yield digest
    finally:
        _quietly("unshipping the scheduler", lambda: client.run_on_scheduler(uninstall, pid))


@contextmanager
def checked(
    client: Any,
    *,
    shipping: bool = False,
    joins: bool = True,
    say: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """A run's cluster checked: shipped to (`shipping`) or compared with the client, and, with
    `joins`, every worker that joins during the run checked as it joins."""
    if shipping:
        with ship(client, say):
            yield
        return
    check_versions(client)
    if not joins:
        yield
        return
    with guard(client, say):
        yield
