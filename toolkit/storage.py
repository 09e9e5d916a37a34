"""Object storage edge: the only module that imports obstore.

Every other module talks to storage through `Store` (a picklable handle that knows its URL and
its non-secret options) and the functions below, which turn obstore's errors into toolkit
errors naming the store, the key and the cause.

A store reached through a zarr store object instead (an Icechunk snapshot or session, see
`toolkit.icechunk.BranchView`) is a `ZarrView`: anything with a `url` and a `zarr(read_only)`.
`get`, `put`, `exists`, `list_keys`, `iter_keys`, `delete` and `delete_prefix` reach either kind
through a `Backend`: `ObjectBackend` (obstore; a `Store` has it from when it is made) or
`ViewBackend` (zarr's store API), so a job that only reads and writes zarr keys runs on either
kind unchanged.

Credentials never travel: a `Store` pickles as (url, options, credential provider reference) and
reopens on the other side, where obstore reads the environment / instance metadata or calls the
provider, which refreshes. Explicit secret options are refused when pickling.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import re
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import unquote, urlparse

import numpy as np
import obstore
from obstore import exceptions as obx
from obstore.store import AzureStore, GCSStore, HTTPStore, LocalStore, MemoryStore, S3Store

from toolkit import tenure

__all__ = [
    "AccessDenied",
    "AlreadyExists",
    "Backend",
    "Blob",
    "CorruptObject",
    "LockHeld",
    "NotFound",
    "ObjectInfo",
    "PreconditionFailed",
    "StorageError",
    "Store",
    "Unreachable",
    "Version",
    "ZarrView",
    "backend",
    "delete",
    "delete_prefix",
    "exists",
    "get",
    "get_json",
    "get_range",
    "head",
    "list_keys",
    "list_objects",
    "open_store",
    "put",
    "read",
    "record_json",
    "zarr_metadata",
]

SECRET_OPTIONS = frozenset(
    {
        "access_key_id",
        "secret_access_key",
        "session_token",
        "token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "service_account_key",
        "account_key",
        "client_secret",
        "sas_key",
    }
)


# --------------------------------------------------------------------------- errors


class StorageError(Exception):
    """A storage operation failed; names the store, the key and the cause."""

    cause = "storage error"
    fix = ""  # what to do about it, when the cause alone does not say

    def __init__(self, store: str, key: str | None, detail: str = "") -> None:
        self.store = store
        self.key = key
        self.detail = detail
        msg = f"{self.cause}: {location(store, key)}"
        if detail:
            msg += f" ({detail})"
        if self.fix:
            msg += f"; {self.fix}"
        super().__init__(msg)

    def __reduce__(self) -> tuple[Any, ...]:
        """Travels from a worker as itself, with what was attached to it there (the task it
        failed in: `toolkit.plan.task_context`)."""
        return (_rebuild, (type(self), self.store, self.key, self.detail), self.__dict__)


def _rebuild(kind: type[StorageError], store: str, key: str | None, detail: str) -> StorageError:
    err = kind.__new__(kind)
    StorageError.__init__(err, store, key, detail)
    return err


class NotFound(StorageError):
    cause = "not found"


class AlreadyExists(StorageError):
    cause = "already exists"


class PreconditionFailed(StorageError):
    cause = "precondition failed (the object changed since it was read; re-read and retry)"


class LockHeld(PreconditionFailed):
    """Another writer holds the local lock of an object, and its lease has not expired."""

    cause = "locked by another writer"

    def __init__(self, store: str, key: str, lock: str, owner: str, left: float) -> None:
        self.owner = owner
        super().__init__(
            store,
            key,
            f"{lock} is held by {owner} for {left:.0f} s more; if that writer is gone, "
            "rerun with --break-lock",
        )


class CorruptObject(StorageError):
    """An object is there but its bytes are not what its reader expects (a chunk that does not
    decode, metadata that is not JSON, a snapshot that is not Icechunk's): named, with the way
    out, instead of a decoder's message about nothing in particular."""

    cause = "corrupt object"

    def __init__(
        self, store: str, key: str | None, what: str, detail: str = "", fix: str = ""
    ) -> None:  # fix: the command that repairs or replaces a record the toolkit keeps
        self.store, self.key, self.what, self.detail = store, key, what, detail
        self.fix = fix or "restore the object, or rerun the job that writes it"
        Exception.__init__(self, f"{location(store, key)}: {detail} (not {what}); {self.fix}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            CorruptObject,
            (self.store, self.key, self.what, self.detail, self.fix),
            self.__dict__,
        )


class AccessDenied(StorageError):
    cause = "access denied (check credentials / anonymous access)"


class ReadOnly(AccessDenied):
    """A local folder this process may not write (its mode, its owner, a read-only mount)."""

    cause = "read-only"
    fix = "make it writable (chmod u+w, or its owner), or choose another path"


class NotReadable(AccessDenied):
    """A local file or folder this process may not read."""

    cause = "permission denied"
    fix = "make it readable (chmod u+rx, or its owner), or check the path"


class BadPath(StorageError):
    """A local path that cannot name a store as it is (exit 2: the input must change)."""


class NotADirectory(BadPath):
    cause = "not a directory"
    fix = "a file is where a folder is needed: pass a folder, or a path that does not exist yet"


class SymlinkLoop(BadPath):
    cause = "symlink loop"
    fix = "repair or remove the link (ls -l shows where it points)"


class NotUtf8(BadPath):
    """A file name whose bytes are not UTF-8 (a Latin-1 folder, say): object-store keys are
    text, so it is refused by name instead of being read as some other folder."""

    cause = "file name is not UTF-8"
    fix = "rename it to UTF-8 (e.g. convmv -f latin1 -t utf8 --notest), or use another path"


class FileTooLarge(StorageError):
    cause = "file too large"
    fix = "raise the file-size limit (ulimit -f) or write where larger files are allowed"


class NoSpace(StorageError):
    cause = "no space left on the device"
    fix = "free some space, or write elsewhere"


class MissingObject(NotFound):
    """An object a repository refers to (a snapshot, a manifest) is gone from it."""

    cause = "missing"
    fix = "the repository lost an object it refers to: restore it from a copy, or rebuild it"


class Unreachable(StorageError):
    cause = "store unreachable (check the endpoint URL and network)"


class BadEndpoint(Unreachable):
    """An endpoint that names no server: refused before any connection (a usage error)."""

    cause = "malformed endpoint"


def check_endpoint(url: str, endpoint: str) -> None:
    """`endpoint` is http[s]://host[:port] with a numeric port, or BadEndpoint naming it."""
    try:
        parsed = urlparse(endpoint)
        parsed.port  # noqa: B018 - raises ValueError for a port that is not a number
        ok = (
            parsed.scheme in ("http", "https")
            and bool(parsed.hostname)
            and not (parsed.query or parsed.fragment or parsed.netloc.endswith(":"))
            and "#" not in endpoint
            and "?" not in endpoint
        )
        why = "" if ok else "want http[s]://host[:port]"
    except ValueError as err:
        why = f"{err}; want http[s]://host[:port]"
    if why:
        raise BadEndpoint(url, None, f"--endpoint {redact(endpoint)!r}: {why}")


def redact(text: str) -> str:
    """`text` with the user:password of every URL in it replaced by ***."""
    return re.sub(r"(\b[a-z][a-z0-9+.-]*://)[^/\s@]+@", r"\1***@", text, flags=re.I)


_UNREACHABLE_HINTS = (
    "connect",
    "connection",
    "dns",
    "timed out",
    "error sending request",
    "tcp",
    "refused",
    "no such host",
)


def _translate(
    err: BaseException, store: Store, key: str | None, writing: bool | None = None
) -> StorageError:
    detail = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
    if isinstance(err, (obx.NotFoundError, FileNotFoundError)):
        return NotFound(store.url, key, detail)
    if store.is_local:
        named = os_error(err, store.url, key, writing)
        if named is not None:
            return named
    if isinstance(err, obx.AlreadyExistsError):
        return AlreadyExists(store.url, key, detail)
    if isinstance(err, (obx.PreconditionError, obx.NotModifiedError)):
        return PreconditionFailed(store.url, key, detail)
    if isinstance(err, (obx.PermissionDeniedError, obx.UnauthenticatedError, PermissionError)):
        return AccessDenied(store.url, key, detail)
    text = str(err).lower()
    if any(h in text for h in _UNREACHABLE_HINTS):
        endpoint = store.options.get("endpoint") or store.url
        return Unreachable(store.url, key, unanswered(endpoint, retry_seconds(store.options)))
    # a status code, not digits inside a duration such as "in 1.821543403s"
    if re.search(r"\b403\b", text) or "forbidden" in text or "access denied" in text:
        return AccessDenied(store.url, key, detail)
    return StorageError(store.url, key, detail)


def unanswered(endpoint: str, budget: float) -> str:
    """Why a call failed when its server never answered: the endpoint, the budget, the fix."""
    return (
        f"{redact(endpoint)} did not answer within the {budget:g} s retry budget; rerun when "
        "it is back (the run resumes), or allow longer with --retry-seconds"
    )


_PERFORMING = re.compile(r"Error performing (\w+) (\S+) in .*?retry_timeout: ([\d.]+)s", re.S)


EXPLAINERS: list[Callable[[BaseException], StorageError | None]] = []
"""What other edges add to `explain` (toolkit.icechunk: Icechunk's errors), so every storage
error, whoever raised it, is said by this one function."""


def explain(err: BaseException) -> StorageError | None:
    """The one voice of storage errors: a toolkit error for a store's error that escaped
    without its store (raised inside zarr's adapter, on a worker, by Icechunk, by the operating
    system), naming the path or URL, the key, the cause in words and the fix; None if `err` is
    not a storage error (or already a toolkit one)."""
    if isinstance(err, StorageError):
        return None
    for explainer in EXPLAINERS:
        named = explainer(err)
        if named is not None:
            return named
    if not isinstance(err, obx.BaseError):  # Python's own: a missing file is its callers' to handle
        local = isinstance(err, (OSError, RuntimeError)) and not isinstance(err, FileNotFoundError)
        return os_error(err, None, None) if local else None
    found = _PERFORMING.search(str(err))
    if found is None:  # a local store's error names the path, not a URL
        named = os_error(err, None, None)
        path = _OS_PATH.search(str(err))
        if named is None and path is not None:
            named = _translate(err, Store(Path(path.group(1)).as_uri()), None)
        return named or StorageError("an object store (it did not say which)", None, _first(err))
    url = found.group(2)
    if any(h in str(err).lower() for h in _UNREACHABLE_HINTS):
        parsed = urlparse(url)
        endpoint = f"{parsed.scheme}://{parsed.netloc}"
        return Unreachable(url, None, unanswered(endpoint, float(found.group(3))))
    return _translate(err, Store(url), None)


def _first(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


# --------------------------------------------------------------------------- local causes

# what the operating system refused, in words (the error that says it and its fix)
_OS_CAUSES: dict[int, type[StorageError]] = {
    errno.ENOENT: NotFound,
    errno.ENOTDIR: NotADirectory,
    errno.ELOOP: SymlinkLoop,
    errno.EFBIG: FileTooLarge,
    errno.ENOSPC: NoSpace,
    errno.EDQUOT: NoSpace,
    errno.EROFS: ReadOnly,
    errno.EACCES: NotReadable,  # ReadOnly when the call was a write
    errno.EPERM: NotReadable,
}
_DENIED_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)
_OS_ERRNO = re.compile(r"\(os error (\d+)\)")  # how Rust spells errno
# the path a local store's (or Icechunk's) error names: "... file /p: Not a directory ..."
_OS_PATH = re.compile(r"(?:file|dir|directory|on|location)\s+(/.*?)(?::\s|\s+not found)")
_WRITES = re.compile(r"creat|writ|\bput\b|copy|renam|delet|remov|mkdir", re.I)


def _errno(err: BaseException) -> int | None:
    if isinstance(err, OSError) and err.errno:
        return err.errno
    found = _OS_ERRNO.search(str(err))
    if found:
        return int(found.group(1))
    if isinstance(err, RuntimeError) and "symlink loop" in str(err).lower():
        return errno.ELOOP  # pathlib's resolve (Python 3.12)
    return None


def os_error(
    err: BaseException, url: str | None, key: str | None, writing: bool | None = None
) -> StorageError | None:
    """What the operating system refused, said as a toolkit error about the local path at
    fault: the file in the way of a folder, the link that loops, the folder that may not be
    written. `url`/`key`: the local store and key the call was about, when known (the error's
    own path wins: it is what the system looked at). None if `err` says no such cause."""
    code = _errno(err)
    kind = _OS_CAUSES.get(code) if code is not None else None
    if kind is None:
        return None
    text = str(err)
    named = getattr(err, "filename", None) or (m.group(1) if (m := _OS_PATH.search(text)) else None)
    if named is None and isinstance(err, RuntimeError):  # "Symlink loop from '/p'"
        named = m.group(1) if (m := re.search(r"'(/[^']*)'", text)) else None
    if named is not None:  # the system's path, made absolute (a relative one has no URI)
        target = Path(os.path.abspath(os.fsdecode(named)))
    elif url is not None and url.startswith("file://"):
        target = file_path(url) / (key or "")
    else:
        return None
    if writing is None:
        writing = bool(_WRITES.search(text))
    if code in _DENIED_ERRNOS and writing:
        kind = ReadOnly
    culprit = _at_fault(target, code) if code != errno.ENOENT else target
    rel = target.relative_to(culprit) if target.is_relative_to(culprit) else None
    doing = "writing" if writing else "reading"
    detail = f"{doing} {rel}" if rel is not None and str(rel) != "." else ""
    return kind(culprit.as_uri(), None, detail)


def _at_fault(path: Path, code: int) -> Path:
    """The component of `path` an error is about: the file where a folder is needed
    (ENOTDIR), the link that loops (ELOOP), the deepest one there is (denied: the folder
    that refused a new entry, or the file itself); else `path` itself."""
    if code not in (errno.ENOTDIR, errno.ELOOP, *_DENIED_ERRNOS):
        return path
    seen = Path(path.anchor)
    for part in path.parts[1:]:
        step = seen / part
        try:
            mode = os.stat(step).st_mode
        except OSError as err:
            if code == errno.ELOOP and err.errno == errno.ELOOP:
                return step
            return seen if code in _DENIED_ERRNOS else path
        if code == errno.ENOTDIR and not stat.S_ISDIR(mode):
            return step
        seen = step
    return path


def location(url: str, key: str | None = None) -> str:
    """Where `key` of the store at `url` is, as its user would type it: a local store's path
    decoded (never percent-encoded), a cloud URL with its user:password hidden."""
    if url.startswith("file://"):
        base = unquote(urlparse(url).path, errors="backslashreplace")
    else:
        base = redact(url)
    return f"{base.rstrip('/')}/{key.lstrip('/')}" if key else base


_FILE_URL = re.compile(r"file://(/[A-Za-z0-9_.~/%-]*)")  # the letters as_uri leaves as they are
# a `context:` block of Rust frames: its indented lines, to the `at file.rs:N` of its last frame
# (each block on its own: never what stands between two blocks, nor what follows the last frame)
_RUST_CONTEXT = re.compile(
    r"\n\s*context:\n(?:[ \t]+[^\n]*\n)*?[ \t]+at \S+\.rs:\d+(?=[^\n]*(?:\n(?![ \t])|$))"
)


def readable(text: str) -> str:
    """`text` (an error line) as a person reads it: every file:// URL in it the path it names,
    decoded; bytes that are not UTF-8 as \\xNN; a URL's user:password hidden; the Rust context
    frames of Icechunk's and obstore's errors dropped (--debug prints them, with the
    traceback)."""
    text = _RUST_CONTEXT.sub("", text)
    text = _FILE_URL.sub(lambda m: unquote(m.group(1), errors="backslashreplace"), text)
    # a name's bytes that are not UTF-8 (Python holds them as lone surrogates) as \xNN
    try:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name decodes to
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return redact(text)


# --------------------------------------------------------------------------- types


@dataclass(frozen=True)
class Version:
    """What a conditional update must match: the etag/version from the GET that read the body."""

    etag: str | None = None
    version: str | None = None

    def as_mode(self) -> dict[str, str]:
        mode: dict[str, str] = {}
        if self.etag is not None:
            mode["e_tag"] = self.etag
        if self.version is not None:
            mode["version"] = self.version
        if not mode:
            raise ValueError("Version needs an etag or a version to condition on")
        return mode


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    last_modified: datetime
    version: Version


@dataclass(frozen=True)
class Blob:
    """A body and the version it was read at (same GET), for conditional updates."""

    key: str
    data: bytes
    version: Version
    last_modified: datetime


class ZarrView(Protocol):
    """A store seen through a zarr store object (no obstore handle): its keys are zarr keys."""

    url: str

    def zarr(self, read_only: bool = False) -> Any: ...


# --------------------------------------------------------------------------- the handle

_MEMORY: dict[str, MemoryStore] = {}
_MEMORY_LOCK = threading.Lock()


class Store:
    """A picklable handle on an object store: URL + non-secret options.

    `memory://NAME` stores are shared by name inside one process (and only there).
    """

    def __init__(
        self,
        url: str,
        options: dict[str, Any] | None = None,
        credential_provider: Callable[[], Any] | None = None,
    ) -> None:
        self.url = _normalise_url(url)
        self.options = dict(options or {})
        self.credential_provider = credential_provider
        self.scheme = urlparse(self.url).scheme
        self._inner: Any = None
        self._lock = threading.Lock()
        self.backend: Backend = ObjectBackend(self)  # how the functions below reach it

    # The obstore store is built lazily so a handle can cross processes cheaply.
    @property
    def inner(self) -> Any:
        if self._inner is None:
            with self._lock:
                if self._inner is None:
                    self._inner = _build(self)
        return self._inner

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def is_memory(self) -> bool:
        return self.scheme == "memory"

    @property
    def local_path(self) -> Path:
        """The directory of a local store, decoded from its file:// URL."""
        if not self.is_local:
            raise ValueError(f"{self.url} is not a local store")
        return file_path(self.url)

    def child(self, prefix: str) -> Store:
        """The same store rooted one prefix deeper (`prefix` is a key: taken literally)."""
        if self.is_local:
            url = (self.local_path / prefix.strip("/")).as_uri()
        else:
            url = f"{self.url.rstrip('/')}/{prefix.strip('/')}"
        return Store(url, self.options, self.credential_provider)

    def object_url(self, key: str) -> str:
        """The URL of `key` here (what a virtual reference points at): percent-encoded for a
        local store, as its own URL is, so that the two agree on every letter."""
        key = key.lstrip("/")
        if self.is_local:
            base = _local_base(self.url)
            if base is not None and _PLAIN_KEY.fullmatch(key) and not _ODD_SEGMENT.search(key):
                return f"{base}/{key}"  # what as_uri makes of it, without a Path per key
            return (self.local_path / key).as_uri()
        return f"{self.url.rstrip('/')}/{key}"

    def zarr(self, read_only: bool = False) -> Any:
        """A zarr v3 store over this object store (zarr's own ObjectStore adapter)."""
        from zarr.storage import ObjectStore

        return ObjectStore(self.inner, read_only=read_only)

    def __reduce__(self) -> tuple[Any, ...]:
        secrets = SECRET_OPTIONS.intersection(self.options)
        if secrets:
            raise TypeError(
                f"refusing to pickle store {self.url} with explicit secrets {sorted(secrets)}: "
                "pass a credential_provider or use the environment so workers refresh their own"
            )
        if self.is_memory:
            raise TypeError(
                f"memory store {self.url} lives in one process; use executor='sync' or a "
                "file:// or s3:// store for a multi-process cluster"
            )
        return (Store, (self.url, self.options, self.credential_provider))

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Store) and (self.url, self.options) == (other.url, other.options)

    def __hash__(self) -> int:
        return hash(self.url)


