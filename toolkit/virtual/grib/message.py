"""GRIB2 message boundaries from the bytes themselves (pure: no I/O).

Every GRIB2 message opens with a 16-byte indicator section: ``GRIB``, two reserved bytes, the
discipline, the edition (2) and the total message length as a big-endian uint64; it closes with
``7777``. That is enough to walk a file without an index, and to check an index against the
file it claims to describe with a single 16-byte ranged read at its last offset.

Sub-messages (several fields in one message) repeat sections 2-7 or 3-7 or 4-7 after the
shared ones; `split_fields` rebuilds each field as a standalone message so it can be decoded
as itself rather than as its first sibling.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from toolkit.virtual.grib.errors import (
    InvalidMessageError,
    StaleIndexError,
    TruncatedMessageError,
)

INDICATOR_SIZE = 16
MAGIC = b"GRIB"
END = b"7777"
_MIN_MESSAGE = INDICATOR_SIZE + len(END)


@dataclass(frozen=True)
class Indicator:
    """Section 0 of a GRIB2 message."""

    discipline: int
    edition: int
    length: int


@dataclass(frozen=True)
class MessageSpan:
    """One message found by scanning: its 1-based number, byte offset and total length."""

    number: int
    offset: int
    length: int
    discipline: int

    @property
    def end(self) -> int:
        return self.offset + self.length


def parse_indicator(header: bytes, url: str = "<bytes>", offset: int = 0) -> Indicator:
    """Parse the 16-byte indicator section; raise InvalidMessageError naming url@offset."""
    if len(header) < INDICATOR_SIZE:
        raise InvalidMessageError(
            url, f"only {len(header)} bytes at offset {offset}, a GRIB2 header needs 16"
        )
    if header[:4] != MAGIC:
        raise InvalidMessageError(
            url, f"no GRIB message starts at offset {offset} (found {bytes(header[:4])!r})"
        )
    edition = header[7]
    if edition != 2:
        raise InvalidMessageError(
            url,
            f"message at offset {offset} is GRIB edition {edition}, only edition 2 is supported",
        )
    (length,) = struct.unpack(">Q", header[8:16])
    if length < _MIN_MESSAGE:
        raise InvalidMessageError(url, f"message at offset {offset} claims length {length}")
    return Indicator(discipline=header[6], edition=edition, length=length)


def scan_messages(data: bytes | memoryview, url: str = "<bytes>") -> list[MessageSpan]:
    """Every message of a whole file, walked header to header (no index needed).

    Raises TruncatedMessageError when a header says its message runs past the end of the data
    and InvalidMessageError when anything but a GRIB2 message sits between messages, or when
    there is no message at all (an empty object is a failed upload, not an empty file).
    """
    view = memoryview(data)
    spans: list[MessageSpan] = []
    pos = 0
    size = len(view)
    if size == 0:
        raise InvalidMessageError(url, "empty file: no GRIB message")
    while pos < size:
        ind = parse_indicator(bytes(view[pos : pos + INDICATOR_SIZE]), url, pos)
        if pos + ind.length > size:
            raise TruncatedMessageError(
                url,
                f"message {len(spans) + 1} at offset {pos} declares {ind.length} bytes but the "
                f"file ends after {size - pos}",
            )
        if bytes(view[pos + ind.length - 4 : pos + ind.length]) != END:
            raise InvalidMessageError(
                url, f"message {len(spans) + 1} at offset {pos} does not end with '7777'"
            )
        spans.append(MessageSpan(len(spans) + 1, pos, ind.length, ind.discipline))
        pos += ind.length
    return spans


def check_message_at(url: str, offset: int, header: bytes, file_size: int) -> Indicator:
    """The stale-index check: a fitting edition-2 message must start at `offset`.

    `header` is the 16 bytes read at `offset` of the data file as it is now. Fitting means the
    length it declares stays inside `file_size`; it need not end at EOF, since a healthy index
    may list fewer messages than the file holds. Raises StaleIndexError (no message starts
    there) or TruncatedMessageError (one does, but it does not fit), both naming the file.
    """
    if offset >= file_size:
        raise StaleIndexError(
            url, f"index offset {offset} is at or past the end of the file ({file_size} bytes)"
        )
    try:
        ind = parse_indicator(header, url, offset)
    except InvalidMessageError as err:
        raise StaleIndexError(
            url, f"index offset {offset} does not point at a message: {err.reason}"
        ) from err
    if offset + ind.length > file_size:
        raise TruncatedMessageError(
            url,
            f"message at index offset {offset} declares {ind.length} bytes, past the end of the "
            f"file ({file_size} bytes): truncated, or the index is stale",
        )
    return ind


# ----------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class Section:
    number: int
    offset: int  # relative to the message start
    length: int


def sections(message: bytes | memoryview, url: str = "<bytes>") -> list[Section]:
    """Sections 1..7 of one message, in file order (section 0 and the trailing 7777 excluded)."""
    view = memoryview(message)
    ind = parse_indicator(bytes(view[:INDICATOR_SIZE]), url)
    if len(view) < ind.length:
        raise TruncatedMessageError(url, f"message declares {ind.length} bytes, have {len(view)}")
    out: list[Section] = []
    pos = INDICATOR_SIZE
    stop = ind.length - len(END)
    while pos < stop:
        (length,) = struct.unpack(">I", view[pos : pos + 4])
        number = view[pos + 4]
        if length < 5 or pos + length > stop or not 1 <= number <= 7:
            raise InvalidMessageError(url, f"bad section {number} of length {length} at byte {pos}")
        out.append(Section(number, pos, length))
        pos += length
    return out


BITMAP_FOLLOWS = 0
BITMAP_PREVIOUS = 254  # section 6 indicator: "the previously defined bit-map applies"


def split_fields(message: bytes, url: str = "<bytes>") -> list[bytes]:
    """Each field of a (possibly multi-field) message as a standalone single-field message.

    A field is the section 7 that closes it plus the latest sections 1-6 seen before it, which
    is how GRIB2 defines repetition. A section 6 that only says "the previous bit-map applies"
    (indicator 254) means nothing on its own, so the standalone field gets that bit-map.
    """
    view = memoryview(message)
    ind = parse_indicator(bytes(view[:INDICATOR_SIZE]), url)
    latest: dict[int, bytes] = {}
    bitmap: bytes | None = None  # the last section 6 that carried a bit-map
    fields: list[bytes] = []
    for sec in sections(message, url):
        body = bytes(view[sec.offset : sec.offset + sec.length])
        if sec.number == 6 and len(body) >= 6:
            if body[5] == BITMAP_FOLLOWS:
                bitmap = body
            elif body[5] == BITMAP_PREVIOUS:
                if bitmap is None:
                    raise InvalidMessageError(
                        url, f"section 6 at byte {sec.offset} reuses a bit-map never defined"
                    )
                body = bitmap
        latest[sec.number] = body
        if sec.number == 7:
            payload = b"".join(latest[n] for n in range(1, 8) if n in latest)
            total = INDICATOR_SIZE + len(payload) + len(END)
            head = bytes(view[:8]) + struct.pack(">Q", total)
            fields.append(head + payload + END)
    if not fields:
        raise InvalidMessageError(url, f"message (discipline {ind.discipline}) has no data section")
    return fields


def join_fields(messages: list[bytes]) -> bytes:
    """Merge single-field messages that share sections 0-3 into one multi-field message.

    The inverse of `split_fields` for messages on one grid: sections 1 and 3 come from the
    first, and each field contributes its sections 4-7. Used to produce sub-message files.
    """
    if not messages:
        raise ValueError("join_fields needs at least one message")
    first = messages[0]
    view = memoryview(first)
    secs = {s.number: s for s in sections(first)}
    body = [
        bytes(view[secs[n].offset : secs[n].offset + secs[n].length])
        for n in (1, 2, 3)
        if n in secs
    ]
    for msg in messages:
        mv = memoryview(msg)
        for sec in sections(msg):
            if sec.number >= 4:
                body.append(bytes(mv[sec.offset : sec.offset + sec.length]))
    payload = b"".join(body)
    total = INDICATOR_SIZE + len(payload) + len(END)
    return bytes(view[:8]) + struct.pack(">Q", total) + payload + END
