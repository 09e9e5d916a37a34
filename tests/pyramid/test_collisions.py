"""Checks before the first write, and user data never overwritten (issue 49, items 4 and 5).

Every refusal here runs the real command line on a real store and compares the bytes of every
file before and after: a refusal creates nothing and changes nothing. A store the toolkit built
itself (its level groups recorded in its plan, or marked by their own `pyramid:factor`) is
still resumed, extended and rebuilt as before.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic
from toolkit.pyramid import build, verify

SYNC = ("--executor", "sync")


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` (hidden ones too) and the hash of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(argv), env=env)
    assert "Traceback" not in res.output, res.output
    return res.exit_code, res.stderr


def refused(path: Path, *argv: str, env: dict[str, str] | None = None) -> str:
    """Run `toolkit ...argv` on `path`: exit 2, one `error:` line (returned), no byte changed."""
    before = tree(path)
    code, err = run(*argv, env=env)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert tree(path) == before, "a refused build created or changed something"
    return lines[0]


def store(path: Path) -> Path:
    synthetic.write_store(storage.open_store(str(path)), shape=(64, 64), shards=(16, 16))
    return path


def add_node(path: Path, name: str, kind: str) -> None:
    """The user's own array or group `name` at the store's root, with data and attributes."""
    root = zarr.open_group(str(path), mode="a")
    if kind == "array":
        a = root.create_array(
            name, shape=(3,), dtype="int32", attributes={"mine": 1}, dimension_names=["n"]
        )
        a[:] = [1, 2, 3]
    else:
        g = root.create_group(name, attributes={"mine": 1})
        g.create_array("notes", shape=(2,), dtype="int32")[:] = [7, 8]


# ------------------------------------------------------------------- names the toolkit writes


@pytest.mark.parametrize("kind", ["array", "group"])
@pytest.mark.parametrize("name", ["2x", "4x", "8x", ".pyramid"])
def test_a_users_node_at_any_name_the_build_writes_is_refused_by_name(tmp_path, name, kind):
    path = store(tmp_path / "s.zarr")
    add_node(path, name, kind)
    line = refused(path, "pyramid", "build", str(path), "--levels", "3", *SYNC)
    assert f"s.zarr/{name}: the store's own {kind} '{name}'" in line, line
    assert "did not write" in line and "rename or move it" in line
    if name == "8x":
        assert "--levels 2" in line  # the fix that leaves it alone
    assert not (path / "2x" / "field").exists()


def test_plan_says_it_too(tmp_path):
    path = store(tmp_path / "s.zarr")
    add_node(path, "4x", "array")
    line = refused(path, "pyramid", "plan", str(path), "--levels", "2")
    assert "s.zarr/4x" in line and "--levels 1" in line


def test_fewer_levels_leave_the_users_node_alone(tmp_path):
    path = store(tmp_path / "s.zarr")
    add_node(path, "4x", "array")
    mine = (path / "4x" / "zarr.json").read_bytes()
    assert run("pyramid", "build", str(path), "--levels", "1", *SYNC)[0] == 0
    assert (path / "4x" / "zarr.json").read_bytes() == mine
    assert zarr.open_array(str(path), path="4x", mode="r")[:].tolist() == [1, 2, 3]
    assert verify(str(path), executor="sync").ok


def test_a_store_the_toolkit_built_is_resumed_extended_and_rebuilt(tmp_path):
    path = store(tmp_path / "s.zarr")
    assert run("pyramid", "build", str(path), "--levels", "2", *SYNC)[0] == 0
    assert run("pyramid", "build", str(path), "--levels", "2", *SYNC)[0] == 0  # resume
    argv = ("pyramid", "build", str(path), "--levels", "3", "--rebuild-from", "8x", *SYNC)
    assert run(*argv)[0] == 0  # extended: the new level only
    assert (
        run("pyramid", "build", str(path), "--levels", "3", "--rebuild-from", "2x", *SYNC)[0] == 0
    )
    assert verify(str(path), executor="sync").ok


def test_levels_whose_record_was_lost_are_still_the_toolkits(tmp_path):
    """A copy without dot-files (`cp -r s/*`) loses `.pyramid`: the level groups' own
    `pyramid:factor` still says whose they are."""
    path = store(tmp_path / "s.zarr")
    build(str(path), levels=2, executor="sync")
    shutil.rmtree(path / ".pyramid")
    assert run("pyramid", "build", str(path), "--levels", "2", *SYNC)[0] == 0
    assert verify(str(path), executor="sync").ok


@pytest.mark.parametrize("kind", ["array", "group"])
def test_a_users_node_beside_the_toolkits_levels_survives_a_rebuild(tmp_path, kind):
    """--rebuild-from deletes the levels it rebuilds: never a node the record does not list."""
    path = store(tmp_path / "s.zarr")
    build(str(path), levels=2, executor="sync")
    add_node(path, "8x", kind)
    argv = ("pyramid", "build", str(path), "--levels", "3", "--rebuild-from", "4x", *SYNC)
    line = refused(path, *argv)
    assert f"s.zarr/8x: the store's own {kind} '8x'" in line and "--levels 2" in line


def test_a_group_named_like_a_level_but_not_the_toolkits(tmp_path):
    """`pyramid:factor` of another factor is no mark: the name alone decides nothing."""
    path = store(tmp_path / "s.zarr")
    zarr.open_group(str(path), mode="a").create_group("2x", attributes={"pyramid:factor": 4})
    line = refused(path, "pyramid", "build", str(path), "--levels", "1", *SYNC)
    assert "s.zarr/2x: the store's own group '2x'" in line


def test_a_repos_own_array_named_like_a_level_is_refused(tmp_path):
    from tests.pyramid.test_repo import START, sim
    from toolkit import icechunk as R
    from toolkit.virtual.backfill import backfill

    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    backfill(ds, start=START, workers=1, executor="sync")
    s = R.writable(R.open_repo(storage.open_store(str(tmp_path / "repo")), fresh=True))
    zarr.open_group(s.store, mode="a").create_array("2x", shape=(2,), dtype="int8")
    R.commit(s, "a user's array")
    argv = ("pyramid", "build", str(tmp_path / "repo"), "-v", "temperature_2m", "--levels", "1")
    line = refused(tmp_path / "repo", *argv, *SYNC)
    assert "repo/2x: the store's own array '2x'" in line


# ------------------------------------------------------- nodes inside the toolkit's levels


def add_inside(path: Path, where: str, kind: str) -> None:
    """The user's own node `where` (e.g. `2x/notes`) inside a level group the toolkit wrote."""
    group, name = where.split("/")
    if kind == "object":
        (path / group / name).write_text("the user's notes")
        return
    g = zarr.open_group(str(path), path=group, mode="a")
    if kind == "array":
        a = g.create_array(name, shape=(3,), dtype="int32", attributes={"mine": 1})
        a[:] = [1, 2, 3]
    else:
        g.create_group(name, attributes={"mine": 1}).create_array(
            "notes", shape=(2,), dtype="int32"
        )[:] = [7, 8]


