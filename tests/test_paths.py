"""Paths users actually have: spaces, `%`, `#`, `?` and letters beyond ASCII land where the user
said, and are found there again, through `toolkit.storage` and through every job's command."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.conftest import make_bucket, s3_options
from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic

# the letters that URLs quote or split on, a space, and some that ASCII has not
ODD = st.text(
    alphabet=st.sampled_from(list("ab z%#?+&=;,~ü€é日-_.")), min_size=1, max_size=12
).filter(lambda s: s.strip(". ") == s and s not in (".", ".."))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(folder=ODD, key=ODD)
def test_a_local_path_round_trips_exactly(tmp_path: Path, folder: str, key: str) -> None:
    root = tmp_path / uuid.uuid4().hex / folder
    for spelled in (str(root), root.as_uri()):  # a plain path and its file:// URL: one store
        store = storage.open_store(spelled)
        assert store.local_path == root
        storage.put(store, f"sub/{key}", b"here")
        assert (root / "sub" / key).read_bytes() == b"here"  # on disk where the user said
        assert storage.get(store, f"sub/{key}").data == b"here"
        assert storage.list_keys(store, "sub/") == [f"sub/{key}"]
        assert storage.open_store(store.url) == store
        assert store.child("sub").local_path == root / "sub"
        assert Path(storage.file_path(store.object_url(f"sub/{key}"))) == root / "sub" / key
        storage.delete(store, f"sub/{key}")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(prefix=ODD, key=ODD)
def test_an_s3_key_round_trips_exactly(s3_endpoint: str, prefix: str, key: str) -> None:
    bucket = make_bucket(s3_endpoint)
    store = storage.open_store(f"s3://{bucket}/{prefix}", **s3_options(s3_endpoint))
    storage.put(store, key, b"there")
    root = storage.open_store(f"s3://{bucket}", **s3_options(s3_endpoint))
    assert storage.list_keys(root) == [f"{prefix}/{key}"]  # the literal key, nothing quoted
    assert storage.get(store, key).data == b"there"
    assert storage.split_bucket(store.url) == (bucket, prefix)


def _odd_dir(tmp_path: Path) -> Path:
    d = tmp_path / "dir ü #1 50%"
    d.mkdir()
    return d


def test_a_pyramid_of_a_store_in_an_odd_folder_lands_inside_it(tmp_path: Path) -> None:
    path = _odd_dir(tmp_path) / "my store.zarr"
    synthetic.write_store(storage.open_store(str(path)), shape=(40, 60), shards=(16, 16))
    for spelled in (str(path), path.as_uri()):
        r = CliRunner().invoke(app, ["pyramid", "build", spelled, "--executor", "sync"])
        assert r.exit_code == 0, r.output
    assert (path / "2x" / "field" / "zarr.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir ü #1 50%"]  # nothing beside
    r = CliRunner().invoke(app, ["pyramid", "verify", str(path), "--executor", "sync"])
    assert r.exit_code == 0, r.output


def test_archive_manifests_in_an_odd_folder_land_inside_it(tmp_path: Path) -> None:
    data = _odd_dir(tmp_path) / "data"
    synthetic.write_store(storage.open_store(str(data / "a.zarr")), shape=(40, 60), shards=(16, 16))
    manifests = tmp_path / "arch sp" / "m ü"
    r = CliRunner().invoke(
        app, ["archive", "partition", "--data", str(data), "--manifests", str(manifests)]
    )
    assert r.exit_code == 0, r.output
    assert any(manifests.rglob("*.json")), list(tmp_path.rglob("*"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arch sp", "dir ü #1 50%"]  # no twin


def test_grib_scan_finds_a_file_with_a_space_in_its_name(tmp_path: Path) -> None:
    src = Path(__file__).parent / "data" / "grib" / "hrrr.t06z.wrfsfcf01-TMP.grib2"
    dst = _odd_dir(tmp_path) / "hrrr TMP ü.grib2"
    dst.write_bytes(src.read_bytes())
    r = CliRunner().invoke(app, ["grib", "scan", str(dst)])
    assert r.exit_code == 0, r.output
    assert "TMP" in r.output


@pytest.mark.slow
def test_a_virtual_backfill_into_an_odd_folder_reads_back(tmp_path: Path) -> None:
    from tests.virtual.test_backfill import START, sim
    from toolkit.examples.simulate import expected_values
    from toolkit.virtual import open_dataset
    from toolkit.virtual.backfill import backfill

    odd = _odd_dir(tmp_path)
    _archive, files, ds = sim(
        storage.open_store(str(odd / "src ü")), storage.open_store(str(odd / "v sp" / "repo"))
    )
    backfill(ds, start=START, executor="sync")
    assert (odd / "v sp" / "repo").is_dir()
    assert sorted(p.name for p in odd.iterdir()) == ["src ü", "v sp"]  # no percent-encoded twin
    got = (
        open_dataset(str(odd / "v sp" / "repo"))["temperature_2m"]
        .isel(init_time=0, lead_time=0)
        .values
    )
    f = files[0]
    np.testing.assert_array_equal(got, expected_values("temperature_2m", f.init, f.lead))


def test_a_secret_inside_an_endpoint_url_is_never_echoed() -> None:
    for argv in (
        ["pyramid", "plan", "s3://b/x", "--endpoint", "http://KEY:SECRET@127.0.0.1:x"],
        ["pyramid", "plan", "s3://b/x", "--allow-http",
         "--endpoint", "http://KEY:SECRET@127.0.0.1:x"],
    ):  # fmt: skip
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 2, r.output
        assert "SECRET" not in r.output and "KEY" not in r.output and "***@" in r.output


@given(port=st.text(alphabet="abxyz:-_.!~ #?%", min_size=1, max_size=6))
def test_an_endpoint_is_checked_before_any_connection(port: str) -> None:
    with pytest.raises(storage.BadEndpoint, match="malformed endpoint"):
        storage.open_store("s3://b/x", endpoint=f"http://127.0.0.1:{port}")
    assert storage.open_store("s3://b/x", endpoint="http://127.0.0.1:9000").url == "s3://b/x"


def test_the_demo_runs_in_a_relative_workdir(tmp_path: Path, monkeypatch) -> None:
    """`demo --workdir REL`: every store under it lands there (no file URI of a relative
    path), with the letters URLs encode in its name."""
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["demo", "--workdir", "rel ü/demo", "--executor", "sync"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "rel ü" / "demo" / "report.html").is_file()
    assert (tmp_path / "rel ü" / "demo" / "pyramid-demo.zarr" / "2x").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel ü"]  # no twin, nothing beside
