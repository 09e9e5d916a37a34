"""A scheduler address nothing listens on fails in about two seconds, naming the address and
the refused port (distributed alone retries it for the whole connect timeout); a scheduler
that binds inside that window is connected to; Dask's own connect timeout is honoured when it
is shorter than toolkit's. Every other wrong address (a dashboard or other HTTP server, a
silent server, a scheme distributed does not speak, tls:// without certificates) ends the CLI
in one line naming it, exit 2, within 10 s and before anything is written; distributed alone
hung on them, or raised MemoryError, ValueError or TypeError."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dask
import pytest

from tests.external import _await_line, _start
from toolkit import storage
from toolkit.engine import cluster as C
from toolkit.examples import synthetic

TOOLKIT = str(Path(sys.executable).parent / "toolkit")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_port_nobody_listens_on_is_refused_quickly_and_named() -> None:
    port = _free_port()
    started = time.monotonic()
    with pytest.raises(C.ClusterUnreachable) as err, C.connect(f"tcp://127.0.0.1:{port}"):
        pass
    took = time.monotonic() - started
    assert C.REFUSED_SECONDS <= took < C.REFUSED_SECONDS + 3, took
    assert f"tcp://127.0.0.1:{port}" in str(err.value)
    assert f"nothing listens on port {port} of 127.0.0.1: connection refused" in str(err.value)
    assert "--cluster / TOOLKIT_CLUSTER" in str(err.value)


def test_a_port_that_starts_listening_inside_the_window_is_not_refused() -> None:
    port = _free_port()
    listening = threading.Event()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def bind_late() -> None:  # the scheduler of `dask scheduler &` binding a moment later
        server.bind(("127.0.0.1", port))
        server.listen()
        listening.set()

    timer = threading.Timer(0.5, bind_late)
    timer.start()
    try:
        dialled = C._dial("127.0.0.1", port)
        assert isinstance(dialled, socket.socket), dialled
        dialled.close()
        assert listening.is_set()
    finally:
        timer.join()
        server.close()


def test_dask_connect_timeout_is_honoured_when_shorter() -> None:
    with dask.config.set({"distributed.comm.timeouts.connect": "30s"}):  # Dask's default
        assert C._connect_seconds() == C.CONNECT_SECONDS
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        assert C._connect_seconds() == 2.0


# ------------------------------------------------------------ wrong addresses, real servers


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A real `dask scheduler` (no workers): its address and its dashboard's host:port."""
    cmd = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1"]
    cmd += ["--port", "0", "--dashboard-address", "127.0.0.1:0"]
    proc, lines = _start(cmd, tmp_path_factory.mktemp("sched"), dict(os.environ))
    try:
        address = _await_line(lines, r"Scheduler at:\s+(tcp://\S+)", "dask scheduler").group(1)
        board = _await_line(lines, r"dashboard at:\s+http://(\S+?)/", "its dashboard").group(1)
        yield address, board
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _serve(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A TCP server on a free loopback port that runs `answer` on each connection."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            answer(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for conn in held:
        conn.close()


@pytest.fixture
def silent() -> Iterator[int]:
    """Accepts and says nothing, whatever it is sent."""
    yield from _serve(lambda conn: None)


@pytest.fixture
def speaks_http_first() -> Iterator[int]:
    """Writes an HTTP status line as it accepts (distributed read it as a frame length:
    MemoryError, 3 EiB)."""
    yield from _serve(lambda conn: conn.sendall(b"HTTP/1.1 408 Request Timeout\r\n\r\n"))


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[int]:
    """`python -m http.server` on a free port."""
    cmd = [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield int(re.search(r"port (\d+)", proc.stdout.readline()).group(1))  # type: ignore[union-attr]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _build(address: str, tmp_path: Path, env: bool = False) -> tuple[int, list[str], float]:
    """`toolkit --cluster ADDRESS pyramid build STORE` (or TOOLKIT_CLUSTER): exit code, the
    stderr lines and the wall seconds; asserts the store is as it was."""
    store = tmp_path / "s.zarr"
    if not store.exists():
        synthetic.write_store(storage.open_store(str(store)), shape=(32, 32), shards=(16, 16))
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    environ = {k: v for k, v in os.environ.items() if k != "TOOLKIT_CLUSTER"}
    argv = [TOOLKIT, "pyramid", "build", str(store)]
    if env:
        environ["TOOLKIT_CLUSTER"] = address
    else:
        argv[1:1] = ["--cluster", address]
    started = time.monotonic()
    res = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before  # nothing written
    return res.returncode, [ln for ln in res.stderr.splitlines() if ln.strip()], took


def _one_line(address: str, tmp_path: Path, *says: str, env: bool = False) -> None:
    code, lines, took = _build(address, tmp_path, env)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    at = 0
    for fragment in (address, *says):
        found = lines[0].find(fragment, at)
        assert found >= 0, f"{fragment!r} not in (after col {at}): {lines[0]}"
        at = found
    assert took < 10, took


HTTP = ("an HTTP server answers there", "dashboard port", "8786", "--cluster")


def test_the_dashboard_port_of_a_real_scheduler_is_named_as_such(scheduler, tmp_path) -> None:
    _, board = scheduler
    _one_line(f"tcp://{board}", tmp_path, *HTTP)
    _one_line(board, tmp_path, *HTTP, env=True)  # bare host:port, from the environment


def test_an_http_server_is_named_as_such(http_server: int, tmp_path: Path) -> None:
    _one_line(f"tcp://127.0.0.1:{http_server}", tmp_path, *HTTP)


def test_an_http_server_that_speaks_first_is_no_memory_error(speaks_http_first, tmp_path) -> None:
    _one_line(f"tcp://127.0.0.1:{speaks_http_first}", tmp_path, *HTTP)


def test_a_silent_server_is_named_within_the_greeting_window(silent: int, tmp_path) -> None:
    _one_line(f"tcp://127.0.0.1:{silent}", tmp_path, "said nothing in 5 s", "greets at once")


def test_a_scheme_distributed_does_not_speak_is_named_with_where_to_go(tmp_path) -> None:
    _one_line(
        "gateway://gw.example.org:8000/c1", tmp_path, "dask-gateway address",
        "from its address alone", "from Python", "cluster=gateway.connect",
    )  # fmt: skip
    _one_line("http://127.0.0.1:8787/status", tmp_path, "unknown scheme 'http'", "Scheduler at")


def test_tls_without_certificates_names_the_settings(scheduler, tmp_path: Path) -> None:
    address = scheduler[0].replace("tcp://", "tls://")
    _one_line(address, tmp_path, "needs certificates", "distributed.comm.tls.ca-file",
              "DASK_DISTRIBUTED__COMM__TLS__CA_FILE")  # fmt: skip


def test_a_real_scheduler_passes_the_probe(scheduler) -> None:
    assert C._no_scheduler(scheduler[0]) is None
    gateway = "gateway://gw.example.org:8000/c1"
    with pytest.raises(C.BadOption, match="dask-gateway address"), C.connect(gateway):
        pass  # from Python too
