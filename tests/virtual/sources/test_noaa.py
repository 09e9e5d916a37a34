"""NOAA catalogs: URLs, window derivation, matching on the real inventories, ownership, gaps."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.virtual.grib.errors import InvalidIndexError, MissingRecordError, SubMessageError
from toolkit.virtual.grib.index import Window, parse_index, parse_window, scan_index
from toolkit.virtual.sources.noaa import GEFS, GFS, HRRR, GribVariable, KnownMissing, NoaaSource

DATA = Path(__file__).resolve().parents[2] / "data"  # tests/data: real files, with licences
INIT = datetime(2025, 8, 1, 0)
H = timedelta(hours=1)

REAL = [
    (HRRR(), "sfc", 0, None, "hrrr.t00z.wrfsfcf00.grib2.idx"),
    (HRRR(), "sfc", 8, None, "hrrr.t00z.wrfsfcf08.grib2.idx"),
    (HRRR(), "sfc", 24, None, "hrrr.t00z.wrfsfcf24.grib2.idx"),
    (GFS(), "pgrb2", 0, None, "gfs.t00z.pgrb2.0p25.f000.idx"),
    (GFS(), "pgrb2", 7, None, "gfs.t00z.pgrb2.0p25.f007.idx"),
    (GEFS(), "pgrb2s", 0, "mean", "geavg.t00z.pgrb2s.0p25.f000.idx"),
    (GEFS(), "pgrb2s", 9, "mean", "geavg.t00z.pgrb2s.0p25.f009.idx"),
    (GEFS(), "pgrb2s", 15, 1, "gep01.t00z.pgrb2s.0p25.f015.idx"),
    (GEFS(), "pgrb2a", 432, 0, "gec00.t00z.pgrb2a.0p50.f432.idx"),
    (GEFS(), "pgrb2b", 3, 0, "gec00.t00z.pgrb2b.0p50.f003.idx"),
]


@pytest.mark.parametrize(
    ("source", "file_type", "lead", "member", "name"), REAL, ids=[r[-1] for r in REAL]
)
def test_every_catalog_field_resolves_to_one_real_record(
    source: NoaaSource, file_type: str, lead: int, member: object, name: str
) -> None:
    records = parse_index((DATA / "idx" / name).read_text())
    matched = source.match(records, file_type, lead, member, url=name)
    fields = source.fields(file_type, lead)
    assert set(matched) == set(fields) and fields
    assert len({r.label for r in matched.values()}) == len(matched), "no record serves two fields"
    for fld, rec in matched.items():
        var = fld.variable
        assert (rec.element, rec.level, rec.window) == (
            var.element,
            var.index_level(fld.level),
            var.window(lead),
        )
    # every owned field is either matched or reported absent at this lead, never both
    absent = source.absent_fields(file_type, lead)
    owned = source.fields(file_type, 1) + source.absent_fields(file_type, 1)
    assert {f.key for f in matched} | {f.key for f in absent} == {f.key for f in owned}
    assert not set(matched) & set(absent)
    assert (lead == 0) == bool(absent)
    assert all(f.variable.step_type != "instant" for f in absent)
    # the data file name matches the index we were given
    assert source.index_key(INIT, lead, file_type, member).endswith(name)


def test_absent_at_lead_zero_is_structural_not_missing() -> None:
    for source, file_type, name in [
        (GFS(), "pgrb2", "gfs.t00z.pgrb2.0p25.f000.idx"),
        (HRRR(), "sfc", "hrrr.t00z.wrfsfcf00.grib2.idx"),
    ]:
        names = {f.variable.name for f in source.fields(file_type, 0)}
        assert "precipitation_surface" not in names
        assert "precipitation_surface" in {f.variable.name for f in source.fields(file_type, 6)}
        matched = source.match(parse_index((DATA / "idx" / name).read_text()), file_type, 0)
        assert all(f.variable.step_type == "instant" for f in matched)


@given(
    st.datetimes(datetime(1990, 1, 1), datetime(2200, 1, 1)).map(
        lambda d: d.replace(minute=0, second=0, microsecond=0)
    ),
    st.integers(0, 840),
)
def test_keys_spell_the_init_as_strftime_does(init: datetime, lead: int) -> None:
    """Keys are spelled from the date's fields (strftime was a third of a coord's cost): the
    same letters as the providers' `%Y%m%d` / `%H` spelling, for every cycle and lead."""
    ymd, hh = f"{init:%Y%m%d}", f"{init:%H}"
    assert (
        HRRR().data_key(init, lead, "prs")
        == f"hrrr.{ymd}/conus/hrrr.t{hh}z.wrfprsf{lead:02d}.grib2"
    )
    assert (
        GFS().data_key(init, lead, "pgrb2")
        == f"gfs.{ymd}/{hh}/atmos/gfs.t{hh}z.pgrb2.0p25.f{lead:03d}"
    )
    assert GEFS().data_key(init, lead, "pgrb2s", 3) == (
        f"gefs.{ymd}/{hh}/atmos/pgrb2sp25/gep03.t{hh}z.pgrb2s.0p25.f{lead:03d}"
    )


