"""Object-store events drive partitioning: `toolkit archive watch`.

A stream of notifications (S3, MinIO, SNS, GCS Pub/Sub; one document per line) is read in
debounced batches. Each batch:

1. maps every written or deleted key to its scope (the store root: the shortest ancestor that
   holds Zarr metadata, found by HEAD requests, or a scope that already has a manifest);
2. partitions the scopes it touched as one gated graph, one node per scope however many events
   touched it, each with the policy recorded in its manifest (new scopes get the command's);
3. counts reads and writes per blob into the scopes' tier state.

Nothing here coordinates two watchers but the conditional writes: a node that loses a manifest
race reads the winner's manifest and partitions again; tier counts are read-modify-write with
if-match and skip event identities already counted. So a replayed event changes nothing, and
two watchers fed the same stream end where one would.
"""

from __future__ import annotations

import datetime as dt
import os
import select
import signal
import stat
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any
from urllib.parse import urlparse

from toolkit import storage, textin
from toolkit.archive.discover import Event, EventError, dedupe, parse_events
from toolkit.archive.keys import key_problem
from toolkit.archive.manifests import MANIFEST_NAME, ManifestStore
from toolkit.archive.model import Policy
from toolkit.archive.partition import excluded
from toolkit.archive.resolve import Trie, relative_to
from toolkit.archive.service import Outcome, scan
from toolkit.archive.tiers import TierState, Usage
from toolkit.archive.tierstore import TIERS_NAME, TierStore
from toolkit.engine import Runner

__all__ = ["Batch", "WatchOptions", "batches", "process", "relative_events", "scope_of"]

_MARKERS = ("zarr.json", ".zgroup", ".zarray")
_OWN = (f"/{MANIFEST_NAME}", f"/{TIERS_NAME}", ".toolkit-lock")
Row = tuple[str, str, Usage]  # (event identity, blob id, usage)
CONFLICTS = 20  # lost manifest races one node absorbs before the batch fails


@dataclass(frozen=True)
class WatchOptions:
    """How a watcher partitions: the policy of new scopes, then by name only (a value in the
    wrong place, such as the `executor` this once held, must not become `break_lock`)."""

    policy: Policy  # for scopes with no manifest yet
    _: KW_ONLY
    exclude: tuple[str, ...] = ()
    hot_always: tuple[str, ...] = ()
    break_lock: bool = False


@dataclass(frozen=True)
class Batch:
    """What one batch did, for the report line."""

    events: int
    repeated: int
    outcomes: tuple[Outcome, ...] = ()
    counted: dict[str, Usage] = field(default_factory=dict)  # scope -> usage newly counted
    outside: tuple[str, ...] = ()  # keys under no Zarr store
    stale: tuple[tuple[str, str, int], ...] = ()  # (scope, blob, writes) whose tape copy went stale

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "repeated": self.repeated,
            "partitioned": [o.scope for o in self.outcomes],
            "written": [{"scope": o.scope, "epoch": o.epoch} for o in self.outcomes if o.written],
            "reads": sum(u.reads for u in self.counted.values()),
            "writes": sum(u.writes for u in self.counted.values()),
            "outside": len(self.outside),
            "stale": [{"scope": s, "blob": b, "writes": n} for s, b, n in self.stale],
        }

    def line(self) -> str:
        written = [f"{o.scope} epoch {o.epoch}" for o in self.outcomes if o.written]
        reads = sum(u.reads for u in self.counted.values())
        writes = sum(u.writes for u in self.counted.values())
        text = (
            f"{self.events} events ({self.repeated} repeated): "
            f"{len(self.outcomes)} scope(s) partitioned, {len(written)} written"
        )
        if written:
            text += f" ({', '.join(written)})"
        text += f"; {reads} reads, {writes} writes counted"
        if self.outside:
            text += f"; {len(self.outside)} key(s) under no Zarr store (e.g. {self.outside[0]})"
        if self.stale:
            text += f"; {len(self.stale)} blob(s) on tape written to, now stale"
        return text


