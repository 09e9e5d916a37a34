"""One unattended fire, end to end: what a CronJob's `toolkit virtual update` runs.

The commits (`toolkit.virtual.update.update`, holding the repo's lease), the hooks that follow
them (the pyramid's levels in the fire, the STAC entry), then validation of the fire's window
inside the same deadline, and the verdict written into the fire's record. The CLI wires its
flags into a `Schedule` (when, and for how long), `Checks` (what is validated after) and a
`Runner` (where the decode samples run), calls `fire`, and prints what it returns.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

from toolkit.engine import RunKeywords, Runner, runner_of
from toolkit.virtual.clock import GRACE, VALIDATION_FLOOR, FireClock
from toolkit.virtual.completeness import label_text
from toolkit.virtual.stac_entry import stac as write_stac
from toolkit.virtual.status import last_fire, record_validation
from toolkit.virtual.update import Fire, update
from toolkit.virtual.validate import ValidationReport, validate
from toolkit.virtual.write import Job

__all__ = ["Checks", "Levels", "Outcome", "Schedule", "fire"]

log = logging.getLogger(__name__)

# `--pyramid`: the level build run after each commit (update's `after_commit`) and the check
# of every level on main (its failures), composed above both jobs (`toolkit.cli`)
Levels = tuple[Callable[[list[dict[str, Any]]], Any] | None, Callable[[], list[str]] | None]


@dataclass(frozen=True)
class Schedule:
    """When a fire runs and how long it may: the scheduled `fire_time` (its window ends
    there), the wall-clock `scheduled_at` (epoch seconds) its `deadline_seconds` count from,
    how long to wait for another fire's lease, after how many fires a skipped file is given
    up, and the snapshot expiry run inside the lease. `named`: `scheduled_at` as the caller
    wrote it, for messages (default: the fire's label)."""

    fire_time: Any
    scheduled_at: float
    deadline_seconds: float = 600.0
    lease_wait: float = 0.0
    give_up_after: int = 3
    expire_older_than: _dt.timedelta | None = None
    named: str | None = None


@dataclass(frozen=True)
class Checks:
    """What is checked after the commits: the window's validation (`validate`; its time bound
    `seconds`, `sample` decode cells, the completeness tiers `min_present`)."""

    validate: bool = True
    seconds: float = 60.0
    sample: int = 16
    min_present: tuple[float, ...] | None = None

    @property
    def reserve(self) -> float:
        """Seconds kept back from polling for validation."""
        return min(self.seconds, VALIDATION_FLOOR) if self.validate else 0.0


@dataclass(frozen=True)
class Outcome:
    """The fire, its validation (None with `Checks(validate=False)`), the failures that fail
    it (with no validation: the files missing for good), and the fire's record as written."""

    fire: Fire
    validation: ValidationReport | None
    failures: tuple[str, ...]
    record: dict[str, Any]

    @property
    def ok(self) -> bool:
        return not self.failures


def fire(
    job: Job,
    schedule: Schedule,
    checks: Checks = Checks(),
    runner: Runner | None = None,
    *,
    levels: Levels | None = None,
    stac: Path | None = None,
    say: Callable[[str], None] = log.warning,
    shown: Callable[[Fire], None] | None = None,
    **run: Unpack[RunKeywords],
) -> Outcome:
    """Commit the fire's window, refresh the STAC entry in `stac` (a failure is one `say`
    line: the data landed), hand the fire to `shown` (the CLI prints it before validation
    starts, so a fire killed mid-validation has logged its commits), then validate the
    window within what the deadline leaves and record the verdict in the fire's record.
    `runner` (or the one `cluster`/`executor`/`progress` make) runs the decode samples: on
    its cluster when one is given, else in this process unless they are large (`auto`); the
    commits, `levels` (`--pyramid`'s hooks) and the STAC entry always run in this process."""
    runner = runner_of(runner, "auto", **run)
    after_commit, check_levels = levels or (None, None)
    clock = FireClock(schedule.scheduled_at, schedule.deadline_seconds, GRACE, checks.reserve)
    _warn_if_late(schedule, clock, say)
    done = update(
        job,
        fire_time=schedule.fire_time,
        scheduled_at=schedule.scheduled_at,
        deadline_seconds=schedule.deadline_seconds,
        grace_seconds=GRACE,
        reserve_seconds=checks.reserve,
        lease_wait=schedule.lease_wait,
        give_up_after=schedule.give_up_after,
        after_commit=after_commit,
        expire_older_than=schedule.expire_older_than,
    )
    if stac is not None:
        _refresh_stac(job, stac, say)
    if shown is not None:
        shown(done)
    failing = check_levels() if (checks.validate and check_levels is not None) else []
    failing += [s.line() for s in done.given_up]
    if not checks.validate:
        return Outcome(done, None, tuple(failing), last_fire(job.repo.store) or {})
    found = _validate(job, schedule, checks, clock, failing, runner)
    failures = list(found.failures)
    record = record_validation(job.repo.store, found.ok, failures)
    return Outcome(done, found, tuple(failures), record)


def _warn_if_late(schedule: Schedule, clock: FireClock, say: Callable[[str], None]) -> None:
    """A fire started after its poll deadline (a late pod, a simulated clock) sweeps once."""
    if clock.poll_until <= time.time():
        say(
            f"the poll deadline ({schedule.deadline_seconds:g} s after the scheduled "
            f"{schedule.named or label_text(schedule.fire_time)}, "
            "less the time kept for the last commit and validation) has passed: one sweep "
            "only"
        )


def _refresh_stac(job: Job, output: Path, say: Callable[[str], None]) -> None:
    """The STAC entry follows main; failing to write it does not fail the fire (its data
    landed): one warning line, and validation still runs."""
    try:
        entry = write_stac(job.repo.store, output)
    except Exception as err:
        say(f"warning: STAC entry not refreshed in {output}: {err}")
        return
    say(f"stac: {entry.collection} rewritten")


def _validate(
    job: Job,
    schedule: Schedule,
    checks: Checks,
    clock: FireClock,
    extra: list[str],
    runner: Runner,
) -> ValidationReport:
    """The fire's window validated within its time bound; `extra` fails it too."""
    return validate(
        job,
        fire_time=schedule.fire_time,
        sample=checks.sample,
        min_present_fraction=checks.min_present,
        deadline=clock.bound(checks.seconds, time.time()),
        extra=extra,
        runner=runner,
    )
