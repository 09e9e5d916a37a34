"""The archive demo on stores written by zarr-python (what `toolkit demo` leaves under its root)."""

from pathlib import Path

import numpy as np
import zarr

from toolkit.examples.archive_demo import demo


def _store(path: Path, n: int) -> None:
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    t = root.create_array("time", shape=(n,), chunks=(n,), dtype="i8", dimension_names=("time",))
    t[:] = np.arange(n)
    v = root.create_array(
        "tas",
        shape=(n, 64, 64),
        chunks=(1, 64, 64),
        dtype="f8",
        dimension_names=("time", "y", "x"),
        compressors=None,
    )
    v[:] = np.random.default_rng(0).random((n, 64, 64))


def test_demo_partitions_and_resolves(tmp_path: Path) -> None:
    _store(tmp_path / "big.zarr", 20)  # 20 x 32 KiB > t_max: bucketed
    _store(tmp_path / "small.zarr", 2)
    out = demo(tmp_path)
    assert [s["scope"] for s in out["scopes"]] == ["big.zarr", "small.zarr"]
    assert out["scopes"][0]["blobs"] == ["b_tas"] and out["scopes"][1]["blobs"] == ["w_tas"]
    kinds = {r["key"]: (r["kind"], r["blob"]) for r in out["resolved"]}
    assert kinds["big.zarr/tas/c/0/0/0"] == ("blob", "b_tas_0")
    assert kinds["not/managed/object"] == ("unmanaged", None)
    assert (tmp_path / "manifests" / "big.zarr" / "manifest.json").exists()
    again = demo(tmp_path, stores=[str(tmp_path / "small.zarr")])
    assert again["scopes"][0]["written"] is False
