"""A single-writer lease: one object, created conditionally, with an expiry.

Operational updates commit to main and grow the append dim lazily; that is only safe with one
writer. The lease makes it enforced rather than assumed: a second update of the same fire (or
an older one) finds the lease held and refuses; a newer scheduled fire takes the lease over
(conditional replace on the version it read), and the older run sees it lost the lease before
its next commit.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from toolkit import storage

__all__ = ["Lease", "LeaseHeld", "LeaseLost"]


class LeaseHeld(RuntimeError):
    """Another live writer holds the lease."""


class LeaseLost(RuntimeError):
    """A newer fire took the lease over: stop before committing again."""


@dataclass
class Lease:
    store: storage.Store
    key: str
    fire_time: float  # the scheduled fire (epoch seconds): newer fires win
    ttl: float = 600.0
    holder: str = field(default_factory=lambda: uuid.uuid4().hex)

    def _body(self) -> bytes:
        return json.dumps(
            {"holder": self.holder, "fire_time": self.fire_time, "expires": time.time() + self.ttl}
        ).encode()

    def acquire(self) -> Lease:
        try:
            storage.put(self.store, self.key, self._body(), mode="create")
            return self
        except (storage.AlreadyExists, storage.PreconditionFailed):
            pass
        blob = storage.get(self.store, self.key)
        held = json.loads(blob.data)
        if (
            held["holder"] != self.holder
            and held["expires"] > time.time()
            and held["fire_time"] >= self.fire_time
        ):
            raise LeaseHeld(
                f"{self.store.url}/{self.key} is held by {held['holder']} (fire "
                f"{held['fire_time']}, expires in {held['expires'] - time.time():.0f} s): another "
                "update is running; this one exits"
            )
        try:  # expired, or ours, or an older fire's: take it over on the version we read
            storage.put(self.store, self.key, self._body(), mode=blob.version)
        except (storage.PreconditionFailed, storage.AlreadyExists) as err:
            raise LeaseHeld(
                f"{self.store.url}/{self.key}: lost the race to take the lease"
            ) from err
        return self

    def check(self) -> None:
        """Raise LeaseLost unless we still hold the lease (call before each commit)."""
        try:
            held = json.loads(storage.get(self.store, self.key).data)
        except storage.NotFound:
            raise LeaseLost(f"{self.store.url}/{self.key} vanished") from None
        if held["holder"] != self.holder:
            raise LeaseLost(
                f"{self.store.url}/{self.key} taken over by {held['holder']} "
                f"(fire {held['fire_time']}); stopping"
            )

    def release(self) -> None:
        try:
            blob = storage.get(self.store, self.key)
        except storage.NotFound:
            return
        if json.loads(blob.data)["holder"] == self.holder:
            storage.delete(self.store, self.key)
