"""read_arrays on real stores (memory, local, S3): raw synthetic v2/v3 and zarr-python output."""

import json

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st

from tests.archive import zarrgen
from toolkit import storage
from toolkit.archive.hierarchy import METADATA_NAMES, HierarchyError, metadata_keys, read_arrays


def by_name(arrays):
    return {a.path.rsplit("/", 1)[-1]: a for a in arrays}


def test_v3_raw_store(any_store: storage.Store) -> None:
    written = zarrgen.cordex_v3(any_store)
    arrays = by_name(read_arrays(any_store, "cordex/a.zarr"))
    assert set(arrays) == {"time", "lat", "tas", "pr", "ps", "orog"}
    tas = arrays["tas"]
    assert tas.object_shape == (2, 4, 4) and tas.inner_shape == (1, 2, 2)  # measured by the shard
    assert (tas.objects, tas.stored_bytes) == (20, 20_000) == (len(written["tas"]), 20 * 1000)
    assert arrays["pr"].separator == "." and arrays["pr"].objects == 4
    assert (arrays["ps"].encoding, arrays["ps"].path) == ("v2", "cordex/a.zarr/sub/ps")
    assert arrays["orog"].shape == () and arrays["orog"].objects == 1
    assert arrays["time"].is_coordinate and arrays["lat"].is_coordinate
    assert not arrays["tas"].is_coordinate


def test_v2_raw_store_and_cf_coordinates(any_store: storage.Store) -> None:
    zarrgen.v2_group(any_store, "old.zarr")
    zarrgen.v2_array(any_store, "old.zarr/time", (6,), (3,), dims=("time",))
    zarrgen.v2_array(any_store, "old.zarr/lat2d", (4, 4), (4, 4), dims=("y", "x"))
    zarrgen.v2_array(
        any_store,
        "old.zarr/t",
        (6, 4),
        (1, 4),
        dims=("time", "x"),
        sep="/",
        attrs={"coordinates": "lat2d"},
    )
    arrays = by_name(read_arrays(any_store, "old.zarr"))
    assert arrays["time"].is_coordinate and arrays["time"].dimension_names == ("time",)
    assert arrays["lat2d"].is_coordinate  # named by a sibling's CF `coordinates`
    assert (arrays["t"].separator, arrays["t"].objects, arrays["t"].zarr_format) == ("/", 6, 2)


def test_zarr_python_store(any_store: storage.Store) -> None:
    root = zarr.open_group(any_store.zarr(), path="zp.zarr", mode="w", zarr_format=3)
    a = root.create_array(
        "tas", shape=(8, 6), chunks=(2, 3), shards=(4, 6), dtype="f4", dimension_names=("time", "x")
    )
    a[:] = np.arange(48, dtype="f4").reshape(8, 6)
    t = root.create_array("time", shape=(8,), chunks=(8,), dtype="i8", dimension_names=("time",))
    t[:] = np.arange(8)
    s = root.create_array("scalar", shape=(), dtype="f8")
    s[...] = 1.5
    arrays = by_name(read_arrays(any_store, "zp.zarr"))
    assert arrays["tas"].object_shape == a.shards and arrays["tas"].inner_shape == a.chunks
    listed = storage.list_objects(any_store, "zp.zarr/tas")
    chunks = [o for o in listed if not o.key.endswith("zarr.json")]
    assert arrays["tas"].objects == len(chunks) == 2
    assert arrays["tas"].stored_bytes == sum(o.size for o in chunks)
    assert arrays["time"].is_coordinate
    assert arrays["scalar"].shape == () and arrays["scalar"].objects == 1


def test_zarr_python_v2_store(any_store: storage.Store) -> None:
    root = zarr.open_group(any_store.zarr(), path="v2.zarr", mode="w", zarr_format=2)
    a = root.create_array("t", shape=(6, 2), chunks=(2, 2), dtype="f4", fill_value=0.0)
    a[:] = 1.0
    a.attrs["_ARRAY_DIMENSIONS"] = ["time", "x"]
    info = by_name(read_arrays(any_store, "v2.zarr"))["t"]
    assert (info.zarr_format, info.objects, info.dimension_names) == (2, 3, ("time", "x"))


def test_bad_metadata_names_the_key(any_store: storage.Store) -> None:
    zarrgen.v3_group(any_store, "bad.zarr")
    storage.put(any_store, "bad.zarr/x/zarr.json", b"{nope")
    with pytest.raises(storage.CorruptObject, match=r"bad\.zarr/x/zarr\.json: .*not JSON"):
        read_arrays(any_store, "bad.zarr")
    storage.put(
        any_store,
        "bad.zarr/x/zarr.json",
        json.dumps(
            {
                "zarr_format": 3,
                "node_type": "array",
                "shape": [2],
                "chunk_grid": {"name": "rectilinear"},
            }
        ).encode(),
    )
    with pytest.raises(HierarchyError, match="regular chunk grids"):
        read_arrays(any_store, "bad.zarr")
    with pytest.raises(HierarchyError, match="no Zarr metadata"):
        read_arrays(any_store, "missing.zarr")


segment = st.sampled_from(
    ["a", "tas", "c", "0", "1", ".zarray", ".zattrs", "zarr.json", ".zgroup", "0.0", "x.zarr"]
)


@given(st.lists(st.lists(segment, min_size=1, max_size=5).map("/".join), max_size=30))
def test_only_metadata_is_ever_read(keys: list[str]) -> None:
    """The keys read_arrays GETs are metadata documents, never a chunk or a shard."""
    for k in metadata_keys(keys):
        assert k.rsplit("/", 1)[-1] in METADATA_NAMES
        assert k in keys
