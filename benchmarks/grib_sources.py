"""Finding a file's messages without NOAA's sidecar (issue 54), side by side with its peers.

* ECMWF `.index` parse, microseconds per file: toolkit's `scan_ecmwf_index` (validated, spelled
  as wgrib2 lists the messages: what a backfill runs) against gribberish's own reading of the
  same sidecar (`parse_grib_index`, which auto-detects ECMWF's format).
* A file's refs through the write loop's own functions (`source_io.fetch` + `refs_from`), with
  the sidecar (`index="ecmwf"`: its GET and a 16-byte ranged GET) against `index="scan"` (the
  messages' sections read from the file, one 4 KiB ranged read per message): requests and
  seconds per file on local disk and on SeaweedFS (tests/seaweed.py) behind tests/faults.py's
  proxy at 20 and 50 ms a request.

The file is ECMWF's layout as ecCodes writes it (tests/virtual/ecmwf_files.py): 83 messages
(2t, 10u, 10v, msl, tp, and t, u, v, q, r, gh on 13 pressure levels) on a 100 x 100 grid,
CCSDS-packed, ~16 KiB a message (above one read's 4 KiB, so a scan pays one request per
message, as on ECMWF's 0.25° files of ~650 KiB a message).

Run: .venv/bin/python -m benchmarks grib_sources  ->  benchmarks/results/grib_sources.{json,md}
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import gribberish
import numpy as np

from benchmarks._report import commit, write
from benchmarks.virtual_throughput import Proxy
from toolkit import storage
from toolkit.virtual.grib.ecmwf_index import scan_ecmwf_index
from toolkit.virtual.gribsource import GribCoord
from toolkit.virtual.source_io import fetch, refs_from

INIT = datetime(2025, 3, 1)
STEPS = (0, 3, 6, 9, 12)
LEVELS = (1000, 925, 850, 700, 600, 500, 400, 300, 250, 200, 150, 100, 50)
KEY = "{init:%Y%m%d}/{init:%H}z/ifs/0p25/oper/{init:%Y%m%d%H}0000-{lead}h-oper-fc.grib2"
LATENCIES_MS = (20, 50)


def best_us(fn: Any, repeat: int = 7, number: int = 200) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best * 1e6


def dataset(store: storage.Store, index: str) -> Any:
    from toolkit.virtual.define import grib_forecast
    from toolkit.virtual.sources.ecmwf import ecmwf_variable

    return grib_forecast(
        "bench-ecmwf",
        source=store,
        key=KEY,
        index=index,
        variables=[
            *(ecmwf_variable(f"v_{s}", s) for s in ("2t", "10u", "10v", "msl", "tp")),
            *(ecmwf_variable(f"v_{s}", s, levels=LEVELS) for s in ("t", "u", "v", "q", "r", "gh")),
        ],
        grid={
            "latitude": [90 - 1.8 * i for i in range(100)],
            "longitude": [-180 + 3.6 * i for i in range(100)],
        },
        first_init=INIT,
        end=datetime(2025, 3, 2),
        every_hours=12,
        leads_hours=STEPS,
    )


def refs_per_file(store: storage.Store, index: str, sizes: dict[int, int]) -> tuple[float, int]:
    """Seconds per file (median over the steps) and refs, through the write loop's functions."""
    ds = dataset(store, index)
    times, refs = [], 0
    for step in STEPS:
        c = GribCoord(
            np.datetime64(INIT, "ns"), np.timedelta64(step, "h").astype("timedelta64[ns]"),
            None, "grib2", storage.object_url(store, KEY.format(init=INIT, lead=step)),
        )  # fmt: skip
        t0 = time.perf_counter()
        got = refs_from(ds.source, c, fetch(ds.source, c, sizes[step]))
        times.append(time.perf_counter() - t0)
        refs += len(got)
    return statistics.median(times), refs // len(STEPS)


