"""A fault-injecting S3 proxy on 127.0.0.1, for tests that prove jobs survive a bad network.

Clients talk to the proxy as their S3 endpoint; it forwards each request to the real server
(the Host header untouched, so signatures still verify) unless the fault policy picks it:

- `503`: answered `503 SlowDown` without forwarding (the server never saw it);
- `slow`: forwarded after a delay;
- `drop`: the connection closed before forwarding (no response at all);
- `lost`: forwarded, then the connection closed before the response (the server applied it,
  the client cannot know: a retried conditional write then meets its own first attempt).

`latency` adds a fixed wait to every forwarded request (a distant object store's round trip,
for benchmarks), on top of any fault. Every request is counted by kind (`seen`: LIST, GET
.idx, GET range, GET, PUT, ...; `reset()` starts a new count).

Faults are drawn from a seeded generator, so a failing run replays. `hold(match)` makes the
proxy stop at the first request whose method and path match until `release()`, and tells the
test it got there (`held.wait()`): a process can be killed with that request in flight.
"""

from __future__ import annotations

import http.client
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

Match = Callable[[str, str], bool]  # (method, path) -> hold this one?


class FaultProxy:
    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.0,
        kinds: tuple[str, ...] = ("503", "slow", "drop"),
        delay: float = 0.1,
        seed: int = 0,
        expires: Callable[[str], float | None] | None = None,
        latency: float = 0.0,
        keep_alive: bool = False,
    ) -> None:
        target = urlparse(upstream)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.rate, self.kinds, self.delay = rate, kinds, delay
        self.latency = latency  # seconds every forwarded request waits first
        self.seen: Counter[str] = Counter()  # requests by kind (`request_kind`)
        self.keep_alive = keep_alive  # one upstream connection per client connection
        self.rng = random.Random(seed)
        self.expires = expires  # access key -> when it stops being accepted (epoch seconds)
        self.expired: Counter[str] = Counter()  # refused as expired, per access key
        self.keys: set[str] = set()  # access keys seen
        self.lock = threading.Lock()
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self.hold_match: Match | None = None
        self.held = threading.Event()
        self.forward_held = True
        self._release = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body leave as written
            upstream: http.client.HTTPConnection | None = None

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def hold(self, match: Match) -> None:
        self.hold_match = match
        self.held.clear()
        self._release.clear()

    def release(self, forward: bool = True) -> None:
        """Let the held request go on (`forward`: to the server, as if it had left the dead
        client's socket; else dropped, as if the kill had cut it off)."""
        self.forward_held = forward
        self.hold_match = None
        self._release.set()

    def _expired(self, req: BaseHTTPRequestHandler) -> bool:
        """Refuse a request signed with a key past its expiry (400 ExpiredToken, as S3 does)."""
        key = _access_key(req)
        if key is None:
            return False
        self.keys.add(key)
        assert self.expires is not None
        until = self.expires(key)
        if until is None or time.time() <= until:
            return False
        self.expired[key] += 1
        _refuse(req, 400, "ExpiredToken", "The provided token has expired.")
        return True

    def reset(self) -> Counter[str]:
        """The requests seen by kind since the last reset; the count starts again."""
        with self.lock:
            seen, self.seen = self.seen, Counter()
        return seen

    def _pick(self, kind: str) -> str | None:
        with self.lock:
            self.requests += 1
            self.seen[kind] += 1
            if self.rng.random() >= self.rate:
                return None
            kind = self.rng.choice(self.kinds)
            self.injected[kind] += 1
            return kind

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else b""
        match = self.hold_match
        if match is not None and match(req.command, req.path):
            self.held.set()
            self._release.wait()
            if not self.forward_held:
                _abort(req)
                return
        if self.expires is not None and self._expired(req):
            return
        kind = self._pick(request_kind(req.command, req.path, req.headers.get("Range")))
        if kind == "503":
            payload = b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"
            req.send_response(503)
            req.send_header("Content-Type", "application/xml")
            req.send_header("Content-Length", str(len(payload)))
            req.end_headers()
            req.wfile.write(payload)
            return
        if kind == "drop":
            _abort(req)
            return
        if kind == "slow":
            time.sleep(self.delay)
        if self.latency:
            time.sleep(self.latency)
        headers = {k: v for k, v in req.headers.items() if k.lower() != "connection"}
        resp, data = self._forward(req, body, headers)
        if kind == "lost":
            _abort(req)
            return
        req.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                req.send_header(k, v)
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        if req.command != "HEAD":
            req.wfile.write(data)

    def _forward(
        self, req: BaseHTTPRequestHandler, body: bytes, headers: dict[str, str]
    ) -> tuple[http.client.HTTPResponse, bytes]:
        """The server's response: on a new connection, or (`keep_alive`) on this client
        connection's own, made again once if the server closed it in between."""
        kept = getattr(req, "upstream", None) if self.keep_alive else None
        for attempt in (0, 1):
            conn = kept or http.client.HTTPConnection(*self.upstream, timeout=60)
            try:
                conn.request(req.command, req.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                if kept is None or attempt:
                    raise
                kept = None  # a stale kept connection: once more on a new one
                continue
            if self.keep_alive and not resp.will_close:
                req.upstream = conn  # type: ignore[attr-defined]
            else:
                conn.close()
                req.upstream = None  # type: ignore[attr-defined]
            return resp, data
        raise AssertionError("unreachable")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog is 5: clients opening 128 connections at once (two
    # processes' pools of 64) had SYNs dropped and waited 1-3 s for the retransmit
    request_queue_size = 1024


def request_kind(method: str, path: str, range_: str | None = None) -> str:
    """What an S3 request does: LIST, GET .idx, GET range, GET, or its method."""
    target = urlparse(path)
    if method == "GET" and "list-type=" in target.query:
        return "LIST"
    if method == "GET" and range_:
        return "GET range"
    if method == "GET" and target.path.endswith(".idx"):
        return "GET .idx"
    return method


def _access_key(req: BaseHTTPRequestHandler) -> str | None:
    auth = req.headers.get("Authorization") or ""
    _, found, rest = auth.partition("Credential=")
    return rest.split("/", 1)[0] if found else None


def _refuse(req: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
    payload = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
    req.send_response(status)
    req.send_header("Content-Type", "application/xml")
    req.send_header("Content-Length", str(len(payload)))
    req.end_headers()
    if req.command != "HEAD":
        req.wfile.write(payload)


class Rotating:
    """A refreshing credential provider over short-lived keys: key n is handed out during
    [t0 + n*ttl, t0 + (n+1)*ttl) and expires at its end; the proxy refuses it after that
    (`expires`), as a server refuses an expired session token."""

    def __init__(self, t0: float, ttl: float, count: int, grace: float = 0.5) -> None:
        self.t0, self.ttl, self.count, self.grace = t0, ttl, count, grace
        self.calls = 0

    def __call__(self) -> dict[str, object]:
        from datetime import UTC, datetime

        self.calls += 1
        n = min(int((time.time() - self.t0) / self.ttl), self.count - 1)
        return {
            "access_key_id": f"ROT{n:04d}",
            "secret_access_key": f"rot-secret-{n}",
            "token": None,
            "expires_at": datetime.fromtimestamp(self.t0 + (n + 1) * self.ttl, UTC),
        }

    def expires(self, access_key: str) -> float | None:
        if not access_key.startswith("ROT"):
            return None
        return self.t0 + (int(access_key[3:]) + 1) * self.ttl + self.grace


def _abort(req: BaseHTTPRequestHandler) -> None:
    """Close the client's connection with no response (a reset, not a clean close)."""
    req.close_connection = True
    try:
        req.connection.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
        req.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
