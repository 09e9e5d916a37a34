"""A single-writer lease: one object, created conditionally, kept alive by a heartbeat.

Operational updates commit to main and grow the append dim lazily; that is only safe with one
writer. The lease makes it enforced rather than assumed: a second update of the same fire (or
an older one) finds the lease held and waits (up to `wait` seconds) or refuses; a newer
scheduled fire takes the lease over (conditional replace on the version it read), and the
older run sees it lost the lease before its next commit.

The lease records its holder (host, pid, start) and a heartbeat a thread renews every
`interval` seconds. A holder that is gone does not block the next fire: a dead process on this
host is taken over at once, and a lease whose heartbeat stopped for two intervals is taken over
from any host (a CronJob's next pod); `took_over` then names the old holder.

A lease whose bytes are not a lease (empty, truncated, another document: `decode` refuses it,
naming it) has no heartbeat to read, so its object's age stands in for one: its live holder
rewrites it at its next beat, and one nothing rewrote for two intervals is taken over by the
next acquirer (the next fire, `toolkit virtual expire`, the same backfill rerun); before
that, acquiring is refused naming the object and when to rerun. A holder never steals: it
replaces a corrupt lease only on the version it read, as any takeover.

Whether a term ran out and why a holder counts as gone are `toolkit.tenure`'s decisions, the
same the local store's lock takes; this module keeps the record format and the I/O.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from toolkit import storage, tenure

__all__ = ["HEARTBEAT", "Lease", "LeaseHeld", "LeaseLost", "decode"]

HEARTBEAT = 5.0  # seconds between a holder's renewals; two missed ones and the lease is free


class LeaseHeld(RuntimeError):
    """Another live writer holds the lease."""


class LeaseLost(RuntimeError):
    """A newer fire took the lease over: stop before committing again."""


NUMBERS = ("fire_time", "expires")  # what every holder's body has, besides its `holder` id


def decode(store: storage.Store, key: str, data: bytes, fix: str) -> dict[str, Any]:
    """A lease's body as its holder wrote it; anything else (empty, cut short, not JSON, a
    document of another shape) is a `CorruptObject` naming it, with `fix`."""
    held = storage.record_json(store, key, data, "a lease", fix)
    if not isinstance(held, dict):
        raise storage.CorruptObject(store.url, key, "a lease", f"a JSON {json_kind(held)}", fix)
    bad = [k for k in NUMBERS if not _number(held.get(k))]
    if not isinstance(held.get("holder"), str):
        bad.insert(0, "holder")
    for k in ("heartbeat", "started", "interval"):
        if k in held and not _number(held[k]):
            bad.append(k)
    if bad:
        why = f"a JSON object without a valid {', '.join(bad)}"
        raise storage.CorruptObject(store.url, key, "a lease", why, fix)
    return held


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def json_kind(doc: Any) -> str:
    """What a JSON value is, in JSON's words."""
    kinds = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(doc), "number")


