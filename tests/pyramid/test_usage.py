"""What a user meets at the command line: bad input is one line naming the object and the cause
(exit 2), a failed check exits 1, and S3 stores work through the same options as other jobs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from tests.conftest import make_bucket, s3_options
from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["pyramid", *args])


def one_line_error(result) -> str:
    """The one `error:` line; under --json its JSON twin on stdout must say the same."""
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    as_json = [ln for ln in lines if ln.startswith('{"error": ')]
    lines = [ln for ln in lines if ln not in as_json]
    assert len(lines) == 1 and len(as_json) <= 1, result.output
    assert lines[0].startswith("error:"), result.output
    for doc in as_json:
        assert json.loads(doc) == {"error": lines[0][len("error: ") :], "exit": result.exit_code}
    return lines[0]


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.zarr"
    synthetic.write_store(storage.open_store(str(path)), shape=(40, 60), shards=(16, 16))
    return path


def test_missing_store_is_bad_usage_and_creates_nothing(tmp_path):
    path = tmp_path / "typo.zarr"
    for cmd in ("plan", "build", "verify"):
        r = run(cmd, str(path), "--executor", "sync") if cmd != "plan" else run(cmd, str(path))
        assert r.exit_code == 2, r.output
        assert "typo.zarr" in one_line_error(r) and "does not exist" in r.output
    assert not path.exists()  # opening a local store creates it: the check comes first


def test_store_that_is_a_file_or_a_bad_url(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hi")
    r = run("plan", str(f))
    assert r.exit_code == 2 and "is not a directory" in one_line_error(r)
    r = run("plan", "ftp://host/x")
    assert r.exit_code == 2 and "unsupported store URL" in one_line_error(r)


def test_zarr_v2_store_refused(tmp_path):
    path = tmp_path / "v2.zarr"
    g = zarr.open_group(str(path), mode="w", zarr_format=2)
    g.create_array("v", shape=(8, 8), dtype="f4")
    r = run("plan", str(path))
    assert r.exit_code == 2 and "a zarr v2 store" in one_line_error(r)


def test_array_without_dimension_names_named(tmp_path):
    path = tmp_path / "nodims.zarr"
    g = zarr.open_group(str(path), mode="w")
    g.create_array("elev", shape=(32, 32), dtype="f4", chunks=(16, 16))
    r = run("plan", str(path))
    assert r.exit_code == 2
    assert "array 'elev' has no dimension_names" in one_line_error(r)
    r = run("plan", str(path), "--variable", "elev")
    assert r.exit_code == 2 and "'elev': has no dimension_names" in one_line_error(r)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--method", "mode"], "array 'field': mode is for categorical integers, not float32"),
        (["--method", "nearest"], "nearest is not offered"),
        (["--variable", "nope"], "variable 'nope': no such array"),
        (["--variable", "lat"], "variable 'lat': has fewer than two dimensions"),
        (["--band-dim", "band"], "--band-dim 'band' is not one of its leading dims"),
        (["--levels", "0"], "'--levels': want a count of levels from 1 to"),
        (["--max-shard", "0"], "'--max-shard': want pixels from 1 to 65536"),
        (["--endpoint", "http://127.0.0.1:1"], "S3 options only apply to s3://"),
    ],
)
def test_bad_options_exit_2_naming_the_cause(good, args, needle):
    r = run("build", str(good), "--executor", "sync", *args)
    assert r.exit_code == 2, r.output
    assert needle in one_line_error(r)
    assert not storage.exists(storage.open_store(str(good)), "2x/zarr.json")  # nothing written


def test_verify_before_build_is_a_failed_check(good):
    r = run("verify", str(good), "--executor", "sync")
    assert r.exit_code == 1
    assert "no recorded pyramid plan" in r.output


def test_rebuild_from_with_other_settings_refused(good):
    assert run("build", str(good), "--executor", "sync", "--levels", "2").exit_code == 0
    r = run(
        "build",
        str(good),
        "--executor",
        "sync",
        "--levels",
        "2",
        "--rebuild-from",
        "4x",
        "--method",
        "max",
    )
    assert r.exit_code == 2
    assert (
        "levels below 4x were built with" in one_line_error(r) and "--rebuild-from 2x" in r.output
    )


@pytest.mark.parametrize("server", ["s3_endpoint", "seaweed_endpoint"])
def test_s3_store_through_the_cli(server, request):
    """Build and verify on S3: an emulator (moto) and a real server (SeaweedFS)."""
    s3_endpoint = request.getfixturevalue(server)
    bucket = make_bucket(s3_endpoint)
    url = f"s3://{bucket}/global.zarr"
    store = storage.open_store(url, **s3_options(s3_endpoint))
    info = synthetic.write_store(store, shape=(48, 80), shards=(16, 16))
    s3 = ["--endpoint", s3_endpoint, "--region", "us-east-1", "--allow-http", "--path-style"]
    r = run("build", url, "--executor", "sync", *s3)
    assert r.exit_code == 0, r.output
    data = zarr.open_array(store.zarr(read_only=True), path="2x/field", mode="r")[...]
    assert data.shape == (24, 40) and np.isfinite(data).any() and info["values"].shape == (48, 80)
    # the bucket is private: the anonymous client round-trip fails and says why, in one line
    r = run("verify", url, "--executor", "sync", *s3)
    assert r.exit_code == 1
    fails = [ln for ln in r.output.splitlines() if ln.startswith("FAIL")]
    assert fails and all("[client]" in ln and "not public" in ln for ln in fails), r.output
    r = run("verify", url, "--executor", "sync", "--private", *s3)
    assert r.exit_code == 0, r.output
    r = run("plan", url, "--endpoint", s3_endpoint)  # plain http without --allow-http
    assert r.exit_code == 2 and "add --allow-http" in one_line_error(r)


def test_more_levels_later_rebuilds_only_the_new_ones(good):
    assert run("build", str(good), "--executor", "sync", "--levels", "1").exit_code == 0
    r = run("build", str(good), "--executor", "sync", "--levels", "3")
    assert r.exit_code == 2 and "--rebuild-from 4x" in one_line_error(r)
    r = run("build", str(good), "--executor", "sync", "--levels", "3", "--rebuild-from", "4x")
    assert r.exit_code == 0, r.output
    assert run("verify", str(good), "--executor", "sync").exit_code == 0


def test_verify_sample_must_be_positive(good):
    assert run("build", str(good), "--executor", "sync", "--levels", "1").exit_code == 0
    r = run("verify", str(good), "--executor", "sync", "--sample", "0")
    assert r.exit_code == 2 and "'--sample': want a whole number from 1 to" in one_line_error(r)
