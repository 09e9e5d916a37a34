"""wgrib2 `.idx` inventories -> records with byte ranges (pure: no I/O).

Line syntax: ``N[.k]:OFFSET:d=YYYYMMDDHH:ELEMENT:LEVEL:WINDOW:[EXTRA...]``. `scan_index`
validates the lines and keeps numbers, offsets and dates as columns (`Inventory`); the text
fields are split when a catalog first looks one up, and records are built only for the lines
it looks up, which is what makes a ~700-line NOAA inventory cheap (faster than gribberish's
parser, which builds every entry). On top of the syntax it checks and adds:

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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

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


TextColumns = tuple[Sequence[str], Sequence[str], Sequence[str], Sequence[str]]


class LineFields:
    """The element, level, window and extras columns of an inventory, split from its text the
    first time a record or a lookup needs them: the scan itself (validation, byte ranges, the
    init check) builds no string per line. Holds its split once made (one per inventory)."""

    __slots__ = ("_columns", "_text")

    def __init__(self, text: str = "", columns: TextColumns | None = None) -> None:
        self._text = text
        self._columns = columns

    def columns(self) -> TextColumns:
        if self._columns is None:
            self._columns = _split_fields(self._text)
            self._text = ""
        return self._columns


@dataclass(frozen=True, eq=False)
class Inventory(Sequence[IndexRecord]):
    """A validated index as columns. Records are built only for the lines asked for: a file's
    catalog takes a few dozen of the ~700 records a real NOAA inventory lists, so the scan
    stops at numbers, offsets and dates, and the text fields are split when first read (a
    catalog's match reads them as columns and builds no record: `span` gives its ranges).

    `numbers` and `offsets` are lists or int64 arrays; `last_length` is None until the last
    message's end is known (`with_byte_ranges`)."""

    url: str
    numbers: Sequence[int]
    subs: Sequence[int | None] | None  # None: no sub-messages at all
    offsets: Sequence[int]
    date_texts: Sequence[str]
    dates: Mapping[str, datetime | None]  # each distinct date field, read
    fields: LineFields
    last_length: int | None = None

    @property
    def elements(self) -> Sequence[str]:
        return self.fields.columns()[0]

    @property
    def levels(self) -> Sequence[str]:
        return self.fields.columns()[1]

    @property
    def windows(self) -> Sequence[str]:
        return self.fields.columns()[2]

    @property
    def extras(self) -> Sequence[str]:
        """What follows each window, ":"-joined ("" for nothing)."""
        return self.fields.columns()[3]

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self._record(i % len(self))

    def __iter__(self) -> Iterator[IndexRecord]:
        return map(self._record, range(len(self)))

    def span(self, i: int) -> tuple[int, int | None]:
        """Record i's offset and length (None: the last message, until `closed`), read off
        the columns without building the record."""
        offsets = self._lists()[1]
        offset = offsets[i]
        if self.subs is None:
            nxt = offsets[i + 1] if i + 1 < len(offsets) else None
        else:
            nxt = self._ends()[offset]
        return offset, self.last_length if nxt is None else nxt - offset

    def _record(self, i: int) -> IndexRecord:
        numbers, _, elements, levels, windows, extras = self._lists()
        offset, length = self.span(i)
        rest = extras[i]
        return IndexRecord(
            numbers[i],
            None if self.subs is None else self.subs[i],
            offset,
            length,
            self.dates[self.date_texts[i]],
            elements[i],
            levels[i],
            windows[i],
            tuple(filter(None, rest.split(":"))) if rest else (),
        )

    def _lists(self) -> tuple[Sequence[Any], ...]:
        """The columns records are built from, as Python lists (made once, when first asked)."""
        got = self.__dict__.get("_as_lists")
        if got is None:
            got = (_listed(self.numbers), _listed(self.offsets), *self.fields.columns())
            object.__setattr__(self, "_as_lists", got)
        return got

    def _ends(self) -> dict[int, int | None]:
        """Where the message at each offset ends (sub-messages share their message's)."""
        ends = self.__dict__.get("_end_of")
        if ends is None:
            starts = sorted(set(self.offsets))
            ends = dict(zip(starts, [*starts[1:], None], strict=True))
            object.__setattr__(self, "_end_of", ends)
        return ends

    @property
    def last_offset(self) -> int:
        return int(self.offsets[-1])

    def closed(self, last_length: int) -> Inventory:
        return dataclasses.replace(self, last_length=last_length)


def _listed(xs: Sequence[int]) -> Sequence[int]:
    return xs.tolist() if isinstance(xs, np.ndarray) else xs


class _Scan(NamedTuple):
    """What a reader of an inventory's text hands `scan_index`."""

    numbers: Sequence[int]
    subs: Sequence[int | None] | None
    offsets: Sequence[int]
    date_texts: Sequence[str]
    first_dated: Mapping[str, int]  # each distinct date field: the first record with it (1-based)
    fields: LineFields


# Below this many characters an index is read by str methods; numpy's fixed cost per call
# (~30 us for its ~40 calls) outweighs its speed up to ~80 lines (~4 kB).
_NUMPY_FROM = 4096


def scan_index(text: str, url: str = "<index>") -> Inventory:
    """Validate an inventory (syntax, dates, message order) and keep it as columns; build no
    record and, for a regular inventory, no string per line.

    The common inventory (every line `number:offset:date:...`, one record per message,
    numbers and offsets increasing) is read at C speed: by numpy over its bytes
    (`_columns_np`, which also wants one date throughout) or, when short, by one `str.split`
    (`_columns`). Anything else takes the line-by-line path, which names the fault. All
    three read the same records (hypothesis tests hold them to it)."""
    scan = _columns_np(text) if len(text) >= _NUMPY_FROM else _columns(text)
    if scan is None:
        scan = _scan_lines(text, url)
    dates = {d: _date(d, line, url) for d, line in scan.first_dated.items()}
    return Inventory(
        url, scan.numbers, scan.subs, scan.offsets, scan.date_texts, dates, scan.fields
    )


def _first_dated(date_texts: list[str]) -> dict[str, int]:
    return {d: date_texts.index(d) + 1 for d in dict.fromkeys(date_texts)}


def _digits(text: str) -> bool:
    """ASCII digits only: `str.isdigit` also passes "¹" and other Unicode digits `int` refuses."""
    return text.isascii() and text.isdigit()


def _columns(text: str) -> _Scan | None:
    """The columns of a regular inventory by `str` methods, or None to go line by line.

    Regular: every line `number:offset:date:element:level:window[:extra...]` with as many
    fields, ended by ":" or not (wgrib2 writes both), digits for number and offset, both
    strictly increasing. The text is split on ":" once with its lines left joined, so line i+1
    starts with the field `\n<number>` at stride i*c. The checks prove that of every line
    before any column is trusted: all n-1 newlines are in the n heads, each head after the
    first opens with one, and the heads hold nothing else but digits, at least one each."""
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
        and ":".join(heads).count(":\n") == n - 1
        and _digits(joined.replace("\n", ""))
        and _digits("".join(offs))
    ):
        return None  # sub-messages ("2.1"), signs, blanks, ragged lines: line by line
    try:
        numbers, offsets = list(map(int, heads)), list(map(int, offs))
    except ValueError:  # an empty number or offset
        return None
    if not (_increasing(numbers) and _increasing(offsets)):
        return None
    date_texts = flat[2::c]
    fields = LineFields(columns=(flat[3::c], flat[4::c], flat[5::c], _extras(flat, c, n)))
    return _Scan(numbers, None, offsets, date_texts, _first_dated(date_texts), fields)


