"""Per-blob sizes, object counts, recall estimates and event counts (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from toolkit.archive.discover import Event
from toolkit.archive.resolve import Trie

__all__ = ["BlobStats", "summarise"]


@dataclass
class BlobStats:
    scope: str | None
    blob: str | None
    kind: str
    bytes: int = 0
    objects: int = 0
    reads: int = 0
    writes: int = 0
    recall_s: float = field(default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "blob": self.blob,
            "kind": self.kind,
            "bytes": self.bytes,
            "objects": self.objects,
            "recall_s": round(self.recall_s, 3),
            "reads": self.reads,
            "writes": self.writes,
        }


def summarise(
    trie: Trie,
    objects: Iterable[tuple[str, int]],
    events: Iterable[Event] = (),
    rate: float = 300e6,
    mount_s: float = 90.0,
) -> list[BlobStats]:
    """Group objects (and events) by resolution; a blob's recall = one mount + bytes / rate."""
    rows: dict[tuple[str | None, str | None, str], BlobStats] = {}

    def row(r: Any) -> BlobStats:
        ident = (r.scope, r.blob, r.kind)
        if ident not in rows:
            rows[ident] = BlobStats(r.scope, r.blob, r.kind)
        return rows[ident]

    listed = list(objects)
    for (_, size), r in zip(listed, trie.lookup_many(k for k, _ in listed), strict=True):
        s = row(r)
        s.bytes += size
        s.objects += 1
    evs = list(events)
    for e, r in zip(evs, trie.lookup_many(e.key for e in evs), strict=True):
        s = row(r)
        if e.event == "read":
            s.reads += 1
        elif e.event == "write":
            s.writes += 1
    for s in rows.values():
        s.recall_s = mount_s + s.bytes / rate if s.kind == "blob" else 0.0
    return sorted(
        rows.values(), key=lambda s: (s.kind != "blob", s.scope or "", s.blob or "", s.kind)
    )
