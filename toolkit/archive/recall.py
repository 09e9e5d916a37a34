"""What a selection needs recalled (pure): per blob its tier, bytes, keys and recall estimate.

A recall brings back a whole blob, so a blob's bytes are all it holds, however few of the
selection's keys lie in it. The estimate is report's: one mount plus bytes / rate per blob,
summed (one drive, one blob after another: an upper bound when blobs share a tape).
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.archive.resolve import Resolution

__all__ = ["READABLE", "BlobRecall", "ReadPlan", "needs_recall", "summarise"]

READABLE = frozenset({"hot", "writing", "recalled", "stale"})


def needs_recall(state: str) -> bool:
    """Whether a blob in tier `state` must come back from tape before it is read: any state
    but those whose hot copy is there to read (a state added later needs a recall until it is
    listed in READABLE)."""
    return state not in READABLE


@dataclass(frozen=True)
class BlobRecall:
    blob: str
    tier: str
    bytes: int  # everything the blob holds: what a recall brings back
    keys: int  # the selection's keys in it
    recall_s: float  # 0 when it is readable now
    needs_recall: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "blob": self.blob,
            "tier": self.tier,
            "bytes": self.bytes,
            "keys": self.keys,
            "recall_s": round(self.recall_s, 3),
            "needs_recall": self.needs_recall,
        }


@dataclass(frozen=True)
class ReadPlan:
    """The recall plan of one selection of one store (`toolkit archive plan-read`)."""

    scope: str
    blobs: tuple[BlobRecall, ...]
    hot_keys: int  # keys on a hot prefix, a pin or a hot_always name
    unmanaged_keys: int  # keys no cut covers yet (they stay hot)
    unwritten_keys: int  # chunks in the selection never written: read as the fill value
    selection: Mapping[str, Any]
    rate: float
    mount: float
    keys: tuple[str, ...] = field(default=(), repr=False)  # the selection's existing keys

    @property
    def to_recall(self) -> tuple[BlobRecall, ...]:
        return tuple(b for b in self.blobs if b.needs_recall)

    @property
    def recall_bytes(self) -> int:
        return sum(b.bytes for b in self.to_recall)

    @property
    def recall_s(self) -> float:
        return sum(b.recall_s for b in self.to_recall)

    def to_dict(self) -> dict[str, Any]:
        """The JSON `plan-read --json` prints."""
        return {
            "blobs": [b.to_dict() for b in self.blobs],
            "hot_keys": self.hot_keys,
            "unmanaged_keys": self.unmanaged_keys,
            "unwritten_keys": self.unwritten_keys,
            "recall_bytes": self.recall_bytes,
            "recall_s": round(self.recall_s, 3),
            "rate_bytes_per_s": self.rate,
            "mount_s": self.mount,
            "selection": dict(self.selection),
        }

    def total(self) -> str:
        in_blobs = sum(b.keys for b in self.blobs)
        return (
            f"{len(self.to_recall)} blob(s) to recall, {self.recall_bytes} bytes, estimated "
            f"{self.recall_s:.1f} s; keys hot: {self.hot_keys} (unmanaged {self.unmanaged_keys}, "
            f"in blobs {in_blobs}, never written {self.unwritten_keys})"
        )

    def table(self) -> str:
        lines = [
            f"{self.scope}: recall estimate {self.mount:g} s per mount + bytes at "
            f"{self.rate / 1e6:g} MB/s",
            f"{'blob':28} {'tier':10} {'bytes':>14} {'keys':>8} {'recall s':>9}",
        ]
        lines += [
            f"{b.blob:28} {b.tier:10} {b.bytes:>14} {b.keys:>8} {b.recall_s:>9.1f}"
            for b in self.blobs
        ]
        return "\n".join([*lines, self.total()])

    def __str__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in ("blob", "tier", "bytes", "keys", "recall s"))
        rows = "".join(
            f"<tr><td>{html.escape(b.blob)}</td><td>{html.escape(b.tier)}</td>"
            f"<td>{b.bytes}</td><td>{b.keys}</td><td>{b.recall_s:.1f}</td></tr>"
            for b in self.blobs
        )
        return (
            f"<p>{html.escape(self.scope)}</p><table><tr>{head}</tr>{rows}</table>"
            f"<p>{html.escape(self.total())}</p>"
        )


def summarise(
    scope: str,
    keys: Iterable[str],
    resolutions: Iterable[Resolution],
    blob_bytes: Mapping[str, int],
    states: Mapping[str, str],
    *,
    rate: float,
    mount: float,
    unwritten: int = 0,
    selection: Mapping[str, Any] | None = None,
) -> ReadPlan:
    """The plan from each key's resolution, each blob's bytes and tier state (no record: hot)."""
    keys = tuple(keys)
    per_blob: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for r in resolutions:
        kinds[r.kind] += 1
        if r.kind == "blob" and r.blob is not None:
            per_blob[r.blob] += 1
    rows = []
    for blob in sorted(per_blob):
        state = states.get(blob, "hot")
        size = blob_bytes.get(blob, 0)
        recall = needs_recall(state)
        rows.append(
            BlobRecall(
                blob, state, size, per_blob[blob], mount + size / rate if recall else 0.0, recall
            )
        )
    return ReadPlan(
        scope=scope,
        blobs=tuple(rows),
        hot_keys=kinds["hot"],
        unmanaged_keys=kinds["unmanaged"],
        unwritten_keys=unwritten,
        selection=dict(selection or {}),
        rate=rate,
        mount=mount,
        keys=keys,
    )