REBUILDS = {
    "resume": ("--levels", "2"),
    "extend": ("--levels", "3", "--rebuild-from", "8x"),
    "rebuild": ("--levels", "2", "--rebuild-from", "2x"),
}


@pytest.mark.parametrize("how", REBUILDS)
@pytest.mark.parametrize(
    ("where", "kind"),
    [("2x/notes", "array"), ("2x/extra", "group"), ("4x/README.txt", "object")],
)
def test_a_users_node_inside_a_level_group_is_refused_by_name(tmp_path, where, kind, how):
    """--rebuild-from deletes the level groups it rebuilds, a build writes into them: a node
    the toolkit did not write there is named with the fix, and no byte of the store changes."""
    path = store(tmp_path / "s.zarr")
    build(str(path), levels=2, executor="sync")
    add_inside(path, where, kind)
    line = refused(path, "pyramid", "build", str(path), *REBUILDS[how], *SYNC)
    name = where.split("/")[1]
    assert f"s.zarr/{where}: '{name}', which this toolkit did not write" in line, line
    assert f"move it out of {where.split('/')[0]}/" in line


def test_a_users_array_named_as_a_new_variable_would_be_is_refused(tmp_path):
    """A user's `2x/extra` array, then a root variable `extra`: the build that adds it would
    overwrite the user's with its level array; the recorded plan says it is not the toolkit's."""
    path = store(tmp_path / "s.zarr")
    build(str(path), levels=2, executor="sync")
    add_inside(path, "2x/extra", "array")
    field = zarr.open_array(str(path), path="field", mode="r")
    root = zarr.open_group(str(path), mode="a")
    extra = root.create_array(
        "extra", shape=field.shape, dtype="float32", chunks=field.chunks,
        dimension_names=list(field.metadata.dimension_names),
    )  # fmt: skip
    extra[:] = 1.0
    line = refused(path, "pyramid", "build", str(path), "-v", "field", "-v", "extra", *SYNC)
    assert "s.zarr/2x/extra: 'extra', which this toolkit did not write" in line, line


