"""wgrib2 `.idx` inventories -> records with byte ranges (pure: no I/O).

Line syntax: ``N[.k]:OFFSET:d=YYYYMMDDHH:ELEMENT:LEVEL:WINDOW:[EXTRA...]``. `scan_index` splits
and validates the lines and keeps them as columns (`Inventory`); records are built only for
the lines a catalog looks up, which is what makes a ~700-line NOAA inventory cheap (faster
than gribberish's parser, which builds every entry). On top of the syntax it checks and adds:

* validation: message numbers and offsets must strictly increase (sub-messages share theirs);
* byte ranges: a message ends where the next one starts, the last one at the length its own
  header declares (read from the data file, which also proves the index is not stale);
* meaning: the forecast window (step type, start, end), ensemble member / statistic, and the
  GRIB parameter triplet behind raw ``var discipline=.. parmcat=.. parm=..`` names;
* sub-messages (``128.1``, ``128.2``): fields sharing one GRIB message. Only the first field is
  what a decoder sees at the message's offset, so the others are refused as references.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

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


@dataclass(frozen=True, eq=False)
class Inventory(Sequence[IndexRecord]):
    """A validated index as columns. Records are built only for the lines asked for: a file's
    catalog takes a few dozen of the ~700 records a real NOAA inventory lists, so parsing
    stops at splitting the text into columns, and windows are parsed only where the text is
    not the spelling asked for.

    `last_length` is None until the last message's end is known (`with_byte_ranges`)."""

    url: str
    numbers: Sequence[int]
    subs: Sequence[int | None] | None  # None: no sub-messages at all
    offsets: Sequence[int]
    date_texts: Sequence[str]
    elements: Sequence[str]
    levels: Sequence[str]
    windows: Sequence[str]
    extras: Sequence[str]  # what follows the window, ":"-joined ("" for nothing)
    dates: Mapping[str, datetime | None]  # each distinct date field, read
    last_length: int | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self._record(i % len(self))

    def _record(self, i: int) -> IndexRecord:
        offset = self.offsets[i]
        nxt = self._ends()[offset]
        rest = self.extras[i]
        return IndexRecord(
            self.numbers[i],
            None if self.subs is None else self.subs[i],
            offset,
            self.last_length if nxt is None else nxt - offset,
            self.dates[self.date_texts[i]],
            self.elements[i],
            self.levels[i],
            self.windows[i],
            tuple(filter(None, rest.split(":"))) if rest else (),
        )

    def _ends(self) -> dict[int, int | None]:
        ends = self.__dict__.get("_end_of")
        if ends is None:
            starts = sorted(set(self.offsets)) if self.subs is not None else list(self.offsets)
            ends = dict(zip(starts, [*starts[1:], None], strict=True))
            object.__setattr__(self, "_end_of", ends)
        return ends

    def lookup(
        self, element: str, level: str, window: Window | None = None, text: str | None = None
    ) -> list[IndexRecord]:
        """The records spelled `element`:`level` (and describing `window`, when given; `text`
        is its usual spelling, compared before any window is parsed)."""
        spans = self.__dict__.get("_spans")
        if spans is None:  # (first, last) line of each (element, level): C-speed dicts
            keys = list(zip(self.elements, self.levels, strict=True))
            n = len(keys)
            spans = (
                dict(zip(reversed(keys), range(n - 1, -1, -1), strict=True)),
                dict(zip(keys, range(n), strict=True)),
                keys,
            )
            object.__setattr__(self, "_spans", spans)
        first = spans[0].get((element, level))
        if first is None:
            return []
        last = spans[1][(element, level)]
        keys = spans[2]
        ids = (
            [first]
            if first == last
            else [i for i in range(first, last + 1) if keys[i] == (element, level)]
        )
        if window is not None:
            text = window.render() if text is None else text
            ids = [
                i for i in ids if self.windows[i] == text or parse_window(self.windows[i]) == window
            ]
        return [self._record(i) for i in ids]

    @property
    def last_offset(self) -> int:
        return self.offsets[-1]

    def closed(self, last_length: int) -> Inventory:
        return dataclasses.replace(self, last_length=last_length)