def test_urls() -> None:
    assert HRRR().data_url(INIT, 8, "sfc") == (
        "s3://noaa-hrrr-bdp-pds/hrrr.20250801/conus/hrrr.t00z.wrfsfcf08.grib2"
    )
    assert (
        HRRR()
        .index_url(datetime(2025, 8, 1, 6), 1, "prs")
        .endswith("hrrr.t06z.wrfprsf01.grib2.idx")
    )
    assert GFS().data_url(INIT, 7, "pgrb2b") == (
        "s3://noaa-gfs-bdp-pds/gfs.20250801/00/atmos/gfs.t00z.pgrb2b.0p25.f007"
    )
    assert (
        GFS()
        .index_url(INIT, timedelta(hours=120), "pgrb2")
        .endswith("gfs.t00z.pgrb2.0p25.f120.idx")
    )
    gefs = GEFS()
    assert gefs.data_url(INIT, 15, "pgrb2s", 1) == (
        "s3://noaa-gefs-pds/gefs.20250801/00/atmos/pgrb2sp25/gep01.t00z.pgrb2s.0p25.f015"
    )
    assert gefs.data_key(INIT, 432, "pgrb2a", 0).endswith("pgrb2ap5/gec00.t00z.pgrb2a.0p50.f432")
    assert gefs.data_key(INIT, 3, "pgrb2b", 30).endswith("pgrb2bp5/gep30.t00z.pgrb2b.0p50.f003")
    assert gefs.index_key(INIT, 0, "pgrb2s", "mean").endswith(
        "pgrb2sp25/geavg.t00z.pgrb2s.0p25.f000.idx"
    )
    assert (
        GFS(bucket="file:///tmp/mirror")
        .data_url(INIT, 0, "pgrb2")
        .startswith("file:///tmp/mirror/gfs.")
    )
    with pytest.raises(ValueError, match="member"):
        gefs.data_key(INIT, 3, "pgrb2s", 31)
    with pytest.raises(ValueError, match="no members"):
        GFS().data_key(INIT, 3, "pgrb2", 1)
    with pytest.raises(ValueError, match="whole-hour"):
        GFS().data_key(INIT, timedelta(minutes=30), "pgrb2")


def test_vertical_levels_render_as_the_index_spells_them() -> None:
    temp = GFS().variable("temperature")
    assert temp.index_level(1000.0) == "1000 mb"
    assert temp.index_level(0.01) == "0.01 mb"
    assert temp.index_level(925) == "925 mb"
    assert GFS().variable("temperature_2m").index_level() == "2 m above ground"
    with pytest.raises(ValueError, match="give a level"):
        temp.index_level()


@given(
    st.integers(1, 840),
    st.sampled_from([1, 3, 6, 24]),
    st.sampled_from(["accum", "avg", "max", "min"]),
)
def test_statistic_window_follows_the_reset_period(lead: int, period: int, step: str) -> None:
    var = GribVariable("v", "X", "surface", "f", step, period)
    window = var.window(lead)
    assert window is not None and window.step_type == step and window.end == lead * H
    start = window.start / H
    assert start % period == 0 and lead - period <= start < lead
    since_init = replace(var, period_hours=None).window(lead)
    assert since_init == Window(step, timedelta(0), lead * H)
    assert var.window(0) is None


