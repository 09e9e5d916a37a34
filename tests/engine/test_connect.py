"""A scheduler address nothing listens on fails in about two seconds, naming the address and
the refused port (distributed alone retries it for the whole connect timeout); a scheduler
that binds inside that window is connected to; Dask's own connect timeout is honoured when it
is shorter than toolkit's."""

from __future__ import annotations

import socket
import threading
import time

import dask
import pytest

from toolkit.engine import cluster as C


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
        assert C._refused(f"tcp://127.0.0.1:{port}") is None
        assert listening.is_set()
    finally:
        timer.join()
        server.close()


def test_dask_connect_timeout_is_honoured_when_shorter() -> None:
    with dask.config.set({"distributed.comm.timeouts.connect": "30s"}):  # Dask's default
        assert C._connect_seconds() == C.CONNECT_SECONDS
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        assert C._connect_seconds() == 2.0