def _normalise_url(url: str) -> str:
    """One spelling per location. A plain path (relative or absolute) is taken literally
    (spaces, `%`, `#`, `?` and any letter are part of the name) and becomes a file:// URL,
    percent-encoded as URLs are; a file:// URL is decoded first, so `file:///a b` and
    `file:///a%20b` are one store. Cloud URLs are `scheme://bucket/key-prefix` with the key
    prefix literal (as `aws s3` reads them). A name that is not UTF-8 (`NotUtf8`) or a
    path that loops (`SymlinkLoop`) is refused by name: no key could spell it."""
    if "://" in url and not url.startswith("file://"):
        _refuse_undecodable(url)
        return url
    path = file_path(url) if url.startswith("file://") else Path(url).expanduser()
    _refuse_undecodable(str(path))
    try:
        return path.resolve().as_uri()
    except (RuntimeError, OSError) as err:  # a symlink loop (RuntimeError in Python 3.12)
        named = os_error(err, None, None)
        if named is None:
            raise
        raise named from None


def _refuse_undecodable(text: str) -> None:
    """`NotUtf8` for a name holding bytes that are not UTF-8 (Python keeps them as lone
    surrogates), shown with those bytes as \\xNN."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text).decode("utf-8", errors="backslashreplace")
        raise NotUtf8(shown, None) from None


# A key `Path.as_uri` leaves as it is: letters quote() keeps, no empty, "." or ".." segment
# (pathlib drops or keeps those its own way). Any other key goes through pathlib.
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.~/-]*[A-Za-z0-9_.~-]")
_ODD_SEGMENT = re.compile(r"(^|/)\.{0,2}(/|$)")


@functools.lru_cache(maxsize=64)
def _local_base(url: str) -> str | None:
    """A local store's directory as `as_uri` spells it (None for the root: it ends in "/")."""
    base = file_path(url).as_uri()
    return None if base.endswith("/") else base