@dataclass
class Lease:
    store: storage.Store
    key: str
    fire_time: float  # the scheduled fire (epoch seconds): newer fires win
    interval: float = HEARTBEAT
    holder: str = field(default_factory=lambda: uuid.uuid4().hex)
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    started: float = field(default_factory=time.time)
    role: str = "update"  # what holds it, in messages ("update", "backfill")
    about: dict[str, Any] = field(default_factory=dict)  # what the holder works on (a region)
    took_over: str | None = None  # set by acquire: the old holder, and why it counted as gone
    _renewed: float = field(default=0.0, repr=False)
    _lost: LeaseLost | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def url(self) -> str:
        return f"{self.store.url.rstrip('/')}/{self.key}"

    def _body(self) -> bytes:
        term = tenure.granted(self.holder, time.time(), 2 * self.interval)
        return json.dumps(
            {
                "holder": self.holder,
                "host": self.host,
                "pid": self.pid,
                "started": self.started,
                "fire_time": self.fire_time,
                "heartbeat": term.heartbeat,
                "interval": self.interval,
                "expires": term.expires,
                **self.about,
            }
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

    @property
    def silence(self) -> float:
        """Seconds a corrupt lease must go unrewritten before it counts as abandoned: two of
        the default holder's beats (the holder's own interval is in the bytes that are gone)."""
        return 2 * max(self.interval, HEARTBEAT)

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
            raise _held(self, "changed hands", 0.0) from None
        try:
            held = decode(self.store, self.key, blob.data, "")
        except storage.CorruptObject as err:
            return self._replace_corrupt(blob, err)
        now, term = time.time(), term_of(held)
        theirs = held["holder"] != self.holder
        gone = gone_because(held, now) if theirs else None
        if theirs and gone is None and held["fire_time"] >= self.fire_time:
            beat = now if term.heartbeat is None else term.heartbeat
            raise _held(
                self,
                f"is held by {term.owner} (fire {_when(held['fire_time'])}, heartbeat "
                f"{max(0.0, now - beat):.0f} s ago): another {self.role} is running",
                term.left(now),
            )
        try:  # gone, or ours, or an older fire's: take it over on the version we read
            storage.put(self.store, self.key, self._body(), mode=blob.version)
        except (storage.PreconditionFailed, storage.AlreadyExists):
            raise _held(self, f"was taken by another {self.role} first", 0.0) from None
        if gone is not None and not term.released:
            self.took_over = f"took over {self.url} from {term.owner}: {gone}"
        self._renewed = time.monotonic()
        return self

    def _replace_corrupt(self, blob: storage.Blob, err: storage.CorruptObject) -> Lease:
        """Take over a lease that is not one, once nothing rewrote it for `silence` seconds
        (a live holder would have); before that, LeaseHeld naming it and when to rerun."""
        now = time.time()
        term = tenure.aged(self.url, blob.last_modified.timestamp(), now, self.silence)
        left = term.left(now)
        if term.lapsed(now) is None:
            fix = (
                f"a live holder rewrites it within {self.interval:g} s; if none does, rerun in "
                f"{math.ceil(left)} s and this {self.role} takes it over"
            )
            held = LeaseHeld(
                str(storage.CorruptObject(err.store, err.key, err.what, err.detail, fix))
            )
            held.expires_in = left  # type: ignore[attr-defined]
            raise held
        try:
            storage.put(self.store, self.key, self._body(), mode=blob.version)
        except (storage.PreconditionFailed, storage.AlreadyExists):
            raise _held(self, f"was taken by another {self.role} first", 0.0) from None
        self.took_over = (
            f"took over {self.url}: it was not a lease ({err.detail}) and nothing rewrote it "
            f"for {self.silence - left:.0f} s"
        )
        self._renewed = time.monotonic()
        return self

    def _read(self) -> tuple[storage.Blob, dict[str, Any] | None]:
        """The lease's object and its body (None: corrupt); LeaseLost if it is gone."""
        try:
            blob = storage.get(self.store, self.key)
        except storage.NotFound:
            raise LeaseLost(f"{self.url} vanished") from None
        try:
            return blob, decode(self.store, self.key, blob.data, "")
        except storage.CorruptObject:
            return blob, None

    @contextmanager
    def heartbeat(self) -> Iterator[Lease]:
        """Renew the lease every `interval` seconds in a thread while the block runs; a lease
        lost meanwhile is raised by the next `check`."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.interval):
                try:
                    self.renew(force=True)
                except LeaseLost as err:
                    self._lost = err
                    return
                except storage.StorageError:
                    continue  # a blip: the next beat tries again (two missed lose the lease)

        thread = threading.Thread(target=beat, name=f"lease {self.key}", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=self.interval + 30)

    def check(self) -> None:
        """Raise LeaseLost unless we still hold the lease (call before each commit)."""
        if self._lost is not None:
            raise self._lost
        _, held = self._read()
        if held is None:  # damaged under us: ours until someone else replaces it
            self.renew(force=True)
            return
        if held["holder"] != self.holder:
            raise LeaseLost(f"{self.url} taken over by {holder_of(held)}; stopping")

    def renew(self, force: bool = False) -> None:
        """Push the heartbeat out (unless `force`, at most once an interval); LeaseLost if
        someone else holds it. A lease damaged under its holder is rewritten whole (on the
        version read: a takeover meanwhile wins)."""
        with self._lock:  # the heartbeat thread and the caller never race on one version
            if not force and time.monotonic() - self._renewed < self.interval:
                return
            blob, held = self._read()
            if held is not None and held["holder"] != self.holder:
                raise LeaseLost(f"{self.url} taken over by {holder_of(held)}; stopping")
            try:
                storage.put(self.store, self.key, self._body(), mode=blob.version)
            except (storage.PreconditionFailed, storage.AlreadyExists):
                raise LeaseLost(f"{self.url} changed while renewing") from None
            self._renewed = time.monotonic()

    def release(self, keep: bool = False) -> None:
        """Give the lease up: deleted, or with `keep` left as a record of what it covered,
        marked released (anyone takes it, no warning)."""
        with self._lock:
            try:
                blob, held = self._read()
            except LeaseLost:
                return
            if held is None or held["holder"] != self.holder:
                return  # damaged: left to age out (it may be another's by now)
            if not keep:
                storage.delete(self.store, self.key)
                return
            body = {**held, "released": time.time(), "expires": 0.0}
            try:
                storage.put(self.store, self.key, json.dumps(body).encode(), mode=blob.version)
            except (storage.PreconditionFailed, storage.AlreadyExists):
                return  # taken over meanwhile: not ours to mark


def holder_of(held: dict[str, Any]) -> str:
    """The holder as a person can find it: pid on host, started when."""
    if "host" not in held:
        return str(held["holder"])
    started = f" (started {_when(held['started'])})" if "started" in held else ""
    return f"pid {held.get('pid')} on {held['host']}{started}"


def term_of(held: dict[str, Any]) -> tenure.Term:
    """A decoded lease's term (`toolkit.tenure`, the one lease's decisions)."""
    beat = held.get("heartbeat")
    return tenure.Term(holder_of(held), held["expires"], beat, "released" in held)


def gone_because(held: dict[str, Any], now: float | None = None) -> str | None:
    """Why the holder of `held` counts as gone (None: it may still be working): it released
    it, its process on this host is no longer running, or its term ran out."""
    now = time.time() if now is None else now
    pid, host = held.get("pid"), held.get("host")
    dead = host == socket.gethostname() and isinstance(pid, int) and not _alive(pid)
    return tenure.takeover(
        term_of(held), now, f"process {pid} on {host} is no longer running" if dead else None
    )


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def _when(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(float(epoch), _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _held(lease: Lease, why: str, expires_in: float) -> LeaseHeld:
    err = LeaseHeld(f"{lease.url} {why}; this {lease.role} exits")
    err.expires_in = expires_in  # type: ignore[attr-defined]
    return err
