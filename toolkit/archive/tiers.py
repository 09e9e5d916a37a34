"""Tier state (pure): where each blob of a scope is on the storage tiers, and how it is used.

One document per scope, `<scope>/tiers.json` beside its manifest. Per blob id (a bucketed
blob's ids are per bucket, `b_tas_3`, as `resolve` answers them): its state, the bytes and
objects it held when it last changed state, and read/write counts (and bytes) from events.

States follow what a tape system does with a blob:

    hot -> writing -> archived -> recalling -> recalled -> archived ...
    archived | recalling | recalled -> stale -> writing -> archived

`writing -> hot` (a failed or abandoned write) and `recalling -> archived` (a failed recall)
go back. A write into a blob whose copy is on tape makes that copy out of date: the blob goes
`stale` by itself (a write event, or a scan that finds an object changed since the blob was
archived) and counts the writes the tape copy misses, until the tape system writes it again
(`stale -> writing -> archived`). Marking a blob with the state it already has changes nothing,
so a hook may retry. A blob with no record is hot: nothing has been written to the cold tier.

Counts are idempotent under replayed deliveries: each document keeps the identities of the
last `KEEP_APPLIED` events it counted and skips them when they come again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from toolkit.archive.ids import is_id
from toolkit.archive.model import Blob, Manifest

__all__ = [
    "FORMAT",
    "KEEP_APPLIED",
    "ON_TAPE",
    "STATES",
    "TRANSITIONS",
    "BlobTier",
    "Counts",
    "TierError",
    "TierState",
    "TransitionRefused",
    "Usage",
    "blob_of",
]

FORMAT = "toolkit-archive-tiers/1"
State = Literal["hot", "writing", "archived", "recalling", "recalled", "stale"]
STATES: tuple[State, ...] = ("hot", "writing", "archived", "recalling", "recalled", "stale")
TRANSITIONS: Mapping[str, frozenset[str]] = {
    "hot": frozenset({"writing"}),
    "writing": frozenset({"archived", "hot"}),
    "archived": frozenset({"recalling", "stale"}),
    "recalling": frozenset({"recalled", "archived", "stale"}),
    "recalled": frozenset({"archived", "recalling", "stale"}),
    "stale": frozenset({"writing"}),
}
ON_TAPE: frozenset[str] = frozenset({"archived", "recalling", "recalled"})  # a copy to go stale
KEEP_APPLIED = 10_000


class TierError(ValueError):
    """A tier document or a state change is invalid; names the scope, the blob and the fix."""


class TransitionRefused(RuntimeError):
    """The blob's recorded state cannot go to the one asked for (a failed check, not a typo)."""


@dataclass(frozen=True)
class Usage:
    """Event counts for one blob."""

    reads: int = 0
    writes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def __radd__(self, other: int) -> Usage:  # sum() starts from 0
        return self if other == 0 else NotImplemented

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.reads + other.reads,
            self.writes + other.writes,
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
        )


@dataclass(frozen=True)
class BlobTier:
    state: State = "hot"
    bytes: int = 0  # what the blob held when its state last changed
    objects: int = 0
    since: str | None = None  # ISO time of the last state change
    usage: Usage = field(default_factory=Usage)
    stale_writes: int = 0  # writes the tape copy misses (counted while stale)

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "bytes": self.bytes,
            "objects": self.objects,
            "since": self.since,
            "stale_writes": self.stale_writes,
            "reads": self.usage.reads,
            "writes": self.usage.writes,
            "bytes_read": self.usage.bytes_read,
            "bytes_written": self.usage.bytes_written,
        }


Counts = Mapping[str, Usage]  # blob id -> usage to add


