"""Where a repo lives: the Icechunk `Storage` for a toolkit `Store`, the runtime settings
every handle opens with, and the repos this process opened (so an error that names no
repo is traced to one, reached with the options the job used)."""

from __future__ import annotations

import threading

import icechunk as ic

from toolkit import storage


def _storage(store: storage.Store) -> ic.Storage:
    _opened(store)
    if store.is_local:
        return ic.local_filesystem_storage(str(store.local_path))
    if store.scheme == "s3":
        bucket, prefix = storage.split_bucket(store.url)
        o = store.options
        return ic.s3_storage(
            bucket=bucket,
            prefix=prefix or None,
            region=o.get("region"),
            endpoint_url=o.get("endpoint"),
            allow_http=bool(o.get("allow_http")),
            force_path_style=bool(o.get("path_style")),
            from_env=not o.get("anonymous"),
            anonymous=bool(o.get("anonymous")) or None,
        )
    if store.scheme in ("gs", "gcs"):
        bucket, prefix = storage.split_bucket(store.url)
        return ic.gcs_storage(bucket=bucket, prefix=prefix or None, from_env=True)
    raise ValueError(
        f"cannot hold an Icechunk repo at {store.url}: use a path, file:// s3:// or gs://"
    )


def _runtime(store: storage.Store) -> ic.RepositoryConfig:
    """The runtime settings every handle opens with (merged over the persisted config, never
    saved: they are this caller's, not the repo's).

    - No manifest preload. Icechunk fetches, at every session's creation, the manifests of
      arrays with coordinate-like names; a repo split along init_time holds one such manifest
      per split for `init_time` and `valid_time`, so each session of a 10^8-ref archive waited
      on thousands of GETs before its first read (an update tick took 18 s, not 0.2).
      Coordinates are read on demand like every other array.
    - Icechunk's retries bounded by the store's time budget (`storage.retry_seconds`), as
      obstore's are: many tries, short backoff, the whole operation cut at the budget.
    """
    cfg = ic.RepositoryConfig(
        manifest=ic.ManifestConfig(preload=ic.ManifestPreloadConfig(max_total_refs=0))
    )
    if store.is_local:
        return cfg
    budget_ms = int(storage.retry_seconds(store.options) * 1000)
    cfg.storage = ic.StorageSettings(
        retries=ic.StorageRetriesSettings(
            max_tries=max(10, budget_ms // 200), initial_backoff_ms=100, max_backoff_ms=2000
        ),
        timeouts=ic.StorageTimeoutSettings(operation_timeout_ms=budget_ms),
    )
    return cfg


_SEEN: dict[str, storage.Store] = {}  # the repos this process opened, newest last
_SEEN_LOCK = threading.Lock()


def _opened(store: storage.Store) -> None:
    with _SEEN_LOCK:
        _SEEN.pop(store.url, None)
        _SEEN[store.url] = store  # with its options: an error's probes reach it as the job did
        while len(_SEEN) > 32:
            del _SEEN[next(iter(_SEEN))]


def _seen(url: str) -> storage.Store:
    with _SEEN_LOCK:
        return _SEEN.get(url) or storage.Store(url)
