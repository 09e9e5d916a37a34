"""The operational update: one writer commits whole files to main each tick as they publish.

Both ends of a fire are anchored to the scheduled fire, not to process start: the window comes
from the dataset's window rule and polling stops at scheduled + active deadline -
grace, so a replacement process stops when the one it replaced would have. Each fire refreshes
metadata first; files not yet published roll to the next fire; crash recovery is the filter.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from toolkit import icechunk as R
from toolkit.plan import Report, StageReport
from toolkit.virtual import skips
from toolkit.virtual.clock import GRACE, FireClock
from toolkit.virtual.inflight import in_flight, ways_out
from toolkit.virtual.layout import committed_extent
from toolkit.virtual.lease import HEARTBEAT, Lease
from toolkit.virtual.source_io import discover
from toolkit.virtual.status import fire_summary, record_fire
from toolkit.virtual.write import Job, RunResult, ensure_repo, filter_already_present, refresh, run

__all__ = [
    "EXPIRY_ORDER",
    "LEASE_KEY",
    "BackfillInFlight",
    "FarBehind",
    "Fire",
    "expire",
    "update",
]

LEASE_KEY = "toolkit-update.lease"


class BackfillInFlight(RuntimeError):
    pass


class FarBehind(RuntimeError):
    pass


@dataclass(frozen=True)
class Fire:
    """What one fire did: of the window's `files`, the `todo` it set out to write (the rest
    were on main already, or given up and unchanged), what its write loop did (`written`:
    committed, skipped, pending, commits, refs, `after_commit`'s returns), the files given up
    as missing for good, the lease it took over from a holder that was gone, the expiries it
    ran, and how long it took."""

    fire_time: Any
    files: int
    todo: int
    written: RunResult
    given_up: list[skips.Strike] = field(default_factory=list)
    took_over: str | None = None
    expired: list[tuple[str, R.Expired]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ingested(self) -> list[str]:
        return self.written.ingested

    @property
    def skipped(self) -> list[Any]:
        return self.written.skipped

    @property
    def pending(self) -> list[str]:
        return self.written.pending

    @property
    def commits(self) -> list[str]:
        return self.written.commits

    @property
    def refs(self) -> int:
        return self.written.refs

    @property
    def after(self) -> list[Any]:
        return self.written.after

    def as_report(self) -> Report:
        """The fire as one row of the per-stage table the engine's jobs print (the CLI, the
        demo's page), holding the fire as its result. No plan ran: the digest is `-`, the
        executor `inline`."""
        skipped = self.files - self.todo
        row = StageReport(
            "update", self.files, skipped, len(self.ingested), self.seconds, result=self
        )
        return Report(f"virtual-update-{self.fire_time}", "-", "inline", (row,), self.seconds)


def update(
    job: Job,
    *,
    fire_time: Any,
    scheduled_at: float | None = None,
    deadline_seconds: float = 600.0,
    grace_seconds: float = GRACE,
    reserve_seconds: float = 0.0,
    lease_wait: float = 0.0,
    heartbeat: float = HEARTBEAT,
    give_up_after: int = 3,
    after_commit: Callable[[list[dict[str, Any]]], Any] | None = None,
    expire_older_than: _dt.timedelta | None = None,
) -> Fire:
    """One fire: refresh metadata, then poll-and-commit the window until done or the deadline.

    One deadline for the whole fire (`FireClock`): polling stops `grace_seconds` (for the last
    commit) plus `reserve_seconds` (for what the caller runs after, validation) before
    `scheduled_at + deadline_seconds`.

    Single writer: the fire holds the repo's lease (a heartbeat renews it, each commit checks
    it). Another live update of this or a newer fire holding it makes this one wait up to
    `lease_wait` seconds (refused when the deadline leaves less), then raise `LeaseHeld` (the
    CLI exits 1 saying another update is running). A holder that is gone (a dead process on
    this host, or a heartbeat silent for two intervals) is taken over at once; the result's
    `took_over` names it. Each commit records the holder as `writer` in its metadata.

    A file skipped (published but unreadable) in `give_up_after` fires in a row is given up:
    not fetched again until its source object changes, and listed in the result's
    `given_up` as missing for good (0: retry forever). See `toolkit.virtual.skips`.

    `after_commit(positions)` runs right after each commit, still holding the lease, with the
    committed files' positions ({dim: label}); what it returns is kept in the result's `after`.
    The CLI's `--pyramid V` passes the pyramid job's in-fire level build here (the jobs do not
    import each other), so main's levels never lag its level 0 by more than one commit.
    """
    skips.given_up({}, give_up_after)  # a bad count fails before any work
    t0 = time.time()
    clock = FireClock(
        t0 if scheduled_at is None else scheduled_at,
        deadline_seconds,
        grace_seconds,
        reserve_seconds,
    )
    _fits(lease_wait, clock.poll_until - t0)
    fire, inside = _window(job, fire_time, clock.poll_until)
    _no_backfill_over(fire, ensure_repo(fire), inside)
    # Fires are ordered by their scheduled fire label, not by process start: two processes of
    # one fire tie (the second waits or exits), a newer fire takes over from an older one.
    lease = Lease(job.repo.store, LEASE_KEY, _fire_order(fire_time), heartbeat)
    lease.acquire(wait=lease_wait)
    try:
        with lease.heartbeat():
            done = _poll(fire_time, fire, lease, give_up_after, after_commit, inside)
            if expire_older_than is not None:
                done = replace(done, expired=_expire_all(fire.repos, expire_older_than, lease))
            done = replace(done, took_over=lease.took_over)
            summary = fire_summary(
                _fire_label(fire_time), t0, time.time(), done, job.repo.open(fresh=True)
            )
            lease.check()  # the record is the lease holder's to write, like the commits
            record_fire(job.repo.store, summary)
    finally:
        lease.release()
    return replace(done, seconds=time.time() - t0)


def _fits(lease_wait: float, polling: float) -> None:
    """--lease-wait must leave the fire time to poll: refused before any work."""
    if lease_wait > max(0.0, polling):
        raise ValueError(
            f"--lease-wait {lease_wait:g} s does not fit the fire: its deadline leaves "
            f"{max(0.0, polling):.0f} s of polling; wait less, or give a longer --deadline"
        )


def _window(job: Job, fire_time: Any, poll_deadline: float) -> tuple[Job, list[Any]]:
    """The fire's job (its window, in update mode, on main) and the window's append-dim
    labels in the template; a window outside the template is refused."""
    start, end = job.dataset.window(fire_time)
    fire = job.region(
        start, end, processing_mode="update", branch="main", poll_deadline=poll_deadline
    )
    t = fire.template
    inside = [x for x in t.coords[t.append_dim] if fire.in_region(x)]
    if not inside:
        raise ValueError(
            f"fire {fire_time}: its window [{start}, {end}) holds no {t.append_dim} of "
            f"the template ({t.coords[t.append_dim][0]} .. {t.coords[t.append_dim][-1]})"
        )
    return fire, inside


def _no_backfill_over(fire: Job, repo: Any, inside: list[Any]) -> None:
    """A fire writes its window's positions on main: refused while a backfill whose region
    (as its guard records it) holds any of them is in flight, since finalize could not land
    it beside the fire's commits. A backfill of a disjoint region is caught up at finalize
    (`toolkit.virtual.landing`); one whose region was not recorded counts as overlapping."""
    lo = int(np.datetime64(inside[0], "ns").astype("int64"))
    hi = int(np.datetime64(inside[-1], "ns").astype("int64")) + 1
    busy = [f for f in in_flight(repo, fire.repo.store) if f.overlaps(lo, hi)]
    if busy:
        t = fire.template
        raise BackfillInFlight(
            f"{fire.repo.url}: backfill {busy[0].branch!r} (region {busy[0].region})"
            f"{f' (and {len(busy) - 1} more)' if len(busy) > 1 else ''} is in flight over "
            f"this fire's {t.append_dim} {str(inside[0])[:19]} .. {str(inside[-1])[:19]}: "
            "an update would write into its region; wait for it to finalize, or "
            f"{ways_out(fire.repo.url, busy[0].branch)}"
        )


def _poll(
    fire_time: Any,
    fire: Job,
    lease: Lease,
    give_up_after: int,
    after_commit: Callable[[list[dict[str, Any]]], Any] | None,
    inside: list[Any],
) -> Fire:
    """The fire's work under the lease: refresh, the write loop, the skip counts."""
    t, job = fire.template, fire
    refresh(fire)
    session = R.readonly(fire.repo.open(fresh=True))
    extent = committed_extent(session, t) or 0
    first = t.position(inside[0])
    # Positions between main's end and the window are never in any later fire's window:
    # growing past them leaves readers empty slots. Tolerate one window's worth (a missed
    # fire or a new dataset whose template starts just before), refuse beyond.
    if first - extent > len(inside):
        raise FarBehind(
            f"{job.repo.url} ends {first - extent} {t.append_dim} positions "
            f"before this fire's window (starting {inside[0]}): run a backfill instead"
        )
    coords = fire.files()
    todo = filter_already_present(fire, coords, session)
    strikes = skips.load(job.repo.store)
    held = _held_back(fire, todo, skips.given_up(strikes, give_up_after))
    todo = [c for c in todo if c.key not in held]
    written = run(
        fire,
        todo,
        before_commit=lease.check,
        metadata={"writer": lease.holder},
        after_commit=after_commit,
    )
    strikes = skips.tally(strikes, _fire_label(fire_time), written.skipped, written.ingested)
    lease.check()  # the skip counts are the lease holder's to write, like the commits
    skips.save(job.repo.store, strikes)
    mine = {c.key for c in coords}
    given_up = [s for url, s in skips.given_up(strikes, give_up_after).items() if url in mine]
    return Fire(fire_time, len(coords), len(todo), written, given_up)