def file_path(url: str) -> Path:
    """The local path a file:// URL names, percent-decoded (the inverse of `Path.as_uri`): the
    bytes it spells, as the file system holds them (a %E9 that is not UTF-8 is not read as
    some other name)."""
    return Path(unquote(urlparse(url).path, errors="surrogateescape"))


def local_path_of(source: str) -> Path | None:
    """The local path a plain path or file:// URL names (None for other schemes): what a
    command checks before opening, since opening a local store creates its directory."""
    if "://" not in source:
        return Path(source).expanduser()
    if source.startswith("file://"):
        return file_path(source)
    return None


def object_url(store: Store, key: str) -> str:
    """The URL of `key` in `store` (`Store.object_url`)."""
    return store.object_url(key)


def split_bucket(url: str) -> tuple[str, str]:
    """(bucket, key prefix) of a cloud URL; the prefix is literal (a `#` or `?` is a letter)."""
    rest = url.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


def _build(store: Store) -> Any:
    url, opts = store.url, dict(store.options)
    scheme = store.scheme
    if scheme == "memory":
        with _MEMORY_LOCK:
            return _MEMORY.setdefault(url, MemoryStore())
    if scheme == "file":
        path = store.local_path
        path.mkdir(parents=True, exist_ok=True)
        # a deleted object takes its emptied directories with it: none is left to read as a
        # stray zarr node or to trip a later rename (a level rebuilt in place)
        return LocalStore(path, automatic_cleanup=True)
    client_options: dict[str, Any] = {}
    if opts.pop("allow_http", False) or scheme == "http":  # an http:// URL says it plainly
        client_options["allow_http"] = True
    if "timeout" in opts:
        client_options["timeout"] = opts.pop("timeout")
    if "connect_timeout" in opts:
        client_options["connect_timeout"] = opts.pop("connect_timeout")
    kwargs: dict[str, Any] = {}
    if client_options:
        kwargs["client_options"] = client_options
    # retries end at the time budget, not at a count: a store that comes back inside it
    # costs only time (obstore's own default gives up after 10 quick tries)
    kwargs["retry_config"] = {
        "max_retries": int(opts.pop("max_retries", 1_000_000)),
        "retry_timeout": timedelta(seconds=retry_seconds(opts)),
        "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": MAX_BACKOFF},
    }
    opts.pop("retry_seconds", None)
    if scheme in HTTP_SCHEMES:  # a web server: GET, HEAD and ranges, no listing, no writes
        return HTTPStore.from_url(url.rstrip("/"), **kwargs)
    bucket, prefix = split_bucket(url)
    kwargs["prefix"] = prefix or None
    if store.credential_provider is not None:
        kwargs["credential_provider"] = store.credential_provider
    if scheme == "s3":
        if opts.pop("anonymous", False):
            opts["skip_signature"] = True
        if "path_style" in opts:
            opts["virtual_hosted_style_request"] = not opts.pop("path_style")
        return S3Store(bucket, **kwargs, **opts)
    if scheme in ("gs", "gcs"):
        if opts.pop("anonymous", False):
            opts["skip_signature"] = True
        return GCSStore(bucket, **kwargs, **opts)
    if scheme in ("az", "azure", "abfs"):
        if opts.pop("anonymous", False):
            opts["skip_signature"] = True
        return AzureStore(bucket, **kwargs, **opts)
    raise ValueError(
        f"unsupported store URL {url!r}: use a path, file://, memory://, s3://, gs://, az:// "
        "or https://"
    )


