"""resolve_file on a simulated archive in every store kind: ranges decode to the known values."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from toolkit import storage
from toolkit.examples import simulate
from toolkit.virtual.grib.decode import decode_via_codec
from toolkit.virtual.grib.errors import (
    GribSourceError,
    InvalidIndexError,
    MissingDataFileError,
    MissingRecordError,
    StaleIndexError,
)
from toolkit.virtual.sources.idx_refs import resolve_file

INIT = datetime(2025, 8, 1, 12)


def test_resolve_every_field(any_store: storage.Store) -> None:
    archive = simulate.make_archive(any_store, kind="gefs", inits=[INIT], leads=[3], members=[1])
    (f,) = archive.files()
    size = storage.head(any_store, archive.data_key(f)).size
    resolved = resolve_file(
        any_store, archive.source, f.init, f.lead, archive.file_type, f.member, file_size=size
    )
    assert resolved.url == archive.data_url(f) and resolved.size == size
    assert len(resolved.fields) == 8
    for fld, rec in resolved.fields.items():
        chunk = storage.get_range(any_store, archive.data_key(f), rec.offset, rec.length)
        values = decode_via_codec(chunk, fld.variable.name)
        np.testing.assert_array_equal(values, archive.expected(f, fld.variable.name, fld.level))


def test_resolve_discards_bad_files_naming_them() -> None:
    store = storage.open_store("memory://resolve-bad")
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT], leads=[0, 6])
    first, second = archive.files()
    archive.reupload(first)
    with pytest.raises(StaleIndexError, match=archive.data_key(first)):
        resolve_file(store, archive.source, first.init, first.lead, archive.file_type)
    archive.index_only(second)
    with pytest.raises(MissingDataFileError, match=archive.data_key(second)):
        resolve_file(
            store, archive.source, second.init, second.lead, archive.file_type, file_size=10**6
        )
    with pytest.raises(storage.NotFound):
        resolve_file(store, archive.source, second.init, second.lead, archive.file_type)
    assert issubclass(MissingDataFileError, GribSourceError)


def test_resolve_only_the_variables_asked_for() -> None:
    store = storage.open_store("memory://resolve-subset")
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT], leads=[6], publish=False)
    (f,) = archive.files()
    archive.publish(f, drop=[("wind_v_10m", None)])
    wanted = [archive.source.variable("temperature_2m"), archive.source.variable("temperature")]
    resolved = resolve_file(
        store, archive.source, f.init, f.lead, archive.file_type, variables=wanted
    )
    assert sorted(fld.key for fld in resolved.fields) == [
        ("temperature", lv) for lv in simulate.SIM_LEVELS
    ] + [("temperature_2m", None)]
    # the whole catalog is still held to every record
    with pytest.raises(MissingRecordError, match="VGRD:10 m above ground"):
        resolve_file(store, archive.source, f.init, f.lead, archive.file_type)


def test_index_of_another_cycle_is_refused() -> None:
    """Same layout, same sizes, valid headers: only the index's own dates show it is wrong."""
    store = storage.open_store("memory://resolve-cycle")
    later = INIT.replace(hour=18)
    archive = simulate.make_archive(store, kind="gfs", inits=[INIT, later], leads=[6])
    first, second = archive.files()
    own = storage.get(store, archive.index_key(second)).data
    storage.put(store, archive.index_key(second), storage.get(store, archive.index_key(first)).data)
    assert [line.split(":")[1] for line in own.decode().splitlines()] == [
        line.split(":")[1]
        for line in storage.get(store, archive.index_key(second)).data.decode().splitlines()
    ], "the borrowed index names the very same byte ranges"
    with pytest.raises(InvalidIndexError, match="another cycle") as err:
        resolve_file(store, archive.source, second.init, second.lead, archive.file_type)
    assert archive.data_url(second) in str(err.value)
    assert "2025-08-01T12:00Z" in str(err.value) and "2025-08-01T18:00Z" in str(err.value)
