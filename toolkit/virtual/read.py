"""Reading a GRIB2 source: what it lists now, and one file's refs. The I/O half of `source`.

Listing is one request per directory; a file's refs are an index GET, a 16-byte header check
of its last message and the catalog match (`toolkit.virtual.sources.resolve`).
"""

from __future__ import annotations

import datetime as _dt
import posixpath
from collections.abc import Sequence

from toolkit import storage
from toolkit.virtual.refs import SourceFileCoord, VirtualRef
from toolkit.virtual.source import GribCoord, GribSource, as_datetime, as_timedelta
from toolkit.virtual.sources.resolve import resolve_file

__all__ = ["Available", "discover", "file_refs", "list_available"]

# (coord, size, last_modified): a file the source lists now
Available = tuple[SourceFileCoord, int, _dt.datetime | None]


def list_available(
    pending: Sequence[SourceFileCoord],
    *,
    store: storage.Store,
    location_prefix: str,
    require_index: bool,
) -> list[Available]:
    """Pending files `store` lists now, with the listing's size and own `last_modified`.

    One listing per distinct directory. Passing the listing's last_modified on to the refs lets
    Icechunk refuse a ref whose object was re-uploaded, instead of reading the wrong bytes.
    """
    prefix = location_prefix.rstrip("/") + "/"
    keys: dict[SourceFileCoord, str] = {}
    for c in pending:
        url = c.get_url()
        if not url.startswith(prefix):
            raise ValueError(f"{url} is not under the source prefix {prefix}")
        keys[c] = url[len(prefix) :]
    listed: dict[str, storage.ObjectInfo] = {}
    for d in sorted({posixpath.dirname(k) for k in keys.values()}):
        for info in storage.list_objects(store, d):
            listed[info.key] = info
    return [
        (c, listed[k].size, listed[k].last_modified)
        for c, k in keys.items()
        if k in listed and (not require_index or f"{k}.idx" in listed)
    ]


def discover(source: GribSource, pending: Sequence[SourceFileCoord]) -> list[Available]:
    """The pending files ready now: data object and `.idx` both listed."""
    return list_available(
        pending, store=source.store, location_prefix=source.store.url, require_index=True
    )


def file_refs(source: GribSource, c: GribCoord, size: int) -> list[VirtualRef]:
    """The file's refs: its index read, its last message's header checked, the catalog matched."""
    resolved = resolve_file(
        source.store,
        source.catalog,
        as_datetime(c.init_time),
        as_timedelta(c.lead_time),
        c.file_type,
        c.member,
        file_size=size,
    )
    if resolved.url != c.get_url():
        raise ValueError(f"resolved {resolved.url} for coord {c.get_url()}")
    base = c.out_loc()
    refs = []
    for fld, rec in resolved.fields.items():
        loc = dict(base)
        if fld.level is not None:
            loc["level"] = fld.level
        refs.append(VirtualRef.make(fld.variable.name, loc, resolved.url, rec.offset, rec.length))
    return refs
