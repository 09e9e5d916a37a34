"""A message read from its own sections, spelled as wgrib2 lists it, against oracles nobody
here wrote: wgrib2's own inventory of NOAA's GFS-Wave file, and ecCodes' reading of messages it
encodes with surfaces, levels and statistics drawn by Hypothesis; ECMWF's `.index` against
gribberish's reading of the same sidecar."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit import storage
from toolkit.virtual.grib.ecmwf_index import scan_ecmwf_index
from toolkit.virtual.grib.errors import InvalidIndexError, StaleIndexError, TruncatedMessageError
from toolkit.virtual.grib.fetch import walk, whole
from toolkit.virtual.grib.identity import identify
from toolkit.virtual.grib.index import scan_index

eccodes = pytest.importorskip("eccodes")
DATA = Path(__file__).resolve().parents[2] / "data" / "grib"
WAVE = "gfswave.t18z.atlocn.0p16.f001.grib2"


def test_a_scan_lists_the_gfs_wave_file_as_wgrib2_does():
    store = storage.open_store(str(DATA))
    size = (DATA / WAVE).stat().st_size
    scanned = walk(store, WAVE, size)
    wgrib2 = scan_index((DATA / f"{WAVE}.idx").read_text())
    assert len(scanned) == len(wgrib2) == 19
    for ours, theirs in zip(scanned, wgrib2, strict=True):
        assert (ours.element, ours.level, ours.window_text) == (
            theirs.element, theirs.level, theirs.window_text,
        )  # fmt: skip
        assert ours.offset == theirs.offset and ours.init == theirs.init
    assert scanned.last_length == size - wgrib2.last_offset


def _message(keys: dict, ints: dict) -> bytes:
    h = eccodes.codes_grib_new_from_samples("GRIB2")
    try:
        for k, v in keys.items():
            eccodes.codes_set(h, k, v)
        for k, v in ints.items():
            eccodes.codes_set_long(h, k, v)
        eccodes.codes_set_values(
            h, [float(i) for i in range(eccodes.codes_get(h, "numberOfValues"))]
        )
        return eccodes.codes_get_message(h)
    finally:
        eccodes.codes_release(h)


def _ecc(message: bytes, *keys: str) -> dict:
    h = eccodes.codes_new_from_message(message)
    try:
        return {k: eccodes.codes_get(h, k) for k in keys}
    finally:
        eccodes.codes_release(h)


SURFACES = st.sampled_from(
    [(1, None), (101, None), (103, 2), (103, 10), (100, 85000), (100, 40), (106, 1)]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    category=st.integers(0, 5),
    number=st.integers(0, 30),
    surface=SURFACES,
    step=st.integers(0, 240),
    stat=st.sampled_from([None, 0, 1, 2, 3]),
    span=st.integers(1, 24),
    centre=st.sampled_from([7, 98, 54]),
)
def test_identify_reads_what_eccodes_reads(category, number, surface, step, stat, span, centre):
    kind, value = surface
    ints = {"centre": centre, "discipline": 0, "parameterCategory": category,
            "parameterNumber": number, "typeOfFirstFixedSurface": kind}  # fmt: skip
    if value is not None:
        ints |= {"scaleFactorOfFirstFixedSurface": 0, "scaledValueOfFirstFixedSurface": value}
    if stat is None:
        ints = {"productDefinitionTemplateNumber": 0, **ints, "forecastTime": step}
    else:
        ints = {"productDefinitionTemplateNumber": 8, **ints, "typeOfStatisticalProcessing": stat,
                "forecastTime": step, "lengthOfTimeRange": span}  # fmt: skip
    msg = _message({}, ints)
    got = identify(msg)
    ecc = _ecc(msg, "discipline", "parameterCategory", "parameterNumber", "typeOfFirstFixedSurface",
               "forecastTime", "centre", "dataDate", "dataTime")  # fmt: skip
    assert (got.discipline, got.category, got.number) == (
        ecc["discipline"], ecc["parameterCategory"], ecc["parameterNumber"],
    )  # fmt: skip
    assert got.surface[0] == kind and got.surface[1] == (None if value is None else float(value))
    assert got.reference.strftime("%Y%m%d") == str(ecc["dataDate"])
    assert got.window.start == timedelta(hours=ecc["forecastTime"])
    if stat is None:
        assert got.window.step_type == "instant" and got.window.end == got.window.start
    else:
        assert got.window.step_type == {0: "avg", 1: "accum", 2: "max", 3: "min"}[stat]
        assert got.window.end - got.window.start == timedelta(hours=span)


def _ecmwf_file(tmp_path: Path) -> tuple[Path, str]:
    from datetime import datetime

    from tests.virtual import ecmwf_files as E

    fields = [E.Field("2t"), E.Field("tp"), E.Field("t", 500), E.Field("msl")]
    path = E.write(tmp_path, "f.grib2", fields, datetime(2025, 3, 1), 6, E.Grid(16, 9))
    return path, path.with_suffix(".index").read_text()


def test_the_ecmwf_index_reads_the_ranges_gribberish_reads(tmp_path):
    import gribberish

    path, text = _ecmwf_file(tmp_path)
    ours = scan_ecmwf_index(text)
    theirs = gribberish.parse_grib_index(text)
    assert [(r.offset, r.length) for r in ours.closed(ours.last_length)] == [
        (e.offset, e.length) for e in theirs
    ]
    assert ours.last_offset + ours.last_length == path.stat().st_size
    spelled = [(r.element, r.level, r.window_text) for r in ours]
    assert spelled == [
        ("TMP", "2 m above ground", "6 hour fcst"),
        (
            "var discipline=0 center=98 local_table=1 parmcat=1 parm=193",
            "surface",
            "0-6 hour acc fcst",
        ),
        ("TMP", "500 mb", "6 hour fcst"),
        ("PRES", "mean sea level", "6 hour fcst"),
    ]
    # and a scan of the same file spells its messages the same way
    scanned = walk(storage.open_store(str(tmp_path)), "f.grib2", path.stat().st_size)
    assert [(r.element, r.level, r.window_text) for r in scanned] == spelled


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda lines: [*lines[:1], "not json", *lines[2:]], "line 2: not JSON"),
        (
            lambda lines: [lines[0].replace('"_offset"', '"offset"'), *lines[1:]],
            "line 1: lacks _offset",
        ),
        (lambda lines: [lines[0], lines[2]], "line 2: message at"),
        (lambda lines: [], "no records"),
    ],
)
def test_a_bad_ecmwf_index_names_the_line(tmp_path, change, says):
    _, text = _ecmwf_file(tmp_path)
    lines = text.splitlines()
    with pytest.raises(InvalidIndexError, match=says):
        scan_ecmwf_index("\n".join(change(lines)), "f.index")


def test_whole_refuses_an_object_of_two_messages_and_walk_a_truncated_one(tmp_path):
    path, _ = _ecmwf_file(tmp_path)
    store = storage.open_store(str(tmp_path))
    with pytest.raises(StaleIndexError, match="holds 4 GRIB messages"):
        whole(store, "f.grib2", path.stat().st_size)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(TruncatedMessageError, match="message 4 at offset"):
        walk(store, "f.grib2", path.stat().st_size)