EXPIRY_ORDER = -1.0e18  # an expiry never takes the lease from a fire; any fire takes it back


def expire(
    refs: Sequence[R.RepoRef], older_than: _dt.timedelta, *, lease_wait: float = 0.0
) -> list[tuple[str, R.Expired]]:
    """Expire the snapshots older than `older_than` and collect garbage in each repo (replicas
    first), holding the primary's update lease so no fire commits meanwhile. Main's head,
    tags and in-flight branches are kept."""
    lease = Lease(refs[-1].store, LEASE_KEY, EXPIRY_ORDER, role="expiry")
    lease.acquire(wait=lease_wait)
    try:
        with lease.heartbeat():
            return _expire_all(refs, older_than, lease)
    finally:
        lease.release()


def _expire_all(
    refs: Sequence[R.RepoRef], older_than: _dt.timedelta, lease: Lease
) -> list[tuple[str, R.Expired]]:
    done = []
    for ref in refs:
        lease.check()
        cutoff = _dt.datetime.now(_dt.UTC) - older_than
        done.append((ref.url, R.expire(ref.open(fresh=True), cutoff)))
    return done


def _held_back(job: Job, todo: list[Any], out: dict[str, skips.Strike]) -> set[str]:
    """The given-up files of `todo` whose source object is unchanged since it was skipped."""
    mine = [c for c in todo if c.key in out]
    if not mine:
        return set()
    listed = {c.key: (size, modified) for c, size, modified in discover(job.dataset.source, mine)}
    return {
        c.key for c in mine if c.key in listed and not skips.retried(out[c.key], *listed[c.key])
    }


def _fire_label(fire_time: Any) -> str:
    import numpy as np

    return str(np.datetime64(fire_time, "s"))


def _fire_order(fire_time: Any) -> float:
    import numpy as np

    return float(np.datetime64(fire_time, "ms").astype("int64")) / 1000.0