RETRY_SECONDS = 60.0  # the default budget every object-store call retries within
MAX_BACKOFF = timedelta(seconds=2)  # a server that is back is noticed within this


def retry_seconds(options: dict[str, Any]) -> float:
    """The retry budget of a store's options (`retry_seconds`), RETRY_SECONDS by default."""
    return float(options.get("retry_seconds", RETRY_SECONDS))


CLOUD_SCHEMES = ("s3", "gs", "gcs", "az", "azure", "abfs")
HTTP_SCHEMES = ("http", "https")  # read-only sources: a web server serving files


class BadStorageOption(ValueError):
    """Storage options that cannot work together (a plain-http endpoint without allow_http):
    refused before anything is read or written (exit 2 on the command line)."""


@dataclass(frozen=True)
class Options:
    """How to reach a user's object stores, as one value: what a command line's --endpoint,
    --region, --anonymous, --allow-http, --path-style and --retry-seconds said, and how the
    GRIB sources of an Icechunk repo are read (`credentials`: anonymously, or with the
    environment's). `open_store(url, options)` applies them to the URLs they concern."""

    endpoint: str | None = None
    region: str | None = None
    anonymous: bool = False
    allow_http: bool = False
    path_style: bool = False
    retry_seconds: float | None = None  # None: RETRY_SECONDS
    credentials: Literal["anonymous", "env"] = "anonymous"

    @property
    def given(self) -> bool:
        """Whether any S3 option was given (`retry_seconds` is not one: it has a default)."""
        return any((self.endpoint, self.region, self.anonymous, self.allow_http, self.path_style))

    def for_url(self, url: str) -> dict[str, Any]:
        """The keyword options of `open_store` for `url`: for a URL of a cloud scheme only,
        with the retry budget."""
        scheme = url.split("://", 1)[0] if "://" in url else "file"
        if scheme not in CLOUD_SCHEMES:
            return {}
        options: dict[str, Any] = {}
        for name, value in (("endpoint", self.endpoint), ("region", self.region)):
            if value is not None:
                options[name] = value
        if self.retry_seconds is not None:
            options["retry_seconds"] = float(self.retry_seconds)
        for name, flag in (
            ("anonymous", self.anonymous),
            ("allow_http", self.allow_http),
            ("path_style", self.path_style),
        ):
            if flag:
                options[name] = True
        return options

    def checked(self, url: str) -> dict[str, Any]:
        """`for_url`, refusing a plain-http endpoint without allow_http (`BadStorageOption`)."""
        options = self.for_url(url)
        if str(options.get("endpoint", "")).startswith("http://") and not self.allow_http:
            raise BadStorageOption(
                f"--endpoint {self.endpoint} is plain http: add --allow-http to use it"
            )
        return options


