"""Virtual chunk containers (where a dataset's source bytes live) and the credentials a
reader passes for each: anonymous unless the repo records a container as private."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal
from urllib.parse import urlparse

import icechunk as ic

from toolkit import storage

Container = ic.VirtualChunkContainer


def _prefix(url: str) -> str:
    if "://" not in url:
        raise ValueError(
            f"container prefix {url!r} must be a URL (file://, s3://, gs://, https://)"
        )
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


def http_container(url: str) -> Container:
    """A container for files a web server serves under http[s]://host/prefix/ (read with
    ranged GETs; plain http only when the URL says so)."""
    prefix = _prefix(url)
    if not prefix.startswith(("http://", "https://")):
        raise ValueError(f"http container prefix must start with http(s)://, got {url!r}")
    opts = {"allow_http": "true"} if prefix.startswith("http://") else None
    return ic.VirtualChunkContainer(prefix, ic.http_store(opts))


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
    if store.scheme in storage.HTTP_SCHEMES:
        return http_container(store.url)
    raise ValueError(
        f"no virtual chunk container for store {store.url}: use file://, s3://, gs:// or https://"
    )


def _credential(prefix: str, mode: Literal["anonymous", "env"]) -> Any:
    scheme = urlparse(prefix).scheme
    if scheme == "file":
        return ic.credentials.LocalFileSystemAccess
    if scheme in storage.HTTP_SCHEMES:
        return ic.credentials.HttpAccess  # a web server's files: read without credentials
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
