"""One source file -> the index record of every field it owns, proven against the data file.

This is the I/O half of a NOAA virtual job's ``file_refs``: GET the ``.idx``, check its last
offset against the data file's own header (one 16-byte ranged GET), close the byte ranges and
match the catalog. Any GribSourceError means "discard the whole file" and names it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from toolkit import storage
from toolkit.virtual.grib.fetch import locate, object_url
from toolkit.virtual.grib.index import IndexRecord, check_init
from toolkit.virtual.sources.noaa import Field, GribVariable, Member, NoaaSource


@dataclass(frozen=True)
class ResolvedFile:
    """Where each field of one file lives: `url` + (record.offset, record.length)."""

    url: str
    size: int
    fields: dict[Field, IndexRecord]


def resolve_file(
    store: storage.Store,
    source: NoaaSource,
    init: datetime,
    lead: timedelta | int,
    file_type: str,
    member: Member = None,
    *,
    file_size: int | None = None,
    variables: Iterable[GribVariable] | None = None,
) -> ResolvedFile:
    """Resolve one file of `source` whose bucket is `store` (keys from `source.data_key`).

    `file_size` (from the listing that found the file) saves a HEAD request. Besides the
    stale-index check, an index dated for another cycle than `init` is refused.
    """
    key = source.data_key(init, lead, file_type, member)
    if file_size is None:
        file_size = storage.head(store, key).size
    records = locate(store, key, f"{key}.idx", file_size=file_size)
    url = object_url(store, key)
    check_init(records, init, url)
    fields = source.match(records, file_type, lead, member, url=url, variables=variables)
    return ResolvedFile(url, file_size, fields)
