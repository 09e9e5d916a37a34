"""Message boundaries from the bytes, against the real GRIB files and the real GFS-Wave index."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolkit.virtual.grib.errors import InvalidMessageError, StaleIndexError, TruncatedMessageError
from toolkit.virtual.grib.index import parse_index, with_byte_ranges
from toolkit.virtual.grib.message import (
    check_message_at,
    join_fields,
    parse_indicator,
    scan_messages,
    sections,
    split_fields,
)

DATA = Path(__file__).resolve().parents[2] / "data"  # tests/data: real files, with licences
GRIBS = sorted((DATA / "grib").glob("*.grib2"))
WAVE = DATA / "grib" / "gfswave.t18z.atlocn.0p16.f001.grib2"
COUNTS = {"gfswave.t18z.atlocn.0p16.f001.grib2": 19, "s2s-pdt9-pdt10-pdt12.grib2": 10}


@pytest.mark.parametrize("path", GRIBS, ids=lambda p: p.name)
def test_every_real_file_scans(path: Path) -> None:
    data = path.read_bytes()
    spans = scan_messages(data, str(path))
    assert len(spans) == COUNTS.get(path.name, 1)
    assert spans[0].offset == 0 and spans[-1].end == len(data)
    for a, b in itertools.pairwise(spans):
        assert a.end == b.offset
    for s in spans:
        assert data[s.end - 4 : s.end] == b"7777"
        assert next(sec.number for sec in sections(data[s.offset : s.end])) == 1


def test_real_index_ranges_equal_scanned_boundaries() -> None:
    data = WAVE.read_bytes()
    records = parse_index(Path(f"{WAVE}.idx").read_text())
    last = records[-1].offset
    records = with_byte_ranges(records, str(WAVE), len(data), data[last : last + 16])
    spans = scan_messages(data)
    assert [(r.offset, r.length) for r in records] == [(s.offset, s.length) for s in spans]


def test_stale_check_on_the_real_pair() -> None:
    data = WAVE.read_bytes()
    records = parse_index(Path(f"{WAVE}.idx").read_text())
    last = records[-1].offset
    # the object was re-uploaded with a different first message: every offset is still in range
    shifted = data[:100] + data
    with pytest.raises(StaleIndexError, match="does not point at a message"):
        with_byte_ranges(records, "s3://b/wave", len(shifted), shifted[last : last + 16])
    # cut short inside the last message
    with pytest.raises(TruncatedMessageError, match="s3://b/wave"):
        with_byte_ranges(records, "s3://b/wave", len(data) - 1, data[last : last + 16])
    # extra messages after what the index lists are fine
    longer = data + data[:41723]
    ok = with_byte_ranges(records, "u", len(longer), longer[last : last + 16])
    assert ok[-1].end == len(data)


def _msg(body: bytes, discipline: int = 0) -> bytes:
    total = 16 + len(body) + 4
    return b"GRIB\x00\x00" + bytes([discipline, 2]) + struct.pack(">Q", total) + body + b"7777"


def test_indicator_errors() -> None:
    with pytest.raises(InvalidMessageError, match="only 3 bytes"):
        parse_indicator(b"GRI", "f")
    with pytest.raises(InvalidMessageError, match="no GRIB message starts at offset 7"):
        parse_indicator(b"XXXX" + bytes(12), "f", 7)
    with pytest.raises(InvalidMessageError, match="edition 1"):
        parse_indicator(b"GRIB\x00\x00\x00\x01" + bytes(8), "f")
    assert parse_indicator(_msg(b"", discipline=10)[:16]).discipline == 10


def test_scan_errors_name_file() -> None:
    one = _msg(b"x" * 10)
    with pytest.raises(TruncatedMessageError, match=r"file\.grib2.*message 2 at offset 30"):
        scan_messages(one + one[:-1], "file.grib2")
    with pytest.raises(InvalidMessageError, match="no GRIB message starts at offset 30"):
        scan_messages(one + b"junk" * 5, "file.grib2")
    bad_end = one[:-4] + b"7778"
    with pytest.raises(InvalidMessageError, match="does not end with '7777'"):
        scan_messages(bad_end, "file.grib2")


@given(st.lists(st.tuples(st.binary(max_size=40), st.integers(0, 255)), min_size=1, max_size=20))
def test_scan_finds_every_generated_message(parts: list[tuple[bytes, int]]) -> None:
    messages = [_msg(body, disc) for body, disc in parts]
    spans = scan_messages(b"".join(messages))
    assert [s.length for s in spans] == [len(m) for m in messages]
    assert [s.discipline for s in spans] == [d for _, d in parts]
    offset = 0
    for m, s in zip(messages, spans, strict=True):
        assert check_message_at("u", s.offset, m[:16], sum(map(len, messages))).length == len(m)
        assert s.offset == offset
        offset += len(m)


def test_split_and_join_fields_on_real_messages() -> None:
    data = WAVE.read_bytes()
    spans = scan_messages(data)
    a, b = (data[s.offset : s.end] for s in spans[:2])
    joined = join_fields([a, b])
    assert [s.number for s in sections(joined)].count(7) == 2
    fields = split_fields(joined)
    assert len(fields) == 2
    # the rebuilt standalone fields decode exactly like the originals
    import gribberish

    for original, rebuilt in zip((a, b), fields, strict=True):
        np.testing.assert_array_equal(
            gribberish.parse_grib_array(original, 0), gribberish.parse_grib_array(rebuilt, 0)
        )
        assert gribberish.parse_grib_message_metadata(rebuilt, 0).var_abbrev == (
            gribberish.parse_grib_message_metadata(original, 0).var_abbrev
        )
    assert split_fields(a) == [a]


def test_empty_data_is_not_a_grib_file() -> None:
    with pytest.raises(InvalidMessageError, match=r"file\.grib2: empty file"):
        scan_messages(b"", "file.grib2")


def _section_bytes(message: bytes) -> dict[int, bytes]:
    return {s.number: message[s.offset : s.offset + s.length] for s in sections(message)}


def test_split_field_that_reuses_the_previous_bitmap() -> None:
    """GRIB2 lets a repeated field say "the previous bit-map applies" (section 6 indicator 254);
    the standalone field must carry that bit-map, or it decodes without its missing points."""
    import gribberish

    data = WAVE.read_bytes()
    spans = scan_messages(data)
    a, b = (data[s.offset : s.end] for s in spans[:2])
    sa, sb = _section_bytes(a), _section_bytes(b)
    assert sa[6][5] == 0 and sa[6] == sb[6], "both wave fields carry the same land mask"
    reuse = struct.pack(">IBB", 6, 6, 254)
    body = sa[1] + sa[3] + sa[4] + sa[5] + sa[6] + sa[7] + sb[4] + sb[5] + reuse + sb[7]
    shared = a[:8] + struct.pack(">Q", 16 + len(body) + 4) + body + b"7777"
    first, second = split_fields(shared, "u")
    assert first == a
    assert _section_bytes(second)[6] == sa[6]
    expected = gribberish.parse_grib_array(b, 0)
    assert np.isnan(expected).any()
    np.testing.assert_array_equal(gribberish.parse_grib_array(second, 0), expected)
    # a 254 with no bit-map before it is refused, naming the file
    orphan = a[:8] + struct.pack(">Q", 0) + sa[1] + sa[3] + sa[4] + sa[5] + reuse + sa[7]
    orphan = orphan[:8] + struct.pack(">Q", len(orphan) + 4) + orphan[16:] + b"7777"
    with pytest.raises(InvalidMessageError, match=r"s3://b/f: section 6 .* never defined"):
        split_fields(orphan, "s3://b/f")
