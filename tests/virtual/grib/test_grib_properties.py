"""Property tests for the two parsers that read untrusted bytes: wgrib2 inventories and GRIB2
indicator sections. Well-formed input round-trips; anything else is a GribSourceError that names
the file, never a crash (IndexError, struct.error, a gribberish panic ...)."""

from __future__ import annotations

import struct
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolkit.virtual.grib.errors import (
    GribSourceError,
    InvalidIndexError,
    InvalidMessageError,
    StaleIndexError,
    TruncatedMessageError,
)
from toolkit.virtual.grib.index import (
    IndexRecord,
    Inventory,
    RawParam,
    Window,
    _columns,
    _columns_np,
    _scan_lines,
    check_init,
    parse_index,
    parse_window,
    scan_index,
    with_byte_ranges,
)
from toolkit.virtual.grib.message import (
    INDICATOR_SIZE,
    check_message_at,
    parse_indicator,
    scan_messages,
    sections,
    split_fields,
)

URL = "s3://bucket/some/file.grib2"
H = timedelta(hours=1)

# ------------------------------------------------------------------ inventories: round trips

_words = st.text(
    st.characters(codec="ascii", min_codepoint=32, max_codepoint=126, exclude_characters=":"),
    min_size=1,
    max_size=12,
).filter(lambda s: s.strip() == s)
_windows = st.one_of(
    st.integers(0, 900).map(lambda h: Window.instant(h * H)),
    st.tuples(
        st.integers(0, 900), st.integers(0, 900), st.sampled_from(["accum", "avg", "max", "min"])
    ).map(lambda t: Window(t[2], min(t[:2]) * H, max(t[:2]) * H)),
)
_elements = st.one_of(
    st.sampled_from(["TMP", "UGRD", "APCP", "TMAX", "5WAVH"]),
    st.builds(
        RawParam,
        st.integers(0, 255),
        st.integers(0, 255),
        st.integers(0, 255),
        st.one_of(st.none(), st.integers(0, 255)),
        st.one_of(st.none(), st.integers(0, 255)),
    ).map(RawParam.element),
)
_levels = st.one_of(
    st.sampled_from(["surface", "2 m above ground", "entire atmosphere", "0-0.1 m below ground"]),
    st.floats(0.01, 1000, allow_nan=False).map(lambda v: f"{round(v, 2):g} mb"),
)
_extras = st.sampled_from([(), ("ENS=low-res ctl",), ("ENS=+7",), ("ens mean",), ("prob >0.254",)])


@st.composite
def inventories(draw: st.DrawFn) -> tuple[list[IndexRecord], list[int]]:
    """Records with strictly increasing numbers and offsets, some grouped as sub-messages."""
    init = draw(st.datetimes(datetime(2000, 1, 1), datetime(2099, 1, 1))).replace(
        minute=0, second=0, microsecond=0, tzinfo=UTC
    )
    groups = draw(st.lists(st.integers(1, 3), min_size=1, max_size=25))
    lengths = draw(st.lists(st.integers(20, 5000), min_size=len(groups), max_size=len(groups)))
    extra = draw(_extras)
    records, offset, number = [], 0, draw(st.integers(1, 3))
    for size, length in zip(groups, lengths, strict=True):
        for k in range(1, size + 1):
            records.append(
                IndexRecord(
                    number,
                    None if size == 1 else k,
                    offset,
                    None,
                    init,
                    draw(_elements),
                    draw(_levels),
                    draw(_windows).render(),
                    extra,
                )
            )
        offset += length
        number += draw(st.integers(1, 2))
    return records, lengths


def _header(length: int, discipline: int = 0) -> bytes:
    return b"GRIB\x00\x00" + bytes([discipline, 2]) + struct.pack(">Q", length)


@given(inventories(), st.booleans())
def test_inventory_round_trips(inv: tuple[list[IndexRecord], list[int]], crlf: bool) -> None:
    records, lengths = inv
    text = "".join(r.line() + ("\r\n" if crlf else "\n") for r in records)
    parsed = parse_index(text, URL)
    assert [
        (r.number, r.submessage, r.offset, r.init, r.element, r.level, r.window_text, r.extra)
        for r in parsed
    ] == [
        (r.number, r.submessage, r.offset, r.init, r.element, r.level, r.window_text, r.extra)
        for r in records
    ]
    assert [parse_window(r.window_text) for r in records] == [r.window for r in parsed]
    # element meaning survives: raw parameters and ensemble members
    assert [r.raw_param for r in parsed] == [r.raw_param for r in records]
    assert [r.member for r in parsed] == [r.member for r in records]
    # ranges: each message ends where the next starts, the last where its header says
    closed = with_byte_ranges(parsed, URL, sum(lengths) + 7, _header(lengths[-1]))
    by_message = {r.number: r.length for r in closed}
    assert list(by_message.values()) == lengths
    check_init(parsed, records[0].init)  # its own cycle passes


