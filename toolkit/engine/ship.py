"""Ship the running toolkit to a cluster for one run, and check every worker that joins it.

Production clusters install toolkit in their image or environment (docs/clusters.md). A
developer's checkout differs from every image, so `ship(client)` packs the package the client
imports (its sources and a dist-info, i.e. an unpacked wheel) and unpacks it into each worker's
and the scheduler's own local directory, first on `sys.path`. Nothing is installed into the
shared environment, and nothing outlives the run: on exit the plugin is unregistered, the
shipped path leaves `sys.path` and the shipped modules leave `sys.modules` on the scheduler and
every worker, so the next run imports what is installed there (and is checked against it).

`guard(client)` checks, for one run, each worker as it joins. A worker with the client's code
gets the run's Dask resource (`toolkit-run-<token>`), which every task of the run requires
(`run_resources`); one whose code or dependencies differ never gets it, so it runs none of the
run's tasks, keeps serving other clients, and is named once on the client. Everything a run
registers carries the run's own token, so concurrent runs never touch each other's, and a
scheduler plugin removes it all when the run's client leaves, even killed: a shared cluster is
left as it was.

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
import uuid
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

PLUGIN = "toolkit-identity"  # a run's worker plugin and event topic: toolkit-identity-<token>
RESOURCE = "toolkit-run"  # a run's Dask resource and scheduler plugin: toolkit-run-<token>
log = logging.getLogger("toolkit.engine")
_guarded: dict[str, str] = {}  # this process's clients whose run is guarded: id -> resource


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


class _Run:
    """The names one guarded run registers under: its own, so concurrent runs never touch each
    other's, and a prefix a test or an operator can find leftovers by."""

    def __init__(self, token: str) -> None:
        self.plugin = f"{PLUGIN}-{token}"  # the worker plugin, and the event topic it writes to
        self.resource = f"{RESOURCE}-{token}"  # the Dask resource, and the scheduler plugin


def _on_scheduler(run: _Run, client_id: str) -> tuple[Any, Any, Any]:
    """(admit, forget, expiry), run in the scheduler: `admit(address, nthreads)` gives a checked
    worker the run's resource; `forget()` removes all the run registered; `expiry` is the
    scheduler plugin that forgets the run when its client leaves (a killed client included)."""
    from distributed import SchedulerPlugin

    plugin, resource = run.plugin, run.resource

    def admit(address: str, nthreads: int, dask_scheduler: Any) -> bool:
        s = dask_scheduler
        ws = s.workers.get(address)
        if ws is None or plugin not in s.worker_plugins or client_id not in s.clients:
            return False  # the run ended (or its client left) while this worker was checked
        ws.resources[resource] = nthreads
        ws.used_resources.setdefault(resource, 0)
        s.resources.setdefault(resource, {})[address] = nthreads
        if ws in s.running:  # tasks no worker could take wait in `unrunnable`: this one can
            s.transitions(
                s.bulk_schedule_unrunnable_after_adding_worker(ws), f"{resource}-{address}"
            )
        return True

    def restricted(s: Any) -> bool:
        return any(resource in (ts.resource_restrictions or ()) for ts in s.tasks.values())

    async def forget(dask_scheduler: Any) -> None:
        import asyncio

        s = dask_scheduler
        s.plugins.pop(resource, None)
        if s.worker_plugins.pop(plugin, None) is not None:  # joining workers no longer get it
            await s.broadcast(msg={"op": "plugin-remove", "name": plugin}, on_error="ignore")
        for _ in range(600):  # released tasks still counted against the resource: let them go
            if not restricted(s):
                break
            await asyncio.sleep(0.5)
        for ws in s.workers.values():
            ws.resources.pop(resource, None)
            ws.used_resources.pop(resource, None)
        s.resources.pop(resource, None)

    class Expiry(SchedulerPlugin):
        name = resource

        def start(self, scheduler: Any) -> None:
            if client_id not in scheduler.clients:
                raise RuntimeError(f"client {client_id} left before its run was registered")

        def remove_client(self, scheduler: Any, client: str) -> None:
            if client == client_id:
                import asyncio

                self.forgetting = asyncio.ensure_future(forget(scheduler))

    return admit, forget, Expiry()


