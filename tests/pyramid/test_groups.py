"""Consistent groups (issue 50, item 7). Level 0 sits at the store's root, so no group names
it: the root's multiscales layout calls it ".", STAC lists the layout's names as they are
(no `1x`), and every other listed name is a group plain xarray opens. The DataTree of
`engine="toolkit"` keeps level 0 as its `1x` child only because xarray's DataTree refuses
level 0 at a tree root whose children reuse its dimension names; that child is the root, the
others are the groups. Built and described by the real CLI; opened with plain xarray."""

from __future__ import annotations

import json

import numpy as np
import pystac
import pytest
import xarray as xr
from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic

SYNC = ("--executor", "sync")


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.output


@pytest.fixture
def pyramid(tmp_path):
    store = tmp_path / "t.zarr"
    synthetic.write_store(storage.open_store(str(store)), shape=(40, 60), shards=(16, 16))
    code, out = cli("pyramid", "build", store, "--levels", "2", *SYNC)
    assert code == 0, out
    return store


def layout(store) -> list[dict]:
    return json.loads((store / "zarr.json").read_text())["attributes"]["multiscales"]["layout"]


def plain(store, name: str) -> xr.Dataset:
    """A listed level as plain xarray opens it: "." is the root."""
    return xr.open_zarr(store, group=None if name == "." else name)


def test_every_level_stac_lists_opens_with_plain_xarray(pyramid, tmp_path):
    code, out = cli("pyramid", "stac", pyramid, "--output", tmp_path / "stac")
    assert code == 0, out
    collection = pystac.Collection.from_file(str(tmp_path / "stac" / "collection.json"))
    listed = collection.summaries.to_dict()["multiscales:levels"]
    assert listed == [item["asset"] for item in layout(pyramid)] == [".", "2x", "4x"]
    shapes = {item["asset"]: item["spatial:shape"] for item in layout(pyramid)}
    for name in listed:
        assert list(plain(pyramid, name)["field"].shape[-2:]) == shapes[name], name
    for key, asset in collection.assets.items():  # each asset with its own open kwargs
        ds = xr.open_dataset(asset.href, **asset.extra_fields["xarray:open_kwargs"])
        group = asset.extra_fields["xarray:open_kwargs"].get("group", ".")
        assert group in listed, key
        assert ds["field"].shape == plain(pyramid, group)["field"].shape


def test_the_datatree_children_are_the_listed_groups_and_1x_is_the_root(pyramid):
    tree = xr.open_datatree(pyramid, engine="toolkit")
    assert list(tree.children) == ["1x", "2x", "4x"]
    assert tree.attrs["multiscales"]["layout"] == layout(pyramid)
    for name, node in tree.children.items():
        group = "." if name == "1x" else name
        assert group in [item["asset"] for item in layout(pyramid)]
        want = plain(pyramid, group)
        got = node.to_dataset(inherit=False)
        np.testing.assert_array_equal(got["field"].values, want["field"].values)
        assert got["field"].attrs == want["field"].attrs
    with pytest.raises(ValueError, match="not aligned with its parents"):
        # why level 0 is a child: xarray's DataTree refuses it at the root
        xr.DataTree.from_dict({"/": plain(pyramid, "."), "/2x": plain(pyramid, "2x")})


def test_the_python_readers_give_the_crs_variable_as_a_coordinate(pyramid):
    """`toolkit.pyramid.open_level` (issue 50, item 1): rioxarray's CRS and each level's own
    transform, with no `decode_coords`."""
    import rioxarray  # noqa: F401 - registers the .rio accessor

    from toolkit.pyramid import open_level

    base = open_level(str(pyramid), ".")
    for name, factor in ((".", 1), ("2x", 2), ("4x", 4)):
        ds = open_level(str(pyramid), name)
        assert "spatial_ref" in ds.coords and "spatial_ref" not in ds.data_vars
        assert ds["field"].rio.crs is not None and ds["field"].rio.crs == base["field"].rio.crs
        t0, t = base["field"].rio.transform(), ds["field"].rio.transform()
        assert (t.a, t.e, t.c, t.f) == pytest.approx((t0.a * factor, t0.e * factor, t0.c, t0.f))
    assert "spatial_ref" in open_level(str(pyramid), "2x", decode_coords=False).data_vars
