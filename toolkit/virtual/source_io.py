"""Reading a GRIB2 source: what it lists now, and one file's refs. The I/O half of `source`.

Listing is one request per directory; a file's refs are, with a sidecar (`index` "wgrib2" or
"ecmwf"), its GET and a 16-byte ranged GET at its last message (`fetch`, I/O, run in threads),
then the parse, the stale-header check and the catalog match (`refs_from`, CPU, run in one
thread: threads only contend for the GIL). Without one ("scan", "whole") `fetch` reads the
messages' own sections and hands `refs_from` the inventory they make.
"""

from __future__ import annotations

import datetime as _dt
import posixpath
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from toolkit import storage
from toolkit.virtual.grib.errors import InvalidIndexError, StaleIndexError
from toolkit.virtual.grib.fetch import read_header, walk, whole
from toolkit.virtual.grib.index import Inventory, check_init, with_byte_ranges
from toolkit.virtual.grib.kinds import last_offset_hint, parse_sidecar, sidecar_key
from toolkit.virtual.gribsource import GribCoord, GribSource, as_datetime, as_timedelta
from toolkit.virtual.refs import SourceFileCoord, VirtualRef

__all__ = [
    "Available",
    "Fetched",
    "discover",
    "fetch",
    "file_refs",
    "list_available",
    "refs_from",
    "without_index",
]

LIST_CONCURRENCY = 16  # directory listings in flight at once (a write loop passes its own)

# (coord, size, last_modified): a file the source lists now
Available = tuple[SourceFileCoord, int, _dt.datetime | None]


def list_available(
    pending: Sequence[SourceFileCoord],
    *,
    store: storage.Store,
    location_prefix: str,
    require_index: bool,
    concurrency: int = LIST_CONCURRENCY,
    index: str = "wgrib2",
    discovery: str = "list",
) -> list[Available]:
    """Pending files `store` lists now, with the listing's size and own `last_modified`.

    One listing per distinct directory, `concurrency` of them at a time (a backfill's files
    sit in one directory per init time: listed one after another, a 50 ms round trip made
    20,000 files' 834 listings cost 42 s before the first GET). Passing the listing's last_modified on to the refs lets
    Icechunk refuse a ref whose object was re-uploaded, instead of reading the wrong bytes.
    """
    prefix = location_prefix.rstrip("/") + "/"
    keys: dict[SourceFileCoord, str] = {}
    for c in pending:
        url = c.get_url()
        if not url.startswith(prefix):
            raise ValueError(f"{url} is not under the source prefix {prefix}")
        keys[c] = url[len(prefix) :]
    if discovery == "probe":
        listed = _probed(store, keys.values(), index if require_index else None)
    else:
        listed = {}
        dirs = sorted({posixpath.dirname(k) for k in keys.values()})
        with ThreadPoolExecutor(max(1, min(concurrency, len(dirs)))) as pool:
            for infos in pool.map(lambda d: storage.list_objects(store, d), dirs):
                for info in infos:
                    listed[info.key] = info
    return [
        (c, listed[k].size, listed[k].last_modified)
        for c, k in keys.items()
        if k in listed and (not require_index or _sidecar_listed(sidecar_key(index, k), listed))
    ]


def _sidecar_listed(sidecar: str | None, listed: dict[str, storage.ObjectInfo]) -> bool:
    return sidecar is None or sidecar in listed


PROBE_CONCURRENCY = 32  # HEAD requests in flight at once when a source cannot be listed


def _probed(
    store: storage.Store, keys: Iterable[str], index: str | None
) -> dict[str, storage.ObjectInfo]:
    """`discovery="probe"`: the keys the template expects, asked for one by one (a HEAD each,
    and one for its sidecar once the file is there), for sources that cannot be listed (an
    HTTP server, a bucket without LIST). Only the window's files are asked: a backfill's
    stripe or an update's few cycles, never the archive."""

    def head(key: str) -> dict[str, storage.ObjectInfo]:
        found: dict[str, storage.ObjectInfo] = {}
        for k in (key, None if index is None else sidecar_key(index, key)):
            if k is None:
                break
            try:
                found[k] = storage.head(store, k)
            except storage.NotFound:
                break  # no file, or no sidecar yet: what a listing would not show either
        return found

    wanted = list(keys)
    listed: dict[str, storage.ObjectInfo] = {}
    with ThreadPoolExecutor(max(1, min(PROBE_CONCURRENCY, len(wanted)))) as pool:
        for found in pool.map(head, wanted):
            listed.update(found)
    return listed


def discovery_of(source: GribSource) -> str:
    """How `source`'s files are found: as its dataset says, and always by probing on a web
    server (`https://`), which has no listing to ask."""
    return "probe" if source.store.scheme in storage.HTTP_SCHEMES else source.catalog.discovery


