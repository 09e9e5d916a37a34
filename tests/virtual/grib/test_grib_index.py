"""wgrib2 inventory parsing: real NOAA indexes, windows, quirks, validation, byte ranges."""

from __future__ import annotations

import itertools
import struct
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolkit.virtual.grib.errors import InvalidIndexError, StaleIndexError, SubMessageError
from toolkit.virtual.grib.index import (
    IndexRecord,
    RawParam,
    Window,
    parse_index,
    parse_raw_param,
    parse_window,
    with_byte_ranges,
)

DATA = Path(__file__).resolve().parents[2] / "data"  # tests/data: real files, with licences
REAL_INDEXES = [
    *sorted((DATA / "idx").glob("*.idx")),
    DATA / "grib" / "gfswave.t18z.atlocn.0p16.f001.grib2.idx",
]
H = timedelta(hours=1)


def header(length: int, discipline: int = 0, edition: int = 2) -> bytes:
    return b"GRIB\x00\x00" + bytes([discipline, edition]) + struct.pack(">Q", length)


@pytest.mark.parametrize("path", REAL_INDEXES, ids=lambda p: p.name)
def test_every_real_inventory_parses(path: Path) -> None:
    text = path.read_text()
    records = parse_index(text, str(path))
    assert len(records) == len(text.strip().splitlines())
    assert all(r.window is not None for r in records), "every real window is understood"
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    # ranges tile the file: each ends where the next begins; only the last is open
    for a, b in itertools.pairwise(records):
        assert a.end == b.offset
    assert records[-1].length is None
    # the record renders back to its own line
    assert [r.line() for r in records] == text.strip().splitlines()


def test_real_quirks() -> None:
    hrrr = parse_index((DATA / "idx" / "hrrr.t00z.wrfsfcf24.grib2.idx").read_text())
    raw = next(r for r in hrrr if r.element.startswith("var "))
    assert raw.raw_param == RawParam(0, 16, 201, center=7, local_table=1)
    assert raw.raw_param.element() == raw.element
    apcp = [r.window for r in hrrr if r.element == "APCP"]
    assert Window("accum", 0 * H, 24 * H) in apcp  # "0-1 day acc fcst"
    assert Window("accum", 23 * H, 24 * H) in apcp
    assert hrrr[0].init == datetime(2025, 8, 1, 0, tzinfo=hrrr[0].init.tzinfo)

    gep = parse_index((DATA / "idx" / "gep01.t00z.pgrb2s.0p25.f015.idx").read_text())
    assert {r.member for r in gep} == {1}
    tmax = next(r for r in gep if r.element == "TMAX")
    assert tmax.window == Window("max", 12 * H, 15 * H)
    gec = parse_index((DATA / "idx" / "gec00.t00z.pgrb2a.0p50.f432.idx").read_text())
    assert {r.member for r in gec} == {0}
    avg = parse_index((DATA / "idx" / "geavg.t00z.pgrb2s.0p25.f000.idx").read_text())
    assert {r.ensemble_stat for r in avg} == {"mean"} and {r.member for r in avg} == {None}
    assert avg[0].window == Window.instant(timedelta(0))


@pytest.mark.parametrize(
    ("text", "window"),
    [
        ("anl", Window("instant", 0 * H, 0 * H)),
        ("7 hour fcst", Window("instant", 7 * H, 7 * H)),
        ("30 min fcst", Window("instant", timedelta(minutes=30), timedelta(minutes=30))),
        ("6-7 hour acc fcst", Window("accum", 6 * H, 7 * H)),
        ("5-6 hour max fcst", Window("max", 5 * H, 6 * H)),
        ("12-15 hour min fcst", Window("min", 12 * H, 15 * H)),
        ("0-6 hour ave fcst", Window("avg", 0 * H, 6 * H)),
        ("0-1 day acc fcst", Window("accum", 0 * H, 24 * H)),
        ("0-0 day max fcst", Window("max", 0 * H, 0 * H)),
        ("prob >0.254", None),
        ("", None),
    ],
)
def test_parse_window(text: str, window: Window | None) -> None:
    assert parse_window(text) == window


@given(st.integers(0, 900), st.integers(0, 900), st.sampled_from(["accum", "avg", "max", "min"]))
def test_window_render_round_trips(a: int, b: int, step: str) -> None:
    start, end = sorted((a, b))
    window = Window(step, start * H, end * H)
    assert parse_window(window.render()) == window
    assert parse_window(Window.instant(end * H).render()) == Window.instant(end * H)


def test_raw_param_variants() -> None:
    assert parse_raw_param("var discipline=10 parmcat=191 parm=4") == RawParam(10, 191, 4)
    assert parse_raw_param("TMP") is None


LINE = "{n}:{o}:d=2025080100:{e}:surface:anl:"


