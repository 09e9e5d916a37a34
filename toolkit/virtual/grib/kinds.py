"""How a dataset finds each file's messages: its `index=` kind, decided once (pure: no I/O).

- ``"wgrib2"``: a wgrib2 inventory beside the file, ``KEY.idx`` (NOAA's archives).
- ``"ecmwf"``: ECMWF's JSON-lines ``.index`` beside the file, the file's extension replaced
  (``...-oper-fc.grib2`` -> ``...-oper-fc.index``).
- ``"scan"``: no sidecar: the file's messages walked with ranged reads, each message's
  sections 0-4 read once (`identity`), one request per message that a read does not cover.
- ``"whole"``: one message per object (single-field files, as ECCC and DWD publish them): one
  ranged read of its first sections.

Every kind ends in the same `Inventory`, spelled as wgrib2 prints it, so a catalog's match, the
stale checks and the refs do not depend on the kind.
"""

from __future__ import annotations

import posixpath

from toolkit.virtual.grib.ecmwf_index import scan_ecmwf_index
from toolkit.virtual.grib.index import Inventory, scan_index

__all__ = ["INDEX_KINDS", "check_kind", "last_offset_hint", "parse_sidecar", "sidecar_key"]

INDEX_KINDS: dict[str, str] = {
    "wgrib2": "a wgrib2 .idx beside each file",
    "ecmwf": "ECMWF's .index (JSON lines) beside each file",
    "scan": "no sidecar: each file's messages read from their own sections",
    "whole": "no sidecar: one message per object",
}


def check_kind(kind: str, dataset: str = "a dataset") -> str:
    """`kind` when it is one of INDEX_KINDS, else a ValueError naming the choices."""
    if kind not in INDEX_KINDS:
        raise ValueError(
            f"{dataset}: index={kind!r} is not a kind of index; use one of "
            + ", ".join(repr(k) for k in INDEX_KINDS)
        )
    return kind


def sidecar_key(kind: str, key: str) -> str | None:
    """The sidecar of the data file at `key`, or None for the kinds without one."""
    if kind == "wgrib2":
        return f"{key}.idx"
    if kind == "ecmwf":
        return posixpath.splitext(key)[0] + ".index"
    return None


def parse_sidecar(kind: str, text: str, url: str) -> Inventory:
    """A sidecar's text as an inventory (the last length open for wgrib2's, which lacks it)."""
    if kind == "ecmwf":
        return scan_ecmwf_index(text, url)
    return scan_index(text, url)


def last_offset_hint(kind: str, raw: bytes) -> int | None:
    """The last record's offset read off the sidecar's last line without parsing the rest (the
    stale check's ranged read starts while the parse runs; the parse checks it)."""
    try:
        last = raw.rstrip().rsplit(b"\n", 1)[-1]
        if kind == "ecmwf":
            start = last.index(b'"_offset"')
            digits = last[start + 9 :].lstrip(b": ").split(b",", 1)[0].split(b"}", 1)[0]
            return int(digits)
        return int(last.split(b":", 2)[1])
    except (IndexError, ValueError):
        return None  # the full parse says what is wrong