@given(inventories(), st.integers(1, 10_000))
def test_another_cycle_is_refused(inv: tuple[list[IndexRecord], list[int]], hours: int) -> None:
    records, _ = inv
    parsed = parse_index("".join(r.line() + "\n" for r in records), URL)
    other = records[0].init + hours * H
    with pytest.raises(InvalidIndexError, match="another cycle") as err:
        check_init(parsed, other.replace(tzinfo=None), URL)
    assert URL in str(err.value)


# ------------------------------------------------------------------ inventories: garbage

_field = st.one_of(
    st.text(max_size=10),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["d=2025080100", "d=2025139900", "d=", "1.2", "128.2", "anl", "ENS=+1"]),
)
_line = st.lists(_field, max_size=9).map(":".join)


@given(
    st.one_of(
        st.text(), st.binary().map(lambda b: b.decode("latin-1")), st.lists(_line).map("\n".join)
    )
)
@example(text="¹:0::::0")  # a Unicode digit `isdigit` passes and `int` refuses (found by CI)
def test_arbitrary_text_is_records_or_invalid_index(text: str) -> None:
    try:
        records = parse_index(text, URL)
    except InvalidIndexError as err:
        assert err.url == URL and err.reason and URL in str(err)
        return
    # what parses satisfies the invariants everything downstream relies on
    assert records
    offsets = [r.offset for r in records if (r.submessage or 1) == 1]
    assert offsets == sorted(set(offsets)) and offsets[0] >= 0
    assert all(r.length is None or r.length > 0 for r in records)


@pytest.mark.parametrize(
    ("date", "reason"),
    [
        ("d=2025139900", "line 2: reference date 'd=2025139900'"),
        ("x=2025080100", "line 2: reference date 'x=2025080100'"),
        ("2025080100", "is not d=YYYYMMDDHH"),
    ],
)
def test_unreadable_dates_are_invalid(date: str, reason: str) -> None:
    text = f"1:0:d=2025080100:TMP:surface:anl:\n2:10:{date}:TMP:2 m above ground:anl:\n"
    with pytest.raises(InvalidIndexError, match=reason):
        parse_index(text, URL)
    # a bare "d=" is what a record without a date renders as: allowed, and not checked
    (rec,) = parse_index("1:0:d=:TMP:surface:anl:\n", URL)
    assert rec.init is None
    check_init([rec], datetime(2025, 8, 1))


# ------------------------------------------------------------------ indicator sections


@given(st.integers(0, 255), st.integers(20, 2**63), st.binary(min_size=2, max_size=2))
def test_indicator_round_trips(discipline: int, length: int, reserved: bytes) -> None:
    head = b"GRIB" + reserved + bytes([discipline, 2]) + struct.pack(">Q", length)
    ind = parse_indicator(head, URL, 123)
    assert (ind.discipline, ind.edition, ind.length) == (discipline, 2, length)
    if length <= 10**6:
        assert check_message_at(URL, 5, head, 5 + length).length == length


@given(st.binary(max_size=40), st.integers(0, 2**40), st.integers(0, 2**40))
def test_arbitrary_header_bytes_give_a_named_error(head: bytes, offset: int, size: int) -> None:
    try:
        ind = parse_indicator(head, URL, offset)
    except InvalidMessageError as err:
        assert URL in str(err) and str(offset) in err.reason
    else:
        assert head[:4] == b"GRIB" and head[7] == 2 and ind.length >= 20
    try:
        checked = check_message_at(URL, offset, head[:INDICATOR_SIZE], size)
    except (StaleIndexError, TruncatedMessageError) as err:
        assert err.url == URL and str(offset) in err.reason
    else:
        assert offset + checked.length <= size


def _section(number: int, body: bytes, fudge: int) -> bytes:
    return struct.pack(">I", max(0, 5 + len(body) + fudge)) + bytes([number]) + body


@given(
    st.lists(
        st.builds(_section, st.integers(0, 9), st.binary(max_size=24), st.integers(-6, 3)),
        max_size=8,
    ),
    st.integers(-30, 30),
    st.integers(0, 4),
    st.binary(max_size=8),
)
def test_malformed_messages_give_a_named_error(
    parts: list[bytes], fudge: int, cut: int, trailer: bytes
) -> None:
    body = b"".join(parts)
    message = _header(max(0, 20 + len(body) + fudge)) + body + b"7777"[: 4 - cut] + trailer
    for parse in (scan_messages, sections, split_fields):
        try:
            parse(message, URL)
        except GribSourceError as err:
            assert err.url == URL and err.reason


@given(
    st.integers(0, 60 * 900),
    st.integers(0, 60 * 900),
    st.sampled_from(["instant", "accum", "avg", "max", "min"]),
)
def test_windows_in_minutes_round_trip(a: int, b: int, step: str) -> None:
    """HRRR sub-hourly windows are whole minutes: they must render to something we parse."""
    start, end = sorted((a, b))
    minute = timedelta(minutes=1)
    window = (
        Window.instant(end * minute)
        if step == "instant"
        else Window(step, start * minute, end * minute)
    )
    text = window.render()
    assert parse_window(text) == window
    whole_hours = window.end % H == timedelta(0) and window.start % H == timedelta(0)
    if text != "anl":
        assert text.split()[1] == ("hour" if whole_hours else "min")


