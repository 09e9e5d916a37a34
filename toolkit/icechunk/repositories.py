"""Opening and creating repos: a location is refused unless it holds a repo (or nothing,
to create one), handles are shared within a process by the repo's identity, and the
containers come from the persisted config."""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import icechunk as ic

from toolkit import storage
from toolkit.icechunk.containers import Container, reader_credentials
from toolkit.icechunk.locations import _runtime, _storage
from toolkit.icechunk.repo_errors import (
    _DENIED,
    NotARepo,
    _refuse_unreachable,
    _unreachable,
    corrupt,
    translate,
)
from toolkit.icechunk.splitting import VirtualConfig

_OPEN: dict[tuple[str, str, str], Any] = {}  # (url, credentials, config digest) -> handle
_OPEN_LOCK = threading.Lock()


@dataclass(frozen=True)
class RepoRef:
    """A picklable pointer to a repo: where it lives. Opening derives everything else."""

    store: storage.Store
    credentials: Literal["anonymous", "env"] = field(default="anonymous")

    @property
    def url(self) -> str:
        return self.store.url

    def open(self, fresh: bool = False) -> ic.Repository:
        return open_repo(self.store, credentials=self.credentials, fresh=fresh)


def create_repo(store: storage.Store, config: VirtualConfig) -> ic.Repository:
    """Create a repo whose config persists `config`'s containers and manifest settings."""
    st = _storage(store)
    credentials = reader_credentials(
        config.prefixes, containers={c.url_prefix: c for c in config.containers}
    )
    try:
        repo = ic.Repository.create(
            st, config=config.repository_config(), authorize_virtual_chunk_access=credentials
        )
        repo.save_config()
    except ic.IcechunkError as err:
        _refuse_unreachable(store, err)
        if _DENIED.search(str(err)):
            raise storage.AccessDenied(
                store.url, None, "these credentials may not write an Icechunk repo here"
            ) from None
        named = translate(err, store.url, writing=True)
        if named is None:
            raise
        raise named from None
    # the runtime settings (no preload, the caller's retry budget) from here on, not persisted
    return ic.Repository.open(
        st, config=_runtime(store), authorize_virtual_chunk_access=credentials
    )


def open_repo(
    store: storage.Store,
    credentials: Literal["anonymous", "env"] = "anonymous",
    fresh: bool = False,
) -> ic.Repository:
    """Open with nothing but the location: containers come from the persisted config.

    Handles are shared within a process (each keeps Icechunk's manifest cache, costly to
    rebuild per tick or task), keyed by the repo's identity as read now, not by its URL alone:
    the location, the credentials and the persisted config (one small GET). Snapshots and
    manifests are content-addressed by random ids, so the config is all a handle could hold
    stale: a repo recreated or repointed at the same URL is never served through a handle
    opened for the one before.
    """
    st = _storage(store)
    try:
        cfg = _fetch_config(store, st)  # one read: the hot path (every tick) pays no more
    except ic.IcechunkError as err:
        _refuse_unreachable(store, err)
        if _exists(store, st):
            named = translate(err, store.url)
            if named is None:
                raise
            raise named from None
        raise NotARepo(
            f"no Icechunk repo at {store.url}: "
            + (
                "the path does not exist"
                if store.is_local and not store.local_path.exists()
                else "nothing there is an Icechunk repository"
            )
            + "; check the path (a backfill or a first update fire creates the repo)"
        ) from None
    if cfg is None:
        raise NotARepo(f"no Icechunk repo config at {store.url}; was it created by toolkit?")
    key = (store.url, credentials, hashlib.sha256(repr(cfg).encode()).hexdigest())
    if not fresh:
        with _OPEN_LOCK:
            if key in _OPEN:
                return _OPEN[key]
    containers = dict(cfg.virtual_chunk_containers or {})
    repo = ic.Repository.open(
        st,
        config=_runtime(store),
        authorize_virtual_chunk_access=reader_credentials(containers, credentials, containers),
    )
    with _OPEN_LOCK:
        for stale in [k for k in _OPEN if k[:2] == key[:2] and k != key]:
            del _OPEN[stale]  # opened for an earlier repo at this URL: never served again
        _OPEN[key] = repo
    return repo


def _fetch_config(store: storage.Store, st: ic.Storage) -> ic.RepositoryConfig | None:
    """The persisted config, retried until the store's budget is spent: Icechunk's own read
    takes no retry settings and gives up after its default schedule (about 12 s)."""
    deadline = time.monotonic() + storage.retry_seconds(store.options)
    while True:
        try:
            return ic.Repository.fetch_config(st)
        except ic.IcechunkError as err:
            if not _unreachable(store, err) or time.monotonic() >= deadline:
                raise
            time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))


def _exists(store: storage.Store, st: ic.Storage | None = None) -> bool:
    """Whether an Icechunk repo is at `store`; one written in a format newer than this
    icechunk reads is a usage error naming both versions and the upgrade, a repo file that
    does not parse is a `CorruptObject` naming it."""
    try:
        return ic.Repository.exists(st or _storage(store))
    except ic.IcechunkError as err:
        named = corrupt(err, store.url)
        if named is not None:
            raise named from None
        if not isinstance(err, ic.FormatError):
            _refuse_unreachable(store, err)
            named = translate(err, store.url)
            if named is None:
                raise
            raise named from None
        said = str(err).split("\n", 1)[0].removeprefix("FormatError: ").split(". Please")[0]
        raise NotARepo(
            f"{store.url}: {said}: upgrade icechunk (this toolkit has {ic.__version__}) on this "
            "machine and on every worker, or open it with the toolkit that wrote it"
        ) from None


def open_or_create(store: storage.Store, config: VirtualConfig) -> ic.Repository:
    """Open the repo at `store`, or create it where nothing is yet; a location that holds
    other objects is refused (a repo is never created on top of someone's data)."""
    if _exists(store):
        return open_repo(store)
    refuse_foreign(store)
    return create_repo(store, config)


def refuse_foreign(store: storage.Store) -> None:
    """`NotARepo` when `store` holds objects but no Icechunk repo. Jobs ask before they start,
    so the refusal is one line about the location, not a failed task."""
    if store.is_local and not store.local_path.exists():
        return
    if _exists(store):
        return
    other = next(storage.iter_keys(store), None)  # one listing page at most
    if other is not None:
        raise NotARepo(
            f"{store.url} holds objects (e.g. {other!r}) but no Icechunk repo: refusing to "
            "create one on top of them; pass an empty or new location"
        )


def repoint_container(store: storage.Store, container: Container) -> None:
    """Replace the container registered at `container.url_prefix` (e.g. with a mirror's store).

    Refs are stored relative to the prefix, so this repoints every ref without a manifest rewrite.
    """
    repo = open_repo(store, fresh=True)
    cfg = repo.config
    if container.url_prefix not in (cfg.virtual_chunk_containers or {}):
        raise KeyError(f"{store.url} has no container at {container.url_prefix!r}")
    cfg.set_virtual_chunk_container(container)
    ic.Repository.open(
        _storage(store),
        config=cfg,
        authorize_virtual_chunk_access=reader_credentials([container.url_prefix]),
    ).save_config()  # a new config object: handles opened before it are never served again


def container_prefixes(repo: ic.Repository) -> list[str]:
    return sorted(repo.config.virtual_chunk_containers or {})
