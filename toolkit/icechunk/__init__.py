"""The Icechunk edge: the only package that imports icechunk, below the jobs beside
`toolkit.storage`, so that any job (virtual datasets today, pyramids of them next) stands on it
without importing another job.

Datasets describe their storage with the real Icechunk objects this package's factories build
(virtual chunk containers, manifest splitting), so nothing lossy stands between a dataset and
Icechunk. Container definitions persist in the repo config: a reader needs only the repo's
location and an anonymous credentials map, which `open_repo` derives from that config.
Credentials are never persisted.

Everything else in toolkit talks to Icechunk through these functions and duck-typed session
objects (`session.store` is a zarr store).

One module per concern, each importing only those listed before it: `locations` (the Icechunk
storage for a Store, the repos opened here), `repo_errors` (Icechunk's errors as
`toolkit.storage` says them), `containers`, `splitting` (manifest splitting, `VirtualConfig`),
`repositories` (open, create, refuse), `sessions` (views, refs, probes, commits, branches) and
`maintenance` (manifest report, resplit, expiry, a corrupt object named). Callers use this
package's names (`from toolkit import icechunk as R`), not its modules'.
"""

from __future__ import annotations

import os

import icechunk as ic

from toolkit.icechunk.containers import (
    Container,
    container_for,
    gcs_container,
    http_container,
    local_container,
    reader_credentials,
    s3_container,
)
from toolkit.icechunk.maintenance import (
    Expired,
    ManifestReport,
    corruption_named,
    expire,
    manifest_report,
    manifest_split,
    resplit,
)
from toolkit.icechunk.repo_errors import (
    BranchMoved,
    ConflictError,
    NotARepo,
    OutsideContainers,
    corrupt,
    translate,
)
from toolkit.icechunk.repositories import (
    RepoRef,
    container_prefixes,
    create_repo,
    open_or_create,
    open_repo,
    refuse_foreign,
    repoint_container,
)
from toolkit.icechunk.sessions import (
    LIST_RATIO,
    BranchView,
    Changes,
    CommitInfo,
    Session,
    SessionView,
    branches,
    changes,
    chunk_bytes,
    chunk_coordinates,
    chunk_refs,
    chunks_present,
    commit,
    commit_counted,
    commit_time,
    create_branch,
    delete_branch,
    exists_many,
    finalize_branch,
    fork,
    has_changes,
    history,
    is_repo,
    merge,
    readonly,
    reset_branch,
    set_virtual_refs,
    snapshot_of,
    stale_ref,
    virtual_locations,
    writable,
    written_chunks,
)
from toolkit.icechunk.splitting import (
    VirtualConfig,
    manifest_append_dim_split,
)

__all__ = [
    "LIST_RATIO",
    "BranchMoved",
    "BranchView",
    "Changes",
    "CommitInfo",
    "ConflictError",
    "Container",
    "Expired",
    "ManifestReport",
    "NotARepo",
    "OutsideContainers",
    "RepoRef",
    "Session",
    "SessionView",
    "VirtualConfig",
    "branches",
    "changes",
    "chunk_bytes",
    "chunk_coordinates",
    "chunk_refs",
    "chunks_present",
    "commit",
    "commit_counted",
    "commit_time",
    "container_for",
    "container_prefixes",
    "corrupt",
    "corruption_named",
    "create_branch",
    "create_repo",
    "delete_branch",
    "exists_many",
    "expire",
    "finalize_branch",
    "fork",
    "gcs_container",
    "has_changes",
    "history",
    "http_container",
    "is_repo",
    "local_container",
    "manifest_append_dim_split",
    "manifest_report",
    "manifest_split",
    "merge",
    "open_or_create",
    "open_repo",
    "reader_credentials",
    "readonly",
    "refuse_foreign",
    "repoint_container",
    "reset_branch",
    "resplit",
    "s3_container",
    "set_virtual_refs",
    "snapshot_of",
    "stale_ref",
    "translate",
    "virtual_locations",
    "writable",
    "written_chunks",
]

# Icechunk warns on every repo open (local-filesystem storage, conditional-PUT readback); keep
# the CLI readable unless the user asked for icechunk's logs with ICECHUNK_LOG.
if "ICECHUNK_LOG" not in os.environ:
    ic.set_logs_filter("error")