def relative_events(data: storage.Store, events: Iterable[Event]) -> list[Event]:
    """Event keys as `resolve` takes them: relative to the data root. An object-store root's
    bucket and prefix are stripped (events of other buckets or prefixes are dropped); a URL
    or absolute path is cut at the root."""
    out = []
    cloud = data.scheme not in ("file", "memory")
    parsed = urlparse(data.url)
    prefix = parsed.path.strip("/") if cloud else ""
    for e in events:
        key: str | None = e.key
        if "://" in e.key or e.key.startswith("/"):
            key = relative_to(e.key, data.url)
        elif cloud:
            if e.bucket not in (None, parsed.netloc):
                continue
            if prefix:
                key = e.key[len(prefix) + 1 :] if e.key.startswith(prefix + "/") else None
        if key:
            out.append(replace(e, key=key))
    return out


def scope_of(
    data: storage.Store, key: str, known: Iterable[str], found: dict[str, bool]
) -> str | None:
    """The store root `key` lies in: a known scope, else the shortest ancestor holding Zarr
    metadata (`found` memoises the probes for one batch: a store may appear later)."""
    parts = key.split("/")
    ancestors = ["/".join(parts[:i]) for i in range(1, len(parts))]
    scopes = set(known)
    for d in ancestors:
        if d in scopes:
            return d
    for d in ancestors:
        if d not in found:
            found[d] = any(storage.exists(data, f"{d}/{m}") for m in _MARKERS)
        if found[d]:
            return d
    return None


def process(
    data: storage.Store,
    manifests: storage.Store,
    events: list[Event],
    options: WatchOptions,
    runner: Runner | None = None,
) -> Batch:
    """One batch: partition the touched scopes (a gated graph), then count usage per blob."""
    unique = list(dedupe(events))
    mine = [e for e in relative_events(data, unique) if not e.key.endswith(_OWN)]
    ms = ManifestStore(manifests, options.break_lock)
    known = ms.scopes()
    found: dict[str, bool] = {}
    scoped: list[tuple[Event, str]] = []
    outside: list[str] = []
    for e in mine:
        if e.event not in ("write", "delete", "read"):
            continue
        # a '.', '..' or empty segment is in no Zarr store: never scoped by what precedes it
        s = None if key_problem(e.key) else scope_of(data, e.key, known, found)
        if s is None:
            outside.append(e.key)
        elif not excluded(s, options.exclude):
            scoped.append((e, s))
    touched = sorted({s for e, s in scoped if e.event in ("write", "delete")})
    outcomes: list[Outcome] = []
    if touched:
        outcomes, _ = scan(
            data,
            manifests,
            options.policy,
            scopes=touched,
            exclude=options.exclude,
            hot_always=options.hot_always,
            runner=runner or Runner(executor="dask"),
            break_lock=options.break_lock,
            keep_policy=True,
            conflicts=CONFLICTS,
        )
    counted, stale = _count(ms, scoped, options.break_lock)
    return Batch(
        len(unique),
        len(events) - len(unique),
        tuple(outcomes),
        counted,
        tuple(outside),
        tuple(stale),
    )


def _count(
    ms: ManifestStore, scoped: list[tuple[Event, str]], break_lock: bool
) -> tuple[dict[str, Usage], list[tuple[str, str, int]]]:
    """Reads and writes per blob into each scope's tier state; returns what was newly added
    and the blobs on tape this batch's writes made stale (scope, blob, writes)."""
    by_scope: dict[str, list[Event]] = defaultdict(list)
    for e, s in scoped:
        if e.event in ("read", "write"):
            by_scope[s].append(e)
    tiers = TierStore(ms.store, break_lock)
    added: dict[str, Usage] = {}
    stale: list[tuple[str, str, int]] = []
    for scope, evs in sorted(by_scope.items()):
        stored = ms.read(scope)
        if stored is None:  # nothing partitioned (an empty store): no blob to count against
            continue
        trie = Trie([stored.manifest])
        rows: list[Row] = []
        for e in evs:
            r = trie.lookup(e.key)
            if r.kind != "blob" or r.blob is None:
                continue
            size = e.size or 0
            usage = Usage(1, 0, size, 0) if e.event == "read" else Usage(0, 1, 0, size)
            rows.append((e.identity or f"{e.bucket}|{e.key}|{e.name}", r.blob, usage))
        if not rows:
            continue
        fresh: list[Usage] = []  # what the attempt that was stored added (retries redo it)
        went: list[tuple[str, int]] = []
        now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")

        def count(
            state: TierState,
            rows: list[Row] = rows,
            fresh: list[Usage] = fresh,
            went: list[tuple[str, int]] = went,
            now: str = now,
        ) -> TierState:
            applied = set(state.applied)
            fresh[:] = [u for ident, _, u in rows if ident not in applied]
            new = state.count(rows, now)
            went[:] = [
                (b, t.stale_writes)
                for b, t in new.stale().items()
                if state.tier(b).state != "stale"
            ]
            return new

        tiers.update(scope, count)
        added[scope] = sum(fresh, Usage())
        stale += [(scope, b, n) for b, n in went]
    return added, stale