def test_plan_names_the_users_node_inside_a_level_too(tmp_path):
    path = store(tmp_path / "s.zarr")
    build(str(path), levels=2, executor="sync")
    add_inside(path, "2x/notes", "array")
    add_inside(path, "2x/more", "object")
    line = refused(path, "pyramid", "plan", str(path))
    assert "s.zarr/2x/more: 'more'" in line and "(also 'notes')" in line


def test_what_the_toolkit_writes_in_a_level_is_no_users_node(tmp_path):
    """Level arrays, `<var>_count`, coordinates and `spatial_ref`: a resume, an extension and
    a rebuild of a toolkit's pyramid run as before; so does a store whose record was lost."""
    path = store(tmp_path / "s.zarr")
    build(str(path), levels=2, executor="sync")
    assert {p.name for p in (path / "2x").iterdir()} >= {"field", "field_count", "spatial_ref"}
    for how in REBUILDS.values():
        assert run("pyramid", "build", str(path), *how, *SYNC)[0] == 0
    shutil.rmtree(path / ".pyramid")
    assert run("pyramid", "build", str(path), "--levels", "3", *SYNC)[0] == 0
    assert verify(str(path), executor="sync").ok


# ------------------------------------------------------------------- checks in the plan


def xarray_store(path: Path, dtype: str = "float32", x: np.ndarray | None = None) -> np.ndarray:
    rng = np.random.default_rng(1)
    values = rng.normal(10, 5, (64, 64)).astype(dtype)
    values[5:11, 3:9] = np.nan
    xs = np.arange(64.0) if x is None else x
    ds = xr.Dataset({"t": (("y", "x"), values)}, coords={"y": np.arange(64.0), "x": xs})
    ds.to_zarr(str(path), zarr_format=3, mode="w", consolidated=False)
    return values


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_coordinate_is_refused_naming_where(tmp_path, bad):
    x = np.arange(64.0)
    x[37] = bad
    path = tmp_path / "c.zarr"
    xarray_store(path, x=x)
    line = refused(path, "pyramid", "build", str(path), "--levels", "2", *SYNC)
    assert f"c.zarr/x: coordinate array 'x' holds {bad} at index 37 of 64" in line, line
    assert "write the cell centres" in line


@pytest.mark.parametrize("method", ["mean", "min", "max", "sum"])
def test_float16_is_pooled_in_float32_and_verifies(tmp_path, method):
    path = tmp_path / "h.zarr"
    values = xarray_store(path, "float16")
    assert run("pyramid", "build", str(path), "--levels", "3", "--method", method, *SYNC)[0] == 0
    assert verify(str(path), executor="sync").ok  # bitwise against the numpy reference
    got = zarr.open_array(str(path), path="2x/t", mode="r")
    want = {"mean": np.float32, "min": np.float16, "max": np.float16, "sum": np.float64}
    assert got.dtype == want[method]
    if method in ("min", "max"):  # a value of the window, exactly
        windows = values.astype(np.float32).reshape(32, 2, 32, 2)
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
            ref = getattr(np, f"nan{method}")(windows, axis=(1, 3)).astype(np.float16)
        np.testing.assert_array_equal(got[:], ref)


def test_float16_with_a_sentinel_nodata(tmp_path):
    path = tmp_path / "h.zarr"
    values = np.full((32, 32), 3.5, dtype=np.float16)
    values[:4, :4] = -9999  # stored as -10000: the fill is compared as float16 holds it
    ds = xr.Dataset(
        {"t": (("y", "x"), values)}, coords={"y": np.arange(32.0), "x": np.arange(32.0)}
    )
    ds["t"].encoding["_FillValue"] = np.float16(-9999)
    ds.to_zarr(str(path), zarr_format=3, mode="w", consolidated=False)
    build(str(path), levels=2, method="mean", executor="sync")
    assert verify(str(path), executor="sync").ok
    two = zarr.open_array(str(path), path="2x/t", mode="r")[:]
    assert np.isnan(two[:2, :2]).all() and (two[2:, 2:] == 3.5).all()


