"""A single-writer lease: one object, created conditionally, with an expiry the holder renews.

Operational updates commit to main and grow the append dim lazily; that is only safe with one
writer. The lease makes it enforced rather than assumed: a second update of the same fire (or
an older one) finds the lease held and waits (up to `wait` seconds) or refuses; a newer
scheduled fire takes the lease over (conditional replace on the version it read), and the
older run sees it lost the lease before its next commit. The holder renews the expiry while it
works, so a crashed holder's lease lapses after `ttl` and a replacement can take it.
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
    ttl: float = 60.0
    holder: str = field(default_factory=lambda: uuid.uuid4().hex)
    _renewed: float = field(default=0.0, repr=False)

    def _body(self) -> bytes:
        return json.dumps(
            {"holder": self.holder, "fire_time": self.fire_time, "expires": time.time() + self.ttl}
        ).encode()

    def acquire(self, wait: float = 0.0) -> Lease:
        """Take the lease, waiting up to `wait` seconds for a live holder to release or lapse."""
        give_up = time.monotonic() + wait
        while True:
            try:
                return self._try_acquire()
            except LeaseHeld as err:
                left = give_up - time.monotonic()
                if left <= 0:
                    raise
                expires_in = getattr(err, "expires_in", 1.0)
                time.sleep(max(0.05, min(1.0, left, expires_in)))

    def _try_acquire(self) -> Lease:
        try:
            storage.put(self.store, self.key, self._body(), mode="create")
            self._renewed = time.monotonic()
            return self
        except (storage.AlreadyExists, storage.PreconditionFailed):
            pass
        try:
            blob = storage.get(self.store, self.key)
        except storage.NotFound:  # released between our create and our read: try again
            raise _held(self, "the lease changed hands", 0.0) from None
        held = json.loads(blob.data)
        if (
            held["holder"] != self.holder
            and held["expires"] > time.time()
            and held["fire_time"] >= self.fire_time
        ):
            raise _held(
                self,
                f"held by {held['holder']} (fire {held['fire_time']}, expires in "
                f"{held['expires'] - time.time():.0f} s): another update is running",
                held["expires"] - time.time(),
            )
        try:  # expired, or ours, or an older fire's: take it over on the version we read
            storage.put(self.store, self.key, self._body(), mode=blob.version)
        except (storage.PreconditionFailed, storage.AlreadyExists):
            raise _held(self, "lost the race to take the lease", 0.0) from None
        self._renewed = time.monotonic()
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

    def renew(self) -> None:
        """Push the expiry out (at most every ttl/3); LeaseLost if someone else holds it."""
        if time.monotonic() - self._renewed < self.ttl / 3:
            return
        try:
            blob = storage.get(self.store, self.key)
        except storage.NotFound:
            raise LeaseLost(f"{self.store.url}/{self.key} vanished") from None
        held = json.loads(blob.data)
        if held["holder"] != self.holder:
            raise LeaseLost(
                f"{self.store.url}/{self.key} taken over by {held['holder']} "
                f"(fire {held['fire_time']}); stopping"
            )
        try:
            storage.put(self.store, self.key, self._body(), mode=blob.version)
        except (storage.PreconditionFailed, storage.AlreadyExists):
            raise LeaseLost(f"{self.store.url}/{self.key} changed while renewing") from None
        self._renewed = time.monotonic()

    def release(self) -> None:
        try:
            blob = storage.get(self.store, self.key)
        except storage.NotFound:
            return
        if json.loads(blob.data)["holder"] == self.holder:
            storage.delete(self.store, self.key)


def _held(lease: Lease, why: str, expires_in: float) -> LeaseHeld:
    err = LeaseHeld(f"{lease.store.url}/{lease.key} {why}; this update exits")
    err.expires_in = expires_in  # type: ignore[attr-defined]
    return err