def discover(
    source: GribSource, pending: Sequence[SourceFileCoord], concurrency: int = LIST_CONCURRENCY
) -> list[Available]:
    """The pending files ready now: the data object listed, and its sidecar if it has one."""
    return list_available(
        pending,
        store=source.store,
        location_prefix=source.store.url,
        require_index=True,
        concurrency=concurrency,
        index=source.catalog.index,
        discovery=discovery_of(source),
    )


def without_index(source: GribSource, coords: Sequence[SourceFileCoord]) -> set[str]:
    """Keys of `coords` whose data object is listed while its `.idx` is not: published, but
    not readable until the index follows."""
    listed = list_available(
        coords,
        store=source.store,
        location_prefix=source.store.url,
        require_index=False,
        discovery=discovery_of(source),
    )
    ready = {c.key for c, _, _ in discover(source, [c for c, _, _ in listed])}
    return {c.key for c, _, _ in listed if c.key not in ready}


@dataclass(frozen=True)
class Fetched:
    """A file's bytes the refs need, fetched: its sidecar and the 16 bytes at its last offset,
    or (no sidecar) the inventory its messages' own sections make."""

    key: str
    size: int
    index: bytes
    last: int | None  # the last record's offset as the raw sidecar spells it
    header: bytes
    sidecar: str | None = None  # the sidecar's key
    walked: Inventory | None = None  # index "scan" / "whole": read from the messages


def fetch(source: GribSource, c: GribCoord, size: int) -> Fetched:
    """The I/O half of `file_refs` (threads overlap it): the sidecar GET, then the 16-byte
    ranged GET at its last record's offset, read off its last line without parsing the rest
    (`refs_from` checks it against the full parse); without a sidecar, the messages' walk."""
    kind = source.catalog.index
    key = source.catalog.data_key(
        as_datetime(c.init_time), as_timedelta(c.lead_time), c.file_type, c.member
    )
    sidecar = sidecar_key(kind, key)
    if sidecar is None:
        walked = (whole if kind == "whole" else walk)(source.store, key, size)
        return Fetched(key, size, b"", None, b"", None, walked)
    index = bytes(storage.get(source.store, sidecar).data)
    last = last_offset_hint(kind, index)
    header = b"" if last is None else read_header(source.store, key, last, size, sidecar)
    return Fetched(key, size, index, last, header, sidecar)


def refs_from(
    source: GribSource, c: GribCoord, got: Fetched, modified: _dt.datetime | None = None
) -> list[VirtualRef]:
    """The CPU half of `file_refs`: parse and validate the index, prove it against the data
    file's header (stale check), check its init time, match the catalog, make the refs, each
    stamped with the listing's `modified` (made so, not copied after: a copy per ref was 5%
    of a write loop's time on local disk)."""
    url = c.get_url()
    closed = got.walked if got.walked is not None else _closed(source, url, got)
    check_init(closed, as_datetime(c.init_time), url)
    lines = source.catalog.match_lines(
        closed, c.file_type, as_timedelta(c.lead_time), c.member, url=url
    )
    pinned = tuple(sorted(c.out_loc().items()))  # a ref's out_loc, as VirtualRef keeps it
    refs = []
    for fld, i in lines:
        name = fld.variable.name
        if c.data_vars and name not in c.data_vars:
            continue  # an analysis reads this variable from another lead's file
        offset, length = closed.span(i)
        loc = pinned if fld.level is None else tuple(sorted((*pinned, ("level", fld.level))))
        refs.append(VirtualRef.make(name, loc, url, offset, length, modified))
    return refs


def _closed(source: GribSource, url: str, got: Fetched) -> Inventory:
    """The sidecar parsed, its ranges closed against the data file's header at its last
    offset: a sidecar that does not describe the file as it is now refuses the whole file."""
    assert got.sidecar is not None
    sidecar_url = storage.object_url(source.store, got.sidecar)
    try:
        text = got.index.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidIndexError(
            sidecar_url, f"not UTF-8 text ({err.reason} at byte {err.start})"
        ) from None
    inventory = parse_sidecar(source.catalog.index, text, sidecar_url)
    header = got.header
    if inventory.last_offset != got.last:  # the raw last line was not the last record
        header = read_header(source.store, got.key, inventory.last_offset, got.size, got.sidecar)
    listed = inventory.last_length  # ECMWF's sidecar gives every length, wgrib2's not the last
    closed = with_byte_ranges(inventory, url, got.size, header)
    if listed is not None and closed.last_length != listed:
        raise StaleIndexError(
            url,
            f"the sidecar says its last message is {listed} bytes, the file's header at "
            f"{inventory.last_offset} says {closed.last_length}",
        )
    return closed


def file_refs(source: GribSource, c: GribCoord, size: int) -> list[VirtualRef]:
    """The file's refs: its index read, its last message's header checked, the catalog matched."""
    return refs_from(source, c, fetch(source, c, size))
