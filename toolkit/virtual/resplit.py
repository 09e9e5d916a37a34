"""Re-splitting a repo's manifests: advice from what main holds, and the rewrite.

A split chosen at creation is not frozen: `apply` records a new one in the repo's config (later
commits follow it) and rewrites main's manifests under it in one commit, holding the repo's
update lease so no fire commits meanwhile.
"""

from __future__ import annotations

from typing import Any

from toolkit import icechunk as R
from toolkit.virtual.lease import Lease
from toolkit.virtual.split_sizing import Advice, advise
from toolkit.virtual.update import EXPIRY_ORDER, LEASE_KEY

__all__ = ["advise_repo", "append_dim_of", "apply_split"]


def append_dim_of(ref: R.RepoRef) -> tuple[str, int]:
    """The append dim (the leading dim of the gridded variables) and its extent on main."""
    import xarray as xr

    ds = xr.open_zarr(R.readonly(ref.open(fresh=True), "main").store, consolidated=False)
    grids = [v for v in ds.data_vars.values() if v.ndim >= 3]
    if not grids:
        raise ValueError(f"{ref.url}: main holds no gridded variable to split manifests of")
    dim = str(grids[0].dims[0])
    return dim, int(ds.sizes[dim])


def advise_repo(ref: R.RepoRef) -> tuple[str, list[Advice]]:
    """Per gridded array: its manifests now and the split that meets the reader budgets."""
    dim, positions = append_dim_of(ref)
    report = R.manifest_report(ref.open(fresh=True))
    out = [
        advise(name, int(m["manifests"]), int(m["refs"]), int(m["bytes"]), positions)
        for name, m in sorted(report.per_array.items())
        if m["refs"] and name != dim
    ]
    return dim, out


def apply_split(ref: R.RepoRef, size: int, *, lease_wait: float = 0.0) -> dict[str, Any]:
    """Split every array's manifests every `size` positions of the append dim, from now on and
    for main's existing refs (one commit). Returns main's manifests before and after."""
    if size < 1:
        raise ValueError(f"--split {size}: must be >= 1 positions per manifest")
    dim, _ = append_dim_of(ref)
    before = R.manifest_report(ref.open(fresh=True))
    lease = Lease(ref.store, LEASE_KEY, EXPIRY_ORDER, role="resplit").acquire(wait=lease_wait)
    try:
        with lease.heartbeat():
            lease.check()
            snap = R.resplit(ref.store, dim, size, f"split manifests every {size} {dim}")
    finally:
        lease.release()
    after = R.manifest_report(ref.open(fresh=True))
    return {"snapshot": snap, "append_dim": dim, "split": size,
            "before": before.as_dict(), "after": after.as_dict()}  # fmt: skip