def scan_index(text: str, url: str = "<index>") -> Inventory:
    """Split and validate an inventory (syntax, dates, message order); build no record.

    The common inventory (every line with as many fields, one record per message, numbers
    and offsets increasing) is split once and checked a column at a time, at C speed; anything
    else takes the line-by-line path, which names the fault."""
    columns = _columns(text)
    if columns is None:
        columns = _scan_lines(text, url)
    numbers, subs, offsets, date_texts, elements, levels, windows, extras = columns
    dates = {}
    for d in set(date_texts):
        dates[d] = _date(d, date_texts.index(d) + 1, url)
    return Inventory(
        url, numbers, subs, offsets, date_texts, elements, levels, windows, extras, dates
    )


def _digits(text: str) -> bool:
    """ASCII digits only: `str.isdigit` also passes "¹" and other Unicode digits `int` refuses."""
    return text.isascii() and text.isdigit()


def _columns(text: str) -> tuple[Any, ...] | None:
    """The columns of a regular inventory, or None to go line by line.

    Regular: every line `number:offset:date:element:level:window[:extra...]` with as many
    fields, ended by ":" or not (wgrib2 writes both), digits for number and offset, both
    strictly increasing. The text is split on ":" once with its lines left joined, so line i+1
    starts with the field `\n<number>` at stride i*c. The checks prove that of every line
    before any column is trusted: all n-1 newlines are in the n heads, no head is empty, and
    the heads hold n digit runs, so each head after the first is exactly `\n<digits>`."""
    body = text[:-1] if text.endswith("\n") else text
    if not body or "\r" in body:
        return None
    if not body.endswith(":"):
        body = body.replace("\n", ":\n") + ":"  # GEFS: "...:anl:ENS=+1", no closing ":"
    first = body.find("\n")
    c = body.count(":", 0, first if first >= 0 else len(body))  # fields a line
    flat = body.split(":")
    n, ragged = divmod(len(flat) - 1, c) if c >= 6 else (0, 1)
    if ragged or not n:
        return None
    heads, offs = flat[0:-1:c], flat[1::c]
    joined = "".join(heads)
    if not (
        joined.count("\n") == body.count("\n") == n - 1
        and all(heads)
        and all(offs)
        and _digits(joined.replace("\n", ""))
        and _digits("".join(offs))
    ):
        return None  # sub-messages ("2.1"), signs, blanks, ragged lines: line by line
    if n < 64:  # numpy's fixed cost outweighs its speed on a short index
        if not all(h[:1] == "\n" and _digits(h[1:]) for h in heads[1:]):
            return None  # (the long path's digit-run count proves the same)
        numbers, offsets = list(map(int, heads)), list(map(int, offs))
        if not (_increasing(numbers) and _increasing(offsets)):
            return None
    else:
        # `joined` is "1\n2\n...": whitespace-separated digit runs, one per line
        num = np.fromstring(joined, dtype=np.int64, sep=" ")
        off = np.fromstring(" ".join(offs), dtype=np.int64, sep=" ")
        if len(num) != n or not ((num[1:] > num[:-1]).all() and (off[1:] > off[:-1]).all()):
            return None
        numbers, offsets = num.tolist(), off.tolist()
    extras = (
        [""] * n if c == 6 else flat[6::c] if c == 7
        else [":".join(t) for t in zip(*(flat[j::c] for j in range(6, c)), strict=True)]
    )  # fmt: skip
    return (
        numbers,
        None,
        offsets,
        flat[2::c],
        flat[3::c],
        flat[4::c],
        flat[5::c],
        extras,
    )


def _increasing(xs: list[int]) -> bool:
    return all(map(operator.lt, xs, xs[1:]))


