"""The Icechunk edge: the only module that imports icechunk, below the jobs beside
`toolkit.storage`, so that any job (virtual datasets today, pyramids of them next) stands on it
without importing another job.

Datasets describe their storage with the real Icechunk objects this module's factories build
(virtual chunk containers, manifest splitting), so nothing lossy stands between a dataset and
Icechunk. Container definitions persist in the repo config: a reader needs only the repo's
location and an anonymous credentials map, which `open_repo` derives from that config.
Credentials are never persisted.

Everything else in toolkit talks to Icechunk through these functions and duck-typed session
objects (`session.store` is a zarr store).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

import icechunk as ic

from toolkit import storage

__all__ = [
    "BranchMoved",
    "BranchView",
    "ConflictError",
    "NotARepo",
    "OutsideContainers",
    "RepoRef",
    "SessionView",
    "VirtualConfig",
    "chunk_coordinates",
    "chunks_present",
    "commit",
    "corrupt",
    "corruption_named",
    "create_branch",
    "delete_branch",
    "exists_many",
    "finalize_branch",
    "fork",
    "gcs_container",
    "history",
    "is_repo",
    "local_container",
    "manifest_append_dim_split",
    "manifest_report",
    "merge",
    "open_repo",
    "readonly",
    "refuse_foreign",
    "reset_branch",
    "s3_container",
    "set_virtual_refs",
    "snapshot_of",
    "translate",
    "virtual_locations",
    "writable",
]

ConflictError = ic.ConflictError
Container = ic.VirtualChunkContainer
Session = ic.Session

# Icechunk warns on every repo open (local-filesystem storage, conditional-PUT readback); keep
# the CLI readable unless the user asked for icechunk's logs with ICECHUNK_LOG.
if "ICECHUNK_LOG" not in os.environ:
    ic.set_logs_filter("error")


class OutsideContainers(ValueError):
    """A ref points outside every virtual chunk container: it could never be read."""


class NotARepo(ValueError):
    """No Icechunk repository at the location given (bad usage: the path is wrong)."""


class BranchMoved(RuntimeError):
    """A guarded reset found the branch somewhere other than the snapshot recorded at setup."""


# ----------------------------------------------------------------------------- containers


def _prefix(url: str) -> str:
    if "://" not in url:
        raise ValueError(f"container prefix {url!r} must be a URL (file://, s3://, gs://)")
    return url if url.endswith("/") else url + "/"


def local_container(path_or_url: str) -> Container:
    """A container for source files under a local directory (file:// prefix).

    Icechunk matches a chunk's location against a container prefix letter for letter, but
    a prefix holding percent-encoded letters (a space, a non-ASCII letter) matches no read;
    the prefix is therefore the nearest enclosing directory whose URL needs no encoding (the
    directory itself, usually), and the rest of each location is read as a path below it."""
    path = storage.Store(path_or_url).local_path
    plain = path
    while plain.as_uri() != f"file://{plain}" and plain.parent != plain:
        plain = plain.parent
    if plain.parent == plain:
        raise ValueError(
            f"source directory {path}: Icechunk cannot read virtual chunks below a top-level "
            "folder whose name URLs must encode; move or link the archive below a plain one"
        )
    prefix = _prefix(plain.as_uri())
    return ic.VirtualChunkContainer(prefix, ic.local_filesystem_store(str(plain)))


def s3_container(
    url: str,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    allow_http: bool = False,
    path_style: bool = False,
    anonymous: bool = True,
) -> Container:
    """A container for s3://bucket/prefix/ on AWS or an S3-compatible endpoint (Source Coop, moto)."""
    prefix = _prefix(url)
    if not prefix.startswith("s3://"):
        raise ValueError(f"s3 container prefix must start with s3://, got {url!r}")
    store = ic.s3_store(
        region=region,
        endpoint_url=endpoint_url,
        allow_http=allow_http,
        anonymous=anonymous,
        s3_compatible=endpoint_url is not None,
        force_path_style=path_style,
    )
    return ic.VirtualChunkContainer(prefix, store)


def gcs_container(url: str, opts: Mapping[str, str] | None = None) -> Container:
    """A container for a gs://bucket/prefix/ mirror."""
    prefix = _prefix(url)
    if not prefix.startswith("gs://"):
        raise ValueError(f"gcs container prefix must start with gs://, got {url!r}")
    return ic.VirtualChunkContainer(prefix, ic.gcs_store(dict(opts or {})))


def container_for(store: storage.Store) -> Container:
    """The container matching a toolkit Store (the source archive's location)."""
    if store.is_local:
        return local_container(store.url)
    if store.scheme == "s3":
        o = store.options
        return s3_container(
            store.url,
            region=o.get("region"),
            endpoint_url=o.get("endpoint"),
            allow_http=bool(o.get("allow_http")),
            path_style=bool(o.get("path_style")),
            anonymous=bool(o.get("anonymous")),  # a private bucket: readers sign, as we did
        )
    if store.scheme in ("gs", "gcs"):
        return gcs_container(store.url.replace("gcs://", "gs://", 1))
    raise ValueError(
        f"no virtual chunk container for store {store.url}: use file://, s3:// or gs://"
    )


def _credential(prefix: str, mode: Literal["anonymous", "env"]) -> Any:
    scheme = urlparse(prefix).scheme
    if scheme == "file":
        return ic.credentials.LocalFileSystemAccess
    if scheme == "s3":
        return (
            ic.s3_anonymous_credentials() if mode == "anonymous" else ic.s3_from_env_credentials()
        )
    if scheme == "gs":
        return (
            ic.credentials.gcs_anonymous_credentials()
            if mode == "anonymous"
            else ic.gcs_from_env_credentials()
        )
    raise ValueError(f"no reader credential for container {prefix!r}")


def reader_credentials(
    prefixes: Iterable[str],
    mode: Literal["anonymous", "env"] = "anonymous",
    containers: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The credentials map a reader passes at open, per container: from the environment
    with `mode="env"`, and for a container the repo records as private (its source was read
    with credentials: a backfill from a private bucket); anonymous otherwise."""
    known = containers or {}

    def how(p: str) -> Literal["anonymous", "env"]:
        return "env" if mode == "env" or (p in known and not _anonymous(known[p])) else "anonymous"

    return ic.containers_credentials({p: _credential(p, how(p)) for p in prefixes})


def _anonymous(container: Any) -> bool:
    """Whether a container's recorded store options read it anonymously (True when the
    store kind records no such option: a local or an older container)."""
    try:
        return bool(container.store[0].anonymous)
    except (AttributeError, IndexError, TypeError):
        return True


# ----------------------------------------------------------------------------- manifest splitting


def manifest_append_dim_split(
    append_dim: str, split: int | Mapping[str | None, int]
) -> ic.ManifestSplittingConfig:
    """Split every array's manifest along `append_dim` every `split` positions.

    `split` may be `{path_regex: size, None: default}` to size array groups differently; the
    first matching regex wins, `None` catches the rest.
    """
    dim = ic.ManifestSplitDimCondition.DimensionName(append_dim)
    sizes = {None: split} if isinstance(split, int) else dict(split)
    for k, v in sizes.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(
                f"manifest split size for {k or 'all arrays'!r} must be an int >= 1, got {v!r}"
            )
        if k is not None:
            re.compile(k)
    rules: dict[Any, Any] = {}
    for k, v in sizes.items():
        if k is not None:
            rules[ic.ManifestSplitCondition.path_matches(k)] = {dim: v}
    if None in sizes:
        rules[ic.ManifestSplitCondition.AnyArray()] = {dim: sizes[None]}
    return ic.ManifestSplittingConfig.from_dict(rules)


@dataclass
class VirtualConfig:
    """A virtual dataset's Icechunk settings, as real Icechunk objects (validated on construction).

    Not picklable (Icechunk's objects are not): datasets build it where they run.
    """

    containers: Sequence[Container]
    splitting: Any = None  # ic.ManifestSplittingConfig
    manifest_fetch_concurrency: int = 32
    chunk_ref_cache: int = 2_000_000

    def __post_init__(self) -> None:
        if not self.containers:
            raise ValueError("a virtual dataset needs at least one virtual chunk container")
        seen: set[str] = set()
        for c in self.containers:
            if not isinstance(c, ic.VirtualChunkContainer):
                raise TypeError(
                    f"container {c!r} is not an icechunk VirtualChunkContainer: build "
                    "it with local_container / s3_container / gcs_container"
                )
            if c.url_prefix in seen:
                raise ValueError(f"container prefix {c.url_prefix!r} registered twice")
            seen.add(c.url_prefix)
        if self.splitting is not None and not isinstance(
            self.splitting, ic.ManifestSplittingConfig
        ):
            raise TypeError("splitting must come from manifest_append_dim_split")
        if self.manifest_fetch_concurrency < 1 or self.chunk_ref_cache < 1:
            raise ValueError("manifest_fetch_concurrency and chunk_ref_cache must be >= 1")

    @property
    def prefixes(self) -> list[str]:
        return [c.url_prefix for c in self.containers]

    def repository_config(self) -> ic.RepositoryConfig:
        cfg = ic.RepositoryConfig.default()
        for c in self.containers:
            cfg.set_virtual_chunk_container(c)
        cfg.manifest = ic.ManifestConfig(
            splitting=self.splitting,
            max_concurrent_manifest_fetches_during_commit=self.manifest_fetch_concurrency,
        )
        cfg.caching = ic.CachingConfig(num_chunk_refs=self.chunk_ref_cache)
        return cfg


# ----------------------------------------------------------------------------- repositories


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


_UNREACHABLE = ("dispatch failure", "connection refused", "connect", "timed out", "timeout")


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


# ----------------------------------------------------------------------------- sessions


def writable(repo: ic.Repository, branch: str = "main") -> ic.Session:
    """A fresh writable session (a committed session is read-only: open one per commit)."""
    return repo.writable_session(branch)


def readonly(repo: ic.Repository, branch: str = "main", snapshot: str | None = None) -> ic.Session:
    if snapshot is not None:
        return repo.readonly_session(snapshot_id=snapshot)
    return repo.readonly_session(branch)


def is_repo(store: storage.Store) -> bool:
    """Whether an Icechunk repo is at `store` (a local path that does not exist is not one)."""
    if store.is_local and not store.local_path.exists():
        return False
    return _exists(store)


@dataclass(frozen=True)
class BranchView:
    """A branch's head as a read-only store for `toolkit.storage` (a `ZarrView`): every
    `zarr()` opens a session at the head as it is then, so a gate or a done-set that observes
    it sees every commit made so far. Picklable: it carries the repo's location, not a session."""

    ref: RepoRef
    branch: str = "main"

    @property
    def url(self) -> str:
        return f"{self.ref.url}@{self.branch}"

    def zarr(self, read_only: bool = True) -> Any:
        if not read_only:
            raise ValueError(f"{self.url}: a branch head is read-only; write through a session")
        return readonly(self.ref.open(), self.branch).store

    def explain(self, err: Exception, key: str | None) -> storage.StorageError | None:
        """An error of this view's store as `toolkit.storage` reports it: a corrupt object
        of the repo named (None: not one)."""
        head = None
        if isinstance(err, ic.IcechunkError):
            with contextlib.suppress(Exception):
                head = snapshot_of(self.ref.open(), self.branch)
        return translate(err, self.ref.url, key, head)


@dataclass(frozen=True)
class SessionView:
    """One session (writable, a fork or a snapshot) as a store for `toolkit.storage`. Pickles
    when its session does (forks and read-only sessions do; a writable session refuses)."""

    url: str
    session: Any
    # arrays opened through this view, for its user to keep (the pyramid's shard writer does,
    # for one stripe): the session's metadata is fixed while it lives
    arrays: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def zarr(self, read_only: bool = False) -> Any:
        return self.session.store

    def explain(self, err: Exception, key: str | None) -> storage.StorageError | None:
        """An error of the repo's store as `toolkit.storage` says it (None: not one)."""
        repo = self.url.rpartition("@")[0] if "@" in self.url.rpartition("/")[2] else self.url
        return translate(err, repo, key, getattr(self.session, "snapshot_id", None))


def finalize_branch(repo: ic.Repository, branch: str, marker: str, base: str = "main") -> str:
    """`base` (main) := `branch` if `base` is still where `marker` recorded it at setup; then
    drop both branches. Replayable: with the branch already gone, base's head is the answer."""
    if branch not in branches(repo):
        return snapshot_of(repo, base)
    head = snapshot_of(repo, branch)
    if head != snapshot_of(repo, base):
        reset_branch(repo, base, head, expected=snapshot_of(repo, marker))
    delete_branch(repo, branch)
    delete_branch(repo, marker)
    return head


def set_virtual_refs(
    session: Any,
    array: str,
    refs: Sequence[tuple[Sequence[int], str, int, int, _dt.datetime | None]],
    checksums: dict[Any, Any] | None = None,
) -> int:
    """Set (index, location, offset, length, last_modified) refs on `array`; return the count.

    Icechunk returns the refs it could not place instead of raising; a ref outside every
    container can never be read, so this raises `OutsideContainers` naming them.
    `checksums`: a dict the caller keeps for one batch over several arrays (a file's refs
    share one last_modified but fall in different arrays), so each is made a checksum once.
    """
    if not refs:
        return 0
    ceil = {} if checksums is None else checksums
    specs = []
    for idx, loc, off, n, mod in refs:
        try:
            checksum = ceil[mod]
        except KeyError:
            checksum = ceil[mod] = _whole_second_ceil(mod)
        specs.append(
            ic.VirtualChunkSpec(
                index=idx,
                location=loc,
                offset=int(off),
                length=int(n),
                last_updated_at_checksum=checksum,
            )
        )
    failed = session.store.set_virtual_refs(array, specs, validate_containers=True)
    if failed:
        bad = {tuple(i) for i in failed}
        shown = [f"{tuple(r[0])} -> {r[1]}" for r in refs if tuple(r[0]) in bad][:5]
        raise OutsideContainers(
            f"{len(failed)} refs for array {array!r} fall outside every virtual chunk container "
            f"(first: {shown}); register a container covering them"
        )
    return len(specs)


def _whole_second_ceil(mod: _dt.datetime | None) -> _dt.datetime | None:
    """Icechunk keeps the checksum in whole seconds and refuses an object modified after it,
    so a fractional mtime (local files) rounds up; S3's whole-second Last-Modified is kept."""
    if mod is None or not mod.microsecond:
        return mod
    return mod.replace(microsecond=0) + _dt.timedelta(seconds=1)


def chunk_coordinates(session: Any, array: str) -> list[tuple[int, ...]]:
    """Indices of every chunk `array` holds a ref for (from the manifests, no chunk read)."""
    return sorted(_coordinates(session, array))


def _coordinates(session: Any, array: str) -> list[tuple[int, ...]]:
    async def run() -> list[tuple[int, ...]]:
        return [tuple(c) async for c in session.chunk_coordinates("/" + array.lstrip("/"))]

    return _await(run())


def chunk_refs(
    session: Any, array: str, append_range: tuple[int, int] | None = None
) -> dict[tuple[int, ...], tuple[str, int, int]]:
    """Every ref `array` holds (chunk index -> location, offset, length), read back from the
    manifests; with `append_range` (lo, hi), only chunks whose first index is in [lo, hi)."""
    lo, hi = append_range if append_range is not None else (0, None)

    async def run() -> dict[tuple[int, ...], tuple[str, int, int]]:
        out: dict[tuple[int, ...], tuple[str, int, int]] = {}
        batches = session.store.array_chunk_iterator("/" + array.lstrip("/"))
        async for coords, _kinds, paths, offsets, lengths, _inline in batches:
            for i, path in enumerate(paths):
                index = tuple(int(x) for x in coords[i])
                if index and (index[0] < lo or (hi is not None and index[0] >= hi)):
                    continue
                out[index] = (path, int(offsets[i]), int(lengths[i]))
        return out

    return _await(run())


def virtual_locations(session: Any) -> set[str]:
    """Every source location the session's manifests point at."""
    return set(session.all_virtual_chunk_locations())


# An array asked about for at least 1/LIST_RATIO of its chunk grid is listed whole (its
# chunk coordinates, ~2 us each) instead of probed cell by cell (`chunk_type`, ~11 us each).
LIST_RATIO = 4


def chunks_present(
    session: Any, cells: Sequence[tuple[str, Sequence[int]]], list_ratio: int = LIST_RATIO
) -> list[bool]:
    """For each (array, chunk index): does the manifest hold a ref (or chunk) there?

    Manifest lookups only, never a source byte. An array asked about for a large share of its
    chunk grid (a backfill's done-set and gate, a completeness check of a whole dataset) is
    answered from one listing of its chunk coordinates, which costs at most `list_ratio` times
    the cells asked; the others are probed: `Session.chunk_type` is ~100x cheaper per cell than
    `store.exists` through asyncio, but it holds the GIL while it fetches a manifest, so the
    manifests are loaded first without it -- one async probe per (array, append-dim index),
    which touches every manifest split the cells fall in -- and the sync calls then hit the
    session's cache. An array missing from the store raises KeyError naming it.
    """
    import asyncio

    asked: dict[str, int] = {}
    for array, _ in cells:
        asked[array] = asked.get(array, 0) + 1
    listed = {
        array: set(_coordinates(session, array))
        for array, n in asked.items()
        if (grid := _stored_grid(session, array)) is not None and grid <= list_ratio * n
    }
    firsts: dict[tuple[str, int | None], tuple[str, list[int]]] = {}
    for array, index in cells:
        if array in listed:
            continue
        idx = [int(i) for i in index]
        firsts.setdefault((array, idx[0] if idx else None), (array, idx))

    def path(array: str) -> str:
        return "/" + array.lstrip("/")

    async def warm() -> None:
        await asyncio.gather(*(session.chunk_type_async(path(a), i) for a, i in firsts.values()))

    try:
        if firsts:
            _await(warm())
        return [
            tuple(int(i) for i in idx) in listed[a]
            if a in listed
            else session.chunk_type(path(a), [int(i) for i in idx]) != ic.ChunkType.uninitialized
            for a, idx in cells
        ]
    except ic.NodeNotFoundError as err:
        missing = next((a for a, _ in firsts.values() if f"`{path(a)}`" in str(err)), "<unknown>")
        raise KeyError(f"array {missing!r} is not in the store") from None


def _stored_grid(session: Any, array: str) -> int | None:
    """How many objects `array`'s chunk grid holds (shards, when sharded; None: no such array)."""
    import math

    import zarr

    try:
        meta = zarr.open_array(session.store, path=array.strip("/"), mode="r").metadata
        stored = meta.chunk_grid.chunk_shape  # the outer grid: shards, when sharded
    except (FileNotFoundError, KeyError, ValueError, TypeError, AttributeError):
        return None  # the probes name a missing array; anything unusual is probed
    return math.prod(-(-n // c) for n, c in zip(meta.shape, stored, strict=True))


def exists_many(session: Any, keys: Sequence[str], concurrency: int = 256) -> list[bool]:
    """Manifest probes (`store.exists`): never read a source byte, never decode."""
    import asyncio

    store = session.store  # one store object: building it per key dominated large probes

    async def run() -> list[bool]:
        sem = asyncio.Semaphore(concurrency)

        async def one(k: str) -> bool:
            async with sem:
                return bool(await store.exists(k))

        return list(await asyncio.gather(*(one(k) for k in keys)))

    return _await(run()) if keys else []


_STALE = "checksum of the object owning the virtual chunk has changed"


def chunk_bytes(session: Any, key: str) -> bytes | None:
    """A chunk's stored bytes, undecoded: for a virtual chunk, the source's byte range as the
    manifest names it (None if the manifest has no such chunk)."""
    from zarr.core.buffer import default_buffer_prototype

    store = session.store

    async def run() -> bytes | None:
        buf = await store.get(key, prototype=default_buffer_prototype())
        return None if buf is None else buf.to_bytes()

    return _await(run())


def stale_ref(session: Any, key: str) -> bool:
    """Whether the virtual ref at `key` no longer reads because its source object was
    modified after the ref's checksum (Icechunk refuses such a read rather than return bytes
    the ref never described)."""
    try:
        chunk_bytes(session, key)
    except ic.IcechunkError as err:
        if _STALE in str(err):
            return True
        raise
    return False


def commit(
    session: Any,
    message: str,
    metadata: Mapping[str, Any] | None = None,
    *,
    max_attempts: int = 50,
) -> str:
    """Commit, rebasing on a lost branch-HEAD race; stamps `rebase_attempts` into the metadata.

    Never commits an empty change set (Icechunk refuses one).
    """
    if not session.has_uncommitted_changes:
        raise ValueError(f"refusing an empty commit ({message!r})")
    attempts = 0
    while True:
        meta = {**(metadata or {}), "rebase_attempts": attempts}
        try:
            return session.commit(message, metadata=meta)
        except ic.ConflictError:
            attempts += 1
            if attempts >= max_attempts:
                raise
            session.rebase(ic.BasicConflictSolver())


def fork(session: Any) -> Any:
    """A picklable fork of a writable session (fork once per stage, not per task)."""
    return session.fork()


def merge(session: Any, forks: Sequence[Any]) -> None:
    if forks:
        session.merge(*forks)


def has_changes(session: Any) -> bool:
    return bool(session.has_uncommitted_changes)


def snapshot_of(repo: ic.Repository, branch: str = "main") -> str:
    return repo.lookup_branch(branch)


def written_chunks(
    repo: ic.Repository, from_snapshot: str, to_snapshot: str
) -> dict[str, list[tuple[int, ...]]] | None:
    """The chunk coordinates written (new or rewritten) by the commits between two snapshots,
    by array path; None when `from_snapshot` is not an ancestor of `to_snapshot` (a rebase
    or a reset moved the branch elsewhere): then nothing can be said."""
    if from_snapshot == to_snapshot:
        return {}
    try:
        d = repo.diff(from_snapshot_id=from_snapshot, to_snapshot_id=to_snapshot)
    except ic.IcechunkError:
        return None
    return {p.strip("/"): [tuple(c) for c in cs] for p, cs in d.updated_chunks.items()}


def branches(repo: ic.Repository) -> list[str]:
    return sorted(repo.list_branches())


def create_branch(repo: ic.Repository, name: str, snapshot: str) -> None:
    repo.create_branch(name, snapshot)


def delete_branch(repo: ic.Repository, name: str) -> None:
    repo.delete_branch(name)


def reset_branch(repo: ic.Repository, branch: str, to_snapshot: str, *, expected: str) -> None:
    """Point `branch` at `to_snapshot` only if it is still at `expected` (recorded at setup)."""
    try:
        repo.reset_branch(branch, to_snapshot, from_snapshot_id=expected)
    except ic.ConflictError as err:
        now = repo.lookup_branch(branch)
        raise BranchMoved(
            f"branch {branch!r} moved since setup (expected {expected}, now {now}); "
            "refusing to reset it: rerun the backfill between operational fires"
        ) from err


@dataclass(frozen=True)
class CommitInfo:
    id: str
    parent: str | None
    written_at: _dt.datetime
    message: str
    metadata: Mapping[str, Any]

    @property
    def rebase_attempts(self) -> int | None:
        value = self.metadata.get("rebase_attempts")
        return int(value) if value is not None else None


def history(
    repo: ic.Repository, branch: str = "main", limit: int | None = None
) -> list[CommitInfo]:
    """Newest first: id, message, metadata (with `rebase_attempts` where we committed)."""
    out = []
    for i, snap in enumerate(repo.ancestry(branch=branch)):
        if limit is not None and i >= limit:
            break
        out.append(
            CommitInfo(
                snap.id, snap.parent_id, snap.written_at, snap.message, dict(snap.metadata or {})
            )
        )
    return out


# ----------------------------------------------------------------------------- manifests


@dataclass(frozen=True)
class ManifestReport:
    manifests: int
    refs: int
    bytes: int
    per_array: Mapping[str, Mapping[str, float]]

    @property
    def bytes_per_ref(self) -> float:
        return self.bytes / self.refs if self.refs else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "manifests": self.manifests,
            "refs": self.refs,
            "bytes": self.bytes,
            "bytes_per_ref": round(self.bytes_per_ref, 2),
            "per_array": {k: dict(v) for k, v in self.per_array.items()},
        }


def manifest_report(repo: ic.Repository, branch: str = "main") -> ManifestReport:
    """Every live manifest of `branch`'s HEAD: refs, bytes, bytes/ref, per array."""
    doc = _await(repo.inspect_snapshot_async(repo.lookup_branch(branch)))
    sizes = {m["id"]: (int(m["num_chunk_refs"]), int(m["size_bytes"])) for m in doc["manifests"]}
    per_array: dict[str, dict[str, float]] = {}
    for node in doc.get("nodes", []):
        if node.get("node_type") != "array":
            continue
        ids = {m["id"] for m in node.get("manifest_refs") or []}
        refs = sum(sizes[i][0] for i in ids if i in sizes)
        byts = sum(sizes[i][1] for i in ids if i in sizes)
        per_array[node["path"].lstrip("/")] = {
            "manifests": len(ids),
            "refs": refs,
            "bytes": byts,
            "bytes_per_ref": round(byts / refs, 2) if refs else 0.0,
        }
    total_refs = sum(r for r, _ in sizes.values())
    total_bytes = sum(b for _, b in sizes.values())
    return ManifestReport(len(sizes), total_refs, total_bytes, per_array)


def manifest_split(store: storage.Store) -> dict[str, Any] | None:
    """The manifest splitting the repo's persisted config holds (None: one manifest per array)."""
    cfg = _fetch_config(store, _storage(store))
    splitting = cfg.manifest.splitting if cfg is not None and cfg.manifest is not None else None
    return None if splitting is None else {"split_sizes": repr(splitting.split_sizes)}


def resplit(store: storage.Store, append_dim: str, size: int, message: str) -> str:
    """Split every array's manifests along `append_dim` every `size` positions from now on
    (persisted in the repo's config, so later commits follow it), and rewrite main's existing
    manifests under it in one commit (Icechunk's manifest rewrite). Returns the snapshot."""
    st = _storage(store)
    cfg = _fetch_config(store, st) or ic.RepositoryConfig.default()
    old = cfg.manifest
    fetches = old.max_concurrent_manifest_fetches_during_commit if old is not None else None
    cfg.manifest = ic.ManifestConfig(
        splitting=manifest_append_dim_split(append_dim, size),
        max_concurrent_manifest_fetches_during_commit=fetches,
    )
    repo = ic.Repository.open(st, config=cfg)
    repo.save_config()
    return repo.rewrite_manifests(message, branch="main", metadata={"split": size})


@dataclass(frozen=True)
class Expired:
    """What an expiry did: snapshots dropped from history, objects deleted, bytes freed."""

    snapshots: int
    objects: int
    bytes: int


def expire(repo: ic.Repository, older_than: _dt.datetime) -> Expired:
    """Expire the snapshots written before `older_than` and collect the objects nothing left
    refers to, with Icechunk's own expiry and GC. Main's head, every branch's and tag's tip
    (an in-flight backfill and its marker among them) are kept: no branch or tag is deleted."""
    gone = repo.expire_snapshots(older_than)
    # An in-flight transaction writes objects it has not committed yet (a level's chunks, a
    # fork's manifests), all after its branch was set up from main: collect nothing newer than
    # the oldest branch tip (a marker's tip is main's head at setup).
    tips = [
        next(iter(repo.ancestry(snapshot_id=repo.lookup_branch(b)))).written_at
        for b in repo.list_branches()
        if b != "main"
    ]
    summary = repo.garbage_collect(min([older_than, *tips]))
    objects = sum(
        int(getattr(summary, f, 0))
        for f in ("chunks_deleted", "manifests_deleted", "snapshots_deleted",
                  "attributes_deleted", "transaction_logs_deleted")
    )  # fmt: skip
    return Expired(len(gone), objects, int(getattr(summary, "bytes_deleted", 0)))


def _await(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, inside or outside a running loop.

    (The sync `inspect_snapshot` holds the GIL across its I/O, which deadlocks against an
    in-process S3 emulator; the async form releases it.)
    """
    import asyncio
    import concurrent.futures

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@contextlib.contextmanager
def corruption_named(store: storage.Store) -> Iterator[None]:
    """Around a job on the repo at `store`: Icechunk's error about one of the repo's objects
    that does not parse (its several lines of Rust context) becomes a `CorruptObject`; when
    the error does not say which object, the branches' snapshots are read to find it."""
    try:
        yield
    except ic.IcechunkError as err:
        named = translate(err, store.url)
        if named is None:
            raise
        if isinstance(named, storage.CorruptObject) and not named.key:
            named = _corrupt_snapshot(store) or named
        raise named from err


def _corrupt_snapshot(store: storage.Store) -> storage.CorruptObject | None:
    """The first branch head whose snapshot does not parse, named (None: every one does)."""
    try:
        repo = ic.Repository.open(_storage(store))
        heads = sorted({repo.lookup_branch(b) for b in repo.list_branches()})
    except Exception:
        return None
    for head in heads:
        try:
            _await(repo.inspect_snapshot_async(head))
        except ic.IcechunkError as err:
            named = corrupt(err, store.url, head)
            if named is not None and named.key:
                return named
    return None


# ----------------------------------------------------------------------------- errors

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
