"""The values users type: numbers, sizes, rates, durations, times and ranges, one check each.

Every numeric, size, duration, time and range option of every command and every web-map query
parameter goes through a check here, so a value nobody listed (`nan`, `inf`, `1e400`,
`99999999999w`, a label in the year 9999) is refused by name with the range it accepts, before
anything is read or written, instead of overflowing (or wrapping round) deep inside a job.
A check takes the text as typed (or a default already of its type) and returns the value the
command uses. `Option` declares a typer option through one of them. Pure: no I/O.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, DecimalException
from typing import Any

__all__ = [
    "BYTES_MAX",
    "COUNT_MAX",
    "DURATION",
    "RANGE",
    "RATE",
    "SECONDS_MAX",
    "SIZE",
    "BadValue",
    "Bounded",
    "Option",
    "count",
    "parse_duration",
    "parse_range",
    "parse_rate",
    "parse_size",
    "parse_time",
    "positions",
    "seconds",
    "time",
]

SECONDS_MAX = 365 * 86400  # a year: longer than any wait, deadline or budget means a typo
COUNT_MAX = 2**31 - 1  # what a C int holds: every count fits whatever it is handed to
BYTES_MAX = 2**63 - 1  # an int64, what a manifest and a JSON reader hold
DURATION_MAX = _dt.timedelta(days=36500)  # a century: now - it is still a date
# what a datetime64[ns] label holds (1677-09-21 .. 2262-04-11), in whole years
EARLIEST, LATEST = _dt.datetime(1678, 1, 1), _dt.datetime(2262, 1, 1)


class BadValue(ValueError):
    """A value outside what its option or query parameter accepts (usage: exit 2, HTTP 400)."""


def _spell(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class Bounded:
    """A finite number of `kind` in lo..hi: NaN, infinities, overflow and text that is not a
    number are refused with the range. `what` names the unit in the message."""

    kind: type
    lo: float
    hi: float
    what: str = "a number"

    def __call__(self, value: Any) -> Any:
        number = self._read(value)
        if number is None or not self.lo <= number <= self.hi:
            raise BadValue(
                f"want {self.what} from {_spell(self.lo)} to {_spell(self.hi)}, got {value!r}"
            )
        return number

    def _read(self, value: Any) -> Any:
        if isinstance(value, bool):
            return None
        if isinstance(value, str):
            try:
                value = int(value) if self.kind is int else float(value)
            except (ValueError, OverflowError):
                return None
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if self.kind is int and isinstance(value, float):
            return int(value) if value.is_integer() else None
        return self.kind(value) if isinstance(value, (int, float)) else None


def seconds(lo: float = 0, hi: float = SECONDS_MAX) -> Bounded:
    """Seconds, lo..hi (a year at most)."""
    return Bounded(float, lo, hi, "seconds")


def count(lo: int = 1, hi: int = COUNT_MAX, what: str = "a whole number") -> Bounded:
    """A whole number lo..hi (what a C int holds at most)."""
    return Bounded(int, lo, hi, what)


# Sizes and rates: "50GiB", "300MB/s", "1e9", 123.
_UNITS = {
    "": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
    "t": 10**12, "tb": 10**12, "p": 10**15, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}  # fmt: skip
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", re.IGNORECASE | re.ASCII)
_SIZE_HELP = "a number with B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. 50GiB), at most 8 EiB"


def parse_size(text: str | int) -> int:
    """Bytes from "50GiB" / "2TB" / "1e9" / 123, exactly (no float rounding), 0..BYTES_MAX."""
    if isinstance(text, int) and not isinstance(text, bool):
        size = text
    else:
        m = _SIZE.fullmatch(str(text))
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS or len(m.group(1)) > 40:
            raise BadValue(f"cannot read size {text!r}: use {_SIZE_HELP}")
        try:
            number = Decimal(m.group(1))
            # an exponent past any size is refused before int() spells out its digits
            size = BYTES_MAX + 1 if number.adjusted() > 25 else int(number * _UNITS[unit])
        except (DecimalException, OverflowError):
            size = BYTES_MAX + 1
    if not 0 <= size <= BYTES_MAX:
        raise BadValue(f"size {text!r} is out of range: use {_SIZE_HELP}")
    return size


def parse_rate(text: str | float) -> float:
    """Bytes per second from "300MB/s" (the "/s" is optional) or a number: positive, finite."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        rate = float(text)
        if not (math.isfinite(rate) and 0 < rate <= BYTES_MAX):
            raise BadValue(f"rate {text!r} must be positive and at most 8 EiB/s")
        return rate
    body = str(text).strip()
    body = body[:-2] if body.lower().endswith("/s") else body
    try:
        rate = parse_size(body)
    except BadValue:
        rate = 0
    if rate <= 0:
        raise BadValue(f"rate {text!r}: want bytes per second above 0, at most 8 EiB/s (300MB/s)")
    return float(rate)


