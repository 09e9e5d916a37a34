"""Backfills in flight: their temp branches, what is on them, and the two ways out of one.

A backfill works on `backfill-<10 hex>` beside a marker branch `<branch>-main-at-setup` (main's
snapshot when it started). Finalize moves main only if main is still at the marker. When main
moved (an operational fire committed), the branch stays and every update refuses to run. An
operator then either aborts it (`toolkit virtual abort`: both branches deleted, main untouched)
or rebases it (`toolkit virtual backfill ... --rebase`: restarted from main's new head, when
main's new commits did not touch the backfill's region).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from toolkit import icechunk as R
from toolkit import transaction as T
from toolkit.transaction import marker

PREFIX = "backfill-"

__all__ = [
    "PREFIX",
    "InFlight",
    "NothingInFlight",
    "abort",
    "in_flight",
    "marker",
    "temp_branches",
    "ways_out",
]


def temp_branches(repo: Any, names: Iterable[str] | None = None) -> list[str]:
    """The backfill branches among `names` (default: the repo's branches), markers excluded."""
    return T.branches_of(repo, PREFIX, names)


@dataclass(frozen=True)
class InFlight:
    branch: str
    region: str  # "[start, end)" as recorded at setup, or "unknown"
    started: _dt.datetime | None  # the setup commit's time
    files: int  # files committed on the branch so far
    main_moved: bool  # finalize would refuse: main is no longer where setup found it

    def line(self, now: _dt.datetime) -> str:
        age = "-" if self.started is None else _age(now - self.started)
        moved = "; main moved since setup: finalize will refuse" if self.main_moved else ""
        return (
            f"{self.branch}: region {self.region}, started {age} ago, "
            f"{self.files} file(s) on it{moved}"
        )


def _age(delta: _dt.timedelta) -> str:
    s = int(delta.total_seconds())
    return (
        f"{s // 86400}d{s % 86400 // 3600}h"
        if s >= 86400
        else (f"{s // 3600}h{s % 3600 // 60}m" if s >= 3600 else f"{s // 60}m{s % 60}s")
    )


def in_flight(repo: Any) -> list[InFlight]:
    """Every backfill branch of `repo`, oldest commit first on each."""
    found = []
    names = set(R.branches(repo))
    main = R.snapshot_of(repo, "main")
    for branch in temp_branches(repo, names):
        at_setup = R.snapshot_of(repo, marker(branch)) if marker(branch) in names else None
        commits = []
        for c in R.history(repo, branch):
            if c.id == at_setup:
                break
            commits.append(c)
        setup = next((c for c in reversed(commits) if "main_at_setup" in c.metadata), None)
        region = str(setup.metadata.get("region", "unknown")) if setup else "unknown"
        found.append(
            InFlight(
                branch,
                region,
                setup.written_at if setup else None,
                sum(int(c.metadata.get("files", 0)) for c in commits),
                at_setup is not None and main != at_setup,
            )
        )
    return found


class NothingInFlight(ValueError):
    """`abort` found no backfill branch to remove (or not the one named)."""


def abort(repo: Any, branch: str | None = None) -> list[str]:
    """Delete a backfill's temp branch and its marker; main is never touched. Without `branch`,
    the only one in flight (several: name one). Returns the branches deleted."""
    flying = temp_branches(repo)
    if branch is None:
        if len(flying) != 1:
            raise NothingInFlight(
                "no backfill in flight"
                if not flying
                else f"{len(flying)} backfills in flight ({', '.join(flying)}): name one with --branch"
            )
        branch = flying[0]
    elif branch not in flying:
        raise NothingInFlight(
            f"no backfill branch {branch!r} (in flight: {', '.join(flying) or 'none'})"
        )
    return T.abort(repo, branch)


def ways_out(repo_url: str, branch: str) -> str:
    """What the operator can do about a backfill branch that blocks main."""
    return (
        f"either rebase it onto main's new head (`toolkit virtual backfill DATASET --repo "
        f"{repo_url} ... --rebase`, the same region) or drop it (`toolkit virtual abort "
        f"{repo_url} --branch {branch}`; main is untouched)"
    )