def _scan_lines(text: str, url: str) -> tuple[Any, ...]:
    columns: tuple[list[Any], ...] = tuple([] for _ in range(8))
    rows = []
    for n, line in enumerate(text.split("\n"), start=1):  # wgrib2's lines: "\n", or "\r\n"
        line = line.removesuffix("\r")
        parts = line.split(":", 6)
        try:
            head, dot, tail = parts[0].partition(".")
            num, sub, off = int(head), int(tail) if dot else None, int(parts[1])
            if len(parts) < 4 or off < 0:
                raise ValueError
        except (ValueError, IndexError):
            if not line.strip():
                continue
            raise InvalidIndexError(
                url, f"line {n} is not a wgrib2 inventory line: {line[:80]!r}"
            ) from None
        rows.append((num, sub, off))
        parts += [""] * (7 - len(parts))
        for column, value in zip(columns, (num, sub, off, *parts[2:]), strict=True):
            column.append(value)
    if not rows:
        raise InvalidIndexError(url, "empty index")
    _validate_order(rows, url)
    return columns


def _date(text: str, line: int, url: str) -> datetime | None:
    """``d=YYYYMMDDHH`` (UTC), or None for a bare ``d=``; anything else is refused: a date that
    could not be read would otherwise slip past the init-time check."""
    date = text.strip()
    if date == "d=":
        return None
    try:
        if (
            not date.startswith("d=")
            or len(date) != 12
            or not (date.isascii() and date[2:].isdigit())
        ):
            raise ValueError
        d = date[2:]
        return datetime(int(d[:4]), int(d[4:6]), int(d[6:8]), int(d[8:]), tzinfo=UTC)
    except ValueError:
        raise InvalidIndexError(
            url, f"line {line}: reference date {date!r} is not d=YYYYMMDDHH"
        ) from None


def parse_index(text: str, url: str = "<index>") -> list[IndexRecord]:
    """Parse and validate an inventory into every record; the last message's length is None."""
    return list(scan_index(text, url))


def check_init(records: Sequence[IndexRecord], init: datetime, url: str = "<index>") -> None:
    """Refuse an index written for another cycle than the file's init time.

    Byte ranges cannot show this (the other cycle's file has the same layout), so an index
    copied or published under the wrong key would otherwise serve the wrong forecast.
    Naive datetimes are taken as UTC; records without a date are not checked.
    """
    want = init if init.tzinfo else init.replace(tzinfo=UTC)
    if isinstance(records, Inventory):  # one check per distinct date, not per record
        wrong = {d for d, date in records.dates.items() if date is not None and date != want}
        if wrong:
            first = next(i for i, d in enumerate(records.date_texts) if d in wrong)
            check_init([records[first]], init, url)
        return
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


def last_offset(records: Sequence[IndexRecord]) -> int:
    return records.last_offset if isinstance(records, Inventory) else records[-1].offset


def with_byte_ranges(
    records: Sequence[IndexRecord], url: str, file_size: int, last_header: bytes
) -> Any:
    """Close the ranges against the data file as it is now.

    `last_header` is the 16 bytes of the data file at the last record's offset. The whole file
    is refused (StaleIndexError, naming `url`) unless a fitting GRIB2 message starts there; the
    last message then ends where its own header says, which is EOF unless the file holds more
    messages than the index lists.
    """
    last = last_offset(records)
    indicator = check_message_at(url, last, last_header, file_size)
    if isinstance(records, Inventory):
        return records.closed(indicator.length)
    return [r if r.offset != last else replace(r, length=indicator.length) for r in records]


def group_messages(records: list[IndexRecord]) -> dict[int, list[IndexRecord]]:
    """Records by message number (a sub-message group has several)."""
    out: dict[int, list[IndexRecord]] = {}
    for r in records:
        out.setdefault(r.number, []).append(r)
    return out