def open_store(
    url: str | Store,
    given: Options | None = None,
    *,
    credential_provider: Callable[[], Any] | None = None,
    must_exist: bool = False,
    **options: Any,
) -> Store:
    """Open a store by URL, with the `Options` that concern it (`given`) or keyword options.

    `memory://name`, `file:///abs/path` or a plain path, `s3://bucket/prefix` (options:
    `endpoint`, `region`, `anonymous`, `allow_http`, `path_style`), `gs://bucket/prefix`,
    `az://container/prefix`. Cloud stores also take `timeout`/`connect_timeout` ("5s") and
    `retry_seconds`: every call retries with backoff for that long (RETRY_SECONDS) before it
    fails as Unreachable. Nothing is contacted until the first operation.
    `must_exist`: a local directory must be there already (`NotFound`); a reader's open
    then creates nothing.
    """
    if isinstance(url, Store):
        return url
    if given is not None:
        options = {**given.checked(url), **options}
    if options.get("endpoint") is not None and "://" in url and not url.startswith("file://"):
        check_endpoint(url, str(options["endpoint"]))
    store = Store(url, options, credential_provider)
    if must_exist and store.is_local and not store.local_path.is_dir():
        raise NotFound(store.url, None, "no such directory")  # and none is made for a reader
    if store.is_local:
        return store  # built at first use: a read of a missing directory must not make it
    try:
        store.inner  # noqa: B018 - validate the configuration now, not on a worker later
    except (ValueError, obx.BaseError) as err:
        raise StorageError(store.url, None, f"cannot open: {err}") from err
    return store


# --------------------------------------------------------------------------- operations


def _meta_info(meta: Any) -> ObjectInfo:
    return ObjectInfo(
        key=meta["path"],
        size=int(meta["size"]),
        last_modified=meta["last_modified"],
        version=Version(meta.get("e_tag"), meta.get("version")),
    )