def SIZE(text: str) -> str:
    """A size option: checked here, handed on as typed (the command reads it again)."""
    parse_size(text)
    return str(text).strip()


def RATE(text: str) -> str:
    """A rate option: checked here, handed on as typed."""
    parse_rate(text)
    return str(text).strip()


# Durations: "0s", "90m", "12h", "30d", "2w".
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])", re.ASCII)


def parse_duration(text: str) -> _dt.timedelta:
    """`0s`, `90m`, `12h`, `30d`, `2w` as a timedelta, up to a century."""
    m = _DURATION.fullmatch(str(text).strip())
    if m is None:
        raise BadValue(
            f"{text!r} is not a duration: write a number and a unit, s m h d or w (0s, 12h, 30d)"
        )
    secs = Decimal(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if secs > Decimal(DURATION_MAX.total_seconds()):
        raise BadValue(f"duration {text!r} is longer than a century ({DURATION_MAX.days}d)")
    return _dt.timedelta(seconds=float(secs))


def DURATION(text: str) -> str:
    """A duration option: checked here, handed on as typed (the command reads it again)."""
    parse_duration(text)
    return str(text).strip()


# Times: ISO 8601, UTC; an offset is converted to UTC.
def parse_time(text: str) -> _dt.datetime:
    """An ISO 8601 time as naive UTC (an offset or Z converted), inside what a datetime64[ns]
    label holds."""
    try:
        when = _dt.datetime.fromisoformat(str(text).strip())
        if when.tzinfo is not None:
            when = when.astimezone(_dt.UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):
        raise BadValue(
            f"{text!r} is not an ISO 8601 time: write UTC as 2025-08-01T06 or 2025-08-01T06:00Z"
        ) from None
    if not EARLIEST <= when < LATEST:
        raise BadValue(
            f"{text!r} is outside {EARLIEST:%Y-%m-%d}..{LATEST:%Y-%m-%d}, what a time label holds"
        )
    return when


def time(now: bool = False) -> Callable[[Any], str]:
    """A time option: ISO 8601 UTC (or, with `now`, the word now). Handed on as typed when it
    has no offset, else as its UTC time, so the command reads one UTC spelling."""

    def check(text: Any) -> str:
        typed = str(text).strip()
        if now and typed.lower() == "now":
            return "now"
        when = parse_time(typed)
        has_offset = _dt.datetime.fromisoformat(typed).tzinfo is not None
        return when.isoformat() if has_offset else typed

    return check


def positions(text: Any) -> str:
    """`--positions`: a count of positions, or all."""
    typed = str(text).strip()
    if typed.lower() != "all":
        try:
            count(1, what="a count of positions (or all)")(typed)
        except BadValue:
            raise BadValue(
                f"want a count of positions from 1 to {COUNT_MAX}, or all; got {text!r}"
            ) from None
    return typed


def parse_range(text: str) -> tuple[float, float]:
    """`MIN,MAX` as two finite numbers, MIN < MAX."""
    lo, sep, hi = str(text).partition(",")
    try:
        pair = (float(lo), float(hi)) if sep else None
    except ValueError:
        pair = None
    if pair is None or not all(map(math.isfinite, pair)) or not pair[0] < pair[1]:
        raise BadValue(f"{text!r}: want MIN,MAX, two finite numbers with MIN < MAX, e.g. 250,310")
    return pair


def RANGE(text: str) -> str:
    """A range option: checked here, handed on as typed."""
    parse_range(text)
    return str(text).strip()


def Option(*names: str, check: Callable[[Any], Any], **kwargs: Any) -> Any:
    """`typer.Option` whose value goes through `check` (a BadValue is exit 2 naming the option);
    a `Bounded` check's range is also the option's min/max, shown in --help."""
    import typer

    if isinstance(check, Bounded):
        kwargs.update(min=check.lo, max=check.hi)
    return typer.Option(*names, parser=check, **kwargs)
