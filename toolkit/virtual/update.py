"""The operational update: one writer commits whole files to main each tick as they publish.

Both ends of a fire are anchored to the scheduled fire, not to process start: the window comes
from the dataset's window rule and polling stops at scheduled + active deadline -
grace, so a replacement process stops when the one it replaced would have. Each fire refreshes
metadata first; files not yet published roll to the next fire; crash recovery is the filter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from toolkit import icechunk as R
from toolkit.plan import Report, StageReport
from toolkit.virtual import skips
from toolkit.virtual.inflight import temp_branches, ways_out
from toolkit.virtual.layout import committed_extent
from toolkit.virtual.lease import Lease
from toolkit.virtual.read import discover
from toolkit.virtual.write import Job, ensure_repo, filter_already_present, refresh, run

__all__ = ["BackfillInFlight", "FarBehind", "update"]

LEASE_KEY = "toolkit-update.lease"


class BackfillInFlight(RuntimeError):
    pass


class FarBehind(RuntimeError):
    pass


def update(
    job: Job,
    *,
    fire_time: Any,
    scheduled_at: float | None = None,
    deadline_seconds: float = 600.0,
    grace_seconds: float = 5.0,
    lease_wait: float = 0.0,
    lease_ttl: float = 60.0,
    give_up_after: int = 3,
    after_commit: Callable[[list[dict[str, Any]]], Any] | None = None,
) -> Report:
    """One fire: refresh metadata, then poll-and-commit the window until done or the deadline.

    Single writer: the fire holds the repo's lease (renewed each tick, checked before each
    commit). Another live update of this or a newer fire holding it makes this one wait up to
    `lease_wait` seconds, then raise `LeaseHeld` (the CLI exits 1 saying another update is
    running). Each commit records the holder as `writer` in its metadata.

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
    scheduled_at = t0 if scheduled_at is None else scheduled_at
    poll_deadline = scheduled_at + deadline_seconds - grace_seconds
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
    first = t.position(inside[0])
    repo = ensure_repo(fire)
    busy = temp_branches(repo)
    if busy:
        raise BackfillInFlight(
            f"{job.repo.url}: backfill {busy[0]!r}"
            f"{f' (and {len(busy) - 1} more)' if len(busy) > 1 else ''} is in flight and an "
            f"update would move main under it: wait for it to finalize, or "
            f"{ways_out(job.repo.url, busy[0])}"
        )
    # Fires are ordered by their scheduled fire label, not by process start: two processes of
    # one fire tie (the second waits or exits), a newer fire takes over from an older one.
    lease = Lease(job.repo.store, LEASE_KEY, _fire_order(fire_time), ttl=lease_ttl).acquire(
        wait=min(lease_wait, max(0.0, poll_deadline - time.time()))
    )
    try:
        refresh(fire)
        session = R.readonly(fire.repo.open(fresh=True))
        extent = committed_extent(session, t) or 0
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
        result = run(
            fire,
            todo,
            on_tick=lease.renew,
            before_commit=lease.check,
            metadata={"writer": lease.holder},
            after_commit=None if after_commit is None else _renewing(after_commit, lease),
        )
        strikes = skips.tally(strikes, _fire_label(fire_time), result.skipped, result.ingested)
        lease.check()  # the skip counts are the lease holder's to write, like the commits
        skips.save(job.repo.store, strikes)
        mine = {c.key for c in coords}
        result.given_up = [
            s for url, s in skips.given_up(strikes, give_up_after).items() if url in mine
        ]
    finally:
        lease.release()
    stage = StageReport(
        "update",
        len(coords),
        len(coords) - len(todo),
        len(result.ingested),
        time.time() - t0,
        result=result,
    )
    return Report(f"virtual-update-{fire_time}", "-", "inline", (stage,), time.time() - t0)


def _renewing(after_commit: Callable[[list[dict[str, Any]]], Any], lease: Lease) -> Any:
    """`after_commit`, then the lease renewed (an in-fire pyramid build can take a while)."""

    def hook(positions: list[dict[str, Any]]) -> Any:
        out = after_commit(positions)
        lease.renew()
        return out

    return hook


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


def with_deadline(job: Job, deadline: float) -> Job:
    return replace(job, poll_deadline=deadline)
