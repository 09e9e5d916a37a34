"""`toolkit serve` as users start it: the console script in its own process, listening on
127.0.0.1 only, stopped by Ctrl-C (exit 130, as every command); bad input refused in one line with exit 2 before it binds."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolkit.cli import app

TOOLKIT = str(Path(sys.executable).with_name("toolkit"))
runner = CliRunner()


def start(*args: str) -> tuple[subprocess.Popen, str]:
    """The console script serving, and the URL it printed once it listens."""
    proc = subprocess.Popen(
        [TOOLKIT, "serve", *args, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    line = proc.stdout.readline()  # blocks until it listens (or exits)
    if not line:
        proc.kill()
        pytest.fail(f"toolkit serve exited {proc.wait()}: {proc.stderr.read()}")
    return proc, line.split(" at ", 1)[1].split()[0]


def test_the_console_script_serves_on_loopback_and_stops_on_ctrl_c(cf_pyramid):
    proc, url = start(str(cf_pyramid), "--variable", "temperature")
    try:
        assert url.startswith("http://127.0.0.1:")
        port = int(url.rsplit(":", 1)[1].strip("/"))
        with urllib.request.urlopen(url + "meta", timeout=30) as r:
            meta = json.load(r)
        assert meta["default_variable"] == "temperature"
        assert meta["source"] == str(cf_pyramid)  # the path with its space and é, as given
        with urllib.request.urlopen(url + "tiles/0/0/0.png", timeout=30) as r:
            assert r.headers["Content-Type"] == "image/png" and r.headers["X-Level"] == "4x"
        # bound to loopback: every other address of this host is refused
        addrs = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
        for addr in addrs - {"127.0.0.1"}:
            with pytest.raises(OSError):
                socket.create_connection((addr, port), timeout=2).close()
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    err = proc.stderr.read()
    assert code == 130 and err.strip().splitlines()[-1] == "stopped", err


def _refused(args: list[str]) -> str:
    result = runner.invoke(app, ["serve", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_bad_input_is_one_line_and_exit_2(cf_pyramid, tmp_path):
    store = str(cf_pyramid)
    assert "does not exist" in _refused([str(tmp_path / "nowhere.zarr")])
    assert "holds no zarr.json" in _refused([str(tmp_path)])
    said = _refused([store, "--variable", "salinity"])
    assert "salinity" in said and "temperature" in said
    assert "unknown colormap 'rainbowz'" in _refused([store, "--colormap", "rainbowz"])
    assert "MIN,MAX" in _refused([store, "--range", "300,250"])
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        said = _refused([store, "--port", str(port)])
        assert f"127.0.0.1:{port}" in said and "--port" in said
    finally:
        taken.close()


def test_toolkit_serve_from_python(cf_pyramid):
    """`toolkit.serve(...)`, as a notebook or script calls it: the same server, its address
    handed to `on_ready`."""
    code = (
        "import sys, toolkit\n"
        "toolkit.serve(sys.argv[1], port=0, colormap='magma',"
        " on_ready=lambda url: print('at', url, flush=True))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(cf_pyramid)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = proc.stdout.readline().split()[1]
        with urllib.request.urlopen(url + "meta", timeout=30) as r:
            legend = json.load(r)["variables"]["temperature"]["legend"]
        assert legend["colormap"] == "magma"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