def _codecs(path: Path, array: str, codecs: list[dict]) -> None:
    meta = path / array / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["codecs"] = codecs
    meta.write_text(json.dumps(doc))


def test_a_numcodecs_codec_that_is_not_installed_is_refused_in_the_plan(tmp_path):
    path = tmp_path / "z.zarr"
    xarray_store(path)
    _codecs(path, "t", [{"name": "numcodecs.zfpy", "configuration": {"mode": 4, "tolerance": 0.1}}])
    line = refused(path, "pyramid", "build", str(path), "--levels", "2", *SYNC)
    assert "z.zarr/t: An implementation for codec 'zfpy' is not available" in line
    assert "install the package" in line and "--variable" in line


def test_a_missing_codec_inside_a_shard_is_refused_in_the_plan(tmp_path):
    path = store(tmp_path / "s.zarr")
    meta = path / "field" / "zarr.json"
    doc = json.loads(meta.read_text())
    (shard,) = doc["codecs"]
    shard["configuration"]["codecs"] = [{"name": "numcodecs.zfpy", "configuration": {"mode": 4}}]
    meta.write_text(json.dumps(doc))
    line = refused(path, "pyramid", "build", str(path), "--levels", "2", *SYNC)
    assert "s.zarr/field: An implementation for codec 'zfpy'" in line


def test_a_codec_zarr_does_not_know_is_refused_by_array(tmp_path):
    path = tmp_path / "z.zarr"
    xarray_store(path)
    _codecs(path, "t", [{"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "frobnicate"}])  # fmt: skip
    line = refused(path, "pyramid", "build", str(path), "--levels", "2", *SYNC)
    assert "z.zarr/t: An implementation for codec 'frobnicate'" in line, line


@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        ("DASK_DISTRIBUTED__WORKER__MEMORY__TARGET", "banana", "want number > 0 and <= 1 or false"),
        ("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT", "soon", "want a duration such as 30s"),
        ("DASK_ARRAY__CHUNK_SIZE", "huge", "want a size such as 128MiB"),
    ],
)
def test_an_invalid_dask_setting_in_the_environment_is_refused_before_anything(
    tmp_path, var, value, says
):
    path = store(tmp_path / "s.zarr")
    line = refused(path, "pyramid", "build", str(path), "--executor", "dask", env={var: value})
    assert f"{var}='{value}'" in line and says in line and "unset it" in line, line


def test_a_valid_dask_setting_in_the_environment_is_no_error():
    from toolkit.engine.cluster import check_dask_env

    check_dask_env(
        {
            "DASK_DISTRIBUTED__WORKER__MEMORY__TARGET": "0.5",
            "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s",
            "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False",
            "DASK_SOMETHING_NEW": "anything",  # not declared: dask's own business
        }
    )


def test_output_of_a_refused_source_creates_no_repo(tmp_path):
    """`--output`: the source's checks come before the output repo is made."""
    path = store(tmp_path / "s.zarr")
    add_node(path, "4x", "array")
    out = tmp_path / "out"
    line = refused(
        path, "pyramid", "build", str(path), "--output", str(out), "--levels", "2", *SYNC
    )
    assert "s.zarr/4x" in line and not out.exists()


def test_a_lost_record_does_not_disown_the_toolkits_other_variables(tmp_path):
    """With no record to ask, a level variable is known by the count plane written beside it:
    a rebuild of one variable never calls another the toolkit wrote the user's (and advises
    moving it out), while a user's array inside a level is still refused."""
    from tests.pyramid.test_operators import write_store

    path = tmp_path / "two.zarr"
    write_store(path)
    assert run("pyramid", "build", str(path), "--levels", "2", *SYNC)[0] == 0
    shutil.rmtree(path / ".pyramid")
    code, out = run("pyramid", "build", str(path), "-v", "t2m", "--levels", "2",
                    "--rebuild-from", "2x", *SYNC)  # fmt: skip
    assert code == 0 and "did not write" not in out, out
    add_node(path, "2x/notes", "array")
    argv = ("pyramid", "build", str(path), "-v", "t2m", "--levels", "2", "--rebuild-from", "2x")
    assert "'notes', which this toolkit did not write" in refused(path, *argv, *SYNC)