@dataclass(frozen=True)
class TierState:
    """The tier document of one scope. `version` grows by one with every stored change."""

    scope: str
    version: int = 0
    blobs: Mapping[str, BlobTier] = field(default_factory=dict)
    applied: tuple[str, ...] = ()  # identities of the last counted events, oldest first
    format: str = FORMAT

    def __post_init__(self) -> None:
        where = f"tier state of scope {self.scope!r}"
        if self.format != FORMAT:
            raise TierError(f"{where}: format must be {FORMAT!r}, got {self.format!r}")
        for blob, tier in self.blobs.items():
            if not is_id(blob):
                raise TierError(f"{where}: {blob!r} is not a blob id")
            if tier.state not in STATES:
                raise TierError(
                    f"{where}: blob {blob}: state {tier.state!r} is not one of {', '.join(STATES)}"
                )
        object.__setattr__(self, "blobs", dict(sorted(self.blobs.items())))
        object.__setattr__(self, "applied", tuple(self.applied))

    def tier(self, blob: str) -> BlobTier:
        return self.blobs.get(blob, BlobTier())

    def mark(
        self,
        blob: str,
        state: str,
        now: str,
        *,
        bytes: int | None = None,
        objects: int | None = None,
        force: bool = False,
    ) -> TierState:
        """`blob` moved to `state` (the tape system's hook); the same state again is no change.
        `bytes`/`objects`: what it holds now, when known (else the recorded figures stay)."""
        if state not in STATES:
            raise TierError(
                f"state {state!r} is not one of {', '.join(STATES)} (blob {blob} of scope "
                f"{self.scope!r})"
            )
        current = self.tier(blob)
        if current.state == state:
            return self
        if not force and state not in TRANSITIONS[current.state]:
            allowed = ", ".join(sorted(TRANSITIONS[current.state]))
            raise TransitionRefused(
                f"blob {blob} of scope {self.scope!r} is {current.state}: it can go to "
                f"{allowed}, not {state} (--force records it anyway)"
            )
        moved = replace(
            current,
            state=state,  # type: ignore[arg-type]
            bytes=current.bytes if bytes is None else bytes,
            objects=current.objects if objects is None else objects,
            since=now,
            stale_writes=current.stale_writes if state in ("stale", "writing") else 0,
        )
        return replace(self, version=self.version + 1, blobs={**self.blobs, blob: moved})

    def count(self, counts: Iterable[tuple[str, str, Usage]], now: str | None = None) -> TierState:
        """Add `(event identity, blob, usage)` rows, skipping identities already counted.

        A write into a blob whose copy is on tape makes it `stale` (since `now`): the tape copy
        is out of date. Writes into a stale blob are counted as the ones its copy misses."""
        seen = set(self.applied)
        blobs = dict(self.blobs)
        fresh: list[str] = []
        for ident, blob, usage in counts:
            if ident in seen:
                continue
            seen.add(ident)
            fresh.append(ident)
            tier = blobs.get(blob, BlobTier())
            tier = replace(tier, usage=tier.usage + usage)
            if usage.writes:
                tier = _went_stale(tier, usage.writes, now)
            blobs[blob] = tier
        if not fresh:
            return self
        applied = (*self.applied, *fresh)[-KEEP_APPLIED:]
        return replace(self, version=self.version + 1, blobs=blobs, applied=applied)

    def changed(self, objects: Mapping[str, int], now: str) -> TierState:
        """Blobs found with `objects[blob]` objects changed since they went to tape (a scan):
        those whose copy is on tape go `stale`; the rest are as they were."""
        blobs = dict(self.blobs)
        for blob, n in objects.items():
            tier = self.tier(blob)
            if n and tier.state in ON_TAPE:
                blobs[blob] = _went_stale(tier, n, now)
        if blobs == self.blobs:
            return self
        return replace(self, version=self.version + 1, blobs=blobs)

    def stale(self) -> dict[str, BlobTier]:
        """The blobs whose tape copy is out of date."""
        return {b: t for b, t in self.blobs.items() if t.state == "stale"}

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "scope": self.scope,
            "version": self.version,
            "blobs": {b: t.to_dict() for b, t in self.blobs.items()},
            "applied": list(self.applied),
        }

    def dumps(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=1) + "\n").encode()

    @classmethod
    def loads(cls, data: bytes | str, source: str) -> TierState:
        try:
            doc = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise TierError(
                f"{source} is not valid JSON ({err}): restore it or delete it"
            ) from None
        try:
            return cls.from_dict(doc)
        except TierError as err:
            raise TierError(f"{source}: {err}: restore it or delete it") from None

    @classmethod
    def from_dict(cls, doc: Any) -> TierState:
        if not isinstance(doc, Mapping):
            raise TierError(f"must be a JSON object, got {type(doc).__name__}")
        missing = [k for k in ("format", "scope", "version", "blobs") if k not in doc]
        if missing:
            raise TierError(f"field {missing[0]!r} is required")
        if not isinstance(doc["scope"], str) or not doc["scope"]:
            raise TierError("field 'scope' must be a non-empty string")
        version = doc["version"]
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise TierError("field 'version' must be an integer >= 0")
        blobs = doc["blobs"]
        if not isinstance(blobs, Mapping):
            raise TierError("field 'blobs' must be an object")
        applied = doc.get("applied", [])
        if not isinstance(applied, list) or not all(isinstance(a, str) for a in applied):
            raise TierError("field 'applied' must be a list of strings")
        return cls(
            scope=doc["scope"],
            version=version,
            blobs={str(b): _blob_tier(t, str(b)) for b, t in blobs.items()},
            applied=tuple(applied),
            format=doc["format"],
        )


