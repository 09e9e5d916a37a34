"""xarray's engine "toolkit" opens a pyramid and a virtual repo as toolkit's own readers do:
real stores and repos, nothing mocked; docs/xarray.md's plain-Icechunk recipe is run as written.
Its chunking ("Chunks: what you get by default") is checked against zarr's own metadata."""

from __future__ import annotations

import re
import tomllib
from importlib import import_module
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from dask.array.core import normalize_chunks

from tests.virtual.test_backfill import START, sim
from toolkit import storage
from toolkit.examples import synthetic
from toolkit.pyramid import build, open_datatree, open_level
from toolkit.pyramid.geometry import PlanError
from toolkit.virtual import open_dataset as virtual_open
from toolkit.virtual.backfill import backfill
from toolkit.xarray_backend import ToolkitBackendEntrypoint as Engine

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def pyramid(tmp_path) -> Path:
    path = tmp_path / "données t2m.zarr"  # a space and a non-ASCII letter
    store = storage.open_store(str(path))
    synthetic.write_store(store, shape=(60, 90), shards=(16, 16), bands=2)
    build(store, levels=2, executor="sync")
    return path


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A backfilled virtual GRIB repo (real GRIB2 by ecCodes) with a 2x level built inside."""
    tmp = tmp_path_factory.mktemp("virtual")
    _, _, ds = sim(storage.open_store(str(tmp / "src")), storage.open_store(str(tmp / "repo")))
    backfill(ds, start=START, workers=1, executor="sync")
    build(str(tmp / "repo"), ["temperature_2m"], levels=1, executor="sync")
    return tmp / "repo"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """A pyramid whose level 0 and 2x level are sharded, each shard holding several inner
    chunks (a level's shard is split only above 512 px: `toolkit.pyramid.geometry.inner_chunk`)."""
    path = tmp_path_factory.mktemp("sharded") / "t2m.zarr"
    store = storage.open_store(str(path))
    synthetic.write_store(
        store, shape=(1100, 1300), shards=(1024, 1024), chunks=(256, 256), bands=1
    )
    build(store, levels=1, executor="sync")
    return path


def test_the_entry_point_names_the_engine() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spec = project["entry-points"]["xarray.backends"]["toolkit"]
    module, _, name = spec.partition(":")
    assert getattr(import_module(module), name) is Engine


def test_the_installed_package_registers_the_engine_by_name(pyramid: Path) -> None:
    """What users type: `engine="toolkit"`, found through the installed entry point."""
    assert xr.backends.list_engines()["toolkit"].__class__ is Engine
    tree = xr.open_datatree(pyramid, engine="toolkit")
    assert [n.path for n in tree.subtree] == ["/", "/1x", "/2x", "/4x"]
    xr.testing.assert_identical(
        xr.open_dataset(pyramid, engine="toolkit", group="2x").load(),
        xr.open_dataset(pyramid, engine=Engine, group="2x").load(),
    )


def test_importing_the_engine_loads_no_toolkit_job_nor_dask() -> None:
    import subprocess
    import sys

    code = (
        "import sys, xarray\n"
        "before = set(sys.modules)\n"
        "import toolkit.xarray_backend\n"
        "new = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in "
        "('dask', 'distributed', 'numba', 'zarr', 'icechunk') or m.startswith('toolkit.'))\n"
        "assert new == ['toolkit.xarray_backend'], new\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def crs_coord(ds: xr.Dataset) -> xr.Dataset:
    """The reader's dataset with its CRS variable as a coordinate, as the engine gives it
    (rioxarray reads a CRS only from a coordinate: tests/pyramid/test_georef.py)."""
    return ds.set_coords([n for n in ["spatial_ref"] if n in ds.data_vars])


def test_open_datatree_is_the_pyramid(pyramid: Path) -> None:
    got = xr.open_datatree(pyramid, engine=Engine)
    want = open_datatree(str(pyramid))
    assert [n.path for n in got.subtree] == [n.path for n in want.subtree]
    assert [n.path for n in got.subtree] == ["/", "/1x", "/2x", "/4x"]
    assert got.attrs == want.attrs and "multiscales" in got.attrs
    for node in want.subtree:
        want_ds = crs_coord(node.to_dataset())
        xr.testing.assert_identical(got[node.path].to_dataset().load(), want_ds.load())
        for name, var in node.data_vars.items():
            np.testing.assert_array_equal(got[node.path][name].values, var.values)
    assert Engine().guess_can_open(pyramid) and Engine().guess_can_open(str(pyramid))


@pytest.mark.parametrize("group", ["2x", "/4x", None, "1x"])
def test_open_dataset_is_one_level(pyramid: Path, group: str | None) -> None:
    got = xr.open_dataset(pyramid, engine=Engine, group=group)
    want = crs_coord(open_level(str(pyramid), group or "."))
    xr.testing.assert_identical(got.load(), want.load())


def test_chunks_and_drop_variables_are_honoured(pyramid: Path) -> None:
    lazy = xr.open_dataset(pyramid, engine=Engine, group="2x")
    assert lazy["field"].chunks is None and not lazy["field"].variable._in_memory
    chunked = xr.open_dataset(pyramid, engine=Engine, group="2x", chunks={})
    assert chunked["field"].chunks is not None
    dropped = xr.open_dataset(pyramid, engine=Engine, group="2x", drop_variables="field")
    assert "field" in lazy and "field" not in dropped and "field_count" in dropped
    tree = xr.open_datatree(pyramid, engine=Engine, drop_variables=["field"])
    assert all("field" not in n.variables for n in tree.subtree)
    assert "field_count" in tree["4x"]


def test_a_virtual_repo_opens_as_toolkits_reader(repo: Path) -> None:
    got = xr.open_dataset(repo, engine=Engine, credentials="anonymous", branch="main")
    want = crs_coord(virtual_open(str(repo)))
    subset = {"init_time": slice(0, 2), "lead_time": slice(0, 2)}
    xr.testing.assert_identical(got.isel(subset).load(), want.isel(subset).load())
    level = xr.open_dataset(str(repo), engine=Engine, group="2x")
    want = crs_coord(virtual_open(str(repo), group="2x"))
    xr.testing.assert_identical(level.load(), want.load())
    assert Engine().guess_can_open(repo)


def test_a_repo_with_levels_opens_as_a_tree(repo: Path) -> None:
    tree = xr.open_datatree(repo, engine=Engine, drop_variables=["temperature"])
    assert [n.path for n in tree.subtree] == ["/", "/1x", "/2x"]
    assert "multiscales" in tree.attrs and not tree.data_vars
    base = virtual_open(str(repo), drop_variables=["temperature"])
    assert set(tree["1x"].data_vars) == set(base.data_vars) - {"spatial_ref"}
    assert "spatial_ref" in tree["1x"]["temperature_2m"].coords  # rioxarray finds the CRS
    assert "spatial_ref" in tree["2x"]["temperature_2m"].coords
    np.testing.assert_array_equal(
        tree["2x"]["temperature_2m"].values, virtual_open(str(repo), group="2x")["temperature_2m"]
    )
    groups = xr.open_groups(repo, engine=Engine)
    assert sorted(groups) == ["/", "/1x", "/2x"]


def recipe() -> str:
    """The plain-Icechunk code block of docs/xarray.md, as a user would copy it."""
    page = (ROOT / "docs" / "xarray.md").read_text()
    (block,) = re.findall(
        r"<!-- the code below is run by [^\n]*-->\n```python\n(.*?)```", page, re.S
    )
    return block


def test_the_docs_plain_icechunk_recipe_opens_the_repo(repo: Path) -> None:
    scope: dict = {"REPO": str(repo)}
    exec(recipe(), scope)
    want = virtual_open(str(repo))
    subset = {"init_time": slice(0, 1)}
    xr.testing.assert_identical(scope["ds"].isel(subset).load(), want.isel(subset).load())


@pytest.mark.parametrize("what", ["empty", "missing", "file"])
def test_neither_a_pyramid_nor_a_repo_is_one_line(tmp_path, what: str) -> None:
    path = tmp_path / "pas un dépôt"
    if what == "empty":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
    elif what == "file":
        path.write_text("hello")
    for call in (xr.open_dataset, xr.open_datatree):
        with pytest.raises(PlanError) as err:
            call(path, engine=Engine)
        said = str(err.value)
        assert "\n" not in said and "pas un dépôt" in said
        assert "Icechunk repo" in said and "Zarr v3" in said
    assert not Engine().guess_can_open(path)
    assert what != "missing" or not path.exists()  # a reader's open creates nothing


def test_a_group_the_pyramid_lacks_is_one_line_naming_its_levels(pyramid: Path) -> None:
    with pytest.raises(PlanError) as err:
        xr.open_dataset(pyramid, engine=Engine, group="16x")
    said = str(err.value)
    assert "\n" not in said and "données t2m.zarr" in said
    assert "no group '16x'" in said and "1x, 2x, 4x" in said


def test_a_pyramid_on_s3_opens_with_store_options(s3_endpoint: str) -> None:
    from tests.conftest import make_bucket, s3_options

    url = f"s3://{make_bucket(s3_endpoint)}/t2m.zarr"
    store = storage.open_store(url, **s3_options(s3_endpoint))
    synthetic.write_store(store, shape=(40, 40), shards=(16, 16), bands=1)
    build(store, levels=1, executor="sync")
    options = s3_options(s3_endpoint)
    tree = xr.open_datatree(url, engine=Engine, store_options=options)
    assert [n.path for n in tree.subtree] == ["/", "/1x", "/2x"]
    got = xr.open_dataset(url, engine=Engine, group="2x", store_options=options)
    xr.testing.assert_identical(got.load(), open_level(store, "2x").load())
    assert not Engine().guess_can_open(url)  # remote: never probed by a guess


# ----------------------------------------------------------------------------- chunks


def chunking(ds: xr.Dataset) -> dict:
    return {name: var.chunks for name, var in ds.variables.items()}


def encodings(ds: xr.Dataset) -> dict:
    """Every variable's encoding, comparable (a NaN fill value is not equal to itself)."""
    return {n: {k: repr(v) for k, v in var.encoding.items()} for n, var in ds.variables.items()}


@pytest.mark.parametrize("chunks", [{}, None, "auto", {"init_time": 4}])
@pytest.mark.parametrize("group", [None, "2x"])
def test_the_engine_and_virtual_open_dataset_are_one_reader(
    repo: Path, group: str | None, chunks: object
) -> None:
    """Same variables, coordinates, attributes, encodings and dask chunks, for the repo's
    dataset and for its pyramid level."""
    got = xr.open_dataset(repo, engine="toolkit", group=group, chunks=chunks)
    want = virtual_open(str(repo), group=group, chunks=chunks)
    for ds in (got, want):  # lazy: nothing read yet, dask only when asked
        assert not ds["temperature_2m"].variable._in_memory
        assert (ds["temperature_2m"].chunks is None) == (chunks is None)
    assert chunking(got) == chunking(want)
    assert encodings(got) == encodings(want)
    xr.testing.assert_identical(got, want)


def test_virtual_open_dataset_is_the_engine_with_one_chunk_per_grib_message(repo: Path) -> None:
    """Its default is `chunks={}`: one dask chunk per virtual chunk, i.e. per GRIB message (a
    whole (init_time, lead_time) field), as zarr's own metadata and a plain Icechunk read say."""
    default = virtual_open(str(repo))
    engine = xr.open_dataset(repo, engine="toolkit", chunks={})
    xr.testing.assert_identical(default, engine)
    assert chunking(default) == chunking(engine)
    scope: dict = {"REPO": str(repo)}
    exec(recipe(), scope)  # docs/xarray.md's plain Icechunk + xarray read, no toolkit
    group = zarr.open_group(scope["session"].store, mode="r")
    for name, var in default.data_vars.items():
        if name == "spatial_ref":
            continue
        message = group[name].chunks
        assert group[name].shards is None and var.ndim > 2
        assert message == (1,) * (var.ndim - 2) + var.shape[-2:], name  # one full field
        assert var.chunks == normalize_chunks(message, var.shape), name
        np.testing.assert_array_equal(var.values, scope["ds"][name].values)
    assert virtual_open(str(repo), chunks=None).chunks == {}


@pytest.mark.parametrize("group", [None, "2x"])
def test_a_sharded_level_reads_in_whole_shards(sharded: Path, group: str | None) -> None:
    """`chunks={}` is one dask chunk per shard, where xarray's zarr engine gives one per inner
    chunk; `chunks=None` is no dask; the values are the zarr engine's."""
    array = zarr.open_group(str(sharded), mode="r")[f"{group}/field" if group else "field"]
    assert array.shards is not None and array.shards != array.chunks  # what this is about
    got = xr.open_dataset(sharded, engine=Engine, group=group, chunks={})
    assert got["field"].chunks == normalize_chunks(array.shards, array.shape)
    assert got["field"].encoding["chunks"] == array.chunks  # a write back keeps the layout
    plain = xr.open_dataset(sharded, engine="zarr", group=group, chunks={})
    assert plain["field"].chunks == normalize_chunks(array.chunks, array.shape)
    np.testing.assert_array_equal(got["field"].values, plain["field"].values)
    tree = xr.open_datatree(sharded, engine=Engine, chunks={})
    assert tree[group or "1x"]["field"].chunks == got["field"].chunks
    auto = xr.open_dataset(sharded, engine=Engine, group=group, chunks="auto")
    for sizes, shard, n in zip(auto["field"].chunks, array.shards, array.shape, strict=True):
        assert all(b % shard == 0 or b == n for b in np.cumsum(sizes))  # no shard split
    lazy = xr.open_dataset(sharded, engine=Engine, group=group)
    assert lazy.chunks == {} and not lazy["field"].variable._in_memory


@pytest.mark.parametrize("level", [".", "2x"])
def test_open_level_reads_whole_shards_as_the_engine_does(sharded: Path, level: str) -> None:
    """`toolkit.pyramid.open_level` without `chunks` is the engine with `chunks={}`: the same
    dataset, one dask chunk per shard; a caller's `chunks` is still xarray's."""
    from toolkit.pyramid import open_level

    group = None if level == "." else level
    got = open_level(str(sharded), level)
    engine = xr.open_dataset(sharded, engine="toolkit", group=group, chunks={})
    xr.testing.assert_identical(got, engine)
    array = zarr.open_group(str(sharded), mode="r")[f"{group}/field" if group else "field"]
    assert got["field"].chunks == engine["field"].chunks
    assert got["field"].chunks == normalize_chunks(array.shards, array.shape)
    inner = open_level(str(sharded), level, chunks={})  # zarr's own preference: the inner chunk
    assert inner["field"].chunks == normalize_chunks(array.chunks, array.shape)
    assert open_level(str(sharded), level, chunks=None).chunks == {}
