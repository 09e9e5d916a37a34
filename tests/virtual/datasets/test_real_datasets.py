"""HRRR / GFS / GEFS virtual datasets against the real NOAA inventories in tests/data/idx.

The GRIB bodies are hundreds of MB and not here, so each source file is laid out as a sparse
local object of a plausible size with a valid 16-byte GRIB2 indicator at every offset its real
`.idx` lists: enough for the real discovery + index + stale-header path, never a decode.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from toolkit import icechunk as R
from toolkit import storage
from toolkit.virtual.builtin import DATASETS, gefs, gfs, hrrr
from toolkit.virtual.builtin.common import NOAA_REGION, carried
from toolkit.virtual.dataset import probe
from toolkit.virtual.filetable import file_tasks
from toolkit.virtual.grib.index import parse_index
from toolkit.virtual.gribsource import GribCoord
from toolkit.virtual.layout import committed_extent
from toolkit.virtual.refs import chunk_key
from toolkit.virtual.source_io import discover, file_refs
from toolkit.virtual.validate import completeness
from toolkit.virtual.write import (
    Job,
    ensure_repo,
    expected_of,
    filter_already_present,
    run,
    virtual_config,
)

DATA = Path(__file__).resolve().parents[2] / "data"  # tests/data: real files, with licences
INIT = datetime(2025, 8, 1)
INIT64 = np.datetime64(INIT, "ns")
LAST_MESSAGE = 1_234_567

# (dataset, lead hours, member, real index)
REAL = [
    (hrrr, 0, None, "hrrr.t00z.wrfsfcf00.grib2.idx"),
    (hrrr, 8, None, "hrrr.t00z.wrfsfcf08.grib2.idx"),
    (hrrr, 24, None, "hrrr.t00z.wrfsfcf24.grib2.idx"),
    (gfs, 0, None, "gfs.t00z.pgrb2.0p25.f000.idx"),
    (gfs, 7, None, "gfs.t00z.pgrb2.0p25.f007.idx"),
    (gefs, 0, "mean", "geavg.t00z.pgrb2s.0p25.f000.idx"),
    (gefs, 9, "mean", "geavg.t00z.pgrb2s.0p25.f009.idx"),
    (gefs, 15, 1, "gep01.t00z.pgrb2s.0p25.f015.idx"),
]


def lay_out(src: storage.Store, key: str, index_name: str) -> int:
    """The real index at `key`.idx and a sparse data object with a GRIB2 header per offset."""
    text = (DATA / "idx" / index_name).read_text()
    offsets = sorted({r.offset for r in parse_index(text)})
    size = offsets[-1] + LAST_MESSAGE
    path = src.local_path / key
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for start, end in zip(offsets, [*offsets[1:], size], strict=True):
            f.seek(start)
            f.write(b"GRIB\0\0\0\x02" + struct.pack(">Q", end - start))
        f.truncate(size)
    storage.put(src, f"{key}.idx", text.encode())
    return size


def small(build, tmp_path: Path, **kw) -> Job:
    """The dataset over a local copy of its bucket, template trimmed to one day."""
    src = storage.open_store(str(tmp_path / "bucket"))
    repo = R.RepoRef(storage.open_store(str(tmp_path / "repo")))
    return Job(build(src, first_init=INIT, append_dim_end=INIT + timedelta(days=1), **kw), repo)


def store_of(ds) -> storage.Store:
    return ds.dataset.source.store


def size_of(ds, c: GribCoord) -> int:
    return storage.head(store_of(ds), c.get_url()[len(store_of(ds).url) + 1 :]).size


def coord_for(ds, lead: int, member) -> GribCoord:
    lead64 = np.timedelta64(lead, "h").astype("timedelta64[ns]")
    (c,) = [
        c
        for c in (ds.files() if isinstance(ds, Job) else file_tasks(ds))
        if c.init_time == INIT64 and c.lead_time == lead64 and c.member == member
    ]
    return c


# ----------------------------------------------------------------------------- templates


def test_default_templates_have_the_real_geometry(tmp_path):
    h, g, e = (DATASETS[n]() for n in ("hrrr", "gfs", "gefs"))

    t = h.template
    assert (len(t.coords["y"]), len(t.coords["x"])) == (1059, 1799)
    assert len(t.coords["lead_time"]) == 49 and t.coords["lead_time"][-1] == np.timedelta64(48, "h")
    assert np.all(np.diff(t.coords["init_time"]) == np.timedelta64(6, "h"))
    assert t.chunks("temperature_2m") == (1, 1, 1059, 1799)
    assert t.variables["temperature_2m"].dims == ("init_time", "lead_time", "y", "x")

    t = g.template
    leads = t.coords["lead_time"] / np.timedelta64(1, "h")
    assert len(leads) == 209 and leads[120] == 120 and leads[121] == 123 and leads[-1] == 384
    assert np.all(np.diff(leads[:121]) == 1) and np.all(np.diff(leads[120:]) == 3)
    assert (len(t.coords["latitude"]), len(t.coords["longitude"])) == (721, 1440)
    assert t.variables["temperature"].dims == (
        "init_time", "lead_time", "level", "latitude", "longitude"
    )  # fmt: skip
    assert t.chunks("temperature") == (1, 1, 1, 721, 1440)
    assert len(t.coords["level"]) == 41 and 0.01 in t.coords["level"]

    t = e.template
    assert list(t.coords["ensemble_member"]) == [str(i) for i in range(31)] + ["mean"]
    assert len(t.coords["lead_time"]) == 81 and t.coords["lead_time"][-1] == np.timedelta64(
        240, "h"
    )
    assert t.chunks("temperature_2m") == (1, 1, 1, 721, 1440)
    assert "level" not in t.coords  # pgrb2s carries no isobaric groups

    firsts = {
        "hrrr": datetime(2020, 12, 3),
        "gfs": datetime(2021, 5, 1),
        "gefs": datetime(2020, 10, 1),
    }
    now = np.datetime64(datetime.now(UTC).replace(tzinfo=None), "ns")
    for ds in (h, g, e):
        t = ds.template
        names = {v.name for v in carried(ds.source.catalog, ds.source.file_types)}
        assert set(t.variables) == names | {"spatial_ref"}
        assert t.variables["spatial_ref"].dims == ()
        assert t.coords["init_time"][0] == np.datetime64(firsts[ds.name], "ns")
        # the template reaches the current cycle, so today's update has somewhere to land
        assert t.coords["init_time"][-1] <= now < t.coords["init_time"][-1] + np.timedelta64(6, "h")


def test_grids_match_the_real_grib_messages():
    import gribberish

    def meta(name):
        return gribberish.parse_grib_message_metadata((DATA / "grib" / name).read_bytes(), 0)

    m = meta("hrrr.t06z.wrfsfcf01-TMP.grib2")
    x, y = (np.asarray(a) for a in m.xy())
    t = hrrr().template
    assert tuple(m.grid_shape) == (len(t.coords["y"]), len(t.coords["x"]))
    np.testing.assert_allclose(t.coords["x"], x, atol=1e-3)
    np.testing.assert_allclose(t.coords["y"], y, atol=1e-3)
    assert "lon_0=262.5" in m.proj and "lat_1=38.5" in m.proj

    m = meta("gfs.t12z.pgrb2.0p25.f023-PV-TMP-missing.grib2")
    lat, lon = (np.asarray(a) for a in m.latlng())
    t = gfs().template
    np.testing.assert_array_equal(t.coords["latitude"], lat)
    np.testing.assert_array_equal(t.coords["longitude"], lon)


def test_hourly_hrrr_cycles_publish_18_hours_off_the_long_cycles(tmp_path):
    ds = small(hrrr, tmp_path, init_freq_hours=1)
    coords = ds.region(INIT64, INIT64 + np.timedelta64(2, "h")).files()
    by_init: dict = {}
    for c in coords:
        by_init.setdefault(c.init_time, []).append(c.lead_time / np.timedelta64(1, "h"))
    assert by_init[INIT64] == list(range(49))
    assert by_init[INIT64 + np.timedelta64(1, "h")] == list(range(19))
    with pytest.raises(ValueError, match="every 6 or 1 h, not every 3 h"):
        small(hrrr, tmp_path, init_freq_hours=3)
    with pytest.raises(ValueError, match="not a 6-hourly cycle"):
        gfs(first_init=datetime(2025, 8, 1, 3))
    with pytest.raises(ValueError, match="unknown file types"):
        small(gfs, tmp_path, source_file_types=("pgrb2", "wrfsfc"))


# ----------------------------------------------------------------------------- sources, URLs


def test_default_source_is_the_public_bucket_and_urls_are_real_keys(tmp_path):
    expect = {
        "hrrr": (8, None, "s3://noaa-hrrr-bdp-pds/hrrr.20250801/conus/hrrr.t00z.wrfsfcf08.grib2"),
        "gfs": (7, None, "s3://noaa-gfs-bdp-pds/gfs.20250801/00/atmos/gfs.t00z.pgrb2.0p25.f007"),
        "gefs": (
            9,
            "mean",
            "s3://noaa-gefs-pds/gefs.20250801/00/atmos/pgrb2sp25/geavg.t00z.pgrb2s.0p25.f009",
        ),
    }
    for name, (lead, member, url) in expect.items():
        ds = DATASETS[name](first_init=INIT, append_dim_end=INIT + timedelta(hours=6))
        assert ds.source.store.url == ds.settings.home
        assert ds.source.store.options == {"region": NOAA_REGION, "anonymous": True}
        c = coord_for(ds, lead, member)
        assert c.get_url() == url and c.get_index_url() == url + ".idx"
        cfg = virtual_config(ds)
        assert cfg.prefixes == [ds.settings.home + "/"]  # one container, anonymous, us-east-1
        assert all(c.get_url().startswith(cfg.prefixes[0]) for c in file_tasks(ds))
    e = DATASETS["gefs"](first_init=INIT, append_dim_end=INIT + timedelta(hours=6))
    urls = {c.get_url().rsplit("/", 1)[1][:5] for c in file_tasks(e)}
    assert urls == {"gec00", "geavg"} | {f"gep{i:02d}" for i in range(1, 31)}
    assert len(file_tasks(e)) == 81 * 32


def test_a_mirror_source_gets_its_own_container(tmp_path):
    ds = small(gfs, tmp_path)
    assert virtual_config(ds.dataset).prefixes == [
        "s3://noaa-gfs-bdp-pds/",
        store_of(ds).url.rstrip("/") + "/",
    ]


# ----------------------------------------------------------------------------- refs on real inventories


@pytest.mark.parametrize(("cls", "lead", "member", "name"), REAL, ids=[r[-1] for r in REAL])
def test_file_refs_one_per_field_on_one_chunk_each(tmp_path, cls, lead, member, name):
    ds = small(cls, tmp_path)
    c = coord_for(ds, lead, member)
    key = c.get_url()[len(store_of(ds).url) + 1 :]
    size = lay_out(store_of(ds), key, name)

    (found,) = discover(ds.dataset.source, [c])
    (info,) = [i for i in storage.list_objects(store_of(ds), key.rsplit("/", 1)[0]) if i.key == key]
    assert found == (c, size, info.last_modified)  # size and mtime from the listing, index required
    refs = file_refs(ds.dataset.source, c, size)
    # completeness expects exactly the cells the file's refs fill
    assert sorted((v, sorted(loc.items())) for v, loc in expected_of(ds, c)) == sorted(
        (r.variable, sorted(r.loc.items())) for r in refs
    )

    fields = ds.dataset.source.catalog.fields(c.file_type, timedelta(hours=lead))
    assert sorted((r.variable, r.loc.get("level")) for r in refs) == sorted(
        (f.variable.name, f.level) for f in fields
    )
    assert set(c.data_vars) == {r.variable for r in refs}
    records = {r.offset: r for r in parse_index((DATA / "idx" / name).read_text())}
    geom = ds.template.geometry()
    keys = set()
    for r in refs:
        assert r.location == c.get_url() and r.offset in records
        assert r.offset + r.length <= size
        ck = chunk_key(geom, r.variable, r.loc)
        assert ck is not None and ck.key not in keys
        keys.add(ck.key)
        t = ds.template
        dims = t.variables[r.variable].dims
        for d, i in zip(dims, ck.index, strict=True):
            if d in r.loc:  # pinned dims: the label's position; grid dims: the one chunk
                assert t.coords[d][i] == r.loc[d] or str(t.coords[d][i]) == str(r.loc[d])
            else:
                assert i == 0
    cell = chunk_key(geom, *probe(ds.dataset, c))
    assert cell is not None and cell.key in keys


def test_stale_index_discards_the_whole_file(tmp_path):
    ds = small(hrrr, tmp_path)
    c = coord_for(ds, 8, None)
    key = c.get_url()[len(store_of(ds).url) + 1 :]
    size = lay_out(store_of(ds), key, "hrrr.t00z.wrfsfcf08.grib2.idx")
    with open(store_of(ds).local_path / key, "r+b") as f:  # re-uploaded: offsets moved
        f.truncate(size - LAST_MESSAGE)
        f.truncate(size)
    ensure_repo(ds)
    result = run(ds.region(INIT64, INIT64 + np.timedelta64(1, "ns")))
    assert result.ingested == [] and result.commits == []
    (skip,) = result.skipped
    assert skip.url == c.get_url() and "Stale" in skip.reason


# ----------------------------------------------------------------------------- repos


@pytest.mark.parametrize("cls", [hrrr, gfs, gefs], ids=["hrrr", "gfs", "gefs"])
def test_empty_repo_opens_with_the_right_coordinates(tmp_path, cls):
    ds = small(cls, tmp_path)
    ensure_repo(ds)
    session = R.readonly(ds.repo.open(fresh=True))
    x = xr.open_zarr(session.store, consolidated=False)
    t = ds.template
    assert x.sizes["init_time"] == 0  # never padded toward the template's span
    for dim, values in t.coords.items():
        if dim != "init_time":
            np.testing.assert_array_equal(x[dim].values, values)
    assert x["lead_time"].dtype == np.dtype("timedelta64[ns]")
    assert set(x.data_vars) == set(t.variables)
    assert x["spatial_ref"].values == 0 and x["spatial_ref"].dtype == np.int32  # CF grid mapping
    crs = t.variables["spatial_ref"].attrs
    assert x["spatial_ref"].attrs["grid_mapping_name"] == crs["grid_mapping_name"]
    root = zarr.open_group(session.store, mode="r")
    for name in [n for n, v in t.variables.items() if v.dims]:  # spatial_ref is stored plainly
        (codec,) = [c for c in root[name].metadata.codecs if c.to_dict()["name"] == "gribberish"]
        assert codec.to_dict()["configuration"]["var"] == name


@pytest.mark.parametrize(("cls", "files"), [
    (hrrr, [(0, None, "hrrr.t00z.wrfsfcf00.grib2.idx"), (8, None, "hrrr.t00z.wrfsfcf08.grib2.idx")]),
    (gefs, [(9, "mean", "geavg.t00z.pgrb2s.0p25.f009.idx"), (15, 1, "gep01.t00z.pgrb2s.0p25.f015.idx")]),
])  # fmt: skip
def test_run_commits_real_inventories_and_the_filter_sees_them(tmp_path, cls, files):
    ds = small(cls, tmp_path)
    placed = []
    for lead, member, name in files:
        c = coord_for(ds, lead, member)
        lay_out(store_of(ds), c.get_url()[len(store_of(ds).url) + 1 :], name)
        placed.append(c)
    ensure_repo(ds)
    s = R.writable(ds.repo.open(fresh=True))  # a grid-mapping value written on main ...
    zarr.open_array(s.store, path="spatial_ref", mode="r+")[...] = 7
    R.commit(s, "spatial_ref := 7")
    region = ds.region(INIT64, INIT64 + np.timedelta64(1, "ns"))
    result = run(region)
    assert sorted(result.ingested) == sorted(c.key for c in placed)
    assert len(result.commits) == 1 and not result.skipped
    assert len(result.pending) == len(region.files()) - len(placed)

    session = R.readonly(ds.repo.open(fresh=True))
    assert committed_extent(session, ds.template) == 1
    remaining = filter_already_present(region, region.files(), session)
    assert {c.key for c in placed}.isdisjoint(c.key for c in remaining)
    assert len(remaining) == len(result.pending)
    geom = ds.template.geometry(1)
    keys = [
        chunk_key(geom, r.variable, r.loc).key
        for c in placed
        for r in file_refs(ds.dataset.source, c, size_of(ds, c))
    ]
    assert all(R.exists_many(session, keys))
    x = xr.open_zarr(session.store, consolidated=False)
    assert x.sizes["init_time"] == 1 and x["init_time"].values[0] == INIT64
    assert x["spatial_ref"].values == 7  # ... that appends never touch
    assert run(region.region(INIT64, INIT64 + np.timedelta64(1, "ns"))).commits == []


def test_gfs_levels_over_two_file_types_are_expected_once_each(tmp_path):
    """GFS pgrb2 + pgrb2b: each isobaric level is expected from the one file that carries it,
    so validation counts every (variable, level) once; ingesting only pgrb2 names exactly the
    pgrb2b levels as the gap."""

    ds = small(gfs, tmp_path, source_file_types=("pgrb2", "pgrb2b"))
    lead = np.timedelta64(7, "h").astype("timedelta64[ns]")
    files = [c for c in ds.files() if c.init_time == INIT64 and c.lead_time == lead]
    assert sorted(c.file_type for c in files) == ["pgrb2", "pgrb2b"]
    cells = {c.file_type: expected_of(ds, c) for c in files}
    flat = [(v, loc.get("level")) for cs in cells.values() for v, loc in cs]
    assert len(flat) == len(set(flat))  # nothing expected twice
    t = ds.template
    temp = sorted(lv for v, lv in flat if v == "temperature")
    np.testing.assert_array_equal(temp, t.coords["level"])  # every level, from one file each
    src = ds.dataset.source.catalog
    for ft, cs in cells.items():
        assert sorted((v, loc.get("level")) for v, loc in cs) == sorted(
            (f.variable.name, f.level) for f in src.fields(ft, timedelta(hours=7))
        )
    pgrb2b_levels = {loc["level"] for v, loc in cells["pgrb2b"] if v == "temperature"}
    assert pgrb2b_levels and not pgrb2b_levels & {loc.get("level") for _, loc in cells["pgrb2"]}

    pgrb2 = next(c for c in files if c.file_type == "pgrb2")
    lay_out(
        store_of(ds),
        pgrb2.get_url()[len(store_of(ds).url) + 1 :],
        "gfs.t00z.pgrb2.0p25.f007.idx",
    )
    ensure_repo(ds)
    assert run(ds.region(INIT64, INIT64 + np.timedelta64(1, "ns"))).ingested == [pgrb2.key]
    comp = completeness(ds, start=INIT64, end=INIT64 + np.timedelta64(1, "ns"))
    at7 = [
        cell
        for by_file in comp.missing.values()
        for cells_ in by_file.values()
        for cell in cells_
        if dict(cell.loc)["lead_time"] == lead
    ]
    pgrb2b = next(c for c in files if c.file_type == "pgrb2b")
    assert pgrb2b.get_url() in comp.missing_files and pgrb2.get_url() not in comp.missing_files
    assert {(c.variable, dict(c.loc).get("level")) for c in at7} == {
        (v, loc.get("level")) for v, loc in cells["pgrb2b"]
    }
    present7 = [c for c in comp.present if dict(c.loc)["lead_time"] == lead]
    assert len(present7) == len(cells["pgrb2"])


def test_gefs_half_degree_files_get_the_half_degree_template(tmp_path):
    """GEFS pgrb2a/pgrb2b are 0.5° files: their own 361 x 720 template (90 to -90, 0 to 359.5),
    leads to 840 h on the 00 UTC cycle only; the real inventories ingest into it."""
    ds = small(gefs, tmp_path, source_file_types=("pgrb2a", "pgrb2b"))
    t = ds.template
    assert (t.coords["latitude"].size, t.coords["longitude"].size) == (361, 720)
    assert t.coords["latitude"][[0, -1]].tolist() == [90.0, -90.0]
    assert t.coords["longitude"][[0, -1]].tolist() == [0.0, 359.5]
    assert t.chunks("temperature")[-2:] == (361, 720)
    long = np.timedelta64(432, "h").astype("timedelta64[ns]")
    files = ds.files()
    with_432 = {str(c.init_time)[11:13] for c in files if c.lead_time == long}
    assert with_432 == {"00"}  # the 35-day run is the 00 UTC cycle's
    placed = []
    for lead, ft, name in ((432, "pgrb2a", "gec00.t00z.pgrb2a.0p50.f432.idx"),
                           (3, "pgrb2b", "gec00.t00z.pgrb2b.0p50.f003.idx")):  # fmt: skip
        lead64 = np.timedelta64(lead, "h").astype("timedelta64[ns]")
        (c,) = [
            c for c in files
            if c.init_time == INIT64 and c.lead_time == lead64 and c.member == 0
            and c.file_type == ft
        ]  # fmt: skip
        lay_out(store_of(ds), c.get_url()[len(store_of(ds).url) + 1 :], name)
        placed.append(c)
    ensure_repo(ds)
    result = run(ds.region(INIT64, INIT64 + np.timedelta64(1, "ns")))
    assert sorted(result.ingested) == sorted(c.key for c in placed) and not result.skipped
    x = xr.open_zarr(R.readonly(ds.repo.open(fresh=True)).store, consolidated=False)
    assert (x.sizes["latitude"], x.sizes["longitude"]) == (361, 720)
    comp = completeness(ds, start=INIT64, end=INIT64 + np.timedelta64(1, "ns"))
    assert not set(comp.missing_files) & {c.get_url() for c in placed}  # both wholly present
    with pytest.raises(ValueError, match=r"mix the 0\.5° grid \(pgrb2a\) with the 0\.25° one"):
        gefs(source_file_types=("pgrb2s", "pgrb2a"))
