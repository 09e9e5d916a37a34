"""`pyramid build SOURCE --output REPO`: sources as xarray writes them (Zarr v2 with zlib or
blosc and CF packing, Zarr v3 sharded) are only read (every byte hashed before and after); level
0 read through the repo equals xarray's read of the source; every level equals the window mean
of level 0 pooled by numpy here; `verify REPO` passes; an array no v3 codec reads is copied, and
the build says so."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
from typer.testing import CliRunner

from tests.pyramid.test_cf import window_mean
from tests.test_xarray_backend import recipe
from toolkit import icechunk as R
from toolkit import storage
from toolkit.cli import app
from toolkit.pyramid import build, verify

H, W = 96, 80


def _dataset() -> xr.Dataset:
    rng = np.random.default_rng(7)
    t = (280 + 10 * rng.standard_normal((H, W))).astype("float32")
    t[10:30, 5:40] = np.nan  # a hole: the fill once encoded
    return xr.Dataset(
        {"t": (("lat", "lon"), t, {"units": "K", "long_name": "air temperature"})},
        coords={
            "lat": ("lat", np.linspace(50, 40, H), {"units": "degrees_north"}),
            "lon": ("lon", np.linspace(0, 10, W), {"units": "degrees_east"}),
        },
    )


SOURCES = {
    "v2 zlib, packed int16": (
        2,
        {
            "chunks": (32, 32),
            "compressors": [numcodecs.Zlib(level=4)],
            "dtype": "int16",
            "scale_factor": 0.01,
            "add_offset": 280.0,
            "_FillValue": -32768,
        },
    ),
    "v2 blosc float32": (
        2,
        {"chunks": (32, 32), "compressors": [numcodecs.Blosc("zstd", 3, shuffle=1)]},
    ),
    "v3 sharded": (3, {"chunks": (16, 16), "shards": (32, 32)}),
}


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


@pytest.mark.parametrize("kind", SOURCES)
def test_a_read_only_source_gets_its_pyramid_in_a_repo_by_reference(tmp_path, kind):
    fmt, encoding = SOURCES[kind]
    src = tmp_path / "lecture seule" / "sourcé.zarr"  # a space and a non-ASCII letter
    _dataset().to_zarr(src, zarr_format=fmt, mode="w", encoding={"t": encoding}, consolidated=False)
    before = _hashes(src)
    repo = tmp_path / "pyramid repo"
    report = build(str(src), output=str(repo), levels=2, executor="sync")
    assert _hashes(src) == before  # not a byte written, not a file added
    assert report.notes[0].startswith("level 0: ") and "none copied" in report.notes[0]
    # level 0 is references to the source's chunk objects, nothing copied
    handle = R.open_repo(storage.open_store(str(repo)), fresh=True)
    refs = R.chunk_refs(R.readonly(handle), "t")
    assert refs and all(
        loc.startswith(src.as_uri().rsplit("/", 2)[0]) for loc, _, _ in refs.values()
    )
    chunk_objects = [k for k in before if k.startswith("t/") and not k.endswith("zarr.json")
                     and not k.rsplit("/", 1)[-1].startswith(".z")]  # fmt: skip
    assert len(refs) == len(chunk_objects) > 1
    # read through the repo, level 0 is xarray's read of the source
    want = xr.open_zarr(src, consolidated=False)
    tree = xr.open_datatree(repo, engine="toolkit")
    got = tree["1x"].to_dataset()
    np.testing.assert_array_equal(got["t"].values, want["t"].values)
    assert got["t"].attrs["units"] == "K" and list(tree.children) == ["1x", "2x", "4x"]
    np.testing.assert_array_equal(got["lat"].values, want["lat"].values)
    # every level is the window mean of level 0 (numpy, from xarray's decoding)
    level0 = want["t"].values.astype(np.float64)
    for f in (2, 4):
        mean, count = window_mean(level0, f)
        level = tree[f"{f}x"].to_dataset()
        np.testing.assert_allclose(level["t"].values, mean, rtol=2e-6, equal_nan=True)
        np.testing.assert_array_equal(level["t_count"].values, count)
    assert verify(str(repo), executor="sync").ok
    # plain Icechunk + xarray, as docs/xarray.md's recipe opens a repo (no toolkit)
    scope: dict = {"REPO": str(repo)}
    exec(recipe(), scope)
    np.testing.assert_array_equal(scope["ds"]["t"].values, want["t"].values)
    level2 = xr.open_zarr(scope["session"].store, group="2x", consolidated=False)
    np.testing.assert_array_equal(level2["t"].values, tree["2x"]["t"].values)
    # a second build finds nothing to reference again and no shard to build: main stays put
    head = R.snapshot_of(R.open_repo(storage.open_store(str(repo)), fresh=True))
    again = build(str(src), output=str(repo), levels=2, executor="sync")
    assert "(0 changed)" in again.notes[0]
    assert R.snapshot_of(R.open_repo(storage.open_store(str(repo)), fresh=True)) == head
    assert again.stage("2x").written == again.stage("4x").written == 0
    assert _hashes(src) == before


def test_a_source_changed_in_place_is_referenced_again_and_its_levels_follow(tmp_path):
    src = tmp_path / "s.zarr"
    ds = _dataset()
    ds.to_zarr(src, zarr_format=3, mode="w", encoding={"t": {"chunks": (32, 32)}},
               consolidated=False)  # fmt: skip
    repo = tmp_path / "repo"
    build(str(src), output=str(repo), levels=2, executor="sync")
    old = xr.open_datatree(repo, engine="toolkit")["2x"]["t"].values
    # the owner of the source rewrites one chunk's values (xarray, in place)
    patch = ds[["t"]].isel(lat=slice(32, 64), lon=slice(32, 64)).drop_vars(["lat", "lon"])
    patch["t"][:] = 5.0
    patch.to_zarr(src, region={"lat": slice(32, 64), "lon": slice(32, 64)}, consolidated=False)

    # while the levels are rebuilt, main has not moved: the new level 0 and its levels reach
    # main together, in one move (a reader sees old or new, never new level 0 under old levels)
    def head() -> str:
        return R.snapshot_of(R.open_repo(storage.open_store(str(repo)), fresh=True))

    before, seen = head(), []

    def look(stage: str, done: int, total: int) -> None:
        if stage != "setup":
            seen.append(head())

    report = build(str(src), output=str(repo), levels=2, executor="sync", progress=look)
    assert seen and set(seen) == {before} != {head()}
    assert "(1 changed)" in report.notes[0]
    handle = R.open_repo(storage.open_store(str(repo)), fresh=True)
    assert R.branches(handle) == ["main"]  # the build's branches are gone
    tree = xr.open_datatree(repo, engine="toolkit")
    level0 = xr.open_zarr(src, consolidated=False)["t"].values.astype(np.float64)
    np.testing.assert_array_equal(tree["1x"]["t"].values, level0)
    for f in (2, 4):
        mean, _ = window_mean(level0, f)
        np.testing.assert_allclose(tree[f"{f}x"]["t"].values, mean, rtol=2e-6, equal_nan=True)
    assert not np.array_equal(tree["2x"]["t"].values, old, equal_nan=True)
    assert verify(str(repo), executor="sync").ok


def _days(first: int, n: int) -> xr.Dataset:
    """`n` daily fields from day `first` on (each the base field plus its day number)."""
    base = _dataset()
    ds = xr.concat([base + k for k in range(first, first + n)], dim="time")
    ds["t"].attrs = base["t"].attrs
    days = np.datetime64("2026-01-01", "ns") + np.arange(first, first + n) * np.timedelta64(1, "D")
    return ds.assign_coords(time=("time", days))


def test_a_source_appended_along_time_gets_the_new_positions_and_nothing_else_rebuilt(tmp_path):
    """xarray appends three days to a v2 source (zlib, CF-packed) as an archive grows: the next
    build references the new chunk objects, builds the levels of the new days only, in one
    commit, and every level is again the window mean of level 0 at every day."""
    src = tmp_path / "archive" / "t2m daily.zarr"
    _, encoding = SOURCES["v2 zlib, packed int16"]
    encoding = {**encoding, "chunks": (1, 32, 32)}
    _days(0, 2).to_zarr(src, zarr_format=2, mode="w", encoding={"t": encoding},
                        consolidated=False)  # fmt: skip
    repo = tmp_path / "repo"
    first = build(str(src), output=str(repo), levels=2, executor="sync")
    assert first.stage("2x").written == 2  # a shard per day
    _days(2, 3).to_zarr(src, append_dim="time", consolidated=False)
    before = _hashes(src)
    handle = R.open_repo(storage.open_store(str(repo)), fresh=True)
    old_head = R.snapshot_of(handle)

    report = build(str(src), output=str(repo), levels=2, executor="sync")
    assert _hashes(src) == before
    for level in ("2x", "4x"):  # the two days built before are skipped, the three new built
        assert (report.stage(level).skipped, report.stage(level).written) == (2, 3)
    handle = R.open_repo(storage.open_store(str(repo)), fresh=True)
    history = [c.id for c in R.history(handle)]  # main moved on from its old head, no rewrite
    assert old_head in history[1:] and R.branches(handle) == ["main"]
    refs = R.chunk_refs(R.readonly(handle), "t")
    assert sorted({idx[0] for idx in refs}) == [0, 1, 2, 3, 4] and len(refs) == 5 * 3 * 3
    want = xr.open_zarr(src, consolidated=False)
    tree = xr.open_datatree(repo, engine="toolkit")
    np.testing.assert_array_equal(tree["1x"]["t"].values, want["t"].values)
    np.testing.assert_array_equal(tree["2x"]["time"].values, want["time"].values)
    for day in range(5):
        level0 = want["t"].values[day].astype(np.float64)
        for f in (2, 4):
            mean, count = window_mean(level0, f)
            level = tree[f"{f}x"].to_dataset().isel(time=day)
            np.testing.assert_allclose(level["t"].values, mean, rtol=2e-6, equal_nan=True)
            np.testing.assert_array_equal(level["t_count"].values, count)
    assert verify(str(repo), executor="sync").ok


def test_a_chunk_rewritten_while_it_was_listed_is_referenced_again(tmp_path):
    """An object rewritten during the last listing keeps its length and may keep a time
    before the newest object then listed: the next build finds the old ref no longer reads and
    sets it again (without that, level 0 would fail to read there for good)."""
    import os

    src = tmp_path / "s.zarr"
    ds = _dataset()
    ds.to_zarr(src, zarr_format=3, mode="w", consolidated=False,
               encoding={"t": {"chunks": (32, 32), "compressors": None}})  # fmt: skip
    chunk = src / "t" / "c" / "1" / "1"
    os.utime(chunk, (1_000_000_000, 1_000_000_000))  # written long before the rest
    repo = tmp_path / "repo"
    build(str(src), output=str(repo), levels=1, executor="sync")
    handle = R.open_repo(storage.open_store(str(repo)), fresh=True)
    record = storage.get_json(R.SessionView(str(repo), R.readonly(handle)), "zarr.json")
    newest = record["attributes"]["pyramid:source_listing"]["newest"]
    # the owner rewrites that chunk (same length: no compressor) while the build lists, so it
    # lands with a time just before the newest object the listing saw
    raw = bytearray(chunk.read_bytes())
    raw[:4] = np.float32(-1.0).tobytes()
    chunk.write_bytes(bytes(raw))
    stamp = np.datetime64(newest[:19], "s").astype(int) - 1
    os.utime(chunk, (stamp, stamp))

    report = build(str(src), output=str(repo), levels=1, executor="sync")
    assert "(1 changed)" in report.notes[0]
    got = xr.open_datatree(repo, engine="toolkit")["1x"]["t"].values
    np.testing.assert_array_equal(got, xr.open_zarr(src, consolidated=False)["t"].values)
    assert got[32, 32] == -1.0
    # rewritten again, same length, after everything the last listing saw: set again unread
    raw[:4] = np.float32(-2.0).tobytes()
    chunk.write_bytes(bytes(raw))
    os.utime(chunk, (stamp + 60, stamp + 60))
    report = build(str(src), output=str(repo), levels=1, executor="sync")
    assert "(1 changed)" in report.notes[0]
    assert xr.open_datatree(repo, engine="toolkit")["1x"]["t"].values[32, 32] == -2.0


def test_an_array_no_v3_codec_reads_is_copied_and_the_command_says_so(tmp_path):
    """Fortran-ordered chunks cannot be read by reference: that array is copied, in one line."""
    src = tmp_path / "f.zarr"
    group = zarr.open_group(str(src), mode="w", zarr_format=2)
    values = np.arange(64 * 48, dtype="float32").reshape(64, 48)
    for name, order in (("c_order", "C"), ("f_order", "F")):
        a = group.create_array(name, shape=values.shape, dtype="float32", chunks=(32, 16),
                               order=order, fill_value=np.nan,
                               attributes={"_ARRAY_DIMENSIONS": ["y", "x"], "units": "1"})  # fmt: skip
        a[:] = values
    for dim, n in (("y", 64), ("x", 48)):
        c = group.create_array(dim, shape=(n,), dtype="float64", chunks=(n,),
                               attributes={"_ARRAY_DIMENSIONS": [dim]})  # fmt: skip
        c[:] = np.arange(n) * 1000.0
    assert json.loads((src / "f_order" / ".zarray").read_text())["order"] == "F"
    before = _hashes(src)
    repo = tmp_path / "repo"
    result = CliRunner().invoke(app, ["pyramid", "build", str(src), "--output", str(repo),
                                      "--levels", "1", "--executor", "sync"])  # fmt: skip
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "copied f_order (f_order: Fortran-ordered chunks)" in said
    assert _hashes(src) == before
    tree = xr.open_datatree(repo, engine="toolkit")
    for name in ("c_order", "f_order"):
        np.testing.assert_array_equal(tree["1x"][name].values, values)
    handle = R.open_repo(storage.open_store(str(repo)), fresh=True)
    session = R.readonly(handle)
    virtual = {a: [loc.startswith("file://") for loc, _, _ in R.chunk_refs(session, a).values()]
               for a in ("c_order", "f_order")}  # fmt: skip
    assert all(virtual["c_order"]) and virtual["f_order"] and not any(virtual["f_order"])


def test_output_refusals_are_one_line(tmp_path):
    src = tmp_path / "s.zarr"
    _dataset().to_zarr(src, zarr_format=3, mode="w", consolidated=False)
    runner = CliRunner()

    def refused(*args: str) -> str:
        r = runner.invoke(app, ["pyramid", "build", str(src), *args, "--executor", "sync"])
        assert r.exit_code == 2, r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1, r.output
        return lines[0]

    assert "inside the source" in refused("--output", str(src / "levels"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("mine")
    assert "is no Icechunk repo" in refused("--output", str(tmp_path / "full"))
    assert "--select" in refused("--output", str(tmp_path / "r"), "--latest")
    missing = runner.invoke(app, ["pyramid", "build", str(tmp_path / "gone.zarr"), "--output",
                                  str(tmp_path / "r"), "--executor", "sync"])  # fmt: skip
    assert missing.exit_code == 2 and missing.output.count("\n") == 1, missing.output
    assert "gone.zarr: does not exist" in missing.output
    # a dtype no pyramid pools: named by the source (not the repo's branch), one line
    odd = tmp_path / "complex.zarr"
    xr.Dataset({"c": (("y", "x"), np.full((8, 8), 1 + 2j, dtype="complex64"))},
               coords={"y": np.arange(8.0), "x": np.arange(8.0)}).to_zarr(
        odd, zarr_format=2, consolidated=False)  # fmt: skip
    before = _hashes(odd)
    r = runner.invoke(app, ["pyramid", "build", str(odd), "--output", str(tmp_path / "rc"),
                            "--executor", "sync"])  # fmt: skip
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert (
        r.output.startswith(f"error: {odd}: no array to pyramid")  # the path, not its URL
        and "complex64" in r.output
    )
    assert _hashes(odd) == before


def _objects(endpoint: str, bucket: str) -> dict[str, str]:
    """Every object of the bucket with its ETag (boto3, apart from the code under test)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


