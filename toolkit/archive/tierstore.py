"""Read and change tier state: `<scope>/tiers.json` beside each manifest.

Every change is read-modify-write under a conditional PUT (create-only for the first, if-match
on the version of the GET that read the body after): two watchers counting events, or a hook
marking a blob while a watcher counts, never lose each other's change; the loser re-reads and
applies its change again. A change that alters nothing writes nothing.

A stored document that is not tier state (empty, cut short, not JSON, of another shape or
scope) is a `CorruptObject` naming it (`decode`), with the way back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from toolkit import storage
from toolkit.archive.tiers import TierError, TierState

__all__ = ["TIERS_NAME", "TierConflict", "TierStore", "decode"]

TIERS_NAME = "tiers.json"
RETRIES = 50


class TierConflict(RuntimeError):
    """The document kept changing under us; nothing of this change was written."""


def decode(store: storage.Store, scope: str, data: bytes) -> TierState:
    """The tier state of `scope` from its stored bytes; anything else is a `CorruptObject`."""
    key, what = f"{scope}/{TIERS_NAME}", "tier state"
    fix = (
        "restore its previous version (a versioned bucket keeps it), or delete it and record "
        f"each blob that is not hot again (`toolkit archive mark {scope} BLOB STATE`)"
    )
    doc = storage.record_json(store, key, data, what, fix)
    try:
        state = TierState.from_dict(doc)
    except TierError as err:
        raise storage.CorruptObject(store.url, key, what, str(err), fix) from None
    except (TypeError, KeyError, AttributeError) as err:  # a shape the schema did not foresee
        why = f"{type(err).__name__}: {err}"
        raise storage.CorruptObject(store.url, key, what, why, fix) from None
    if state.scope != scope:
        raise storage.CorruptObject(store.url, key, what, f"holds scope {state.scope!r}", fix)
    return state


@dataclass(frozen=True)
class TierStore:
    """Tier documents under the manifests store."""

    store: storage.Store
    break_lock: bool = False

    def key(self, scope: str) -> str:
        return f"{scope}/{TIERS_NAME}"

    def read(self, scope: str) -> tuple[TierState, storage.Version | None]:
        """The scope's state and its version (None: no document yet, every blob hot)."""
        key = self.key(scope)
        try:
            blob = storage.get(self.store, key)
        except storage.NotFound:
            return TierState(scope), None
        return decode(self.store, scope, blob.data), blob.version

    def update(self, scope: str, change: Callable[[TierState], TierState]) -> TierState:
        """Apply `change` to the stored state under a conditional write, retrying lost races."""
        for _ in range(RETRIES):
            state, version = self.read(scope)
            new = change(state)
            if new is state:
                return state
            try:
                storage.put(
                    self.store,
                    self.key(scope),
                    new.dumps(),
                    mode="create" if version is None else version,
                    break_lock=self.break_lock,
                )
                return new
            except (storage.AlreadyExists, storage.PreconditionFailed) as err:
                if isinstance(err, storage.LockHeld):
                    raise TierConflict(
                        f"tier state of scope {scope!r} at {self.store.url}: {err}; "
                        "nothing was written (rerun, or --break-lock if its writer is gone)"
                    ) from None
                continue
        raise TierConflict(
            f"tier state of scope {scope!r} at {self.store.url} changed {RETRIES} times while "
            "being updated; nothing was written: rerun"
        )
