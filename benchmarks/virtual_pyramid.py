"""Map levels of a virtual GRIB dataset, inside its Icechunk repo: how fast, how fresh.

1. Latency. The real operational path -- `toolkit.virtual.update.update()` with the pyramid's
   in-fire build as its `after_commit` (what `toolkit virtual update --pyramid V` runs) --
   while a thread publishes the next cycle's simulator files one at a time, 1 s apart. Per file:
   published (its `.idx`, written last, in place) -> its refs committed on main, and -> its map
   levels committed on main (readable from one snapshot with level 0).

2. Build throughput from GRIB-backed level 0. NOAA's GFS-Wave Atlantic file (19 messages,
   331x301, land masked; tests/data/grib) laid out as several cycles and backfilled as refs.
   toolkit: `toolkit.pyramid.build(repo)`, level 0 decoded by gribberish's codec, exact
   count-weighted cascade, levels committed in the repo. Peer, same run, same bytes: ecCodes
   decodes every message of every file into memory, then xarray's `coarsen(...).mean()` makes
   each level from the previous one (the usual notebook way; not exact where windows are
   partly masked). Both in one process (one worker); MB = decoded level 0 (float32).

Run: .venv/bin/python -m benchmarks virtual_pyramid  -> benchmarks/results/virtual_pyramid.{json,md}
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._report import write
from toolkit import icechunk as R
from toolkit import storage
from toolkit.transaction import AUDIT_EVENT
from toolkit.virtual.write import Job

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "grib"
WAVE = "gfswave.t18z.atlocn.0p16.f001.grib2"
WAVE_KEY = (
    "gfs.{init:%Y%m%d}/{init:%H}/wave/gridded/gfswave.t{init:%H}z.atlocn.0p16.f{lead:03d}.grib2"
)
WAVE_INIT = datetime(2023, 8, 23, 18)
LEVELS = 3

COMMITTED: list[tuple[float, tuple[str, ...]]] = []  # (returned at, file keys), from the audit


def on_audit(event: str, args: tuple[Any, ...]) -> None:
    if event == AUDIT_EVENT and args[0] == "committed":
        COMMITTED.append((time.time(), tuple(args[1])))


@dataclass
class Stamped:
    """`after_commit` that stamps when the levels of the newest commit's files landed."""

    inner: Any
    landed: list[tuple[float, tuple[str, ...]]]

    def __call__(self, positions: list[dict[str, Any]]) -> Any:
        keys = COMMITTED[-1][1]
        report = self.inner(positions)
        self.landed.append((time.time(), keys))
        return report


