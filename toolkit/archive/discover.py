"""What feeds the partitioner and the resolver: a bucket scan, and object-store event records.

Events from S3 notifications (bare, or in the SNS envelope SQS delivers), MinIO webhooks and
GCS Pub/Sub notifications (push or pull) are normalised to `Event(key, event, principal)`, keys URL-decoded where the source encodes them,
and de-duplicated (deliveries are at least once). `LiveResolver` keeps a trie current: it
reloads a scope's manifest when a newer epoch appears and refuses one that goes backwards.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

from toolkit import storage
from toolkit.archive.keys import key_problem
from toolkit.archive.manifests import ManifestStore, scope_of_key
from toolkit.archive.model import ManifestError
from toolkit.archive.partition import excluded
from toolkit.archive.resolve import Resolution, Trie, relative_to

__all__ = [
    "Event",
    "EventError",
    "LiveResolver",
    "dedupe",
    "find_stores",
    "parse_events",
    "read_events",
]

_STORE_MARKERS = ("zarr.json", ".zgroup", ".zarray")


def find_stores(store: storage.Store, prefix: str = "", exclude: Iterable[str] = ()) -> list[str]:
    """Scopes (store roots) under `prefix`: directories with Zarr metadata and no Zarr parent."""
    patterns = tuple(exclude)
    dirs = {
        posixpath.dirname(k)
        for k in storage.iter_keys(store, prefix)
        if posixpath.basename(k) in _STORE_MARKERS
    }
    roots = []
    for d in sorted(dirs):
        parts = d.split("/") if d else []
        if any("/".join(parts[:i]) in dirs for i in range(len(parts))):
            continue
        if d == "":
            raise ValueError(
                f"{store.url} is itself a Zarr store: pass its parent as the data "
                "root so the store has a scope name"
            )
        if not excluded(d, patterns):
            roots.append(d)
    return roots


# --------------------------------------------------------------------------- events


class EventError(ValueError):
    """An event record cannot be parsed; names the record and the field."""


@dataclass(frozen=True)
class Event:
    key: str
    event: str  # "write" | "delete" | "read" | "restore" | "other"
    principal: str | None
    bucket: str | None = None
    name: str = field(default="", compare=False)  # the source's own event name
    identity: str = field(default="", compare=False)  # what makes a delivery unique
    size: int | None = field(default=None, compare=False)  # object bytes, when the source says


def _size(value: Any) -> int | None:
    """Object size as sources send it (S3: a number; GCS: a decimal string); None if absent."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def _kind(name: str) -> str:
    n = name.lower()
    if "restore" in n:
        return "restore"
    if "created" in n or "finalize" in n or n.endswith(("put", "copy", "completemultipartupload")):
        return "write"
    if "removed" in n or "delete" in n or "archive" in n:
        return "delete"
    if "accessed" in n or n.endswith(("get", "head")):
        return "read"
    return "other"


def _s3_record(rec: Mapping[str, Any], i: int) -> Event:
    try:
        name = rec["eventName"]
        s3 = rec["s3"]
        key = unquote_plus(s3["object"]["key"])
        bucket = s3["bucket"]["name"]
    except (KeyError, TypeError) as err:
        raise EventError(f"S3 record {i}: missing field {err}") from None
    ident = rec.get("userIdentity") or {}
    principal = ident.get("principalId") if isinstance(ident, Mapping) else None
    obj = s3["object"]
    # the sequencer orders one key's events; without it (some servers) the etag alone would
    # merge two writes of the same bytes, so the event's time goes with it
    seq = obj.get("sequencer") or f"{obj.get('eTag', '')}@{rec.get('eventTime', '')}"
    return Event(
        key,
        _kind(name),
        principal,
        bucket,
        name,
        f"s3|{bucket}|{key}|{name}|{seq}",
        _size(obj.get("size")),
    )


def _gcs(msg: Mapping[str, Any], i: int) -> Event:
    attrs = msg.get("attributes") or {}
    try:
        name = attrs["eventType"]
        key = attrs["objectId"]
        bucket = attrs.get("bucketId")
    except (KeyError, TypeError) as err:
        raise EventError(f"GCS message {i}: missing attribute {err}") from None
    principal = None
    size = None
    data = msg.get("data")
    if isinstance(data, str) and data:
        try:
            body = json.loads(base64.b64decode(data))
        except (binascii.Error, json.JSONDecodeError, UnicodeDecodeError):
            raise EventError(f"GCS message {i}: data is not base64 JSON") from None
        if isinstance(body, Mapping):
            owner = body.get("owner")
            principal = owner.get("entity") if isinstance(owner, Mapping) else None
            size = _size(body.get("size"))
    gen = attrs.get("objectGeneration", "")
    ident = msg.get("messageId") or msg.get("message_id") or f"{bucket}|{key}|{name}|{gen}"
    return Event(key, _kind(name), principal, bucket, name, f"gcs|{ident}", size)


