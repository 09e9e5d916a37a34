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
from toolkit.virtual.write import AUDIT_EVENT, Job

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
    from toolkit.pyramid import build
    from toolkit.pyramid.repo import FireLevels
    from toolkit.virtual.backfill import backfill
    from toolkit.virtual.datasets.sim import sim_gfs
    from toolkit.virtual.simulate import make_archive
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


def as_cycle(init: datetime) -> tuple[bytes, str]:
    """The GFS-Wave file and its index re-dated to cycle `init`: each message's reference time
    (section 1, octets 13-17) and each index line's `d=` patched; the values are untouched."""
    body = bytearray((DATA / WAVE).read_bytes())
    lines = (DATA / f"{WAVE}.idx").read_text().splitlines()
    stamp = f"d={init:%Y%m%d%H}"
    out = []
    for line in lines:
        n, offset, _date, *rest = line.split(":")
        at = int(offset) + 16 + 12  # past section 0 (16 bytes), octet 13 of section 1
        assert body[int(offset) : int(offset) + 4] == b"GRIB" and body[int(offset) + 20] == 1
        body[at : at + 2] = init.year.to_bytes(2, "big")
        body[at + 2 : at + 5] = bytes((init.month, init.day, init.hour))
        out.append(":".join([n, offset, stamp, *rest]))
    return bytes(body), "\n".join(out) + "\n"


def wave_job(root: Path, cycles: int) -> tuple[Job, list[Path]]:
    """The GFS-Wave file as `cycles` 6-hourly cycles (the same bytes each), as a user defines
    it (`toolkit.virtual.define`), backfilled."""
    from toolkit.virtual.backfill import backfill
    from toolkit.virtual.define import grib_forecast, variable

    surface = {"wind_speed": "WIND", "wind_direction": "WDIR", "wind_u": "UGRD",
               "wind_v": "VGRD", "significant_height_combined": "HTSGW",
               "primary_wave_period": "PERPW", "primary_wave_direction": "DIRPW",
               "wind_wave_height": "WVHGT", "wind_wave_period": "WVPER",
               "wind_wave_direction": "WVDIR"}  # fmt: skip
    swell = {"swell_height": "SWELL", "swell_period": "SWPER", "swell_direction": "SWDIR"}
    lat = np.linspace(55.0, 0.0, 331)
    lon = np.linspace(260.0, 310.0, 301)
    paths = []
    for i in range(cycles):
        init = WAVE_INIT + timedelta(hours=6 * i)
        key = WAVE_KEY.format(init=init, lead=1)
        (root / "src" / key).parent.mkdir(parents=True, exist_ok=True)
        body, index = as_cycle(init)
        (root / "src" / key).write_bytes(body)
        (root / "src" / f"{key}.idx").write_text(index)
        paths.append(root / "src" / key)
    src = storage.open_store(str(root / "src"))
    ds = grib_forecast(
        "gfswave-atlocn",
        source=src,
        key=WAVE_KEY,
        variables=[
            *(variable(n, e, "surface") for n, e in surface.items()),
            *(variable(n, e, "{level:g} in sequence", levels=[1, 2, 3]) for n, e in swell.items()),
        ],
        grid={"latitude": lat, "longitude": lon},
        first_init=WAVE_INIT,
        end=WAVE_INIT + timedelta(hours=6 * cycles),
        every_hours=6,
        leads_hours=[1],
    )
    job = Job(ds, R.RepoRef(storage.open_store(str(root / "repo"))))
    backfill(job, start=np.datetime64(WAVE_INIT, "ns"), workers=1, executor="sync")
    return job, paths


def eccodes_then_xarray(paths: list[Path]) -> float:
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
    ds = xr.Dataset(
        {k: (("init_time", "latitude", "longitude"), np.stack(v)) for k, v in fields.items()}
    )
    level = ds
    for _ in range(LEVELS):
        level = level.coarsen(latitude=2, longitude=2, boundary="pad").mean().compute()
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


def throughput(cycles: int = 8, rounds: int = 3) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="vpyr-wave-"))
    try:
        job, paths = wave_job(work, cycles)
        mb = 19 * cycles * 331 * 301 * 4 / 1e6
        ours, peer = [], []
        for _ in range(rounds):  # interleaved, same bytes (warm page cache for both)
            peer.append(eccodes_then_xarray(paths))
            ours.append(toolkit_build(job))
            drop_levels(job)
        t, p = float(np.median(ours)), float(np.median(peer))
        return {
            "level0_mb": round(mb, 1),
            "fields": 19 * cycles,
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
    thr = throughput()
    print(thr, flush=True)
    write(
        "virtual_pyramid",
        [lat],
        "Latency: simulator GFS-shaped dataset (32x48 grid), two variables with 2 map levels in "
        "the repo; one update fire while 6 files of the next cycle publish 1 s apart; per file: "
        "published (.idx in place) -> refs committed on main / -> its levels committed on main. "
        "The update polls every 0.1 s. Local disk, 2 cores.",
        more={
            "Build throughput from GRIB-backed level 0 (one process each, median of 3, interleaved)": (
                "GFS-Wave Atlantic (331x301, 19 messages, land masked) as 8 cycles of refs. "
                "ratio = toolkit seconds / (ecCodes decode + xarray coarsen) seconds; toolkit "
                "also writes and commits every level in the repo, exact; the peer writes nothing.",
                [thr],
            )
        },
    )


if __name__ == "__main__":
    main()
