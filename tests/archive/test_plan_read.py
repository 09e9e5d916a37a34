"""`toolkit archive plan-read` / `toolkit.archive.plan_read` against a brute force.

The oracle is xarray itself: the store is opened through a zarr store that records every key
it reads, the selection is loaded for real, and the chunk keys read must be the plan's keys.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from typer.testing import CliRunner
from zarr.storage import LocalStore, WrapperStore

import toolkit.archive
from tests.archive import zarrgen
from toolkit import storage
from toolkit.archive.recall import needs_recall
from toolkit.archive.recall_plan import plan
from toolkit.cli import app

META = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}
SCOPE = "exp 1/ré.zarr"  # a space and a non-ASCII letter, in the scope and the root
POLICY = ["--t-max", "3000", "--t-hot", "200", "--t-min", "1500"]


class Recorder(WrapperStore):
    """A zarr store that notes every key it returned bytes for."""

    def __init__(self, store: Any, seen: set[str]) -> None:
        super().__init__(store)
        self.seen = seen

    def _with_store(self, store: Any) -> Recorder:
        return type(self)(store, self.seen)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        out = await self._store.get(key, prototype, byte_range)
        if out is not None:
            self.seen.add(key)
        return out

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> Any:
        key_ranges = list(key_ranges)
        out = await self._store.get_partial_values(prototype, key_ranges)
        self.seen.update(k for (k, _), v in zip(key_ranges, out, strict=True) if v is not None)
        return out


def read_keys(
    root: Path, scope: str, variables: list[str] | None = None, isel=None, sel=None
) -> set[str]:
    """The chunk keys xarray reads loading `ds[variables].sel(sel).isel(isel)`."""
    path = root / scope
    isel = dict(isel or {})
    if sel:  # labels -> positions by xarray's own .sel on an indexed open
        indexed = xr.open_zarr(path, chunks=None, consolidated=False)
        for dim, label in sel.items():
            at = xr.DataArray(np.arange(indexed.sizes[dim]), dims=dim, coords={dim: indexed[dim]})
            picked = at.sel({dim: label}).values
            isel[dim] = int(picked) if picked.ndim == 0 else slice(picked.min(), picked.max() + 1)
            if picked.ndim and picked.size == 0:
                isel[dim] = slice(0, 0)
    seen: set[str] = set()
    store = Recorder(LocalStore(path, read_only=True), seen)
    ds = xr.open_zarr(store, chunks=None, consolidated=False, create_default_indexes=False)
    seen.clear()  # opening reads metadata (and the ends of time coordinates)
    (ds if variables is None else ds[variables]).isel(isel).load()
    return {f"{scope}/{k}" for k in seen if posixpath.basename(k) not in META}


def the_plan(root: Path, manifests: Path, scope: str, **kw: Any) -> Any:
    return plan(storage.open_store(str(root)), storage.open_store(str(manifests)), scope, **kw)


def cf_dataset(n_time: int = 12) -> xr.Dataset:
    rng = np.random.default_rng(1)
    tas = rng.random((n_time, 4, 6)).astype("f4") * 30
    tas[:3, :2] = 200.0  # encodes to 0, zarr's fill_value (v3): whole chunks never written
    return xr.Dataset(
        {
            "tas": (("time", "lat", "lon"), tas, {"units": "K"}),
            "pr": (("time", "lat"), rng.random((n_time, 4))),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=n_time),
            "lat": np.linspace(60, 30, 4),  # descending, as many grids store it
            "lon": np.arange(6.0) * 10,
            "height": 2.0,
        },
    )


def write(ds: xr.Dataset, path: Path, fmt: int, sharded: bool = False) -> None:
    tas: dict[str, Any] = {
        "dtype": "int16",
        "scale_factor": 0.01,
        "add_offset": 200.0,
        "_FillValue": -9999,
    }
    tas["chunks"] = (1, 2, 2) if sharded else (2, 2, 4)
    if sharded:
        tas["shards"] = (4, 2, 4)
    enc = {
        "tas": tas,
        "pr": {"chunks": (5, 2)},
        "time": {"units": "days since 2019-12-01", "dtype": "int32", "chunks": (5,)},
        "lat": {"chunks": (3,)},
    }
    ds.to_zarr(
        path, mode="w", zarr_format=fmt, consolidated=False, encoding=enc, write_empty_chunks=False
    )


SELECTIONS: list[dict[str, Any]] = [
    {},
    {"variables": ["tas"], "isel": {"time": (2, 7)}},
    {"variables": ["tas"], "isel": {"time": 5, "lon": (-2, None)}},
    {"variables": ["pr"], "isel": {"lat": (1, 3)}},
    {"variables": ["tas", "pr"], "sel": {"time": ("2020-01-03", "2020-01-06")}},
    {"variables": ["tas"], "sel": {"time": "2020-01-10", "lat": (50, 35)}},
    {"variables": ["tas"], "sel": {"lon": (15, 40)}, "isel": {"time": (0, 0)}},
]


def _xr_args(s: dict[str, Any]) -> dict[str, Any]:
    isel = {d: slice(*v) if isinstance(v, tuple) else v for d, v in s.get("isel", {}).items()}
    sel = {d: slice(*v) if isinstance(v, tuple) else v for d, v in s.get("sel", {}).items()}
    return {"variables": s.get("variables"), "isel": isel, "sel": sel}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "dätä root"


@pytest.mark.parametrize(("fmt", "sharded"), [(3, False), (3, True), (2, False)])
@pytest.mark.parametrize("sel", SELECTIONS, ids=range(len(SELECTIONS)))
def test_the_plan_reads_what_xarray_reads(root: Path, fmt: int, sharded: bool, sel) -> None:
    write(cf_dataset(), root / SCOPE, fmt, sharded)
    manifests = root.parent / "m"
    res = CliRunner().invoke(
        app, ["archive", "partition", "--data", str(root), "--manifests", str(manifests), *POLICY]
    )
    assert res.exit_code == 0, res.output
    got = the_plan(root, manifests, SCOPE, **sel)
    assert set(got.keys) == read_keys(root, SCOPE, **_xr_args(sel))
    assert len(got.keys) == got.hot_keys + got.unmanaged_keys + sum(b.keys for b in got.blobs)


def test_unwritten_chunks_are_counted_not_planned(root: Path) -> None:
    write(cf_dataset(), root / SCOPE, 3)
    manifests = root.parent / "m"
    CliRunner().invoke(
        app, ["archive", "partition", "--data", str(root), "--manifests", str(manifests)]
    )
    got = the_plan(root, manifests, SCOPE, variables=["tas"], isel={"time": (0, 4)})
    # tas chunks (2, 2, 4): times 0..3 are 2 x 2 x 2 chunks; times 0-2, lats 0-1 are fill
    tas = [k for k in got.keys if "/tas/" in k]
    assert len(tas) == 8 - 2 and got.unwritten_keys == 2
    assert not {f"{SCOPE}/tas/c/0/0/0", f"{SCOPE}/tas/c/0/0/1"} & set(tas)


def _partitioned(tmp_path: Path) -> tuple[Path, Path, dict[str, list[str]]]:
    """cordex_v3 (a bucketed sharded tas, grouped small arrays, hot coordinates), partitioned,
    under a root with a space and a non-ASCII letter."""
    root, manifests = tmp_path / "dätä root", tmp_path / "m"
    keys = zarrgen.cordex_v3(storage.open_store(str(root)), scope="cordex/é a.zarr")
    res = CliRunner().invoke(
        app,
        ["archive", "partition", "--data", str(root), "--manifests", str(manifests),
         "--t-max", "5000", "--t-hot", "100", "--t-min", "3000"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return root, manifests, keys


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["archive", *args])


def test_cli_bucketed_grouped_and_archived(tmp_path: Path) -> None:
    root, manifests, _ = _partitioned(tmp_path)
    scope = "cordex/é a.zarr"
    base = ["--data", str(root), "--manifests", str(manifests)]
    for state in ("writing", "archived"):
        assert invoke("mark", scope, "b_tas_1", state, "--manifests", str(manifests)).exit_code == 0
    res = invoke("plan-read", scope, *base, "--isel", "time=8:12", "--rate", "1MB/s",
                 "--mount", "10", "--json")  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) >= {"blobs", "hot_keys", "unmanaged_keys", "recall_bytes", "recall_s"}
    rows = {b["blob"]: b for b in doc["blobs"]}
    assert set(rows["b_tas_1"]) == {"blob", "tier", "bytes", "keys", "recall_s", "needs_recall"}
    # tas: shards of 2 times; times 8..11 are shards 4 (bucket 0) and 5 (bucket 1), width 5
    assert rows["b_tas_0"] == {"blob": "b_tas_0", "tier": "hot", "bytes": 5000, "keys": 1,
                               "recall_s": 0.0, "needs_recall": False}  # fmt: skip
    assert rows["b_tas_1"]["needs_recall"] and rows["b_tas_1"]["tier"] == "archived"
    assert rows["b_tas_1"]["bytes"] == 5 * 1000  # the whole bucket, not the one shard read
    assert rows["b_tas_1"]["recall_s"] == pytest.approx(10 + 5000 / 1e6)
    assert doc["recall_bytes"] == 5000 and doc["recall_s"] == pytest.approx(10 + 5000 / 1e6)
    # the grouped blob (orog, pr) comes back whole: its bytes agree with `report`
    rep = json.loads(invoke("report", *base, "--json").stdout)["blobs"]
    group = next(b for b in rows if b.startswith("g_orog"))
    assert rows[group]["bytes"] == next(r["bytes"] for r in rep if r["blob"] == group)
    assert rows[group]["keys"] == 3  # pr chunks of times 0-9 and 10-19, and orog (0-d)
    assert doc["hot_keys"] == 2  # time and lat: coordinates stay hot
    assert doc["selection"]["positions"] == {"time": [8, 12]}

    text = invoke("plan-read", scope, *base, "--isel", "time=8:12", "--rate", "1MB/s",
                  "--mount", "10")  # fmt: skip
    assert text.exit_code == 0 and "b_tas_1" in text.stdout
    assert "1 blob(s) to recall, 5000 bytes, estimated 10.0 s; keys hot: 2" in text.stdout

    none = json.loads(invoke("plan-read", scope, *base, "--var", "pr", "--json").stdout)
    assert not any(b["needs_recall"] for b in none["blobs"]) and none["recall_s"] == 0


def test_the_plan_matches_the_written_keys(tmp_path: Path) -> None:
    """Without xarray: the keys zarrgen wrote for the selected shards, exactly."""
    root, manifests, made = _partitioned(tmp_path)
    got = the_plan(root, manifests, "cordex/é a.zarr", variables=["tas"], isel={"time": -3})
    assert [k for k in got.keys if "/tas/" in k] == [made["tas"][-2]]  # 37 // 2: shard 18
    got = the_plan(root, manifests, "cordex/é a.zarr", variables=["sub/ps", "orog"])
    assert set(got.keys) == set(made["ps"]) | set(made["orog"]) | set(made["time"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--var", "nope"], "variable 'nope': no such array"),
        (["--isel", "depth=1"], "no dim 'depth'; they have time, lat, lon"),
        (["--isel", "time"], "want DIM=START:STOP or DIM=INDEX"),
        (["--isel", "time=1:5:2"], "no step"),
        (["--isel", "time=40"], "out of range"),
        (["--sel", "lon=3"], "no coordinate array 'lon'"),
        (["--isel", "time=1", "--sel", "time=2"], "both --isel and --sel"),
        (["--rate", "fast"], "rate 'fast': want bytes per second"),
    ],
)
def test_cli_refusals_are_one_line_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    root, manifests, _ = _partitioned(tmp_path)
    res = invoke("plan-read", "cordex/é a.zarr", "--data", str(root), "--manifests",
                 str(manifests), *args)  # fmt: skip
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in res.output


def test_no_manifest_exits_1(tmp_path: Path) -> None:
    root, _, _ = _partitioned(tmp_path)
    res = invoke("plan-read", "cordex/é a.zarr", "--data", str(root), "--manifests",
                 str(tmp_path / "none"))  # fmt: skip
    assert res.exit_code == 1 and "no manifest for scope" in res.stderr
    assert not (tmp_path / "none").exists()


def test_sel_by_value_names_the_range(root: Path) -> None:
    write(cf_dataset(), root / SCOPE, 3)
    manifests = root.parent / "m"
    invoke("partition", "--data", str(root), "--manifests", str(manifests))
    base = ["--data", str(root), "--manifests", str(manifests)]
    res = invoke("plan-read", SCOPE, *base, "--sel", "time=2021-01-01")
    assert res.exit_code == 2
    assert "no such time; time runs 2020-01-01" in res.stderr and "2020-01-12" in res.stderr
    ok = invoke("plan-read", SCOPE, *base, "--sel", "time=2020-01-03:2020-01-04", "--json")
    assert json.loads(ok.stdout)["selection"]["positions"] == {"time": [2, 4]}


def test_python_entry_takes_a_dataset_or_a_path(root: Path) -> None:
    write(cf_dataset(), root / SCOPE, 3)
    manifests = root.parent / "m"
    invoke("partition", "--data", str(root), "--manifests", str(manifests), *POLICY)
    ds = xr.open_zarr(root / SCOPE, consolidated=False)
    a = toolkit.archive.plan_read(ds[["tas"]], manifests=str(manifests), isel={"time": slice(0, 4)})
    b = toolkit.archive.plan_read(
        SCOPE, data=str(root), manifests=str(manifests), variables="tas", isel={"time": (0, 4)}
    )
    assert a.to_dict() == b.to_dict() and a.keys == b.keys
    assert (
        a.selection["variables"] == ["tas"] and "recall" in str(a) and "<table>" in a._repr_html_()
    )
    cli = invoke("plan-read", SCOPE, "--data", str(root), "--manifests", str(manifests),
                 "--var", "tas", "--isel", "time=0:4", "--json")  # fmt: skip
    assert json.loads(cli.stdout) == a.to_dict()
    with pytest.raises(ValueError, match="pass the store's path"):
        toolkit.archive.plan_read(xr.Dataset(), manifests=str(manifests))


def test_needs_recall_states() -> None:
    assert [needs_recall(s) for s in ("hot", "writing", "recalled", "stale")] == [False] * 4
    assert needs_recall("archived") and needs_recall("recalling") and needs_recall("lost")


def test_import_stays_light() -> None:
    import subprocess
    import sys

    code = "import sys, toolkit.archive; assert 'xarray' not in sys.modules and 'toolkit.archive.recall_plan' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
