"""The one lease: who holds a thing and until when, and the decisions on it.

A local store's lock (`toolkit.storage`, around a conditional write) and the single-writer
lease of `virtual update` and of a backfill's guard (`toolkit.virtual.lease`) are both a `Term`:
an owner and an expiry. Whether a term ran out, whether it may be taken over and why, and how
long a record whose own term cannot be read holds, are decided here once. Pure: the callers
read the clock, the store and the process table, and hand in what they found.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

__all__ = ["Term", "aged", "granted", "lock_body", "read_lock", "takeover"]


@dataclass(frozen=True)
class Term:
    """A lease as its record says: `owner` (as a person can find it) holds it until `expires`
    (epoch seconds); `heartbeat` is its holder's last renewal where the record keeps one, and a
    `released` term is kept only as a record of what it covered."""

    owner: str
    expires: float
    heartbeat: float | None = None
    released: bool = False

    def left(self, now: float) -> float:
        """Seconds the term still runs (negative: since it ran out)."""
        return self.expires - now

    def lapsed(self, now: float) -> str | None:
        """Why the term is over at `now`, None while it runs. An expiry that is not a number
        (NaN) has run out: no record holds a thing for ever by being unreadable."""
        if self.expires > now:
            return None
        if math.isnan(self.expires):
            return "its expiry is not a number"
        if self.heartbeat is None or not math.isfinite(self.heartbeat):
            return f"expired {now - self.expires:.0f} s ago"
        return f"its heartbeat stopped for {now - self.heartbeat:.0f} s"


def granted(owner: str, now: float, ttl: float) -> Term:
    """The term a holder writes when it takes or renews a lease at `now`."""
    return Term(owner, now + ttl, heartbeat=now)


def aged(owner: str, written: float, now: float, ttl: float) -> Term:
    """The term of a record that does not say its own (a lock from before locks had owners, a
    lease whose bytes are damaged): `ttl` from when its object was last written, as a live
    holder would have rewritten it by then. An object dated in the future (another clock)
    counts as written now, so no record holds longer than `ttl` from now."""
    return Term(owner, min(written, now) + ttl)


def takeover(held: Term, now: float, force: str | None = None) -> str | None:
    """Why `held` may be taken over at `now`, None while its holder may still be working (wait
    for it or refuse, naming it): it was released, the caller's `force` (--break-lock, the
    holder's process known to be gone), or its term ran out."""
    if held.released:
        return "it released it"
    return force or held.lapsed(now)


def lock_body(term: Term) -> bytes:
    """A local lock as stored: `{"owner": ..., "expires": ...}`."""
    return json.dumps({"owner": term.owner, "expires": term.expires}).encode()


def read_lock(data: bytes, written: float, now: float, ttl: float) -> Term:
    """A local lock's term from its bytes, whatever they are. A lock from before locks had
    owners (a bare pid) or one cut short has the term its age gives (`aged`)."""
    try:
        doc = json.loads(data)
        return Term(str(doc["owner"]), float(doc["expires"]))
    except (ValueError, KeyError, TypeError):
        return aged(f"pid {data[:20].decode(errors='replace')}", written, now, ttl)
