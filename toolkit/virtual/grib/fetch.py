"""Reading GRIB sources through toolkit.storage: the index GET, the 16-byte header GET, scans.

`locate` is what a virtual job's file_refs needs per source file: the index parsed, checked
against the data file's own header at the last offset (one ranged GET), ranges closed.
"""

from __future__ import annotations

from toolkit import storage
from toolkit.virtual.grib.errors import InvalidIndexError, MissingDataFileError
from toolkit.virtual.grib.index import Inventory, last_offset, scan_index, with_byte_ranges
from toolkit.virtual.grib.message import INDICATOR_SIZE, MessageSpan, scan_messages


def object_url(store: storage.Store, key: str) -> str:
    """The canonical URL of `key` in `store` (what references point at)."""
    return storage.object_url(store, key)


def read_index(store: storage.Store, key: str) -> Inventory:
    """GET and parse an index; its last record's length stays open (see `locate`)."""
    url = object_url(store, key)
    data = storage.get(store, key).data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidIndexError(url, f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    return scan_index(text, url)


def read_header(
    store: storage.Store, data_key: str, offset: int, file_size: int, index_key: str
) -> bytes:
    """The (up to) 16 bytes of the data file at `offset`, where its index says the last message
    starts; empty when that is at or past the end (the stale check then refuses the file)."""
    if not 0 <= offset < file_size:
        return b""
    try:
        return bytes(
            storage.get_range(store, data_key, offset, min(INDICATOR_SIZE, file_size - offset))
        )
    except storage.NotFound:
        raise MissingDataFileError(
            object_url(store, data_key), f"index {index_key} exists but the data file does not"
        ) from None


def locate(
    store: storage.Store,
    data_key: str,
    index_key: str | None = None,
    *,
    file_size: int | None = None,
    index_store: storage.Store | None = None,
) -> Inventory:
    """Records of `data_key` with byte ranges, proven against the data file as it is now.

    `file_size` (from the listing that discovered the file) saves a HEAD. Raises
    StaleIndexError / InvalidIndexError / MissingDataFileError naming the file.
    """
    index_key = index_key or f"{data_key}.idx"
    records = read_index(index_store or store, index_key)
    url = object_url(store, data_key)
    if file_size is None:
        try:
            file_size = storage.head(store, data_key).size
        except storage.NotFound:
            raise MissingDataFileError(
                url, f"index {index_key} exists but the data file does not"
            ) from None
    header = read_header(store, data_key, last_offset(records), file_size, index_key)
    return with_byte_ranges(records, url, file_size, header)


def scan(store: storage.Store, key: str) -> list[MessageSpan]:
    """Message boundaries of a whole data file, found from its headers (reads the file)."""
    return scan_messages(storage.get(store, key).data, object_url(store, key))