def test_ownership_one_file_per_field() -> None:
    gfs = GFS()
    temp = gfs.variable("temperature")
    assert temp.owner(500.0) == "pgrb2" and temp.owner(125.0) == "pgrb2b"
    a = {f.key for f in gfs.fields("pgrb2", 6)}
    b = {f.key for f in gfs.fields("pgrb2b", 6)}
    assert ("temperature", 500.0) in a and ("temperature", 125.0) in b and not a & b
    # a level listed by both files belongs to the first
    both = GribVariable(
        "t", "TMP", "{level:g} mb", "a", levels=(500.0,), extra_levels=(("b", (500.0, 600.0)),)
    )
    src = NoaaSource(variables=(both,), file_types=("a", "b"))
    assert [f.key for f in src.fields("a", 0)] == [("t", 500.0)]
    assert [f.key for f in src.fields("b", 0)] == [("t", 600.0)]
    gefs = GEFS()
    assert gefs.variable("temperature").owner(10.0) == "pgrb2a"
    assert gefs.variable("temperature").owner(975.0) == "pgrb2b"


def test_catalog_validation() -> None:
    with pytest.raises(ValueError, match="unknown file types"):
        NoaaSource(variables=(GribVariable("x", "X", "surface", "zzz"),), file_types=("a",))
    with pytest.raises(ValueError, match="needs levels"):
        GribVariable("x", "X", "{level:g} mb", "a")
    with pytest.raises(ValueError, match="step type"):
        GribVariable("x", "X", "surface", "a", "sum")
    dup = GribVariable("x", "X", "surface", "a")
    with pytest.raises(ValueError, match="duplicate"):
        NoaaSource(variables=(dup, dup))


GEFS_S15 = (DATA / "idx" / "gep01.t00z.pgrb2s.0p25.f015.idx").read_text()


def _without(text: str, element: str, level: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if f":{element}:{level}:" not in line)


def test_missing_record_rejected_unless_known_missing() -> None:
    records = parse_index(_without(GEFS_S15, "GUST", "surface"))
    with pytest.raises(MissingRecordError) as err:
        GEFS().match(
            records, "pgrb2s", 15, 1, url="s3://noaa-gefs-pds/x/gep01.t00z.pgrb2s.0p25.f015"
        )
    assert "gep01.t00z.pgrb2s.0p25.f015" in str(err.value)
    assert "GUST:surface:15 hour fcst" in str(err.value)
    exempt = GEFS(
        known_missing=(KnownMissing("pgrb2s", "GUST", "surface", leads_hours=(15,), members=(1,)),)
    )
    matched = exempt.match(records, "pgrb2s", 15, 1)
    assert "wind_gust_surface" not in {f.variable.name for f in matched}
    # the exemption is specific: another member or lead is still rejected
    with pytest.raises(MissingRecordError):
        exempt.match(records, "pgrb2s", 15, 2)


def test_duplicate_records_are_ambiguous() -> None:
    lines = GEFS_S15.splitlines()
    gust = next(line for line in lines if ":GUST:surface:" in line)
    last_offset = int(lines[-1].split(":")[1])
    dup = gust.replace(gust.split(":")[1], str(last_offset + 1000)).replace(
        gust.split(":")[0] + ":", "39:", 1
    )
    records = parse_index("\n".join([*lines, dup]) + "\n")
    with pytest.raises(InvalidIndexError, match="matches records 2, 39"):
        GEFS().match(records, "pgrb2s", 15, 1)


def _kinds(name: str) -> set[tuple[str, str, str]]:
    records = parse_index((DATA / "idx" / name).read_text())
    return {(r.element, r.level, r.window.step_type) for r in records if r.window}


def test_real_gefs_inventories_show_no_omission() -> None:
    """Why GEFS.known_missing is empty: the real pgrb2s inventories of different members and
    leads list the same records, and lead 0 differs only by what lead 0 structurally lacks."""
    mean_9 = _kinds("geavg.t00z.pgrb2s.0p25.f009.idx")
    member_15 = _kinds("gep01.t00z.pgrb2s.0p25.f015.idx")
    assert mean_9 == member_15
    mean_0 = _kinds("geavg.t00z.pgrb2s.0p25.f000.idx")
    # lead 0 adds the static orography and lacks the statistics apart from 0-0 max/min
    assert mean_0 - mean_9 == {("HGT", "surface", "instant")}
    assert {k[2] for k in mean_9 - mean_0} == {"accum", "avg"}


