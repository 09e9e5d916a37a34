"""Icechunk's errors as `toolkit.storage` says every storage error: the repo and the
object named, the cause in words, the fix; a server that does not answer, a denied
credential and an object that does not parse each recognised once, here."""

from __future__ import annotations

import contextlib
import re

import icechunk as ic

from toolkit import storage
from toolkit.icechunk.locations import _SEEN, _SEEN_LOCK, _runtime, _seen, _storage

ConflictError = ic.ConflictError


class OutsideContainers(ValueError):
    """A ref points outside every virtual chunk container: it could never be read."""


class NotARepo(ValueError):
    """No Icechunk repository at the location given (bad usage: the path is wrong)."""


class BranchMoved(RuntimeError):
    """A guarded reset found the branch somewhere other than the snapshot recorded at setup."""


_UNREACHABLE = ("dispatch failure", "connection refused", "connect", "timed out", "timeout")


def _unreachable(store: storage.Store, err: Exception) -> bool:
    return not store.is_local and any(h in str(err).lower() for h in _UNREACHABLE)


_DENIED = re.compile(r"\(AccessDenied\)|code: \"AccessDenied\"")  # the S3 error code


def _refuse_unreachable(store: storage.Store, err: Exception) -> None:
    """An Icechunk error that says the server did not answer becomes `storage.Unreachable`
    naming the repo and the endpoint (instead of Icechunk's multi-line context)."""
    if _unreachable(store, err):
        endpoint = store.options.get("endpoint") or store.url
        budget = storage.retry_seconds(store.options)
        raise storage.Unreachable(store.url, None, storage.unanswered(endpoint, budget)) from None


# what Icechunk says of a file it cannot parse (a failed request says something else)
_UNPARSED = re.compile(
    r"invalid magic|header size|src size is incorrect|decompress|deserializ|unknown frame"
    r"|flatbuffer|invalid file|unexpected end|corrupt",
    re.I,
)


def corrupt(
    err: BaseException, url: str, snapshot: str | None = None
) -> storage.CorruptObject | None:
    """The repo's object Icechunk could not parse, named (its repo file, a snapshot, a
    manifest: as Icechunk's context says, else `snapshot`, the one the reader was on); None
    for any other error (a newer format, a failed request)."""
    if not isinstance(err, ic.IcechunkError):
        return None
    text = str(err)
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    if "format version" in first or not (
        isinstance(err, ic.FormatError) or _UNPARSED.search(first)
    ):
        return None
    key, what = None, "an Icechunk repository object"
    if m := re.search(r"snapshot_id=(\w+)", text):
        key, what = f"snapshots/{m.group(1)}", "an Icechunk snapshot"
    elif m := re.search(r"manifest_id=(\w+)", text):
        key, what = f"manifests/{m.group(1)}", "an Icechunk manifest"
    elif "fetch_repo_info" in text:
        key, what = "repo", "an Icechunk repo file"
    elif snapshot is not None and 'key="' in text and "zarr.json" in text:
        key, what = f"snapshots/{snapshot}", "an Icechunk snapshot"  # its metadata is there
    return storage.CorruptObject(url, key, what, f"{type(err).__name__}: {first}")


# Icechunk errors about the repo's objects; the rest (conflicts, refs, nodes, rebases) are
# states their callers handle by type
_STORAGE_SAYS = re.compile(r"object not found|\(os error \d+\)|object store error", re.I)
_OBJECT = re.compile(r'with path="([^"]+)"')  # the key Icechunk's context names
_PREFIXES = ("StorageError: ", "session error: ", "object store error ", "Generic ")


def translate(
    err: BaseException,
    url: str | None = None,
    key: str | None = None,
    snapshot: str | None = None,
    writing: bool | None = None,
) -> storage.StorageError | None:
    """An Icechunk error as `toolkit.storage` says every storage error (its `explain` asks
    here): the repo (`url`, else the one this process opened whose object is missing), the
    object, the cause in words and the fix; Icechunk's context frames dropped. None for an
    error that is not about storage (a conflict, a missing branch: their callers decide)."""
    if not isinstance(err, ic.IcechunkError):
        return None
    if url is not None and (named := corrupt(err, url, snapshot)) is not None:
        return named
    text = str(err)
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    if not (isinstance(err, ic.StorageError) or _STORAGE_SAYS.search(first)):
        return None
    obj = m.group(1) if (m := _OBJECT.search(text)) else None
    repo = url or _repo_of(obj)
    if repo is not None and (local := storage.os_error(err, repo, obj, writing)) is not None:
        return local
    if repo is None:
        return storage.os_error(err, None, None, writing)  # the system's own path, if it said
    if _unreachable(where := _seen(repo), err):
        endpoint = where.options.get("endpoint") or repo
        budget = storage.retry_seconds(where.options)
        return storage.Unreachable(repo, None, storage.unanswered(endpoint, budget))
    if _DENIED.search(text):
        return storage.AccessDenied(repo, obj or key, "these credentials may not use this repo")
    said = first
    while said.startswith(_PREFIXES):
        said = said.split(" ", 1)[1] if said.startswith("Generic ") else said.split(": ", 1)[1]
    if "object not found" in first.lower():
        gone = obj if obj and obj.startswith(("snapshots/", "manifests/")) else None
        gone = gone or _missing_snapshot(repo) or obj or key
        return storage.MissingObject(repo, gone, "object not found")
    return storage.StorageError(repo, obj or key, said[:300])


def _repo_of(obj: str | None) -> str | None:
    """Which repo opened here an error is about, when it did not say: the only one, else the
    newest local one that lacks `obj`, else the newest."""
    with _SEEN_LOCK:
        seen = list(_SEEN.values())[::-1]
    if len(seen) <= 1 or obj is None:
        return seen[0].url if seen else None
    for store in seen:
        with contextlib.suppress(Exception):
            if store.is_local and not storage.exists(store, obj):
                return store.url
    return seen[0].url


def _missing_snapshot(url: str) -> str | None:
    """`snapshots/<id>` of the first branch head whose snapshot object is gone (None: every
    one is there): what a read that failed with no object named was looking for."""
    try:
        store = _seen(url)
        repo = ic.Repository.open(_storage(store), config=_runtime(store))
        heads = sorted({repo.lookup_branch(b) for b in repo.list_branches()})
        return next(
            (f"snapshots/{h}" for h in heads if not storage.exists(store, f"snapshots/{h}")),
            None,
        )
    except Exception:
        return None


storage.EXPLAINERS.append(translate)