def main(argv: list[str] | None = None) -> None:
    from tests.conftest import make_bucket
    from tests.seaweed import Weed
    from tests.virtual import ecmwf_files as E

    del argv
    began, at = time.perf_counter(), commit()
    work = Path(tempfile.mkdtemp(prefix="gribsrc-"))
    grid = E.Grid(100, 100)
    fields = [E.Field(s) for s in ("2t", "10u", "10v", "msl", "tp")]
    fields += [E.Field(s, lv) for s in E.PRESSURE for lv in LEVELS]
    src = work / "src"
    sizes = {}
    for step in STEPS:
        path = E.write(src, KEY.format(init=INIT, lead=step), fields, INIT, step, grid)
        sizes[step] = path.stat().st_size
    index_text = path.with_suffix(".index").read_text()
    messages = len(index_text.splitlines())

    ours = best_us(lambda: scan_ecmwf_index(index_text))
    theirs = best_us(lambda: gribberish.parse_grib_index(index_text))
    assert (
        len(scan_ecmwf_index(index_text))
        == len(gribberish.parse_grib_index(index_text))
        == messages
    )
    parse = [
        {"what": "toolkit scan_ecmwf_index (validated, wgrib2 spelling)", "us_per_file": round(ours, 1),
         "ratio_to_gribberish": round(ours / theirs, 2)},
        {"what": "gribberish parse_grib_index", "us_per_file": round(theirs, 1), "ratio_to_gribberish": 1.0},
    ]  # fmt: skip

    rows: list[dict[str, Any]] = []
    local = storage.open_store(str(src))
    for index in ("ecmwf", "scan"):
        seconds, refs = refs_per_file(local, index, sizes)
        rows.append({"store": "local", "index": index, "requests_per_file": None,
                     "ms_per_file": round(seconds * 1000, 2), "refs_per_file": refs})  # fmt: skip
    weed = Weed(work / "weed")
    weed.start()
    proxy = Proxy(weed.endpoint)
    try:
        bucket = make_bucket(weed.endpoint, "src")
        direct = {"region": "us-east-1", "allow_http": True, "path_style": True}
        up = storage.open_store(f"s3://{bucket}/ecmwf", endpoint=weed.endpoint, **direct)
        for f in src.rglob("*"):
            if f.is_file():
                storage.put(up, str(f.relative_to(src)), f.read_bytes())
        remote = storage.open_store(f"s3://{bucket}/ecmwf", endpoint=proxy.url, **direct)
        for ms in LATENCIES_MS:
            proxy.ask("latency", ms / 1000)
            for index in ("ecmwf", "scan"):
                proxy.ask("reset")
                seconds, refs = refs_per_file(remote, index, sizes)
                seen = proxy.ask("reset")
                rows.append({"store": f"seaweedfs +{ms} ms", "index": index,
                             "requests_per_file": round(sum(seen.values()) / len(STEPS), 1),
                             "ms_per_file": round(seconds * 1000, 1), "refs_per_file": refs})  # fmt: skip
            proxy.ask("latency", 0.0)
    finally:
        proxy.close()
        weed.stop()
        shutil.rmtree(work, ignore_errors=True)
    for r in rows:
        peer = next(p for p in rows if p["store"] == r["store"] and p["index"] == "ecmwf")
        r["ratio_to_sidecar"] = round(r["ms_per_file"] / peer["ms_per_file"], 2)
        r["commit"] = at
    took = time.perf_counter() - began
    notes = (
        f"One file of {messages} messages (ECMWF's layout, written by ecCodes; {sizes[STEPS[-1]] // 1024} KiB). "
        "Refs per file through source_io.fetch + refs_from, the median over 5 files; requests "
        "counted by the proxy. The run took "
        f"{took / 60:.1f} min on {sys.platform}."
    )
    write(
        "grib_sources",
        rows,
        notes,
        {"ECMWF .index parse": ("Best of 7 x 200 parses of the file's sidecar.", parse)},
    )


if __name__ == "__main__":
    main()
