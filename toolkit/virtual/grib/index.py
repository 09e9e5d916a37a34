"""wgrib2 `.idx` inventories -> records with byte ranges (pure: no I/O).

Line syntax (``N[.k]:OFFSET:d=YYYYMMDDHH:ELEMENT:LEVEL:WINDOW:[EXTRA...]``) is parsed by
gribberish's own index parser; this module adds what it lacks:

* validation: message numbers and offsets must strictly increase (sub-messages share theirs);
* byte ranges: a message ends where the next one starts, the last one at the length its own
  header declares (read from the data file, which also proves the index is not stale);
* meaning: the forecast window (step type, start, end), ensemble member / statistic, and the
  GRIB parameter triplet behind raw ``var discipline=.. parmcat=.. parm=..`` names;
* sub-messages (``128.1``, ``128.2``): fields sharing one GRIB message. Only the first field is
  what a decoder sees at the message's offset, so the others are refused as references.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import gribberish

from toolkit.virtual.grib.errors import InvalidIndexError, SubMessageError
from toolkit.virtual.grib.message import check_message_at

STEP_TYPES = ("instant", "accum", "avg", "max", "min")
_STAT_WORDS = {"acc": "accum", "ave": "avg", "max": "max", "min": "min"}
_UNITS = {"min": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
_INSTANT_RE = re.compile(r"^(\d+) (min|hour|day) fcst$")
_RANGE_RE = re.compile(r"^(\d+)-(\d+) (min|hour|day) (acc|ave|max|min) fcst$")
_RAW_RE = re.compile(
    r"^var discipline=(\d+)(?: center=(\d+))?(?: local_table=(\d+))? parmcat=(\d+) parm=(\d+)$"
)
_ENS_RE = re.compile(r"^ENS=(?:([+-]\d+)|(low-res|hi-res) ctl)$")


@dataclass(frozen=True)
class Window:
    """The time a field describes, relative to init: an instant or a statistic over [start, end]."""

    step_type: str
    start: timedelta
    end: timedelta

    @classmethod
    def instant(cls, lead: timedelta) -> Window:
        return cls("instant", lead, lead)

    def render(self) -> str:
        """The wgrib2 spelling: hours, or minutes when the window is not whole hours (HRRR
        sub-hourly); wgrib2 itself may print whole days as ``0-1 day``, which parses the same."""
        unit, size = _unit(self.start, self.end)
        if self.step_type == "instant":
            if self.end == timedelta(0):
                return "anl"
            return f"{self.end // size} {unit} fcst"
        word = {v: k for k, v in _STAT_WORDS.items()}[self.step_type]
        return f"{self.start // size}-{self.end // size} {unit} {word} fcst"


def _unit(*deltas: timedelta) -> tuple[str, timedelta]:
    for unit in ("hour", "min"):
        size = _UNITS[unit]
        if all(d % size == timedelta(0) for d in deltas):
            return unit, size
    raise ValueError(f"wgrib2 windows are whole minutes, not {', '.join(map(str, deltas))}")


def parse_window(text: str) -> Window | None:
    """`anl`, `7 hour fcst`, `6-7 hour acc fcst`, `0-1 day max fcst` ...; None if unrecognised."""
    text = text.strip()
    if text == "anl":
        return Window.instant(timedelta(0))
    if m := _INSTANT_RE.match(text):
        return Window.instant(int(m[1]) * _UNITS[m[2]])
    if m := _RANGE_RE.match(text):
        unit = _UNITS[m[3]]
        return Window(_STAT_WORDS[m[4]], int(m[1]) * unit, int(m[2]) * unit)
    return None


@dataclass(frozen=True)
class RawParam:
    """The GRIB parameter behind an element wgrib2 has no name for."""

    discipline: int
    category: int
    number: int
    center: int | None = None
    local_table: int | None = None

    def element(self) -> str:
        """The element string wgrib2 prints for this parameter."""
        parts = [f"var discipline={self.discipline}"]
        if self.center is not None:
            parts.append(f"center={self.center}")
        if self.local_table is not None:
            parts.append(f"local_table={self.local_table}")
        parts += [f"parmcat={self.category}", f"parm={self.number}"]
        return " ".join(parts)


def parse_raw_param(element: str) -> RawParam | None:
    if m := _RAW_RE.match(element.strip()):
        return RawParam(
            int(m[1]),
            int(m[4]),
            int(m[5]),
            int(m[2]) if m[2] else None,
            int(m[3]) if m[3] else None,
        )
    return None


@dataclass(frozen=True, slots=True)
class IndexRecord:
    """One inventory line. `length` is None until the end of the last message is known."""

    number: int
    submessage: int | None
    offset: int
    length: int | None
    init: datetime | None
    element: str
    level: str
    window_text: str
    extra: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.number}" if self.submessage is None else f"{self.number}.{self.submessage}"

    @property
    def end(self) -> int | None:
        return None if self.length is None else self.offset + self.length

    @property
    def window(self) -> Window | None:
        return parse_window(self.window_text)

    @property
    def raw_param(self) -> RawParam | None:
        return parse_raw_param(self.element)

    @property
    def member(self) -> int | None:
        """Ensemble member: 0 for the control, N for ``ENS=+N`` (-N for ``ENS=-N``)."""
        for item in self.extra:
            if m := _ENS_RE.match(item.strip()):
                return int(m[1]) if m[1] else 0
        return None

    @property
    def ensemble_stat(self) -> str | None:
        """``mean`` / ``spread`` for ensemble-statistic files (``ens mean``, ``ens spread``)."""
        for item in self.extra:
            word = item.strip().lower()
            if word.startswith("ens ") and not word.startswith("ens="):
                return "spread" if "spread" in word or "std" in word else word[4:]
        return None

    def line(self) -> str:
        """The record as a wgrib2 inventory line."""
        date = f"d={self.init:%Y%m%d%H}" if self.init else "d="
        fields = [self.label, str(self.offset), date, self.element, self.level, self.window_text]
        return ":".join([*fields, *self.extra]) + (":" if not self.extra else "")

    def check_referenceable(self, url: str) -> None:
        """Refuse a field a byte-range reference cannot isolate.

        A reference points at a whole message and the decoder returns its first field, so
        sub-message 2 onwards would silently decode as sub-message 1.
        """
        if self.submessage is not None and self.submessage > 1:
            raise SubMessageError(
                url,
                f"record {self.label} ({self.element} {self.level}) is field {self.submessage} of "
                f"GRIB message {self.number}; a reference to that message decodes field 1",
            )


def parse_index(text: str, url: str = "<index>") -> list[IndexRecord]:
    """Parse and validate an inventory; the last message's length is left as None."""
    if not text.strip():
        raise InvalidIndexError(url, "empty index")
    try:
        entries = gribberish.parse_grib_index(text)
    except ValueError as err:
        raise InvalidIndexError(url, str(err)) from None
    if not entries:
        raise InvalidIndexError(url, "no records (not a wgrib2 inventory?)")
    if any(e.reference_date is None for e in entries):
        _check_dates(text, url)
    rows = [(e.message_number, e.submessage, e.offset) for e in entries]
    _validate_order(rows, url)
    starts = sorted({offset for _, _, offset in rows})
    following = dict(zip(starts, [*starts[1:], None], strict=True))
    records = []
    for e, (number, submessage, offset) in zip(entries, rows, strict=True):
        nxt = following[offset]
        records.append(
            IndexRecord(
                number,
                submessage,
                offset,
                None if nxt is None else nxt - offset,
                e.reference_date,
                e.var or "",
                e.level or "",
                e.forecast_time or "",
                tuple(e.extra),
            )
        )
    return records


