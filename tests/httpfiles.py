"""A web server on 127.0.0.1 serving a folder as a provider's HTTP site does: GET (whole or
one byte range, 206 with Content-Range), HEAD with Content-Length, Last-Modified and ETag, 404
for anything that is not a file, and no listing (what `discovery="probe"` is for). Requests
are counted by method (`seen`)."""

from __future__ import annotations

import email.utils
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class FileSite:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.seen: Counter[str] = Counter()
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                site.serve(self, body=False)

            def do_GET(self) -> None:
                site.serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FileSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve(self, req: BaseHTTPRequestHandler, body: bool) -> None:
        self.seen[req.command] += 1
        path = (self.root / unquote(urlparse(req.path).path).lstrip("/")).resolve()
        if not path.is_file() or self.root not in path.parents:
            req.send_response(404)
            req.send_header("Content-Length", "0")
            req.end_headers()
            return
        data = path.read_bytes()
        stat = path.stat()
        start, end, status = 0, len(data), 200
        want = req.headers.get("Range")
        if want and (m := _RANGE.match(want.strip())):
            start = int(m[1])
            end = min(len(data), int(m[2]) + 1) if m[2] else len(data)
            status = 206
        req.send_response(status)
        req.send_header("Content-Length", str(end - start))
        req.send_header("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True))
        req.send_header("ETag", f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"')
        req.send_header("Accept-Ranges", "bytes")
        if status == 206:
            req.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        req.end_headers()
        if body:
            req.wfile.write(data[start:end])