def _index(offsets: list[int], labels: list[str] | None = None) -> str:
    labels = labels or [str(i + 1) for i in range(len(offsets))]
    return "".join(
        LINE.format(n=n, o=o, e=f"V{i}") + "\n"
        for i, (n, o) in enumerate(zip(labels, offsets, strict=True))
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty index"),
        ("   \n", "empty index"),
        (_index([0, 100, 100]), "offsets not increasing"),
        (_index([0, 100, 50]), "offsets not increasing"),
        (_index([0, 100], ["1", "1"]), "listed twice"),
        (_index([0, 100], ["2", "1"]), "message numbers not increasing"),
        (_index([0, 100, 100], ["1", "2.1", "2.3"]), "follows"),
        (_index([0, 100, 120], ["1", "2.1", "2.2"]), "sub-message 2.2 at offset 120"),
        (_index([0, 100], ["1", "2.2"]), "starts mid-message"),
        ("1:0:d=2025080100:A:surface:anl:\ngarbage\n", "line 2 is not a wgrib2 inventory line"),
        ("1:zero:d=2025080100:A:surface:anl:\n", "line 1 is not a wgrib2 inventory line"),
        ("1:-5:d=2025080100:A:surface:anl:\n", "line 1 is not a wgrib2 inventory line"),
        ("1.x:0:d=2025080100:A:surface:anl:\n", "line 1 is not a wgrib2 inventory line"),
        ("1:0:d=2025080100\n", "line 1 is not a wgrib2 inventory line"),
        ("1:0:d=20250801:A:surface:anl:\n", "reference date 'd=20250801' is not d=YYYYMMDDHH"),
    ],
)
def test_invalid_indexes_name_the_file_and_reason(text: str, reason: str) -> None:
    with pytest.raises(InvalidIndexError) as err:
        parse_index(text, "s3://bucket/file.idx")
    assert "s3://bucket/file.idx" in str(err.value)
    assert reason in str(err.value)


def test_submessages_share_a_range_and_only_the_first_is_referenceable() -> None:
    records = parse_index(_index([0, 100, 100, 250], ["1", "2.1", "2.2", "3"]))
    assert [r.label for r in records] == ["1", "2.1", "2.2", "3"]
    assert [(r.offset, r.length) for r in records[1:3]] == [(100, 150), (100, 150)]
    records[1].check_referenceable("u")
    with pytest.raises(SubMessageError, match="field 2 of GRIB message 2"):
        records[2].check_referenceable("s3://b/f")
    # a sub-message group at the end of the file is closed by the header too
    tail = parse_index(_index([0, 100, 100], ["1", "2.1", "2.2"]))
    closed = with_byte_ranges(tail, "u", 300, header(200))
    assert [(r.offset, r.length) for r in closed] == [(0, 100), (100, 200), (100, 200)]


def test_last_range_from_the_header() -> None:
    records = parse_index(_index([0, 100]))
    # ends at EOF
    assert with_byte_ranges(records, "u", 160, header(60))[-1].length == 60
    # the file holds more messages than the index lists: the header, not EOF, ends it
    assert with_byte_ranges(records, "u", 500, header(60))[-1].length == 60


@pytest.mark.parametrize(
    ("size", "head", "reason"),
    [
        (100, header(60), "at or past the end"),
        (50, header(60), "at or past the end"),
        (160, b"7777" + bytes(12), "does not point at a message"),
        (160, header(60, edition=1), "edition 1"),
        (160, b"GRIB", "only 4 bytes"),
    ],
)
def test_stale_index_names_file_and_reason(size: int, head: bytes, reason: str) -> None:
    records = parse_index(_index([0, 100]))
    with pytest.raises(StaleIndexError) as err:
        with_byte_ranges(records, "s3://b/data.grib2", size, head)
    assert "s3://b/data.grib2" in str(err.value) and reason in str(err.value)


@given(st.lists(st.integers(20, 10_000), min_size=1, max_size=40), st.integers(0, 3))
def test_generated_inventories_round_trip(lengths: list[int], extra_after: int) -> None:
    offsets = [sum(lengths[:i]) for i in range(len(lengths))]
    records = [
        IndexRecord(
            i + 1,
            None,
            o,
            None,
            datetime(2025, 8, 1),
            "TMP",
            f"{i} mb",
            f"{i} hour fcst",
            ("ENS=+3",),
        )
        for i, o in enumerate(offsets)
    ]
    text = "".join(r.line() + "\n" for r in records)
    parsed = parse_index(text)
    assert [(r.offset, r.element, r.level, r.member) for r in parsed] == [
        (o, "TMP", f"{i} mb", 3) for i, o in enumerate(offsets)
    ]
    file_size = sum(lengths) + 50 * extra_after
    closed = with_byte_ranges(parsed, "u", file_size, header(lengths[-1]))
    assert [r.length for r in closed] == lengths


def test_crlf_and_extra_fields() -> None:
    text = "1:0:d=2025080100:A:surface:anl:ENS=+1:prob >0\r\n2:50:d=2025080100:B:surface:6 hour fcst:\r\n"
    a, b = parse_index(text)
    assert (a.window_text, a.extra, a.member, a.end) == ("anl", ("ENS=+1", "prob >0"), 1, 50)
    assert (b.window_text, b.extra, b.window) == ("6 hour fcst", (), Window.instant(6 * H))