def _check_dates(text: str, url: str) -> None:
    """Every line's third field is ``d=YYYYMMDDHH`` (or a bare ``d=``): a date gribberish could
    not read would otherwise become "no date" and slip past the init-time check."""
    for n, line in enumerate((ln for ln in text.splitlines() if ln.strip()), start=1):
        fields = line.split(":")
        date = fields[2].strip() if len(fields) > 2 else ""
        if date == "d=":
            continue
        try:
            if not date.startswith("d="):
                raise ValueError
            datetime.strptime(date[2:], "%Y%m%d%H")
        except ValueError:
            raise InvalidIndexError(
                url, f"line {n}: reference date {date!r} is not d=YYYYMMDDHH"
            ) from None


def check_init(records: list[IndexRecord], init: datetime, url: str = "<index>") -> None:
    """Refuse an index written for another cycle than the file's init time.

    Byte ranges cannot show this (the other cycle's file has the same layout), so an index
    copied or published under the wrong key would otherwise serve the wrong forecast.
    Naive datetimes are taken as UTC; records without a date are not checked.
    """
    want = init if init.tzinfo else init.replace(tzinfo=UTC)
    for rec in records:
        if rec.init is None:
            continue
        have = rec.init if rec.init.tzinfo else rec.init.replace(tzinfo=UTC)
        if have != want:
            raise InvalidIndexError(
                url,
                f"record {rec.label} is dated {have:%Y-%m-%dT%H:%M}Z, the file's init time is "
                f"{want:%Y-%m-%dT%H:%M}Z: the index belongs to another cycle",
            )


