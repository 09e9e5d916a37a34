"""Backfills in flight: their temp branches, what is on them, and the two ways out of one.

A backfill works on `backfill-<10 hex>` beside a marker branch `<branch>-main-at-setup` (main's
snapshot when it started). Update fires outside its region keep committing to main meanwhile;
finalize first brings main's new commits onto the branch (`toolkit.virtual.landing`), then
moves main. When main's new commits wrote into the region (or did what cannot be replayed),
finalize refuses and keeps the branch. An operator then either aborts it (`toolkit virtual
abort`: both branches deleted, main untouched) or rebases it (`toolkit virtual backfill ...
--rebase`: restarted from main's new head, when main's new commits did not touch the region).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from toolkit import icechunk as R
from toolkit import storage
from toolkit import transaction as T
from toolkit.transaction import marker
from toolkit.virtual.lease import decode, gone_because, holder_of

PREFIX = "backfill-"

__all__ = [
    "PREFIX",
    "InFlight",
    "NothingInFlight",
    "RegionOverlap",
    "abort",
    "guard_key",
    "in_flight",
    "marker",
    "temp_branches",
    "ways_out",
    "what_moved",
]


def guard_key(branch: str) -> str:
    """The object in the repo's store a running backfill holds (a lease: holder, heartbeat,
    region), so a second one over an overlapping region is refused while it runs."""
    return f"toolkit-{branch}.lease"


def temp_branches(repo: Any, names: Iterable[str] | None = None) -> list[str]:
    """The backfill branches among `names` (default: the repo's branches), markers excluded."""
    return T.branches_of(repo, PREFIX, names)


class RegionOverlap(RuntimeError):
    """Main's commits since a backfill started wrote into the backfill's region, or another
    backfill over an overlapping region is in flight."""


@dataclass(frozen=True)
class InFlight:
    branch: str
    region: str  # "[start, end)" as recorded at setup, or "unknown"
    started: _dt.datetime | None  # the setup commit's time
    files: int  # files committed on the branch so far
    main_moved: bool  # finalize would refuse: main is no longer where setup found it
    start: int | None = None  # the region's bounds (ns since the epoch; None: open, unknown)
    end: int | None = None
    holder: str | None = None  # the process running it now ("": none; None: not looked at)
    # main moved: why finalize will refuse ("": it catches up; None: not looked at)
    refusal: str | None = None

    @property
    def blocked(self) -> bool:
        """Finalize would refuse: main moved and (as far as was looked at) cannot be caught up."""
        return self.main_moved and self.refusal != ""

    def line(self, now: _dt.datetime) -> str:
        age = "-" if self.started is None else _age(now - self.started)
        moved = ""
        if self.main_moved:
            moved = (
                "; main moved since setup: finalize catches up"
                if self.refusal == ""
                else f"; main moved since setup: finalize will refuse ({self.refusal})"
                if self.refusal
                else "; main moved since setup: finalize catches up unless main wrote into "
                "its region (`toolkit virtual status` says)"
            )
        held = f"; running in {self.holder}" if self.holder else ""
        idle = "; no process runs it (rerun the same region to resume)" if self.holder == "" else ""
        return (
            f"{self.branch}: region {self.region}, started {age} ago, "
            f"{self.files} file(s) on it{moved}{held}{idle}"
        )

    def overlaps(self, start: int, end: int | None) -> bool:
        """Whether [start, end) meets this backfill's region (an unrecorded one always does)."""
        if self.start is None:
            return True
        return (end is None or self.start < end) and (self.end is None or start < self.end)


def _age(delta: _dt.timedelta) -> str:
    s = int(delta.total_seconds())
    return (
        f"{s // 86400}d{s % 86400 // 3600}h"
        if s >= 86400
        else (f"{s // 3600}h{s % 3600 // 60}m" if s >= 3600 else f"{s // 60}m{s % 60}s")
    )


def in_flight(
    repo: Any, store: storage.Store | None = None, mine: str | None = None
) -> list[InFlight]:
    """Every backfill branch of `repo`, oldest commit first on each; with the repo's `store`,
    each with the process running it (from its guard; a corrupt guard is a `CorruptObject`
    naming it, but not the guard of `mine`, the branch the caller is about to claim)."""
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
        guard = _guard(store, branch) if store is not None and branch != mine else {}
        meta = {**(setup.metadata if setup else {}), **guard}
        holder = None
        if store is not None:
            holder = "" if not guard or gone_because(guard) else holder_of(guard)
        found.append(
            InFlight(
                branch,
                str(meta.get("region", "unknown")),
                setup.written_at if setup else None,
                sum(int(c.metadata.get("files", 0)) for c in commits),
                at_setup is not None and main != at_setup,
                _ns(meta.get("start")),
                _ns(meta.get("end")),
                holder,
            )
        )
    return found


def _ns(value: Any) -> int | None:
    return None if value is None else int(value)


def _guard(store: storage.Store, branch: str) -> dict[str, Any]:
    """The branch's guard as its holder wrote it ({}: none)."""
    try:
        data = storage.get(store, guard_key(branch)).data
    except storage.NotFound:
        return {}
    return decode(store, guard_key(branch), data, guard_fix(store.url, branch))


def guard_fix(repo_url: str, branch: str) -> str:
    """What repairs a backfill's corrupt guard: the same backfill takes it over (once nothing
    rewrote it for two beats), or the backfill is dropped."""
    return (
        "rerun the same backfill (it takes the guard over), or drop it: "
        f"`toolkit virtual abort {repo_url} --branch {branch}` (main is untouched)"
    )


def what_moved(repo: Any, branch: str) -> str:
    """What main's commits since `branch`'s setup were, as a person reads them."""
    at_setup = R.snapshot_of(repo, marker(branch)) if marker(branch) in R.branches(repo) else None
    fires = backfills = other = 0
    regions: list[str] = []
    for c in R.history(repo, "main"):
        if c.id == at_setup:
            break
        if c.metadata.get("mode") == "update":
            fires += 1
        elif "main_at_setup" in c.metadata and "region" in c.metadata:
            backfills += 1
            regions.append(str(c.metadata["region"]))
        elif c.metadata.get("group") or c.metadata.get("mode") == "refresh":
            continue  # a backfill's or a build's commits, or a fire's refresh: counted above
        else:
            other += 1
    said = []
    if backfills:
        said.append(f"{backfills} other backfill(s) finalized (region {', '.join(regions[:3])})")
    if fires:
        said.append(f"{fires} update fire commit(s)")
    if other:
        said.append(f"{other} other commit(s)")
    return "; ".join(said) or "main was reset"


class NothingInFlight(ValueError):
    """`abort` found no backfill branch to remove (or not the one named)."""


def abort(repo: Any, branch: str | None = None, store: storage.Store | None = None) -> list[str]:
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
    deleted = T.abort(repo, branch)
    if store is not None and storage.exists(store, guard_key(branch)):
        storage.delete(store, guard_key(branch))
    return deleted


def ways_out(repo_url: str, branch: str) -> str:
    """What the operator can do about a backfill branch that blocks main."""
    return (
        f"either rebase it onto main's new head (`toolkit virtual backfill DATASET --repo "
        f"{repo_url} ... --rebase`, the same region) or drop it (`toolkit virtual abort "
        f"{repo_url} --branch {branch}`; main is untouched)"
    )
