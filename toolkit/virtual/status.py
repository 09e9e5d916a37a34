"""A repo's operational state for machines: what a monitor polls, what an alert reads.

Each fire records its summary in one object of the repo's store (written by the lease holder,
like the skip counts), and the CLI adds the fire's validation result to it; `status` joins that
with what the repo itself says: the newest position on main, backfills in flight (each with
how its finalize will go beside main's updates: lands, catches up, or refuses) and the
manifests' bytes per ref. Everything is plain JSON.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

import numpy as np

from toolkit import icechunk as R
from toolkit import storage
from toolkit.virtual import skips
from toolkit.virtual.inflight import InFlight, in_flight
from toolkit.virtual.landing import refusal
from toolkit.virtual.lease import json_kind

__all__ = [
    "FIRE_KEY",
    "decode_fire",
    "fire_summary",
    "last_fire",
    "record_fire",
    "record_validation",
    "status",
]

FIRE_KEY = "toolkit-update.last-fire.json"
FIRE_FIX = "the next `toolkit virtual update` fire rewrites it (or delete it: it is only a record)"
FIRE_FIELDS = {"fire": str, "validation": dict, "commits": list, "skipped": list, "given_up": list}


def _iso(t: _dt.datetime | float | None) -> str | None:
    if t is None:
        return None
    if not isinstance(t, _dt.datetime):
        t = _dt.datetime.fromtimestamp(float(t), _dt.UTC)
    return t.astimezone(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def fire_summary(
    fire: str, started: float, finished: float, result: Any, repo: Any
) -> dict[str, Any]:
    """One fire as JSON: its counts and names, and the lag from the newest file's publication
    (the source's own last-modified) to its commit on main."""
    lag = None
    commits = {c.id: c for c in R.history(repo, "main", limit=max(1, len(result.commits)) + 5)}
    newest = commits.get(result.commits[-1]) if result.commits else None
    if newest is not None and newest.metadata.get("published"):
        published = _dt.datetime.fromisoformat(str(newest.metadata["published"]))
        lag = round((newest.written_at - published).total_seconds(), 3)
    return {
        "fire": fire,
        "started": _iso(started),
        "finished": _iso(finished),
        "seconds": round(finished - started, 3),
        "committed": len(result.ingested),
        "commits": list(result.commits),
        "pending": len(result.pending),
        "skipped": [{"url": s.url, "reason": s.reason} for s in result.skipped],
        "given_up": [s.url for s in result.given_up],
        "lag_seconds": lag,
        "took_over": result.took_over,
        "validation": None,
    }


def record_fire(store: storage.Store, summary: dict[str, Any]) -> None:
    storage.put(store, FIRE_KEY, json.dumps(summary, indent=1).encode())


def last_fire(store: storage.Store) -> dict[str, Any] | None:
    """The last fire's record (None: no fire yet); one that is not is a `CorruptObject`."""
    try:
        data = storage.get(store, FIRE_KEY).data
    except storage.NotFound:
        return None
    return decode_fire(store, data)


def decode_fire(store: storage.Store, data: bytes) -> dict[str, Any]:
    """A fire record's body as a fire (or `validate`) wrote it: a JSON object whose fields the
    readers use have their types; anything else names the object and how it is rewritten."""
    doc = storage.record_json(store, FIRE_KEY, data, "a fire record", FIRE_FIX)
    bad = (
        [f"a JSON {json_kind(doc)}"]
        if not isinstance(doc, dict)
        else [f"a JSON object without {k!r}" for k in ("fire", "validation") if k not in doc]
        + [
            f"{k!r} is a JSON {json_kind(doc[k])}"
            for k, want in FIRE_FIELDS.items()
            if doc.get(k) is not None and not isinstance(doc[k], want)
        ]
    )
    if bad:
        raise storage.CorruptObject(store.url, FIRE_KEY, "a fire record", bad[0], FIRE_FIX)
    return doc


def record_validation(store: storage.Store, passed: bool, failures: list[str]) -> dict[str, Any]:
    """The last fire's record with its validation result; returns it."""
    summary = last_fire(store) or {"fire": None}
    summary["validation"] = {"passed": passed, "failures": failures}
    record_fire(store, summary)
    return summary


def _landing(repo: Any, f: InFlight, dim: str | None, labels: Any) -> dict[str, Any]:
    """How finalize will go for backfill `f`: `finalize` is "lands" (main has not moved),
    "catches up" (main moved outside its region: its commits are replayed on the branch) or
    "refuses: <why>"; `blocked` is the last."""
    if not f.main_moved:
        return {"finalize": "lands", "blocked": False}
    why = refusal(repo, f, dim, labels) if dim is not None else "main's append dim is unknown"
    return {"finalize": f"refuses: {why}" if why else "catches up", "blocked": bool(why)}


def status(ref: R.RepoRef, append_dim: str | None = None) -> dict[str, Any]:
    """The repo's state: newest position on main, the last fire, skips, backfills in flight
    (and whether each lands beside main's updates), manifests."""
    import xarray as xr

    repo = ref.open(fresh=True)
    ds = xr.open_zarr(R.readonly(repo, "main").store, consolidated=False)
    latest: dict[str, Any] = {}
    grids = [v for v in ds.data_vars.values() if v.ndim >= 3]
    dim = append_dim or (grids[0].dims[0] if grids else None)
    if dim is not None and dim in ds.coords and ds.sizes.get(dim):
        latest[dim] = str(ds[dim].values[-1])[:19]
    now = _dt.datetime.now(_dt.UTC)
    strikes = skips.load(ref.store)
    report = R.manifest_report(repo)
    labels = ds[dim].values if dim is not None and dim in ds.coords else np.array([])
    return {
        "repo": ref.url,
        "main": R.snapshot_of(repo, "main"),
        "latest": latest,
        "last_fire": last_fire(ref.store),
        "skipped": len(strikes),
        "in_flight": [
            {
                "branch": f.branch,
                "region": f.region,
                "age_seconds": None
                if f.started is None
                else int((now - f.started).total_seconds()),
                "files": f.files,
                "main_moved": f.main_moved,
                "running_in": f.holder or None,
                **_landing(repo, f, dim, labels),
            }
            for f in in_flight(repo, ref.store)
        ],
        "manifests": {
            "count": report.manifests,
            "refs": report.refs,
            "bytes": report.bytes,
            "bytes_per_ref": round(report.bytes_per_ref, 2),
        },
    }
