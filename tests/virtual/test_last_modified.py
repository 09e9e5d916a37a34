"""The listing's own last_modified travels into every ref, so Icechunk refuses to read a
source object that was re-uploaded after ingest instead of silently serving other bytes."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import xarray as xr

from tests.virtual.test_backfill import sim
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.simulate import expected_values
from toolkit.virtual.source_io import discover, file_refs
from toolkit.virtual.write import commit_batch, ensure_repo, run


def ingest_without_last_modified(ds) -> int:
    """The negative control: the write loop's steps, minus stamping the listing's
    last_modified on the refs."""
    batch = [
        (c, file_refs(ds.dataset.source, c, size))
        for c, size, _ in discover(ds.dataset.source, ds.files())
    ]
    commit_batch(ds, batch)
    return len(batch)


def read_t2m(ds, f) -> np.ndarray:
    session = R.readonly(ds.repo.open(fresh=True))
    x = xr.open_zarr(session.store, consolidated=False)
    sel = {
        "init_time": np.datetime64(f.init, "ns"),
        "lead_time": np.timedelta64(f.lead, "h").astype("timedelta64[ns]"),
    }
    return x["temperature_2m"].sel(sel).values


def reupload_later(archive, f) -> None:
    """Re-upload `f` and stamp its mtime a minute later (whole seconds differ for certain)."""
    archive.reupload(f)
    path = archive.store.local_path / archive.data_key(f)
    later = time.time() + 60
    os.utime(path, (later, later))


@pytest.mark.parametrize("checked", [True, False])
def test_reuploaded_source_is_refused_at_read_time(tmp_path, checked):
    archive, files, plain = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=3,
    )
    ds = plain  # the write loop stamps the listing's last_modified on every ref
    ensure_repo(ds)
    assert (len(run(ds).ingested) if checked else ingest_without_last_modified(ds)) == 3
    f = files[1]
    want = expected_values("temperature_2m", f.init, f.lead)
    np.testing.assert_array_equal(read_t2m(ds, f), want)  # the checksum passes while unchanged

    reupload_later(archive, f)
    if checked:
        with pytest.raises(
            Exception, match=r"checksum of the object owning the virtual chunk has changed"
        ):
            read_t2m(ds, f)
        np.testing.assert_array_equal(
            read_t2m(ds, files[0]), expected_values("temperature_2m", files[0].init, files[0].lead)
        )  # untouched files still read
    else:  # without the checksum the stale ref silently serves other bytes (or garbage)
        try:
            got = read_t2m(ds, f)
        except Exception:
            return
        assert not np.array_equal(got, want)
