"""Ship the running toolkit to a cluster: for a development checkout, not for production.

Production clusters install toolkit in their image or environment (docs/clusters.md). A
developer's checkout differs from every image, so `ship(client)` packs the package the client
imports (its sources and a dist-info, i.e. an unpacked wheel) and unpacks it into each worker's
and the scheduler's own local directory, first on `sys.path`. Nothing is installed into the
shared environment. Workers that join later get it too (a registered worker plugin).

The installer and the plugin are built inside functions so that cloudpickle sends them by value:
the receiving process cannot import toolkit yet, which is the point.

Why not distributed's `UploadDirectory`: it unpacks into the nanny's directory and needs a worker
restart to reach the worker's path, ships no dist-info (so the version check could not see
what was shipped), and leaves an already-imported toolkit in place. Here every process gets
the code on its own `sys.path` at once, with its metadata, and forgets the toolkit it imported.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import toolkit
from toolkit.engine.versions import check_versions

SUFFIXES = (".py", ".json")


def payload() -> tuple[bytes, str]:
    """The running toolkit as a zip (sources, package data, dist-info) and its content digest."""
    root = Path(toolkit.__file__).resolve().parent
    files = sorted(
        p for p in root.rglob("*") if p.suffix in SUFFIXES and "__pycache__" not in p.parts
    )
    h = hashlib.sha256()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in files:
            name = f"toolkit/{p.relative_to(root).as_posix()}"
            data = p.read_bytes()
            h.update(name.encode() + b"\0" + data + b"\0")
            z.writestr(name, data)
        v = version("toolkit")
        z.writestr(
            f"toolkit-{v}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: toolkit\nVersion: {v}\n",
        )
    return buf.getvalue(), h.hexdigest()[:16]


def _installer() -> Any:
    def install(data: bytes, digest: str, base: str, client_pid: int) -> str:
        import importlib
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
        for name in [m for m in sys.modules if m == "toolkit" or m.startswith("toolkit.")]:
            del sys.modules[name]  # the next unpickle imports the shipped code
        importlib.invalidate_caches()
        return target

    return install


def _worker_plugin(data: bytes, digest: str, client_pid: int) -> Any:
    from distributed import WorkerPlugin

    install = _installer()

    class ShipToolkit(WorkerPlugin):
        name = "toolkit-ship"

        def setup(self, worker: Any) -> None:
            install(data, digest, worker.local_directory, client_pid)

    return ShipToolkit()


def ship(client: Any) -> str:
    """Install the running toolkit on the scheduler and on every (current and future) worker,
    then check versions. Returns the content digest that was shipped."""
    data, digest = payload()
    install, pid = _installer(), os.getpid()
    client.run_on_scheduler(
        lambda dask_scheduler: install(data, digest, dask_scheduler.local_directory, pid)
    )
    client.register_plugin(_worker_plugin(data, digest, pid))
    check_versions(client)
    return digest