def parse_events(doc: Any) -> list[Event]:
    """Events of one decoded notification (S3 / MinIO `Records`, GCS Pub/Sub push or pull)."""
    if isinstance(doc, list):
        return [e for i, d in enumerate(doc) for e in _one(d, i)]
    return _one(doc, 0)


def _one(doc: Any, i: int) -> list[Event]:
    if not isinstance(doc, Mapping):
        raise EventError(f"record {i}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("Type") == "Notification" and isinstance(doc.get("Message"), str):  # SNS envelope
        try:
            return _one(json.loads(doc["Message"]), i)
        except json.JSONDecodeError:
            raise EventError(f"record {i}: SNS 'Message' is not JSON") from None
    if doc.get("Event") == "s3:TestEvent":  # sent once when a notification is configured
        return []
    if "Records" in doc:  # S3 notifications; MinIO wraps the same records with EventName/Key
        records = doc["Records"]
        if not isinstance(records, list):
            raise EventError(f"record {i}: 'Records' must be a list")
        return [_s3_record(r, j) for j, r in enumerate(records)]
    if "message" in doc and isinstance(doc["message"], Mapping):  # Pub/Sub push
        return [_gcs(doc["message"], i)]
    if "attributes" in doc:  # Pub/Sub pull
        return [_gcs(doc, i)]
    if "eventName" in doc and "s3" in doc:
        return [_s3_record(doc, i)]
    raise EventError(
        f"record {i}: not an S3, MinIO or GCS Pub/Sub notification (keys: {sorted(doc)[:6]})"
    )


def read_events(text: str) -> list[Event]:
    """A file of notifications: one JSON document, a JSON array, or JSON lines."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        return parse_events(json.loads(stripped))
    except json.JSONDecodeError:
        pass
    out: list[Event] = []
    for n, line in enumerate(stripped.splitlines(), 1):
        if line.strip():
            try:
                out.extend(parse_events(json.loads(line)))
            except json.JSONDecodeError as err:
                raise EventError(f"line {n}: not JSON ({err.msg})") from None
    return out


def dedupe(events: Iterable[Event]) -> Iterator[Event]:
    """Drop repeated deliveries of the same event (same source identity)."""
    seen: set[str] = set()
    for e in events:
        ident = e.identity or f"{e.bucket}|{e.key}|{e.name}"
        if ident not in seen:
            seen.add(ident)
            yield e


# --------------------------------------------------------------------------- live resolver


class LiveResolver:
    """A trie that follows the manifest store: newer epochs replace a scope, older ones are refused."""

    def __init__(self, manifests: ManifestStore) -> None:
        self.manifests = manifests
        self.trie = Trie()
        self._versions: dict[str, storage.Version] = {}
        self.refresh()

    def lookup(self, key: str) -> Resolution:
        return self.trie.lookup(key)

    def epoch(self, scope: str) -> int | None:
        m = self.trie.manifests.get(scope)
        return m.epoch if m else None

    def reload(self, scope: str) -> bool:
        """Read one scope's manifest; True when a newer epoch was loaded."""
        stored = self.manifests.read(scope)
        if stored is None:
            return False
        known = self.trie.manifests.get(scope)
        if known is not None:
            if stored.manifest.epoch < known.epoch:
                raise ManifestError(
                    "epoch", f"went backwards from {known.epoch} to {stored.manifest.epoch}", scope
                )
            if stored.manifest.epoch == known.epoch:
                return False
        self.trie.replace(stored.manifest)
        self._versions[scope] = stored.version
        return True

    def refresh(self) -> list[str]:
        """Reload every scope whose manifest object changed (one listing); returns those reloaded."""
        changed = [s for s, v in self.manifests.versions().items() if self._versions.get(s) != v]
        return [s for s in changed if self.reload(s)]

    def on_event(self, event: Event) -> bool:
        """Feed a manifest-store event: a write to a manifest reloads its scope.

        Event keys are bucket keys; the manifest store's own prefix is stripped, and events of
        other buckets or prefixes are ignored.
        """
        key: str | None = event.key
        url = self.manifests.store.url
        if event.bucket is not None and self.manifests.store.scheme not in ("file", "memory"):
            key = relative_to(f"{url.split('://', 1)[0]}://{event.bucket}/{event.key}", url)
        scope = scope_of_key(key) if key is not None else None
        if scope is None or key_problem(scope) is not None:  # no scope of ours has such a name
            return False
        return event.event == "write" and self.reload(scope)
