"""Blob ids: one rule for the validator, the builder and the schema.

Ids are join keys against tier state and tape addresses, so how they are derived is frozen
(tests/archive/test_ids.py holds golden values). A name that is already a valid id is used as is;
any other name (upper case, "/", non-ASCII) is folded to ASCII and suffixed with a short hash of
its UTF-8 bytes, so two different names never map to the same id.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

__all__ = ["ID_PATTERN", "ID_RE", "blob_id", "bucket_id", "is_id", "slug"]

ID_PATTERN = r"^[a-z0-9_]+$"
ID_RE = re.compile(ID_PATTERN)

# Prefixes of each kind of cut; the bucket number is always the last "_" segment.
WHOLE, GROUP, BUCKET = "w", "g", "b"


def is_id(text: object) -> bool:
    return isinstance(text, str) and ID_RE.fullmatch(text) is not None


_HASHED = re.compile(r"_[0-9a-f]{8}$")


def slug(name: str) -> str:
    """A deterministic id fragment for an array path (injective over names).

    Names that are valid ids stay as they are unless they end like a hashed slug, which is what
    keeps the mapping injective.
    """
    if is_id(name) and not _HASHED.search(name):
        return name
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    folded = re.sub(r"[^a-z0-9]+", "_", folded).strip("_")
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    return f"{folded}_{digest}" if folded else f"x_{digest}"


def blob_id(kind: str, first_array: str, cut: int = 1) -> str:
    """Id of a blob named after the first array (by path) it holds and the cut that made it.

    Members of one cut's blobs are disjoint, so (kind, cut, first array) names one blob for the
    life of its scope. The first cut keeps the original form (`w_tas`); a later cut puts its
    number after the kind (`w2_tas`, `b3_tas`), which no first-cut id can spell (their second
    character is always `_`), so a re-cut never reuses an id that tier state or a tape address
    already joins on."""
    if kind not in (WHOLE, GROUP, BUCKET):
        raise ValueError(f"blob kind must be one of w, g, b, not {kind!r}")
    if isinstance(cut, bool) or not isinstance(cut, int) or cut < 1:
        raise ValueError(f"cut must be an integer >= 1, not {cut!r}")
    return f"{kind}{cut if cut > 1 else ''}_{slug(first_array)}"


def bucket_id(base: str, index: int, width: int) -> str:
    """`<base>_<index // width>`: arithmetic, so an append needs no manifest change."""
    return f"{base}_{index // width}"