def test_zero_length_windows_at_lead_zero_are_not_matched() -> None:
    """HRRR and GEFS publish statistics over an empty window at lead 0 (``0-0 day max fcst``);
    a max over no time is no data, so those variables are structurally absent there."""
    for source, file_type, member, name, element in [
        (GEFS(), "pgrb2s", "mean", "geavg.t00z.pgrb2s.0p25.f000.idx", "TMAX"),
        (HRRR(), "sfc", None, "hrrr.t00z.wrfsfcf00.grib2.idx", "APCP"),
        (HRRR(), "sfc", None, "hrrr.t00z.wrfsfcf00.grib2.idx", "WIND"),
    ]:
        records = parse_index((DATA / "idx" / name).read_text())
        empty = [r for r in records if r.element == element and r.window.step_type != "instant"]
        assert empty and all(r.window.start == r.window.end == timedelta(0) for r in empty)
        matched = source.match(records, file_type, 0, member, url=name)
        assert not any(rec in empty for rec in matched.values())
        assert all(f.variable.step_type == "instant" for f in matched)


def _respelled(window: str) -> str:
    """The same window in minutes: "7 hour fcst" -> "420 min fcst" (wgrib2 writes both)."""
    w = parse_window(window)
    if w is None or w.end == timedelta(0):
        return window
    m = timedelta(minutes=1)
    if w.step_type == "instant":
        return f"{w.end // m} min fcst"
    word = {"accum": "acc", "avg": "ave", "max": "max", "min": "min"}[w.step_type]
    return f"{w.start // m}-{w.end // m} min {word} fcst"


def _edited(lines: list[str], edits: list[tuple[int, str]]) -> str:
    """Lines dropped, copied to the end (a second record of the field), respelled, or made
    field 2 of a sub-message group (field 1 an unrelated record at the same offset)."""
    by_line: dict[int, set[str]] = {}
    for i, edit in edits:
        by_line.setdefault(i, set()).add(edit)
    out, tail = [], []
    for i, line in enumerate(lines):
        f = line.split(":")
        kinds = by_line.get(i, set())
        if "drop" in kinds:
            continue
        if "respell" in kinds:
            f[5] = _respelled(f[5])
        if "dup" in kinds:
            tail.append(f)
        if "sub" in kinds:
            out += [[f"{f[0]}.1", f[1], f[2], "OTHER", *f[4:]], [f"{f[0]}.2", *f[1:]]]
        else:
            out.append(f)
    last = int(out[-1][1])
    for j, f in enumerate(tail, 1):
        out.append([str(len(lines) + 100 + j), str(last + 1000 * j), *f[2:]])
    return "".join(":".join(f) + "\n" for f in out)


def _brute_match(records, source, file_type, lead, member):  # type: ignore[no-untyped-def]
    """The oracle: every record compared with every owned field (element, level, window), in
    catalog order; a field with several records or only a sub-message's refuses the file at
    once, missing fields once all are looked at."""
    found, missing = {}, []
    for fld in source.fields(file_type, lead):
        var = fld.variable
        want = (var.element, var.index_level(fld.level), var.window(lead))
        hits = [r for r in records if (r.element, r.level, r.window) == want]
        if len(hits) > 1:
            return InvalidIndexError
        if not hits:
            missing.append(fld)
        elif hits[0].submessage is not None and hits[0].submessage > 1:
            return SubMessageError
        else:
            found[fld] = hits[0].line()
    return MissingRecordError if missing else found


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(REAL),
    st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from(["drop", "dup", "respell", "sub"])),
        max_size=4,
    ),
)
def test_a_match_finds_what_a_brute_force_over_every_record_finds(
    real: tuple[NoaaSource, str, int, object, str], edits: list[tuple[int, str]]
) -> None:
    """Real inventories with records dropped, repeated, respelled in minutes or hidden behind
    a sub-message: the match (over an inventory's columns, and over a list of records) finds
    each owned field's one record, or refuses as a brute force over every record does."""
    source, file_type, lead, member, name = real
    lines = (DATA / "idx" / name).read_text().splitlines()
    text = _edited(lines, [(i % len(lines), e) for i, e in edits])
    try:
        want = _brute_match(parse_index(text), source, file_type, lead, member)
    except InvalidIndexError:  # edits that break the index: every reader refuses it
        with pytest.raises(InvalidIndexError):
            scan_index(text, name)
        return
    for records in (scan_index(text, name), parse_index(text, name)):
        if isinstance(want, type):
            with pytest.raises(want, match=name):
                source.match(records, file_type, lead, member, url=name)
        else:
            got = source.match(records, file_type, lead, member, url=name)
            assert {f: r.line() for f, r in got.items()} == want
