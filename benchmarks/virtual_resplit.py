"""Re-splitting a repo's manifests at 10^6 refs: the rewrite's cost, and a reader's first
access before and after (side by side, one run).

One gridded array of `POSITIONS` x `CELLS` virtual refs (1 x 1 chunks), committed under one
manifest (the split a repo created without one has). A reader's first access is a fresh repo
handle resolving one chunk of the newest position: it fetches every manifest that chunk's
position falls in, which is what a split changes. `toolkit virtual split advise`'s proposal is
then applied (`split apply`: config recorded, main rewritten in one commit) and the same access
timed again.

    python -m benchmarks virtual_resplit
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import zarr

from benchmarks._report import write
from toolkit import icechunk as R
from toolkit import storage
from toolkit.virtual.split_sizing import advise

POSITIONS, CELLS = 1000, 1000  # 10^6 refs
ROUNDS = 5


def build(root: Path) -> R.RepoRef:
    source = root / "grib"
    source.mkdir()
    (source / "f.grib2").write_bytes(b"\0" * 64)
    store = storage.open_store(str(root / "repo"))
    R.create_repo(store, R.VirtualConfig([R.local_container(str(source))]))
    ref = R.RepoRef(store)
    session = R.writable(ref.open(fresh=True))
    zarr.create_array(session.store, name="v", shape=(POSITIONS, CELLS), chunks=(1, 1),
                      dtype="f4", dimension_names=("time", "x"))  # fmt: skip
    url = storage.object_url(storage.open_store(str(source)), "f.grib2")
    refs = [((t, x), url, 0, 8, None) for t in range(POSITIONS) for x in range(CELLS)]
    R.set_virtual_refs(session, "v", refs)
    R.commit(session, "10^6 refs")
    return ref


def first_access(ref: R.RepoRef) -> float:
    """Median over fresh handles: open, then resolve one chunk of the newest position."""
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        session = R.readonly(ref.open(fresh=True))
        assert R.chunks_present(session, [("v", (POSITIONS - 1, CELLS // 2))]) == [True]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        ref = build(Path(tmp))
        built = time.perf_counter() - t0
        report = R.manifest_report(ref.open(fresh=True)).per_array["v"]
        proposal = advise("v", int(report["manifests"]), int(report["refs"]),
                          int(report["bytes"]), POSITIONS)  # fmt: skip
        before = first_access(ref)
        t0 = time.perf_counter()
        R.resplit(ref.store, "time", proposal.split, "re-split")
        rewrite = time.perf_counter() - t0
        after_report = R.manifest_report(ref.open(fresh=True)).per_array["v"]
        after = first_access(ref)
    rows = [
        {"repo": "one manifest (as created)", "manifests": report["manifests"],
         "bytes_per_manifest": report["bytes"] / report["manifests"],
         "first_access_s": round(before, 4), "ratio": 1.0},
        {"repo": f"split every {proposal.split} positions (advised)",
         "manifests": after_report["manifests"],
         "bytes_per_manifest": after_report["bytes"] / after_report["manifests"],
         "first_access_s": round(after, 4), "ratio": round(after / before, 3)},
    ]  # fmt: skip
    write(
        "virtual_resplit",
        rows,
        f"{POSITIONS * CELLS:,} virtual refs ({POSITIONS} positions x {CELLS}); first access = "
        f"a fresh handle resolving one chunk of the newest position, median of {ROUNDS}; "
        f"ratio over the unsplit repo. Building the repo took {built:.1f} s; the rewrite "
        f"(config + one commit of every manifest) took {rewrite:.2f} s.",
    )


if __name__ == "__main__":
    sys.exit(main())
