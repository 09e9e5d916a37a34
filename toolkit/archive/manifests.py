"""Read and write manifests: one object per scope, `<scope>/manifest.json` under a store.

The version used for the conditional write comes from the same GET that read the body, so a
manifest that changed in between is never overwritten: creation uses create-only, updates use
if-match, and the loser gets `ManifestConflict` having written nothing.

A stored manifest that is not one (empty, cut short, not JSON, of another shape or scope) is a
`CorruptObject` naming it (`decode`), with the way back: its previous version, or a new
partition of the scope.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit import storage
from toolkit.archive.model import Manifest, ManifestError

__all__ = [
    "MANIFEST_NAME",
    "ManifestConflict",
    "ManifestStore",
    "Stored",
    "decode",
    "repair",
    "scope_of_key",
]

MANIFEST_NAME = "manifest.json"


class ManifestConflict(RuntimeError):
    """Another writer changed the manifest since it was read; nothing was written."""

    def __init__(self, url: str, scope: str, detail: str, rerun: bool = True) -> None:
        self.scope = scope
        then = " Re-run to partition against the new manifest." if rerun else ""
        super().__init__(
            f"conflict writing the manifest of scope {scope!r} at {url}: {detail}; "
            f"nothing was written.{then}"
        )


@dataclass(frozen=True)
class Stored:
    """A manifest and the version it was read at."""

    manifest: Manifest
    version: storage.Version


def repair(scope: str) -> str:
    """What replaces a corrupt manifest of `scope` (a new partition cuts new blob ids)."""
    return (
        "restore its previous version (a versioned bucket keeps it), or delete it and "
        f"partition the scope again (`toolkit archive partition`: new blob ids for {scope})"
    )


def decode(store: storage.Store, scope: str, data: bytes) -> Manifest:
    """The manifest of `scope` from its stored bytes; anything else is a `CorruptObject`
    naming the object (never a decoder's or the schema's message about nothing in particular)."""
    key, what = f"{scope}/{MANIFEST_NAME}", "an archive manifest"
    doc = storage.record_json(store, key, data, what, repair(scope))
    try:
        manifest = Manifest.from_dict(doc)
    except ManifestError as err:
        why = f"field {err.field!r}: {err.problem}"
        raise storage.CorruptObject(store.url, key, what, why, repair(scope)) from None
    except (TypeError, KeyError, AttributeError) as err:  # a shape the schema did not foresee
        why = f"{type(err).__name__}: {err}"
        raise storage.CorruptObject(store.url, key, what, why, repair(scope)) from None
    if manifest.scope != scope:
        why = f"holds scope {manifest.scope!r}"
        raise storage.CorruptObject(store.url, key, what, why, repair(scope))
    return manifest


def scope_of_key(key: str) -> str | None:
    """The scope a manifest key belongs to (None for other keys)."""
    suffix = "/" + MANIFEST_NAME
    return key[: -len(suffix)] if key.endswith(suffix) else None


@dataclass(frozen=True)
class ManifestStore:
    """Manifests under `store`; `break_lock` lets a write take over a local lock whose writer
    is known to be gone (`--break-lock`)."""

    store: storage.Store
    break_lock: bool = False

    def key(self, scope: str) -> str:
        return f"{scope}/{MANIFEST_NAME}"

    def read(self, scope: str) -> Stored | None:
        key = self.key(scope)
        try:
            blob = storage.get(self.store, key)
        except storage.NotFound:
            return None
        return Stored(decode(self.store, scope, blob.data), blob.version)

    def write(self, manifest: Manifest, previous: Stored | None) -> storage.Version:
        """Create (no previous) or replace exactly the version read; refuse a non-increasing epoch."""
        manifest.check_successor(previous.manifest if previous else None)
        key = self.key(manifest.scope)
        body = manifest.dumps()
        try:
            if previous is None:
                return storage.put(self.store, key, body, mode="create")
            return storage.put(
                self.store, key, body, mode=previous.version, break_lock=self.break_lock
            )
        except (storage.AlreadyExists, storage.PreconditionFailed) as err:
            mine = None if isinstance(err, storage.LockHeld) else self._own_write(key, body)
            if mine is not None:
                return mine
            raise self._conflict(manifest, previous, err) from None

    def _own_write(self, key: str, body: bytes) -> storage.Version | None:
        """The version of `key` when it holds exactly `body`: a retried conditional PUT (its
        response lost, the server having applied it) met its own first attempt. Epochs only
        grow, so no other writer stores these bytes."""
        try:
            stored = storage.get(self.store, key)
        except storage.NotFound:
            return None
        return stored.version if stored.data == body else None

    def _conflict(
        self, manifest: Manifest, previous: Stored | None, err: Exception
    ) -> ManifestConflict:
        url, scope = self.store.url, manifest.scope
        if isinstance(err, storage.LockHeld):
            detail = f"another partitioner is writing it: {err.detail}"
            return ManifestConflict(url, scope, detail, rerun=False)
        if isinstance(err, storage.AlreadyExists):
            return ManifestConflict(url, scope, "another partitioner created it first")
        epoch = previous.manifest.epoch if previous else "-"
        return ManifestConflict(url, scope, f"it changed since epoch {epoch} was read")

    def scopes(self) -> list[str]:
        return sorted(s for k in storage.list_keys(self.store) if (s := scope_of_key(k)))

    def versions(self) -> dict[str, storage.Version]:
        """Scope -> version of its manifest, from one listing (cheap change detection)."""
        return {
            s: o.version for o in storage.list_objects(self.store) if (s := scope_of_key(o.key))
        }

    def load_all(self) -> list[Manifest]:
        """Every manifest; the first unreadable one raises (`load_each` degrades per scope)."""
        out = []
        for scope in self.scopes():
            stored = self.read(scope)
            if stored is not None:
                out.append(stored.manifest)
        return out

    def load_each(self) -> tuple[list[Manifest], dict[str, str]]:
        """Every readable manifest, and scope -> why for each one that is not (the object and
        its fault, without the repair: the caller says what is lost meanwhile): one corrupt
        manifest costs only its own scope."""
        good, broken = [], {}
        for scope in self.scopes():
            try:
                stored = self.read(scope)
            except storage.CorruptObject as err:
                broken[scope] = str(err).removesuffix(f"; {err.fix}")
                continue
            if stored is not None:
                good.append(stored.manifest)
        return good, broken
