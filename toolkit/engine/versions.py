"""The same code on client, scheduler and workers, checked on connect.

Services pickle by reference: a worker unpickles `toolkit.pyramid.shards.BuildShard` from its
own installation, and the scheduler unpickles every graph it is sent. A worker with another
toolkit (or none), or another numba/zarr/icechunk, fails late and obscurely; this check fails
first, in one line that names the package, the versions and where they differ.
"""

from __future__ import annotations

from typing import Any

PACKAGES = ("toolkit", "numba", "zarr", "icechunk", "gribberish", "obstore")


class VersionMismatch(RuntimeError):
    """Client, scheduler and workers do not run the same versions of the packages that matter."""


def _probe() -> Any:
    """A version reader built per call: a nested function, so cloudpickle sends it by value and
    a worker that cannot import toolkit still runs it (and says so)."""

    def versions(packages: tuple[str, ...]) -> dict[str, str | None]:
        import importlib
        import importlib.metadata as md
        import importlib.util

        importlib.invalidate_caches()  # code shipped since the last call is seen
        found: dict[str, str | None] = {}
        for name in packages:
            try:  # metadata without an importable package is a broken install: not installed
                found[name] = md.version(name) if importlib.util.find_spec(name) else None
            except md.PackageNotFoundError:
                found[name] = None
        return found

    return versions


def local_versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    return _probe()(packages)


def mismatches(
    client: dict[str, str | None],
    scheduler: dict[str, str | None],
    workers: dict[str, dict[str, str | None]],
) -> list[str]:
    """One phrase per package whose version differs from the client's (pure)."""
    found = []
    for name, want in client.items():
        where: dict[str, list[str]] = {}
        for place, versions in (("the scheduler", scheduler), *workers.items()):
            have = versions.get(name)
            if have != want:
                where.setdefault(have or "not installed", []).append(place)
        for have, places in where.items():
            shown = places[0] if len(places) == 1 else f"{places[0]} and {len(places) - 1} more"
            found.append(f"{name} {want or 'not installed'} on the client, {have} on {shown}")
    return found


def check_versions(client: Any, packages: tuple[str, ...] = PACKAGES) -> None:
    """Raise `VersionMismatch` unless every worker and the scheduler match the client."""
    probe = _probe()
    mine = probe(packages)
    workers = {f"worker {addr}": v for addr, v in client.run(probe, packages).items()}
    scheduler = client.run_on_scheduler(probe, packages)
    found = mismatches(mine, scheduler, workers)
    if found:
        raise VersionMismatch(
            f"version mismatch: {found[0]}"
            + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
            + "; install the same versions everywhere (worker image / environment), "
            "or ship this checkout to the workers with --ship / toolkit.engine.ship(client)"
        )
