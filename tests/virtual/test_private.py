"""A private GRIB bucket on a server that checks signatures (SeaweedFS): a backfill records
that its source is read with credentials, and every later reader signs its chunk reads."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import make_bucket, s3_options
from tests.virtual.test_backfill import START, sim
from toolkit import storage
from toolkit.cli import app
from toolkit.examples.simulate import expected_values
from toolkit.virtual import open_dataset
from toolkit.virtual.backfill import backfill


@pytest.mark.slow
def test_a_private_bucket_is_read_with_the_credentials_it_was_backfilled_with(
    seaweed_endpoint, tmp_path
):
    import icechunk as ic

    opts = s3_options(seaweed_endpoint)
    bucket = make_bucket(seaweed_endpoint)  # private: only the environment's identity reads it
    repo = tmp_path / "repo"
    _archive, files, ds = sim(
        storage.open_store(f"s3://{bucket}/src", **opts), storage.open_store(str(repo))
    )
    backfill(ds, start=START, executor="sync")
    f = files[0]
    got = open_dataset(str(repo))["temperature_2m"].isel(init_time=0, lead_time=0).values
    np.testing.assert_array_equal(got, expected_values("temperature_2m", f.init, f.lead))
    r = CliRunner().invoke(
        app, ["pyramid", "build", str(repo), "-v", "temperature_2m", "--levels", "1",
              "--executor", "sync"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    # the control: the same repo read anonymously is refused by the server (it checks)
    st = ic.local_filesystem_storage(str(repo))
    prefixes = list(ic.Repository.fetch_config(st).virtual_chunk_containers)
    anon = ic.Repository.open(
        st,
        authorize_virtual_chunk_access=ic.containers_credentials(
            {p: ic.s3_anonymous_credentials() for p in prefixes if p.startswith("s3://")}
        ),
    )
    import zarr

    arr = zarr.open_array(anon.readonly_session("main").store, path="temperature_2m", mode="r")
    with pytest.raises(Exception, match=r"(?i)denied|forbidden|403"):
        arr[0, 0]
