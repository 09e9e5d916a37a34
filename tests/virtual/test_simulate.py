"""The simulated NOAA archive: real GRIB2 + wgrib2 indexes, exact known values, bad cases."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from toolkit import storage
from toolkit.examples import simulate
from toolkit.virtual.grib import fetch
from toolkit.virtual.grib.decode import decode_direct, decode_via_codec
from toolkit.virtual.grib.errors import (
    MissingDataFileError,
    MissingRecordError,
    StaleIndexError,
    SubMessageError,
    TruncatedMessageError,
)
from toolkit.virtual.grib.message import scan_messages, split_fields

INIT = datetime(2025, 8, 1, 6)


def _decode_all(archive: simulate.SimArchive, f: simulate.SimFile) -> dict:
    records = fetch.locate(archive.store, archive.data_key(f))
    matched = archive.source.match(
        records, archive.file_type, f.lead, f.member, url=archive.data_url(f)
    )
    data = storage.get(archive.store, archive.data_key(f)).data
    return {
        fld.key: decode_via_codec(data[r.offset : r.end], fld.variable.name)
        for fld, r in matched.items()
    }


def test_round_trip_every_store(any_store: storage.Store) -> None:
    archive = simulate.make_archive(
        any_store, kind="gefs", inits=[INIT], leads=[0, 6], members=[0, 2]
    )
    assert len(storage.list_keys(any_store)) == 2 * len(archive.files())
    for f in archive.files():
        decoded = _decode_all(archive, f)
        # lead 0 has no accumulation; lead 6 has it
        assert (("precipitation_surface", None) in decoded) == (f.lead > 0)
        assert len(decoded) == (7 if f.lead == 0 else 8)
        for (name, level), values in decoded.items():
            np.testing.assert_array_equal(values, archive.expected(f, name, level))


def test_values_distinguish_every_coordinate() -> None:
    base = simulate.expected_values("temperature_2m", INIT, 6, 1)
    others = [
        simulate.expected_values("temperature_2m", INIT, 7, 1),
        simulate.expected_values("temperature_2m", datetime(2025, 8, 1, 12), 6, 1),
        simulate.expected_values("temperature_2m", INIT, 6, 2),
        simulate.expected_values("temperature_2m", INIT, 6, "mean"),
        simulate.expected_values("wind_u_10m", INIT, 6, 1),
        simulate.expected_values("temperature_2m", INIT, 6, 1, generation=1),
    ]
    assert base.shape == simulate.GRID_SHAPE
    for other in others:
        assert not np.array_equal(base, other)
    levels = [
        simulate.expected_values("temperature", INIT, 6, 1, level=lv) for lv in simulate.SIM_LEVELS
    ]
    assert not np.array_equal(levels[1], levels[2])


def test_gfs_layout_and_index_spelling() -> None:
    store = storage.open_store("memory://sim-gfs-layout")
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT], leads=[7])
    (f,) = archive.files()
    assert archive.data_key(f) == "gfs.20250801/06/atmos/gfs.t06z.pgrb2.0p25.f007"
    text = storage.get(store, archive.index_key(f)).data.decode()
    lines = text.splitlines()
    assert lines[0] == "1:0:d=2025080106:TMP:2 m above ground:7 hour fcst:"
    assert "APCP:surface:6-7 hour acc fcst:" in text
    assert ":TMP:0.4 mb:" in text and ":TMP:1000 mb:" in text
    data = storage.get(store, archive.data_key(f)).data
    offsets = [int(line.split(":")[1]) for line in lines]
    assert offsets == [s.offset for s in scan_messages(data)]


def test_publish_over_time() -> None:
    store = storage.open_store("memory://sim-publish")
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT], leads=[0, 1, 2], publish=False)
    assert storage.list_keys(store) == []
    files = archive.files()
    for i, f in enumerate(files, start=1):
        archive.publish(f)
        keys = storage.list_keys(store)
        assert len(keys) == 2 * i
        assert archive.data_key(f) in keys and archive.index_key(f) in keys


def test_stale_index_after_reupload() -> None:
    store = storage.open_store("memory://sim-stale")
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT], leads=[6])
    (f,) = archive.files()
    archive.reupload(f)
    with pytest.raises(StaleIndexError) as err:
        fetch.locate(store, archive.data_key(f))
    assert archive.data_url(f) in str(err.value)
    # the re-uploaded file itself is a valid GRIB file: only the index is wrong
    assert len(scan_messages(storage.get(store, archive.data_key(f)).data)) == 9


def test_truncated_data_file() -> None:
    store = storage.open_store("memory://sim-trunc")
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT], leads=[6])
    (f,) = archive.files()
    archive.truncate(f)
    with pytest.raises(TruncatedMessageError) as err:
        fetch.locate(store, archive.data_key(f))
    assert archive.data_url(f) in str(err.value)
    with pytest.raises(TruncatedMessageError):
        fetch.scan(store, archive.data_key(f))


def test_missing_message() -> None:
    store = storage.open_store("memory://sim-missing")
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT], leads=[6], publish=False)
    (f,) = archive.files()
    archive.publish(f, drop=[("wind_v_10m", None)])
    records = fetch.locate(store, archive.data_key(f))
    with pytest.raises(MissingRecordError) as err:
        archive.source.match(records, archive.file_type, f.lead, url=archive.data_url(f))
    assert "VGRD:10 m above ground:6 hour fcst" in str(err.value)
    assert archive.data_url(f) in str(err.value)


def test_index_without_data_file() -> None:
    store = storage.open_store("memory://sim-index-only")
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT], leads=[6], publish=False)
    (f,) = archive.files()
    archive.index_only(f)
    with pytest.raises(MissingDataFileError) as err:
        fetch.locate(store, archive.data_key(f))
    assert archive.data_url(f) in str(err.value)


def test_submessages_refused_as_references_but_decodable_directly() -> None:
    store = storage.open_store("memory://sim-sub")
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT], leads=[6], publish=False)
    (f,) = archive.files()
    archive.publish(f, submessages=True)
    text = storage.get(store, archive.index_key(f)).data.decode()
    assert "\n2.1:" in text and "\n2.2:" in text
    records = fetch.locate(store, archive.data_key(f))
    u, v = (r for r in records if r.number == 2)
    assert (u.offset, u.length) == (v.offset, v.length)
    with pytest.raises(SubMessageError) as err:
        archive.source.match(records, archive.file_type, f.lead, url=archive.data_url(f))
    assert "2.2" in str(err.value) and archive.data_url(f) in str(err.value)
    message = storage.get(store, archive.data_key(f)).data[v.offset : v.end]
    assert len(split_fields(message)) == 2
    # what a reference to the shared message would decode is the sibling, hence the refusal
    np.testing.assert_array_equal(
        decode_via_codec(message, "wind_v_10m"), archive.expected(f, "wind_u_10m")
    )
    np.testing.assert_array_equal(
        decode_direct(message, field=2), archive.expected(f, "wind_v_10m")
    )
    # without the V wind, the U wind (field 1) is a valid reference
    without_v = [var for var in archive.source.variables if var.name != "wind_v_10m"]
    matched = archive.source.match(records, archive.file_type, f.lead, variables=without_v)
    assert [r.label for fld, r in matched.items() if fld.variable.name == "wind_u_10m"] == ["2.1"]


def test_ecCodes_reads_simulated_submessages() -> None:
    eccodes = pytest.importorskip("eccodes")
    store = storage.open_store("memory://sim-sub-ec")
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT], leads=[6], publish=False)
    (f,) = archive.files()
    archive.publish(f, submessages=True)
    records = fetch.locate(store, archive.data_key(f))
    u = next(r for r in records if r.label == "2.1")
    message = storage.get(store, archive.data_key(f)).data[u.offset : u.end]
    eccodes.codes_grib_multi_support_on()
    try:
        fields = []
        for part in split_fields(message):
            h = eccodes.codes_new_from_message(part)
            fields.append(eccodes.codes_get(h, "shortName"))
            eccodes.codes_release(h)
    finally:
        eccodes.codes_grib_multi_support_off()
    assert fields == ["10u", "10v"]


def test_gfs_has_no_members() -> None:
    with pytest.raises(ValueError, match="no ensemble members"):
        simulate.make_archive(
            storage.open_store("memory://sim-bad"), kind="gfs", inits=[INIT], leads=[0], members=[1]
        )