# --------------------------------------------------------------------------- reading the stream


def batches(
    fd: int,
    *,
    follow: bool,
    debounce: float = 1.0,
    max_wait: float = 30.0,
    max_events: int = 100_000,
    poll: float = 0.1,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[list[tuple[int, str]]]:
    """Lines of the stream as `(line number, text)` batches.

    A batch closes when no line arrived for `debounce` seconds, when its first line is
    `max_wait` old, or at `max_events` lines: a burst of writes to one scope is one batch.
    Without `follow` the stream is read to its end (one pass); with it a file is followed as
    it grows and a pipe until it closes. `stop()` ends the stream at the next poll, the lines
    pending still delivered.
    """
    is_file = stat.S_ISREG(os.fstat(fd).st_mode)
    pending: list[tuple[int, str]] = []
    partial = b""
    number = 0
    first = last = 0.0
    while True:
        chunk = _read(fd, is_file, poll)
        now = time.monotonic()
        if chunk:
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            for raw in lines:
                number += 1
                if raw.strip():
                    if not pending:
                        first = now
                    pending.append((number, _decoded(raw, number)))
                    last = now
            if len(pending) >= max_events:
                yield pending
                pending = []
            continue
        at_end = chunk == b"" and (not follow or not is_file)
        if at_end or stop():
            if partial.strip():
                number += 1
                pending.append((number, _decoded(partial, number)))
            if pending:
                yield pending
            return
        if pending and (now - last >= debounce or now - first >= max_wait):
            yield pending
            pending = []
        if chunk == b"":  # a followed file at its end: wait for it to grow
            time.sleep(poll)


def _decoded(raw: bytes, number: int) -> str:
    """Line `number` of the stream as text: a byte-order mark before the first line is not
    part of it; bytes that are not UTF-8 are refused by line (never turned into U+FFFD inside
    a key, which would count the event against an object nobody wrote)."""
    if number == 1 and raw.startswith(textin.UTF8_BOM):
        raw = raw[len(textin.UTF8_BOM) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise EventError(
            f"line {number}: not UTF-8 (byte 0x{raw[err.start]:02x}): notifications are "
            "UTF-8 JSON; save or send them as UTF-8"
        ) from None


def _read(fd: int, is_file: bool, poll: float) -> bytes | None:
    """Bytes available now; b"" at the end of a file or a closed pipe; None: nothing yet."""
    if not is_file:
        ready, _, _ = select.select([fd], [], [], poll)
        if not ready:
            return None
    return os.read(fd, 1 << 20)


def parse_lines(lines: list[tuple[int, str]]) -> list[Event]:
    """Events of a batch of lines; a line that is not a notification names its number."""
    import json

    out: list[Event] = []
    for number, text in lines:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            raise EventError(f"line {number}: not JSON ({err.msg})") from None
        try:
            out.extend(parse_events(doc))
        except EventError as err:
            raise EventError(f"line {number}: {err}") from None
    return out


class Stopper:
    """SIGTERM / SIGINT end the watch after the batch in hand (nothing half-done)."""

    def __init__(self) -> None:
        self.stopped = False

    def __call__(self) -> bool:
        return self.stopped

    def install(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            self.stopped = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, handler)
