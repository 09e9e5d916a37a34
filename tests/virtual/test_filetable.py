"""The columnar task list of a region (`FileTable`) against a plain loop over every file."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.tasks import stripe
from toolkit.virtual.builtin import gefs, hrrr
from toolkit.virtual.dataset import ShortCycles, in_region
from toolkit.virtual.filetable import FileTable, Keys, file_table, published_mask
from toolkit.virtual.gribsource import as_datetime, as_timedelta, file_coord, variables_of

HOURLY_HRRR = hrrr(
    first_init=datetime(2025, 8, 1),
    append_dim_end=datetime(2025, 8, 3),
    init_freq_hours=1,
    source_file_types=("sfc", "prs"),
)
GEFS = gefs(first_init=datetime(2025, 1, 1), append_dim_end=datetime(2025, 1, 1, 12))  # 2 inits
DATASETS = [HOURLY_HRRR, GEFS]


def oracle(ds, start=None, end=None):
    """One coord per file, by nested loops: what the table must equal, file by file."""
    t, src = ds.template, ds.source
    out = []
    names_of: dict[tuple[str, np.timedelta64], tuple[str, ...]] = {}  # a pure function's memo
    for init in t.coords[t.append_dim]:
        if not in_region(init, start, end):
            continue
        when = (np.datetime64(init, "ns"), as_datetime(init))
        for lead in ds.leads(init, t.coords["lead_time"]):
            for m in src.members:
                for ft in src.file_types:
                    at = (ft, np.timedelta64(lead, "ns"))
                    if at not in names_of:
                        names_of[at] = variables_of(src, ft, lead)
                    names = names_of[at]
                    if names:
                        span = (np.timedelta64(lead, "ns"), as_timedelta(lead))
                        out.append(file_coord(src, when, span, m, ft, names))
    return out


def _instant(ds, draw, which):
    inits = ds.template.coords["init_time"]
    i = draw(st.integers(0, len(inits)))
    if i == len(inits):
        return None if which == "start" else inits[-1] + np.timedelta64(1, "h")
    return inits[i] + np.timedelta64(draw(st.sampled_from([0, 1, -1])), "m")


@st.composite
def regions(draw):
    ds = draw(st.sampled_from(DATASETS))
    start = draw(st.none()) if draw(st.booleans()) else _instant(ds, draw, "start")
    end = draw(st.none()) if draw(st.booleans()) else _instant(ds, draw, "end")
    return ds, start, end


@settings(max_examples=25, deadline=None)
@given(region=regions())
def test_the_table_is_every_file_of_the_region_in_append_dim_order(region):
    ds, start, end = region
    table = file_table(ds, start, end)
    want = oracle(ds, start, end)
    assert list(table) == want  # every field of every coord, in the same order
    assert len(table) == len(want)
    assert len({c.key for c in table}) == len(table)  # one URL, one file


@settings(max_examples=25, deadline=None)
@given(region=regions(), count=st.integers(1, 70), mode=st.sampled_from(["contiguous", "strided"]))
def test_stripes_of_the_table_are_tables_that_partition_it_exactly(region, count, mode):
    table = file_table(*region)
    blocks = [stripe(table, i, count, mode) for i in range(count)]
    assert all(isinstance(b, FileTable) for b in blocks)
    keys, whole = [c.key for b in blocks for c in b], table.keys
    assert sorted(keys) == sorted(whole)  # no file twice, none left out
    if mode == "contiguous":
        assert keys == whole
        assert max(map(len, blocks)) - min(map(len, blocks)) <= 1


@settings(max_examples=100, deadline=None)
@given(
    every=st.sampled_from([1, 2, 3, 6, 12]),
    max_lead=st.integers(0, 60),
    start=st.datetimes(datetime(2020, 1, 1), datetime(2030, 1, 1)),
    hours=st.integers(1, 60),
)
def test_short_cycles_mask_says_what_the_rule_says_of_each_init(every, max_lead, start, hours):
    rule = ShortCycles(every, max_lead)
    inits = np.datetime64(start, "ns") + np.arange(hours) * np.timedelta64(1, "h")
    leads = np.arange(0, 49) * np.timedelta64(1, "h").astype("timedelta64[ns]")
    mask = rule.mask(inits, leads)
    for i, init in enumerate(inits):
        assert (leads[mask[i]] == rule(init, leads)).all()


def test_a_rule_without_a_mask_is_asked_once_per_init():
    def even_hours_only_six_leads(init, leads):
        hour = int(np.datetime64(init, "h").astype("int64")) % 24
        return leads if hour % 2 == 0 else leads[:6]

    ds = dataclasses.replace(HOURLY_HRRR, leads=even_hours_only_six_leads)
    assert list(file_table(ds)) == oracle(ds)
    t = ds.template
    mask = published_mask(even_hours_only_six_leads, t.coords["init_time"], t.coords["lead_time"])
    assert mask[1].sum() == 6 and mask[0].all()


def test_the_digest_names_the_files_and_survives_pickling():
    a, b = file_table(HOURLY_HRRR), file_table(HOURLY_HRRR)
    assert a.digest == b.digest  # two builds, one name: a resubmitted plan attaches
    half = file_table(HOURLY_HRRR, None, HOURLY_HRRR.template.coords["init_time"][24])
    assert half.digest != a.digest
    mirror = dataclasses.replace(
        HOURLY_HRRR,
        source=dataclasses.replace(HOURLY_HRRR.source, store=GEFS.source.store),
    )
    assert file_table(mirror).digest != a.digest  # other URLs, other tasks
    back = pickle.loads(pickle.dumps(a))
    assert back.digest == a.digest and list(back) == list(a)


def test_a_block_ships_as_columns_not_as_an_object_per_file():
    table = file_table(GEFS)
    small, large = table[:2000], table[:4000]
    per_file = (len(pickle.dumps(large)) - len(pickle.dumps(small))) / 2000
    # int32 init, int32 lead, int16 member, int16 file type; plus pickle's 9-byte FRAME header
    # per 64 KiB, which the larger pickle may have one more of
    assert per_file <= 12 + 9 / 2000
    assert len(pickle.dumps(list(small))) > 5 * 12 * len(small)  # what it replaced (~110 B)


@settings(max_examples=30, deadline=None)
@given(region=regions(), pick=st.integers(0, 10**6))
def test_through_keeps_the_files_at_or_before_a_label(region, pick):
    table = file_table(*region)
    if not len(table):
        assert len(table.through(None)) == 0
        return
    last = table[pick % len(table)].init_time
    want = [c.key for c in table if c.init_time <= last]
    assert table.through(last).keys == want
    assert list(Keys(table.through(last))) == want and len(Keys(table)) == len(table)
    assert table.through(None) is table


def test_indexing_one_file_and_from_the_end():
    table = file_table(HOURLY_HRRR)
    coords = list(table)
    assert table[0] == coords[0] and table[-1] == coords[-1] and table[5] == coords[5]
    with pytest.raises(IndexError, match=f"file {len(table)} of a table of {len(table)}"):
        table[len(table)]


def test_another_key_layout_of_the_same_files_digests_differently(tmp_path):
    from toolkit.virtual.define import grib_forecast, variable

    def layout(key: str):
        return grib_forecast(
            "mine",
            source=str(tmp_path),
            key=key,
            variables=[variable("temperature_2m", "TMP", "2 m above ground")],
            grid={"latitude": np.arange(3.0), "longitude": np.arange(4.0)},
            first_init=datetime(2025, 8, 1),
            end=datetime(2025, 8, 2),
            every_hours=6,
            leads_hours=[0, 3],
        )

    a = file_table(layout("{init:%Y%m%d%H}/f{lead:03d}.grib2"))
    b = file_table(layout("{init:%Y%m%d}/{init:%H}/f{lead:03d}.grib2"))
    assert (a.init == b.init).all() and (a.lead == b.lead).all()  # the same positions ...
    assert a.digest != b.digest  # ... named by other URLs: other tasks