def _absent(store: Store) -> bool:
    """A local root that does not exist holds nothing: reads answer so without building the
    store (building makes the directory, and a read must not leave a folder behind)."""
    return store.is_local and store._inner is None and not store.local_path.exists()


def list_objects(store: Store, prefix: str = "") -> list[ObjectInfo]:
    """Every object under `prefix` (whole path segments), sorted by key."""
    if _absent(store):
        return []
    try:
        pages = obstore.list(store.inner, prefix=prefix.strip("/") or None).collect()
    except Exception as err:
        raise _translate(err, store, prefix or None) from err
    infos = [_meta_info(m) for m in pages]
    infos.sort(key=lambda i: i.key)
    return infos


def list_keys(store: Store | ZarrView, prefix: str = "") -> list[str]:
    """Keys under `prefix`, sorted (LocalStore lists in arbitrary order)."""
    return backend(store).list_keys(prefix)


def iter_keys(store: Store | ZarrView, prefix: str = "") -> Iterator[str]:
    """Keys under `prefix` page by page, unsorted: for counting huge prefixes."""
    return backend(store).iter_keys(prefix)


def list_between(store: Store | ZarrView, prefix: str, first: str, last: str) -> list[str]:
    """Keys under `prefix` from `first` to `last` (both included), sorted: one stripe's or one
    gate page's share of a huge prefix. An object store is listed from just before `first` and
    no further than `last` where its listings come sorted (every cloud store); a local folder or
    a zarr view is listed whole and filtered."""
    if not isinstance(store, Store) or store.is_local:
        return [k for k in list_keys(store, prefix) if first <= k <= last]
    if _absent(store):
        return []
    found: list[str] = []
    try:
        pages = obstore.list(store.inner, prefix=prefix.strip("/") or None, offset=_before(first))
        for page in pages:
            for meta in page:
                key = meta["path"]
                if key > last:
                    return found
                if key >= first:
                    found.append(key)
    except Exception as err:
        raise _translate(err, store, prefix or None) from err
    return found


def _before(key: str) -> str | None:
    """A string every listing offset (exclusive) may take so that `key` is listed: below `key`
    and above every shorter key that sorts before it."""
    if not key:
        return None
    head, below = key[:-1], ord(key[-1]) - 1
    if below < 0:
        return head or None
    if 0xD800 <= below <= 0xDFFF:  # a surrogate is no character of a key: the one below them
        below = 0xD7FF
    if below == ord("/") and (not head or head.endswith("/")):
        below = ord(".")  # an empty path segment is no key (and no valid offset) either
    return head + chr(below) + "\U0010ffff"


def get(store: Store | ZarrView, key: str) -> Blob:
    """Body and version from one GET."""
    return backend(store).get(key)


def get_range(store: Store, key: str, start: int, length: int) -> bytes:
    """Bytes [start, start + length) of one object."""
    if _absent(store):
        raise NotFound(store.url, key, "the store's directory does not exist")
    try:
        return bytes(obstore.get_range(store.inner, key, start=start, length=length))
    except Exception as err:
        raise _translate(err, store, key) from err


def head(store: Store, key: str) -> ObjectInfo:
    if _absent(store):
        raise NotFound(store.url, key, "the store's directory does not exist")
    try:
        return _meta_info(obstore.head(store.inner, key))
    except Exception as err:
        raise _translate(err, store, key) from err


def exists(store: Store | ZarrView, key: str) -> bool:
    return backend(store).exists(key)


PutMode = Literal["overwrite", "create"] | Version


def put(
    store: Store | ZarrView,
    key: str,
    data: bytes,
    mode: PutMode = "overwrite",
    break_lock: bool = False,
) -> Version:
    """Write one object.

    `mode="create"` fails with AlreadyExists if the key exists; a `Version` (from the GET that
    read the body) fails with PreconditionFailed if the object changed since. On a local store
    a conditional write takes a leased lock (`LockHeld` while another writer's lease runs);
    `break_lock` takes over a lock left by a writer known to be gone.
    """
    return backend(store).put(key, data, mode, break_lock)


def delete(store: Store | ZarrView, key: str) -> None:
    backend(store).delete(key)


def delete_prefix(store: Store | ZarrView, prefix: str) -> int:
    """Delete every object under `prefix`; returns how many."""
    keys = list_keys(store, prefix)
    backend(store).delete_many(keys, prefix)
    return len(keys)


# --------------------------------------------------------------------------- backends


class Backend(Protocol):
    """How the functions above reach a store's keys: through obstore (`ObjectBackend`, every
    `Store`) or through a zarr store object (`ViewBackend`, a `ZarrView`). Errors are toolkit
    errors naming the store and the key either way."""

    def list_keys(self, prefix: str) -> list[str]: ...

    def iter_keys(self, prefix: str) -> Iterator[str]: ...

    def get(self, key: str) -> Blob: ...

    def exists(self, key: str) -> bool: ...

    def put(self, key: str, data: bytes, mode: PutMode, break_lock: bool) -> Version: ...

    def delete(self, key: str) -> None: ...

    def delete_many(self, keys: list[str], prefix: str) -> None:
        """Delete `keys`, the listing of `prefix` (which an error names)."""
        ...

    def explain(self, err: Exception) -> StorageError | None:
        """What a failed zarr read of this store means, when the store knows (None: ask the
        decoder)."""
        ...


def backend(store: Store | ZarrView) -> Backend:
    """How `store` is reached: a `Store` has its object-store backend from when it was made;
    anything else is a zarr view."""
    return store.backend if isinstance(store, Store) else ViewBackend(store)