_regularish = st.lists(
    st.tuples(
        st.sampled_from(["1", "2", "3", "10", "2.1", "", "-4", "+5"]),
        st.sampled_from(["0", "100", "200", "99", "", "1e3"]),
        st.lists(_field, min_size=3, max_size=6).map(":".join),
        st.sampled_from([":", ""]),
    ).map(lambda t: f"{t[0]}:{t[1]}:{t[2]}{t[3]}"),
    min_size=1,
    max_size=6,
).map("\n".join)


@st.composite
def _dated(draw: st.DrawFn) -> str:
    """Inventories as NOAA writes them (what the byte reader accepts), of lines with few or
    many fields, with at most one fault: a field of one line replaced."""
    n = draw(st.integers(1, 6))
    fields = st.lists(st.sampled_from(["TMP", "2 m", "anl", "", "ENS=+1", "7"]), max_size=5)
    rows = [[str(i + 1), str(100 * i), "d=2025080100", *draw(fields)] for i in range(n)]
    faults = [(0, "1"), (0, ""), (0, "x"), (0, "2.1"), (1, "0"), (1, "99"), (1, ""), (1, "1e3")]
    faults += [(2, "d=2025080112"), (2, "d="), (2, "d=2025080")]
    fault = draw(st.sampled_from([None, *faults]))
    if fault is not None:
        rows[draw(st.integers(0, n - 1))][fault[0]] = fault[1]
    return "\n".join(":".join(r) + draw(st.sampled_from([":", ""])) for r in rows)


@settings(max_examples=600)
@example("1:0:d:a:b:c:\n2:5:d:a:b:c:7:8:\n3:9:d:b:")  # a digit field where a line should start
@example("1:0:d:a:b:c:\n2:5:d:a:b:c::7:d:a:b:c:\n4\n5:9:d:a:b:c:")  # an empty one, a bare line
@example("1:0:::::::\n:0:::::::")  # a line without its number
@example("1:0::::\n1:0::::\n1:0::::\n1:::::\n1:0::::0")  # a line without its offset
@example("1:0:d=2025080100:a\n1:9:d=2025080100:b")  # a number repeated
@example("1:0:d=2025080100:a\n2:0:d=2025080100:b")  # an offset repeated
@example("1:0:d=2025080100:a\n2:9:d=2025080112:b")  # two dates
@example("1:0:d=2025080100\n2:9:d=2025080100:b")  # a line of three fields
@given(
    st.one_of(
        _regularish,
        _regularish.map(lambda s: s + "\n"),
        _regularish.map(lambda s: s.replace("\n", "\n\n", 1)),
        _dated(),
        _dated().map(lambda s: s + "\n"),
        st.lists(_line).map("\n".join),
    )
)
def test_the_column_fast_paths_accept_only_what_the_line_path_reads_the_same(text: str) -> None:
    """The fast readers split the whole text once (str) or read its bytes (numpy): whatever
    either accepts, the line-by-line path (which names every fault) must read the same."""
    for reader in (_columns, _columns_np):
        fast = reader(text)
        if fast is not None:
            assert _read(fast) == _read(_scan_lines(text, URL)), reader.__name__


def _read(scan: Any) -> tuple[list[str], list[IndexRecord]]:
    """A reader's date fields and records (dates compared as text: reading them is not the
    point, so the records carry none)."""
    subs = None if scan.subs is None or all(s is None for s in scan.subs) else scan.subs
    dates = dict.fromkeys(scan.date_texts)
    inv = Inventory(URL, scan.numbers, subs, scan.offsets, scan.date_texts, dates, scan.fields)
    return list(scan.date_texts), list(inv)


@settings(max_examples=200)
@given(inventories(), st.booleans(), st.booleans(), st.integers(0, 400))
def test_the_fast_paths_read_every_regular_inventory_as_the_line_path_does(
    inv: tuple[list[IndexRecord], list[int]], trailing: bool, bare: bool, pad: int
) -> None:
    """Inventories of one record per message (what NOAA publishes), with or without the
    closing ":" and the final newline, padded to any length: both fast readers accept them
    and read what the line path reads; scan_index (numpy from 4 kB) agrees with parse_index's
    records line by line."""
    records = [
        replace(r, submessage=None, number=i + 1)
        for i, r in enumerate(inv[0])
        if r.submessage in (None, 1)
    ]
    last = records[-1]
    records += [
        replace(last, number=last.number + j, offset=last.offset + 1000 * j)
        for j in range(1, pad + 1)
    ]
    lines = [r.line() if not bare else r.line().removesuffix(":") for r in records]
    text = "\n".join(lines) + ("\n" if trailing else "")
    slow = _read(_scan_lines(text, URL))
    for reader in (_columns, _columns_np):
        fast = reader(text)
        assert fast is not None, reader.__name__
        assert _read(fast) == slow, reader.__name__
    assert [r.line() for r in scan_index(text, URL)] == [r.line() for r in records]
