"""Reading GRIB sources through toolkit.storage: the index GET, the 16-byte header GET, scans,
and the two ways without a sidecar (`walk` for index="scan", `whole`).

`locate` is what a virtual job's file_refs needs per source file: the index parsed, checked
against the data file's own header at the last offset (one ranged GET), ranges closed.
"""

from __future__ import annotations

from toolkit import storage
from toolkit.virtual.grib.errors import (
    InvalidIndexError,
    InvalidMessageError,
    MissingDataFileError,
    StaleIndexError,
    TruncatedMessageError,
)
from toolkit.virtual.grib.identity import HEAD_BYTES, Identity, identify, inventory_of, sections_end
from toolkit.virtual.grib.index import Inventory, last_offset, scan_index, with_byte_ranges
from toolkit.virtual.grib.message import (
    INDICATOR_SIZE,
    MessageSpan,
    parse_indicator,
    scan_messages,
)


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


def walk(store: storage.Store, key: str, file_size: int, read: int = HEAD_BYTES) -> Inventory:
    """`index="scan"`: the file's messages found from their own headers, without a sidecar.

    Each message's section 0 gives its length, so the next one's offset; its sections 1-4 say
    what it is (`identify`). One ranged read of `read` bytes per message (more only when its
    sections 1-4 are longer), none for a message whose head a previous read already holds:
    a file of N messages costs about N requests, whatever its size."""
    url = object_url(store, key)
    if file_size <= 0:
        raise InvalidMessageError(url, "empty file: no GRIB message")
    buf_at, buf = 0, b""

    def at(pos: int, n: int) -> bytes:
        """`n` bytes (fewer at the end of the file) from `pos`: from the last read when it
        holds them, else from a new one of at least `read` bytes."""
        nonlocal buf_at, buf
        n = min(n, file_size - pos)
        if not (buf_at <= pos and pos + n <= buf_at + len(buf)):
            buf_at, buf = (
                pos,
                bytes(storage.get_range(store, key, pos, min(max(read, n), file_size - pos))),
            )
            if len(buf) < n:
                raise TruncatedMessageError(url, f"read {len(buf)} of {n} bytes at offset {pos}")
        return buf[pos - buf_at : pos - buf_at + max(n, read)]

    found: list[tuple[int, int, Identity]] = []
    pos = 0
    while pos < file_size:
        head = at(pos, INDICATOR_SIZE)
        length = parse_indicator(head[:INDICATOR_SIZE], url, pos).length
        if pos + length > file_size:
            raise TruncatedMessageError(
                url,
                f"message {len(found) + 1} at offset {pos} declares {length} bytes but the "
                f"file ends after {file_size - pos}",
            )
        while (need := min(sections_end(head, url, pos), length)) > len(head):
            head = at(pos, max(need, 2 * len(head)))
        found.append((pos, length, identify(head[:length], url, pos)))
        pos += length
    return inventory_of(url, found)


def whole(store: storage.Store, key: str, file_size: int, read: int = HEAD_BYTES) -> Inventory:
    """`index="whole"`: an object that is one message, proven so by its own length (an object
    holding more, or less, than its message is refused, like a stale sidecar)."""
    url = object_url(store, key)
    inventory = walk(store, key, file_size, read)
    if len(inventory) != 1:
        raise StaleIndexError(
            url, f"holds {len(inventory)} GRIB messages; index='whole' reads one per object"
        )
    return inventory