@dataclass(frozen=True)
class ObjectBackend:
    """A `Store` reached through obstore; a local root that does not exist holds nothing."""

    store: Store

    def list_keys(self, prefix: str) -> list[str]:
        return [i.key for i in list_objects(self.store, prefix)]

    def iter_keys(self, prefix: str) -> Iterator[str]:
        store = self.store
        if _absent(store):
            return
        try:
            for page in obstore.list(store.inner, prefix=prefix.strip("/") or None):
                for meta in page:
                    yield meta["path"]
        except Exception as err:
            raise _translate(err, store, prefix or None) from err

    def get(self, key: str) -> Blob:
        store = self.store
        if _absent(store):
            raise NotFound(store.url, key, "the store's directory does not exist")
        try:
            result = obstore.get(store.inner, key)
            data = bytes(result.bytes())
            meta = result.meta
        except Exception as err:
            raise _translate(err, store, key) from err
        version = Version(meta.get("e_tag"), meta.get("version"))
        return Blob(key, data, version, meta["last_modified"])

    def exists(self, key: str) -> bool:
        try:
            head(self.store, key)
        except NotFound:
            return False
        return True

    def put(self, key: str, data: bytes, mode: PutMode, break_lock: bool) -> Version:
        store = self.store
        if isinstance(mode, Version):
            if store.is_local:
                return _local_conditional_update(store, key, data, mode, break_lock)
            obmode: Any = mode.as_mode()
        elif mode in ("overwrite", "create"):
            obmode = mode
        else:
            raise ValueError(f"put mode must be 'overwrite', 'create' or a Version, not {mode!r}")
        try:
            result = obstore.put(store.inner, key, data, mode=obmode)
        except obx.AlreadyExistsError as err:
            # S3 reports a lost If-Match race as 409 on some servers: a conflict either way.
            if isinstance(mode, Version):
                raise PreconditionFailed(store.url, key, str(err).splitlines()[0]) from err
            raise _translate(err, store, key, writing=True) from err
        except Exception as err:
            raise _translate(err, store, key, writing=True) from err
        return Version(result.get("e_tag"), result.get("version"))

    def delete(self, key: str) -> None:
        try:
            obstore.delete(self.store.inner, key)
        except Exception as err:
            raise _translate(err, self.store, key, writing=True) from err

    def delete_many(self, keys: list[str], prefix: str) -> None:
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            try:
                obstore.delete(self.store.inner, batch)
            except Exception as err:
                raise _translate(err, self.store, prefix, writing=True) from err

    def explain(self, err: Exception) -> StorageError | None:
        return None  # obstore's own errors are named where they are raised