@pytest.mark.slow
def test_a_source_in_a_bucket_gets_its_pyramid_in_a_repo_in_another(s3_endpoint):
    """A v2 source (blosc, as xarray writes it) in a public bucket on the S3 server the tests
    run, the repo in another bucket: the source's objects are the same after the build (ETags),
    level 0 read through the repo equals xarray's read of the source, the levels its means."""
    from tests.conftest import make_bucket, s3_options
    from tests.virtual.test_repo import public_bucket

    opts = s3_options(s3_endpoint)
    source_bucket = public_bucket(s3_endpoint)
    src = f"s3://{source_bucket}/reanalysis/t.zarr"
    fmt, encoding = SOURCES["v2 blosc float32"]
    mapper = storage.open_store(src, **opts).zarr()
    _dataset().to_zarr(mapper, zarr_format=fmt, mode="w", encoding={"t": encoding},
                       consolidated=False)  # fmt: skip
    before = _objects(s3_endpoint, source_bucket)
    repo = f"s3://{make_bucket(s3_endpoint)}/t-pyramid"
    report = build(src, output=repo, levels=2, executor="sync", options=storage.Options(**opts))
    assert "none copied" in report.notes[0]
    assert _objects(s3_endpoint, source_bucket) == before
    tree = xr.open_datatree(repo, engine="toolkit", store_options=opts)
    want = xr.open_zarr(storage.open_store(src, **opts).zarr(read_only=True), consolidated=False)
    np.testing.assert_array_equal(tree["1x"]["t"].values, want["t"].values)
    mean, _ = window_mean(want["t"].values.astype(np.float64), 2)
    np.testing.assert_allclose(tree["2x"]["t"].values, mean, rtol=2e-6, equal_nan=True)
    assert verify(repo, executor="sync", private=True, options=storage.Options(**opts)).ok