def _label(number: int, submessage: int | None) -> str:
    return f"{number}" if submessage is None else f"{number}.{submessage}"


def _validate_order(rows: list[tuple[int, int | None, int]], url: str) -> None:
    """Message numbers and offsets strictly increase; sub-messages k = 1, 2, ... share theirs."""
    prev: tuple[int, int | None, int] | None = None
    for number, sub, offset in rows:
        label = _label(number, sub)
        if prev is None or number != prev[0]:
            if sub not in (None, 1):
                raise InvalidIndexError(url, f"record {label} starts mid-message")
            if prev is not None:
                if number < prev[0]:
                    raise InvalidIndexError(
                        url, f"message numbers not increasing: {_label(*prev[:2])} then {label}"
                    )
                if offset <= prev[2]:
                    raise InvalidIndexError(
                        url,
                        f"offsets not increasing: message {_label(*prev[:2])} at {prev[2]}, "
                        f"message {label} at {offset}",
                    )
        else:
            if sub is None or prev[1] is None:
                raise InvalidIndexError(url, f"message {number} is listed twice")
            if sub != prev[1] + 1:
                raise InvalidIndexError(url, f"record {label} follows {_label(*prev[:2])}")
            if offset != prev[2]:
                raise InvalidIndexError(
                    url, f"sub-message {label} at offset {offset}, its message at {prev[2]}"
                )
        prev = (number, sub, offset)


def last_offset(records: list[IndexRecord]) -> int:
    return records[-1].offset


def with_byte_ranges(
    records: list[IndexRecord], url: str, file_size: int, last_header: bytes
) -> list[IndexRecord]:
    """Close the ranges against the data file as it is now.

    `last_header` is the 16 bytes of the data file at the last record's offset. The whole file
    is refused (StaleIndexError, naming `url`) unless a fitting GRIB2 message starts there; the
    last message then ends where its own header says, which is EOF unless the file holds more
    messages than the index lists.
    """
    last = records[-1].offset
    indicator = check_message_at(url, last, last_header, file_size)
    return [r if r.offset != last else replace(r, length=indicator.length) for r in records]


def group_messages(records: list[IndexRecord]) -> dict[int, list[IndexRecord]]:
    """Records by message number (a sub-message group has several)."""
    out: dict[int, list[IndexRecord]] = {}
    for r in records:
        out.setdefault(r.number, []).append(r)
    return out
