"""The same code on client, scheduler and workers, checked on connect.

Services pickle by reference: a worker unpickles `toolkit.pyramid.shards.BuildShard` from
whatever toolkit it imports, and the scheduler unpickles every graph it is sent. So toolkit is
compared by the code each process would actually import -- a digest of the package directory
that process finds -- not by its version string (a shipped or edited checkout says 0.1.0 like
any other). Its dependencies are compared by version. A mismatch fails first, in one line that
names the process, the package, both digests or versions, and the fix that applies.
"""

from __future__ import annotations

from typing import Any

CODE = "toolkit"  # compared by the digest of its sources; every other package by version
# what importlib.metadata and pip know the code by (`toolkit.DISTRIBUTION`, said again here so
# the engine does not import the package root, which sits above every job)
DISTRIBUTION = "zarr-toolkit"
PACKAGES = (CODE, "numba", "zarr", "icechunk", "gribberish", "obstore")
SUFFIXES = (".py", ".json")  # what makes up the code (and what --ship packs)

Identity = dict[str, str | None]  # package -> toolkit's code digest / a version / None


class VersionMismatch(RuntimeError):
    """Client, scheduler and workers do not run the same code and dependency versions."""


def _identity() -> Any:
    """The readers built per call: nested functions, so cloudpickle sends them by value and a
    process that cannot import toolkit still runs them (and says so). Returns
    `(sources, digest, identity)`; `toolkit.engine.ship.payload` packs what `sources` lists."""

    def sources(root: str) -> list[tuple[str, str]]:
        """(name inside the package, path) of every source file under `root`, sorted."""
        import os

        found = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for f in files:
                if os.path.splitext(f)[1] in SUFFIXES:
                    path = os.path.join(folder, f)
                    rel = os.path.relpath(path, root).replace(os.sep, "/")
                    found.append((f"{CODE}/{rel}", path))
        return sorted(found)

    def digest(root: str) -> str:
        import hashlib

        h = hashlib.sha256()
        for name, path in sources(root):
            with open(path, "rb") as f:
                h.update(name.encode() + b"\0" + f.read() + b"\0")
        return h.hexdigest()[:16]

    def identity(packages: tuple[str, ...]) -> dict[str, str | None]:
        import importlib
        import importlib.metadata as md
        import importlib.util

        importlib.invalidate_caches()  # code shipped (or unshipped) since the last call is seen
        found: dict[str, str | None] = {}
        for name in packages:
            try:  # the imported module's own spec when imported, else where it would come from
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            if name == CODE:
                where = spec.submodule_search_locations if spec else None
                found[name] = digest(next(iter(where))) if where else None
                continue
            try:  # metadata without an importable package is a broken install: not installed
                found[name] = md.version(name) if spec else None
            except md.PackageNotFoundError:
                found[name] = None
        return found

    return sources, digest, identity


def _probe() -> Any:
    return _identity()[2]


def local_versions(packages: tuple[str, ...] = PACKAGES) -> Identity:
    """This process's identity: toolkit's code digest, its dependencies' versions."""
    return _probe()(packages)


def _label(name: str) -> str:
    return "toolkit code" if name == CODE else name


def fix(name: str, want: str | None) -> str:
    """What to do about a mismatch of `name` (the client has `want`): shipping fixes toolkit's
    code and nothing else, so a dependency is never told to --ship."""
    if name == CODE:
        return (
            "ship this checkout with --ship (toolkit.engine.ship(client) from Python), "
            "or install the same toolkit on the scheduler and workers"
        )
    if want is None:
        return f"install {name} on the client, or rebuild the worker image / environment without it"
    return f"rebuild the worker image / environment with {name}=={want}"


def _differences(
    client: Identity, scheduler: Identity, workers: dict[str, Identity]
) -> list[tuple[str, str]]:
    """(package, phrase) per package and differing value; dependencies first (--ship cannot
    fix them, so theirs is the fix to tell)."""
    found = []
    for name in sorted(client, key=lambda n: n == CODE):
        want = client[name]
        where: dict[str, list[str]] = {}
        for place, versions in (("the scheduler", scheduler), *workers.items()):
            have = versions.get(name)
            if have != want:
                where.setdefault(have or "not installed", []).append(place)
        for have, places in where.items():
            shown = places[0] if len(places) == 1 else f"{places[0]} and {len(places) - 1} more"
            phrase = f"{_label(name)} {want or 'not installed'} on the client, {have} on {shown}"
            found.append((name, phrase))
    return found


def mismatches(client: Identity, scheduler: Identity, workers: dict[str, Identity]) -> list[str]:
    """One phrase per package and value that differs from the client's (pure)."""
    return [phrase for _, phrase in _differences(client, scheduler, workers)]


def refusal(
    client: Identity, scheduler: Identity, workers: dict[str, Identity], what: str = "mismatch"
) -> str | None:
    """The one line refusing a cluster that differs from the client, or None (pure)."""
    found = _differences(client, scheduler, workers)
    if not found:
        return None
    name, first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{what}: {first}{more}; {fix(name, client[name])}"


def check_versions(
    client: Any, packages: tuple[str, ...] = PACKAGES, *, skip: tuple[str, ...] = ()
) -> None:
    """Raise `VersionMismatch` unless the scheduler and every worker import the client's
    toolkit code and dependency versions. `skip`: packages not compared (--ship compares the
    dependencies before it installs the code)."""
    probe = _probe()
    wanted = tuple(p for p in packages if p not in skip)
    mine = probe(wanted)
    workers = {f"worker {addr}": v for addr, v in client.run(probe, wanted).items()}
    scheduler = client.run_on_scheduler(probe, wanted)
    line = refusal(mine, scheduler, workers, "version mismatch")
    if line is not None:
        raise VersionMismatch(line)