@pytest.mark.slow
def test_a_bucket_these_credentials_only_read_gets_its_pyramid_in_one_they_write(
    seaweed_endpoint, monkeypatch
):
    """The user's keys may read the source's bucket and write only their own (SeaweedFS checks
    every signature against per-bucket rights): the command builds there from the environment's
    keys, the source's objects stay as they were (ETags), and level 0 reads through the repo
    with the same keys as xarray reads the source."""
    from tests.conftest import make_bucket, s3_options

    opts = s3_options(seaweed_endpoint)
    for bucket in ("readable", "reader-own"):
        make_bucket(seaweed_endpoint, bucket)
    src = "s3://readable/reanalysis/t 2m.zarr"  # written by its owner (the admin identity)
    fmt, encoding = SOURCES["v2 zlib, packed int16"]
    _dataset().to_zarr(storage.open_store(src, **opts).zarr(), zarr_format=fmt, mode="w",
                       encoding={"t": encoding}, consolidated=False)  # fmt: skip
    before = _objects(seaweed_endpoint, "readable")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "READER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "reader-secret")
    with pytest.raises(storage.StorageError, match="denied"):  # the premise: read, never write
        storage.put(storage.open_store(src, **opts), "probe", b"x")
    flags = ["--endpoint", seaweed_endpoint, "--region", "us-east-1", "--allow-http",
             "--path-style"]  # fmt: skip
    repo = "s3://reader-own/t2m-pyramid"
    private = f"s3://{make_bucket(seaweed_endpoint)}/t.zarr"  # a bucket these keys may not read
    unread = CliRunner().invoke(app, ["pyramid", "build", private, "--output", repo,
                                      "--executor", "sync", *flags])  # fmt: skip
    assert unread.exit_code == 2 and unread.output.count("\n") == 1, unread.output
    assert private in unread.output and "access denied" in unread.output
    denied = CliRunner().invoke(app, ["pyramid", "build", src, "--output", "s3://readable/pyr",
                                      "--executor", "sync", *flags])  # fmt: skip
    assert denied.exit_code == 2 and denied.output.count("\n") == 1, denied.output
    assert "s3://readable/pyr" in denied.output and "denied" in denied.output
    result = CliRunner().invoke(app, ["pyramid", "build", src, "--output", repo, "--levels", "2",
                                      "--executor", "sync", *flags])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "none copied" in result.output
    monkeypatch.undo()
    assert _objects(seaweed_endpoint, "readable") == before
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "READER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "reader-secret")
    # the source was read with credentials, so the repo records its container as private and
    # every reader signs with the environment's keys, without being told
    tree = xr.open_datatree(repo, engine="toolkit", store_options=opts)
    want = xr.open_zarr(storage.open_store(src, **opts).zarr(read_only=True), consolidated=False)
    np.testing.assert_array_equal(tree["1x"]["t"].values, want["t"].values)
    mean, _ = window_mean(want["t"].values.astype(np.float64), 4)
    np.testing.assert_allclose(tree["4x"]["t"].values, mean, rtol=2e-6, equal_nan=True)
    result = CliRunner().invoke(app, ["pyramid", "verify", repo, "--private",
                                      "--executor", "sync", *flags])  # fmt: skip
    assert result.exit_code == 0, result.output
