"""A fire's clock (pure): one deadline for the whole operational fire.

A scheduler (cron, a Kubernetes CronJob with `activeDeadlineSeconds`) kills a fire that outlives
its deadline, mid-commit or mid-validation. So the deadline bounds the process: polling stops
early enough for the last commit (`grace`) and for what runs after it (`reserve`: validation,
at least `VALIDATION_FLOOR`), and validation is capped by what is left.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

__all__ = ["EXIT_MARGIN", "GRACE", "VALIDATION_FLOOR", "FireClock", "parse_duration"]

GRACE = 5.0  # seconds kept after polling for the last commit
VALIDATION_FLOOR = 5.0  # seconds validation always gets: kept back from polling
EXIT_MARGIN = 1.0  # seconds the deadline keeps for the report and the exit


@dataclass(frozen=True)
class FireClock:
    """One deadline for the whole fire, anchored to its scheduled time: polling, the last
    commit (`grace`) and what runs after (`reserve`, validation) all end by `end`."""

    scheduled_at: float
    deadline: float
    grace: float = GRACE
    reserve: float = 0.0

    @property
    def end(self) -> float:
        return self.scheduled_at + self.deadline

    @property
    def poll_until(self) -> float:
        return self.end - self.grace - self.reserve

    def bound(self, seconds: float, now: float) -> float:
        """A step of `seconds` starting `now` (validation): capped by what the deadline leaves,
        but never below the floor it was kept (or `seconds`, when that is less)."""
        left = self.end - EXIT_MARGIN - now
        return now + min(seconds, max(VALIDATION_FLOOR, left))


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> _dt.timedelta:
    """`0s`, `90m`, `12h`, `30d`, `2w` as a timedelta; anything else a ValueError naming it."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise ValueError(
            f"{text!r} is not a duration: write a number and a unit, s m h d or w (0s, 12h, 30d)"
        )
    return _dt.timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