def _plugin(
    want: Identity, shipped: tuple[bytes, str] | None, client_pid: int, run: _Run, admit: Any
) -> Any:
    """The run's worker plugin: installs the shipped code (if any), then admits the worker to
    the run (gives it the run's resource) if its identity is the client's. A worker that differs
    is only named: it runs none of this run's tasks and goes on serving everyone else. It runs
    before the worker handles any task (distributed sets plugins up before it reads the
    scheduler's messages)."""
    from distributed import WorkerPlugin

    install, uninstall = _installer()
    identity = _identity()[2]
    name, resource = run.plugin, run.resource

    def drop(worker: Any) -> None:
        """The resource leaves the worker once no task of the run (a cancelled one still
        executing after its client died) holds it."""
        state = worker.state
        if any(resource in (ts.resource_restrictions or ()) for ts in state.tasks.values()):
            worker.loop.call_later(0.5, drop, worker)
            return
        state.total_resources.pop(resource, None)
        state.available_resources.pop(resource, None)

    class CheckIdentity(WorkerPlugin):
        async def setup(self, worker: Any) -> None:
            if shipped is not None:
                install(*shipped, worker.local_directory, client_pid)
            have = identity(tuple(want))
            if have != want:
                worker.log_event(name, {"worker": worker.address, "have": have})
                return
            from distributed.protocol.pickle import dumps

            n = worker.state.nthreads
            worker.state.total_resources[resource] = n
            worker.state.available_resources[resource] = n
            address = worker.contact_address
            reply = await worker.scheduler.run_function(
                function=dumps(admit), args=dumps((address, n)), wait=True
            )
            if reply.get("status") != "OK" or not reply.get("result"):
                drop(worker)  # the run is over: nothing of it stays here

        def teardown(self, worker: Any) -> None:
            drop(worker)
            if shipped is not None:
                uninstall(client_pid)

    CheckIdentity.name = name
    return CheckIdentity()


def _quietly(what: str, call: Callable[[], object]) -> None:
    try:
        call()
    except Exception as err:  # the cluster may be gone: the run's expiry plugin cleans up
        log.debug("%s failed: %s", what, err)


def _forgotten(client: Any, resource: str, seconds: float = 10.0) -> None:
    """Return once no worker holds the run's resource any more (a worker lets it go once the
    run's last task has left it), or after `seconds`: the run leaves nothing behind."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        held = client.run(lambda dask_worker: resource in dask_worker.state.total_resources)
        if not any(held.values()):
            return
        time.sleep(0.1)


def run_resources(client: Any) -> dict[str, float] | None:
    """The Dask resources every task of this client's guarded run requires (only workers whose
    identity check passed for the run hold them), or None when nothing restricts the run."""
    resource = _guarded.get(getattr(client, "id", None))
    return None if resource is None else {resource: 1}


@contextmanager
def guard(
    client: Any,
    say: Callable[[str], None] | None = None,
    *,
    shipped: tuple[bytes, str] | None = None,
) -> Iterator[None]:
    """For the run: every worker, now or joining, is checked (installing `shipped` first); the
    run's tasks go only to workers that run the client's code, and `say` gets one line naming
    each worker kept out. On exit everything registered is removed (undoing the install) and
    the topic unsubscribed; if the client dies first, the scheduler removes it."""
    if client.id in _guarded:
        if shipped is not None:
            raise RuntimeError("ship before connecting: this client's run is already guarded")
        yield  # an outer run on this client guards it already
        return
    want = local_versions(PACKAGES)
    tell = say or log.warning
    run = _Run(uuid.uuid4().hex[:16])
    named: set[str] = set()

    def heard(event: tuple[float, dict[str, Any]]) -> None:
        msg = event[1]
        addr = msg.get("worker", "?")
        if addr in named:
            return
        named.add(addr)
        what = f"kept {addr} out of this run"
        line = refusal(want, want, {f"worker {addr}": msg.get("have", {})}, what)
        tell(line or f"{what}: it differs from the client")

    admit, forget, expiry = _on_scheduler(run, client.id)
    pid = os.getpid()
    _guarded[client.id] = run.resource
    try:
        client.subscribe_topic(run.plugin, heard)
        client.register_plugin(expiry, name=run.resource)  # first: it outlives a killed client
        client.register_plugin(_plugin(want, shipped, pid, run, admit), name=run.plugin)
        yield
    finally:
        _quietly("forgetting the run on the cluster", lambda: client.run_on_scheduler(forget))
        _quietly("waiting for the workers to forget it", lambda: _forgotten(client, run.resource))
        if shipped is not None:
            uninstall = _installer()[1]
            _quietly("unshipping the workers", lambda: client.run(uninstall, pid))
        _quietly("unsubscribing", lambda: client.unsubscribe_topic(run.plugin))
        _guarded.pop(client.id, None)


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
