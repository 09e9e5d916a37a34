"""Read and change tier state: `<scope>/tiers.json` beside each manifest.

Every change is read-modify-write under a conditional PUT (create-only for the first, if-match
on the version of the GET that read the body after): two watchers counting events, or a hook
marking a blob while a watcher counts, never lose each other's change; the loser re-reads and
applies its change again. A change that alters nothing writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from toolkit import storage
from toolkit.archive.tiers import TierError, TierState

__all__ = ["TIERS_NAME", "TierConflict", "TierStore"]

TIERS_NAME = "tiers.json"
RETRIES = 50


class TierConflict(RuntimeError):
    """The document kept changing under us; nothing of this change was written."""


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
        state = TierState.loads(blob.data, f"{self.store.url}/{key}")
        if state.scope != scope:
            raise TierError(
                f"{self.store.url}/{key}: holds scope {state.scope!r}: restore it or delete it"
            )
        return state, blob.version

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