def latency(files_n: int = 6, gap: float = 1.0) -> dict[str, Any]:
    from toolkit.examples.datasets import sim_gfs
    from toolkit.examples.simulate import make_archive
    from toolkit.pyramid import build
    from toolkit.pyramid.repo import FireLevels
    from toolkit.virtual.backfill import backfill
    from toolkit.virtual.update import update

    work = Path(tempfile.mkdtemp(prefix="vpyr-"))
    try:
        src = storage.open_store(str(work / "src"))
        inits = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(3)]
        leads = list(range(files_n))
        archive = make_archive(src, kind="gfs", inits=inits, leads=leads, publish=False)
        files = archive.files()
        old = [f for f in files if f.init < inits[-1]]
        archive.publish(old)
        job = Job(
            sim_gfs(src, lead_hours=tuple(leads)), R.RepoRef(storage.open_store(str(work / "repo")))
        )
        job = replace(job, tick_interval=0.1)
        backfill(job, start=np.datetime64(inits[0], "ns"), executor="sync")
        variables = ["temperature_2m", "pressure_reduced_to_mean_sea_level"]
        build(job.repo.url, variables, levels=2, executor="sync")
        live = [f for f in files if f.init == inits[-1]]
        published: dict[str, float] = {}

        def publish() -> None:
            for f in live:
                time.sleep(gap)
                archive.publish(f)
                published[archive.data_url(f)] = time.time()

        landed: list[tuple[float, tuple[str, ...]]] = []
        COMMITTED.clear()
        pub = threading.Thread(target=publish)
        pub.start()
        update(
            job,
            fire_time=np.datetime64(inits[-1], "ns"),
            deadline_seconds=len(live) * gap + 120.0,
            after_commit=Stamped(FireLevels(job.repo, tuple(variables)), landed),
        )
        pub.join()
        refs = [at - published[k] for at, keys in COMMITTED for k in keys if k in published]
        maps = [at - published[k] for at, keys in landed for k in keys if k in published]
        assert len(maps) == len(live), (len(maps), len(live))
        return {
            "files": len(live),
            "commits": len(landed),
            "refs_p50_s": round(float(np.percentile(refs, 50)), 3),
            "refs_p95_s": round(float(np.percentile(refs, 95)), 3),
            "levels_p50_s": round(float(np.percentile(maps, 50)), 3),
            "levels_p95_s": round(float(np.percentile(maps, 95)), 3),
            "levels_max_s": round(max(maps), 3),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass(frozen=True)
class Real:
    """A real NOAA GRIB2 file of tests/data, laid out as `cycles` cycles and defined as a user
    defines a dataset (`toolkit.virtual.define`)."""

    name: str
    file: str
    index: str  # its wgrib2 inventory (`d=` re-dated per cycle)
    key: str
    first: datetime
    every_hours: int
    grid: dict[str, np.ndarray]
    variables: tuple[tuple[str, str, str, tuple[float, ...]], ...]  # name, element, level, levels
    cycles: int

    @property
    def fields(self) -> int:
        return self.cycles * sum(max(1, len(v[3])) for v in self.variables)

    @property
    def field_bytes(self) -> int:
        return int(np.prod([len(c) for c in self.grid.values()])) * 4


WAVE_SURFACE = (
    "WIND",
    "WDIR",
    "UGRD",
    "VGRD",
    "HTSGW",
    "PERPW",
    "DIRPW",
    "WVHGT",
    "WVPER",
    "WVDIR",
)
CASES = (
    Real(
        "GFS-Wave Atlantic 0.16 deg (331x301, 19 messages, land masked)",
        WAVE,
        (DATA / f"{WAVE}.idx").read_text(),
        WAVE_KEY,
        WAVE_INIT,
        6,
        {"latitude": np.linspace(55.0, 0.0, 331), "longitude": np.linspace(260.0, 310.0, 301)},
        (
            *((e.lower(), e, "surface", ()) for e in WAVE_SURFACE),
            *(
                (e.lower(), e, "{level:g} in sequence", (1.0, 2.0, 3.0))
                for e in ("SWELL", "SWPER", "SWDIR")
            ),
        ),
        8,
    ),
    Real(
        "HRRR CONUS 3 km surface temperature (1059x1799, complex packing)",
        "hrrr.t06z.wrfsfcf01-TMP.grib2",
        "1:0:d=2023072206:TMP:surface:1 hour fcst:\n",
        "hrrr.{init:%Y%m%d}/conus/hrrr.t{init:%H}z.wrfsfcf{lead:02d}.grib2",
        datetime(2023, 7, 22, 6),
        1,
        {"y": np.arange(1059) * 3000.0, "x": np.arange(1799) * 3000.0},
        (("temperature_surface", "TMP", "surface", ()),),
        12,
    ),
)


def as_cycle(case: Real, init: datetime) -> tuple[bytes, str]:
    """The file and its index re-dated to cycle `init`: each message's reference time
    (section 1, octets 13-17) and each index line's `d=` patched; the values are untouched."""
    body = bytearray((DATA / case.file).read_bytes())
    stamp = f"d={init:%Y%m%d%H}"
    out = []
    for line in case.index.splitlines():
        n, offset, _date, *rest = line.split(":")
        at = int(offset) + 16 + 12  # past section 0 (16 bytes), octet 13 of section 1
        assert body[int(offset) : int(offset) + 4] == b"GRIB" and body[int(offset) + 20] == 1
        body[at : at + 2] = init.year.to_bytes(2, "big")
        body[at + 2 : at + 5] = bytes((init.month, init.day, init.hour))
        out.append(":".join([n, offset, stamp, *rest]))
    return bytes(body), "\n".join(out) + "\n"


def real_job(root: Path, case: Real) -> tuple[Job, list[Path]]:
    """`case` laid out as its cycles (the same values each), defined, backfilled."""
    from toolkit.virtual.backfill import backfill
    from toolkit.virtual.define import grib_forecast, variable

    paths = []
    for i in range(case.cycles):
        init = case.first + timedelta(hours=case.every_hours * i)
        key = case.key.format(init=init, lead=1)
        (root / "src" / key).parent.mkdir(parents=True, exist_ok=True)
        body, index = as_cycle(case, init)
        (root / "src" / key).write_bytes(body)
        (root / "src" / f"{key}.idx").write_text(index)
        paths.append(root / "src" / key)
    src = storage.open_store(str(root / "src"))
    ds = grib_forecast(
        case.file.split(".")[0],
        source=src,
        key=case.key,
        variables=[
            variable(n, e, level, levels=list(levels)) if levels else variable(n, e, level)
            for n, e, level, levels in case.variables
        ],
        grid=case.grid,
        first_init=case.first,
        end=case.first + timedelta(hours=case.every_hours * case.cycles),
        every_hours=case.every_hours,
        leads_hours=[1],
    )
    job = Job(ds, R.RepoRef(storage.open_store(str(root / "repo"))))
    report = backfill(job, start=np.datetime64(case.first, "ns"), workers=1, executor="sync")
    assert report.stage("commit").gate_have == case.cycles, "every cycle must be ingested"
    return job, paths


def eccodes_then_xarray(paths: list[Path], dims: tuple[str, str]) -> float:
    """Decode every message with ecCodes into memory, then coarsen level by level."""
    import eccodes
    import xarray as xr

    t0 = time.perf_counter()
    fields: dict[str, list[np.ndarray]] = {}
    for path in paths:
        with open(path, "rb") as f:
            n = 0
            while (h := eccodes.codes_grib_new_from_file(f)) is not None:
                try:
                    values = eccodes.codes_get_values(h)
                    if eccodes.codes_get(h, "bitmapPresent"):
                        values[values == eccodes.codes_get(h, "missingValue")] = np.nan
                    nj, ni = eccodes.codes_get(h, "Nj"), eccodes.codes_get(h, "Ni")
                    fields.setdefault(f"m{n}", []).append(values.reshape(nj, ni).astype(np.float32))
                finally:
                    eccodes.codes_release(h)
                n += 1
    ds = xr.Dataset({k: (("init_time", *dims), np.stack(v)) for k, v in fields.items()})
    level = ds
    for _ in range(LEVELS):
        level = level.coarsen({dims[0]: 2, dims[1]: 2}, boundary="pad").mean().compute()
    return time.perf_counter() - t0


def toolkit_build(job: Job) -> float:
    from toolkit.pyramid import build

    t0 = time.perf_counter()
    build(job.repo.url, levels=LEVELS, executor="sync")
    return time.perf_counter() - t0


def drop_levels(job: Job) -> None:
    """main back to the backfill's snapshot (the levels' commits undone) for the next round."""
    repo = job.repo.open(fresh=True)
    history = R.history(repo)
    base = next(c.id for c in history if "pyramid" not in c.metadata)
    R.reset_branch(repo, "main", base, expected=R.snapshot_of(repo, "main"))


def throughput(case: Real, rounds: int = 3) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="vpyr-real-"))
    try:
        job, paths = real_job(work, case)
        mb = case.fields * case.field_bytes / 1e6
        dims = tuple(case.grid)
        ours, peer = [], []
        for _ in range(rounds):  # interleaved, same bytes (warm page cache for both)
            peer.append(eccodes_then_xarray(paths, dims))  # type: ignore[arg-type]
            ours.append(toolkit_build(job))
            drop_levels(job)
        t, p = float(np.median(ours)), float(np.median(peer))
        return {
            "source": case.name,
            "fields": case.fields,
            "level0_mb": round(mb, 1),
            "levels": LEVELS,
            "toolkit_s": round(t, 3),
            "eccodes_xarray_s": round(p, 3),
            "toolkit_mb_s_per_worker": round(mb / t, 1),
            "eccodes_xarray_mb_s": round(mb / p, 1),
            "ratio": round(t / p, 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    _ = sys.argv[1:] if argv is None else argv
    sys.addaudithook(on_audit)
    lat = latency()
    print(lat, flush=True)
    thr = []
    for case in CASES:
        thr.append(throughput(case))
        print(thr[-1], flush=True)
    write(
        "virtual_pyramid",
        [lat],
        "Latency: simulator GFS-shaped dataset (32x48 grid), two variables with 2 map levels in "
        "the repo; one update fire while 6 files of the next cycle publish 1 s apart; per file: "
        "published (.idx in place) -> refs committed on main / -> its levels committed on main. "
        "The update polls every 0.1 s. Local disk, 2 cores.",
        more={
            "Build throughput from GRIB-backed level 0 (one process each, median of 3, interleaved)": (
                "Real NOAA GRIB2 files (tests/data), each laid out as several cycles (the same "
                "values, re-dated) and backfilled as refs; 3 levels. ratio = toolkit seconds / "
                "(ecCodes decode + xarray coarsen) seconds; toolkit also writes and commits "
                "every level in the repo, exact; the peer writes nothing.",
                thr,
            )
        },
    )


if __name__ == "__main__":
    main()