@dataclass(frozen=True)
class ViewBackend:
    """A `ZarrView` reached through zarr's store API; a view that can say what its store's
    errors mean (`explain(err, key)`, Icechunk: which of its objects is corrupt) names them."""

    view: ZarrView

    def _call(self, key: str | None, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except StorageError:
            raise
        except Exception as err:  # the zarr store's own errors (Icechunk: a key it cannot hold)
            named = self._explained(err, key)
            if named is not None:
                raise named from err
            text = str(err).strip()
            detail = text.splitlines()[0][:300] if text else type(err).__name__
            raise StorageError(self.view.url, key, detail) from err

    def _explained(self, err: Exception, key: str | None) -> StorageError | None:
        explain = getattr(self.view, "explain", None)
        return explain(err, key) if callable(explain) else None

    def _keys(self, prefix: str) -> list[str]:
        """Keys under `prefix`. A store that lists only from a node (Icechunk: a group or an
        array, not `a/c/0`) is listed from the nearest parent it accepts, then filtered."""
        zs = self.view.zarr(read_only=True)
        p = prefix.strip("/")

        async def run(at: str) -> list[str]:
            return [k async for k in zs.list_prefix(at + "/" if at else "")]

        at = p
        while True:
            try:
                keys = self._call(prefix or None, lambda at=at: _zsync(run(at)))
                break
            except StorageError:
                if not at:
                    raise
                at = at.rpartition("/")[0]
        return keys if at == p else [k for k in keys if k.startswith(p + "/")]

    def list_keys(self, prefix: str) -> list[str]:
        return sorted(self._keys(prefix))

    def iter_keys(self, prefix: str) -> Iterator[str]:
        yield from self._keys(prefix)

    def get(self, key: str) -> Blob:
        from zarr.core.buffer import default_buffer_prototype

        zs = self.view.zarr(read_only=True)
        buf = self._call(key, lambda: _zsync(zs.get(key, default_buffer_prototype())))
        if buf is None:
            raise NotFound(self.view.url, key, "no such key")
        return Blob(key, bytes(buf.to_bytes()), Version(), datetime.fromtimestamp(0))

    def exists(self, key: str) -> bool:
        zs = self.view.zarr(read_only=True)
        return bool(self._call(key, lambda: _zsync(zs.exists(key))))

    def put(self, key: str, data: bytes, mode: PutMode, break_lock: bool) -> Version:
        from zarr.core.buffer import default_buffer_prototype

        if isinstance(mode, Version):
            raise StorageError(self.view.url, key, "a zarr view cannot update conditionally")
        zs = self.view.zarr(read_only=False)
        body = default_buffer_prototype().buffer.from_bytes(data)
        if mode == "create" and self._call(key, lambda: _zsync(zs.exists(key))):
            raise AlreadyExists(self.view.url, key, "exists")
        self._call(key, lambda: _zsync(zs.set(key, body)))
        return Version()

    def delete(self, key: str) -> None:
        self.delete_many([key], key)

    def delete_many(self, keys: list[str], prefix: str) -> None:
        zs = self.view.zarr(read_only=False)

        async def run() -> None:
            for k in keys:
                await zs.delete(k)

        self._call(keys[0] if keys else None, lambda: _zsync(run()))

    def explain(self, err: Exception) -> StorageError | None:
        return self._explained(err, None)


def _zsync(coro: Any) -> Any:
    from zarr.core.sync import sync

    return sync(coro)


LOCK_TTL_S = 30.0  # a local lock's term: far longer than the head + put it guards
LOCK_WAIT_S = 5.0  # how long a writer waits for a live term before naming its owner


def _lock_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _lock_term(store: Store, lock: str) -> tenure.Term | None:
    """The term of a held lock (`tenure.read_lock`), None if it is gone."""
    try:
        blob = get(store, lock)
    except NotFound:
        return None
    return tenure.read_lock(blob.data, blob.last_modified.timestamp(), time.time(), LOCK_TTL_S)


def _take_lock(store: Store, key: str, break_lock: bool) -> str:
    """Create `<key>.toolkit-lock` holding an owner and an expiry. Waits while another writer's
    term runs; takes over a lapsed (or, with `break_lock`, any) lock, saying so; raises
    `LockHeld` naming the owner when the term outlives the wait."""
    lock = f"{key}.toolkit-lock"
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        body = tenure.lock_body(tenure.granted(_lock_owner(), time.time(), LOCK_TTL_S))
        try:
            obstore.put(store.inner, lock, body, mode="create")
            return lock
        except obx.AlreadyExistsError:
            pass
        held = _lock_term(store, lock)
        if held is None:  # released meanwhile: try again (never delete what we did not see)
            continue
        now = time.time()
        why = tenure.takeover(held, now, "broken (--break-lock)" if break_lock else None)
        if why is not None:
            logging.getLogger("toolkit.storage").warning(
                "%s/%s: lock held by %s %s: taken over", store.url, lock, held.owner, why
            )
            with contextlib.suppress(FileNotFoundError, obx.NotFoundError):
                obstore.delete(store.inner, lock)
            break_lock = False  # break what is there now, not a successor's fresh lock
            continue
        if time.monotonic() > deadline:
            raise LockHeld(store.url, key, lock, held.owner, held.left(now))
        time.sleep(0.01)


def _local_conditional_update(
    store: Store, key: str, data: bytes, expected: Version, break_lock: bool = False
) -> Version:
    """LocalStore has no if-match: serialise writers with a create-mode lock object."""
    lock = _take_lock(store, key, break_lock)
    try:
        current = head(store, key)
        if expected.etag is not None and current.version.etag != expected.etag:
            raise PreconditionFailed(
                store.url, key, f"etag is {current.version.etag}, expected {expected.etag}"
            )
        result = obstore.put(store.inner, key, data, mode="overwrite")
        return Version(result.get("e_tag"), result.get("version"))
    except NotFound as err:
        raise PreconditionFailed(store.url, key, "object no longer exists") from err
    finally:
        obstore.delete(store.inner, lock)


# --------------------------------------------------------------------------- zarr reads

# failed requests, not undecodable bytes: the object is not at fault, and reading it again one
# chunk at a time would name whichever chunk the next failure happened to hit
_NOT_DECODING = (
    obx.BaseError,
    StorageError,
    ConnectionError,
    TimeoutError,
    FileNotFoundError,
    PermissionError,
    MemoryError,
)


def _decoding_error(err: BaseException) -> bool:
    return isinstance(err, Exception) and not isinstance(err, _NOT_DECODING)


def _said(err: BaseException) -> str:
    """The decoder's first sentence (a checksum error goes on to print the bytes)."""
    text = str(err).strip()
    if not text:
        return type(err).__name__
    first = re.split(r"(?<=\.)\s+(?=[A-Z])", text.splitlines()[0])[0].rstrip(".")
    return f"{type(err).__name__}: {first[:200]}"


def get_json(store: Store | ZarrView, key: str) -> Any:
    """The JSON document at `key`; one that is not JSON is a `CorruptObject` naming it."""
    body = get(store, key).data
    try:
        return json.loads(body)
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise CorruptObject(store.url, key, "JSON", _said(err)) from err


def record_json(store: Store | ZarrView, key: str, data: bytes, what: str, fix: str) -> Any:
    """A record the toolkit keeps (a lease, a manifest) parsed from its bytes; empty or not
    JSON is a `CorruptObject` naming it, `what` it should be and `fix`, the command that
    repairs or replaces it. Its shape is the caller's to check (and to refuse the same way)."""
    if not data.strip():
        raise CorruptObject(store.url, key, what, "empty", fix)
    try:
        return json.loads(data)
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise CorruptObject(store.url, key, what, _said(err), fix) from None


@contextlib.contextmanager
def zarr_metadata(store: Store | ZarrView, path: str = "") -> Iterator[None]:
    """Around opening the zarr node at `path`: its zarr.json not being JSON is a
    `CorruptObject` naming it (zarr's own error names no key)."""
    try:
        yield
    except ValueError as err:
        if not isinstance(err, (json.JSONDecodeError, UnicodeDecodeError)):
            raise
        key = f"{path.strip('/')}/zarr.json" if path.strip("/") else "zarr.json"
        raise CorruptObject(store.url, key, "JSON", _said(err)) from err


def read(store: Store | ZarrView, arr: Any, selection: Any = Ellipsis) -> np.ndarray:
    """`arr[selection]` of a zarr array in `store`; a stored object that does not decode (bad
    bytes, truncated) is a `CorruptObject` naming it. Looked for only when a read fails: each
    object the selection touches is read alone until one fails, so a good read costs nothing."""
    try:
        return np.asarray(arr[selection])
    except Exception as err:
        named = backend(store).explain(err)
        if named is not None:
            raise named from err
        if not _decoding_error(err):
            raise
        found = _corrupt_chunk(arr, selection)
        if found is None:
            raise
        key, why = found
        raise CorruptObject(store.url, key, "a valid zarr chunk", _said(why)) from err


def _corrupt_chunk(arr: Any, selection: Any) -> tuple[str, BaseException] | None:
    """(key, error) of the first stored object under `selection` that fails to read alone; the
    key as the array's chunk key encoding spells it (a shard is one object: read whole)."""
    from zarr.core.indexing import BasicIndexer

    sel = selection if isinstance(selection, tuple) else (selection,)
    try:
        cells = [p.chunk_coords for p in BasicIndexer(sel, arr.shape, arr._chunk_grid)]
    except Exception:  # a selection that is not basic: nothing to narrow down
        return None
    for cell in cells:
        try:
            arr.get_block_selection(cell)
        except Exception as err:
            if _decoding_error(err):
                key = arr.metadata.encode_chunk_key(cell)
                return (f"{arr.path.strip('/')}/{key}" if arr.path.strip("/") else key), err
    return None