def _went_stale(tier: BlobTier, writes: int, now: str | None) -> BlobTier:
    if tier.state in ON_TAPE:
        return replace(tier, state="stale", since=now or tier.since, stale_writes=writes)
    if tier.state == "stale":
        return replace(tier, stale_writes=tier.stale_writes + writes)
    return tier


def _blob_tier(doc: Any, blob: str) -> BlobTier:
    if not isinstance(doc, Mapping):
        raise TierError(f"blobs.{blob} must be an object")
    numbers = {}
    for name in (
        "bytes",
        "objects",
        "reads",
        "writes",
        "bytes_read",
        "bytes_written",
        "stale_writes",
    ):
        value = doc.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TierError(f"blobs.{blob}.{name} must be an integer >= 0")
        numbers[name] = value
    since = doc.get("since")
    if since is not None and not isinstance(since, str):
        raise TierError(f"blobs.{blob}.since must be a string or null")
    state = doc.get("state")
    if state not in STATES:
        raise TierError(f"blobs.{blob}.state {state!r} is not one of {', '.join(STATES)}")
    return BlobTier(
        state=state,
        bytes=numbers["bytes"],
        objects=numbers["objects"],
        since=since,
        usage=Usage(
            numbers["reads"], numbers["writes"], numbers["bytes_read"], numbers["bytes_written"]
        ),
        stale_writes=numbers["stale_writes"],
    )


def blob_of(manifest: Manifest, blob: str, buckets: Mapping[str, int] | None = None) -> Blob:
    """The blob (live or retired) that `blob` names: an unbucketed blob's id, or a bucket id
    (`<base>_<n>`) of a bucketed blob whose array has bucket n. `buckets` (blob id -> buckets
    its array fills now, from its metadata) overrides the count the cut recorded. Anything else
    is refused naming the ids the scope has and the fix."""
    for b in manifest.every_blob():
        if b.bucket is None and b.id == blob:
            return b
        if b.bucket is not None and blob.startswith(b.id + "_") and blob[len(b.id) + 1 :].isdigit():
            n = int(blob[len(b.id) + 1 :])  # tier state is per bucket: the ids `resolve` answers
            count = (buckets or {}).get(b.id, b.bucket.count)
            if count is not None and n >= count:
                how = "now" if buckets and b.id in buckets else "when cut (--data checks it now)"
                raise TierError(
                    f"{blob!r}: blob {b.id} of scope {manifest.scope!r} has buckets 0-"
                    f"{count - 1} {how}; a bucket beyond them holds nothing to mark"
                )
            return b
    known = ", ".join(b.ids() for b in manifest.blobs) or "none"
    raise TierError(
        f"{blob!r} is not a blob of scope {manifest.scope!r} (its blobs: {known}); "
        "`toolkit archive report` lists them"
    )