def _extras(flat: list[str], c: int, n: int) -> list[str]:
    """Fields 6.. of each line of `flat` (a regular index split on ":", c pieces a line)."""
    if c == 6:
        return [""] * n
    if c == 7:
        return flat[6::c]
    return [":".join(t) for t in zip(*(flat[j::c] for j in range(6, c)), strict=True)]


def _increasing(xs: list[int]) -> bool:
    return all(map(operator.lt, xs, xs[1:]))


def _columns_np(text: str) -> _Scan | None:
    """The numbers, offsets and date of a regular inventory read by numpy over its bytes, or
    None to go line by line; its text fields are left to be split when first looked up.

    Regular: ASCII, every line `number:offset:date:...` (at least four fields; no blank line,
    no "\r"), number and offset 1-15 ASCII digits, both strictly increasing, one date field
    spelled alike on every line. The separators (":" and "\n") are found once; each line's
    first three colons are the three separators after its newline, which the gaps between
    newlines prove (>= 3 colons each). The digit fields are read right-aligned through a
    window view of the bytes, as rows of a matrix times powers of ten (exact in float64)."""
    if not text.isascii() or "\r" in text:
        return None
    raw = text.encode()
    size = len(raw) - (raw[-1:] == b"\n")
    if size <= 0:
        return None
    b = np.frombuffer(raw, np.uint8, size)
    sep = np.flatnonzero((b == 58) | (b == 10))
    ends = np.flatnonzero(b[sep] == 10)  # sep[ends[i]]: the newline ending line i
    n = len(ends) + 1
    first = np.empty(n, np.int64)  # each line's first separator, as an index into sep
    first[0] = 0
    first[1:] = ends + 1
    if first[-1] + 2 >= len(sep) or (n > 1 and np.diff(first).min() < 4):
        return None  # a line with fewer than three colons, or a blank one
    c0, c1, c2 = sep[first], sep[first + 1], sep[first + 2]
    before = np.empty(n, np.int64)  # the separator before each line: its newline, or -1
    before[0] = -1
    before[1:] = sep[ends]
    stops = np.concatenate((c0, c1))  # where each number, then each offset, field stops
    lens = stops - np.concatenate((before, c0)) - 1
    w = int(lens.max())
    if w > 15 or lens.min() < 1:
        return None
    # row r of `window`: the w bytes before position r (the text ":"-padded in front)
    window = np.ndarray((size + 1, w), np.uint8, np.frombuffer(b":" * w + raw, np.uint8), 0, (1, 1))
    inside = np.arange(w, dtype=np.int8) >= (w - lens).astype(np.int8)[:, None]
    digits = (window[stops] ^ np.uint8(48)) * inside  # a non-digit inside shows as > 9
    if (digits > 9).any():
        return None
    values = digits @ (10.0 ** np.arange(w - 1, -1, -1))
    numbers, offsets = values[:n], values[n:]
    if not ((numbers[1:] > numbers[:-1]).all() and (offsets[1:] > offsets[:-1]).all()):
        return None
    width = int(c2[0] - c1[0])  # ":d=YYYYMMDDHH" on line 1: every line's must be the same
    if not (c2 - c1 == width).all():
        return None
    dated = np.ndarray((size - width + 1, width), np.uint8, raw, 0, (1, 1))[c1]
    if not (dated == dated[0]).all():
        return None
    date = text[int(c1[0]) + 1 : int(c2[0])]
    return _Scan(
        numbers.astype(np.int64),
        None,
        offsets.astype(np.int64),
        [date] * n,
        {date: 1},
        LineFields(text),
    )


