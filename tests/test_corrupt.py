"""Corrupt objects are named by what is corrupt: the chunk object that does not decode (found
only once a read fails), in a local store and on S3, under either chunk key encoding."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from tests.conftest import make_bucket, s3_options
from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic

GARBAGE = b"\x8b garbage \x00" * 30


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> storage.Store:
    if request.param == "local":
        return storage.open_store(str(tmp_path / "s.zarr"))
    endpoint = request.getfixturevalue("s3_endpoint")
    return storage.open_store(f"s3://{make_bucket(endpoint)}/s.zarr", **s3_options(endpoint))


def _array(store: storage.Store, sharded: bool) -> zarr.Array:
    """A 4x4 grid of stored objects: shards under the default encoding, or plain chunks
    under the v2 one (`v/1.2`), so the key is the encoding's, not a spelling of our own."""
    z = store.zarr()
    if sharded:
        a = zarr.create_array(z, name="v", shape=(32, 32), chunks=(4, 4), shards=(8, 8), dtype="f4")
    else:
        a = zarr.create_array(
            z, name="v", shape=(32, 32), chunks=(8, 8), dtype="f4",
            chunk_key_encoding={"name": "v2", "separator": "."},
        )  # fmt: skip
    a[...] = np.arange(32 * 32, dtype="f4").reshape(32, 32)
    return zarr.open_array(store.zarr(read_only=True), path="v", mode="r")


@pytest.mark.parametrize(("sharded", "key"), [(True, "v/c/1/2"), (False, "v/1.2")])
def test_the_object_that_does_not_decode_is_named(
    store: storage.Store, sharded: bool, key: str
) -> None:
    arr = _array(store, sharded)
    assert storage.exists(store, key)
    storage.put(store, key, GARBAGE)
    assert storage.read(store, arr, (slice(0, 8), slice(0, 32))).shape == (8, 32)  # not touched
    with pytest.raises(storage.CorruptObject) as caught:
        storage.read(store, arr, (slice(4, 20), slice(2, 30)))  # 3 x 4 objects, one of them bad
    err = caught.value
    assert (err.store, err.key) == (store.url, key)
    assert str(err).startswith(f"{storage.location(store.url, key)}: ")
    assert str(err).endswith(
        "(not a valid zarr chunk); restore the object, or rerun the job that writes it"
    )
    assert "\n" not in str(err)
    again = pickle.loads(pickle.dumps(err))  # it travels back from a worker as itself
    assert (type(again), str(again), again.key) == (storage.CorruptObject, str(err), key)


def test_a_truncated_object_is_named(store: storage.Store) -> None:
    arr = _array(store, sharded=False)
    body = storage.get(store, "v/3.0").data
    storage.put(store, "v/3.0", body[: len(body) // 2])
    with pytest.raises(storage.CorruptObject, match=r"/v/3\.0: RuntimeError: Zstd"):
        storage.read(store, arr)


def test_metadata_that_is_not_json_is_named(store: storage.Store) -> None:
    _array(store, sharded=False)
    storage.put(store, "v/zarr.json", b"\xff\xfe not json")
    not_json = r"/v/zarr\.json: .*\(not JSON\)"
    with pytest.raises(storage.CorruptObject, match=not_json), storage.zarr_metadata(store, "v"):
        zarr.open_array(store.zarr(read_only=True), path="v", mode="r")
    with pytest.raises(storage.CorruptObject, match=r"/v/zarr\.json: .*\(not JSON\)"):
        storage.get_json(store, "v/zarr.json")


def test_pyramid_build_on_s3_names_the_corrupt_shard(s3_endpoint: str) -> None:
    bucket = make_bucket(s3_endpoint)
    url = f"s3://{bucket}/{uuid.uuid4().hex[:6]}.zarr"
    store = storage.open_store(url, **s3_options(s3_endpoint))
    synthetic.write_store(store, shape=(40, 60), shards=(16, 16))
    storage.put(store, "field/c/2/1", GARBAGE)
    flags = ["--endpoint", s3_endpoint, "--region", "us-east-1", "--allow-http", "--path-style"]
    res = CliRunner().invoke(app, ["pyramid", "build", url, *flags, "--executor", "sync"])
    assert res.exit_code == 1, res.output
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert f"{url}/field/c/2/1: " in lines[0] and "restore the object" in lines[0]
    assert "Traceback" not in res.output