def _split_fields(text: str) -> TextColumns:
    """Element, level, window and extras of every line of an inventory `_columns_np` read:
    one `str.split` when every line has as many fields (the trailing ":" alike), else line by
    line as `_scan_lines` splits them."""
    body = text[:-1] if text.endswith("\n") else text
    closed = body if body.endswith(":") else body.replace("\n", ":\n") + ":"
    first = closed.find("\n")
    c = closed.count(":", 0, first if first >= 0 else len(closed))
    n = closed.count("\n") + 1
    flat = closed.split(":")
    # every head piece opens with the line's newline, and holds the only one: lines aligned
    if c >= 6 and len(flat) == c * n + 1 and (":" + ":".join(flat[c:-1:c])).count(":\n") == n - 1:
        return flat[3::c], flat[4::c], flat[5::c], _extras(flat, c, n)
    rows = [[*line.split(":", 6), "", "", ""] for line in body.split("\n")]
    return [r[3] for r in rows], [r[4] for r in rows], [r[5] for r in rows], [r[6] for r in rows]


def _scan_lines(text: str, url: str) -> _Scan:
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
    numbers, subs, offsets, date_texts, *text_columns = columns
    fields = LineFields(columns=tuple(text_columns))  # type: ignore[arg-type]
    return _Scan(numbers, subs, offsets, date_texts, _first_dated(date_texts), fields)


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
