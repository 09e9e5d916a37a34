"""A Dask cluster the way users run one: `dask scheduler` and `dask worker` OS processes.

Started once per session on 127.0.0.1 and reused by every test marked `cluster`, so workers
stay warm across runs, as on a Jupyter session's cluster. Waits read the processes' own output
and the scheduler's state; nothing sleeps.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _drain(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:  # keep reading so the process never blocks on a full pipe
        lines.put(line)


def _start(
    cmd: Sequence[str], cwd: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    proc = subprocess.Popen(
        list(cmd), cwd=cwd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_drain, args=(proc, lines), daemon=True).start()
    return proc, lines


def _await_line(lines: queue.Queue[str], pattern: str, what: str) -> re.Match[str]:
    seen = []
    while True:
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            raise RuntimeError(f"{what} did not start:\n{''.join(seen)}") from None
        seen.append(line)
        if m := re.search(pattern, line):
            return m


@dataclass
class External:
    """A running scheduler and its worker processes (each `--nworkers 1`, behind a nanny)."""

    address: str
    workdir: Path
    python: str
    env: dict[str, str]
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def add_worker(self, nthreads: int = 1, env: dict[str, str] | None = None) -> int:
        """Start one more worker (in `env`, else the cluster's) and return its process id."""
        cmd = [
            self.python,
            "-m",
            "distributed.cli.dask_worker",
            self.address,
            "--nworkers",
            "1",
            "--nthreads",
            str(nthreads),
            "--host",
            "127.0.0.1",
            "--no-dashboard",
            "--local-directory",
            str(self.workdir / "workers"),
        ]
        proc, lines = _start(cmd, self.workdir, self.env if env is None else env)
        self.procs.append(proc)
        _await_line(lines, r"Registered to:", "dask worker")
        return proc.pid

    def worker_pids(self) -> dict[str, int]:
        from distributed import Client

        with Client(self.address, set_as_default=False) as c:
            return c.run(os.getpid)

    def wait_for_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, set_as_default=False) as c:
            c.wait_for_workers(n, timeout=120)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def start(
    workdir: Path, workers: int = 2, python: str = sys.executable, env: dict[str, str] | None = None
) -> External:
    """Scheduler + `workers` worker processes. The default environment imports this checkout
    (tests' services included, through PYTHONPATH), like a worker image built from it."""
    workdir.mkdir(parents=True, exist_ok=True)
    if env is None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        python,
        "-m",
        "distributed.cli.dask_scheduler",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--dashboard-address",
        "127.0.0.1:0",
    ]
    proc, lines = _start(cmd, workdir, env)
    address = _await_line(lines, r"Scheduler at:\s+(tcp://\S+)", "dask scheduler").group(1)
    cluster = External(address, workdir, python, env, [proc])
    try:
        for _ in range(workers):
            cluster.add_worker()
    except Exception:
        cluster.stop()
        raise
    return cluster


def isolated_python(where: Path) -> str:
    """An interpreter that sees every dependency but not this project: a venv whose only link
    to ours is a .pth naming our site-packages (a .pth there is not processed, so the editable
    install's finder never runs, and toolkit cannot be imported)."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    ours = sysconfig.get_paths()["purelib"]
    theirs = next((where / "lib").glob("python3*/site-packages"))
    (theirs / "dependencies.pth").write_text(ours + "\n")
    return str(where / "bin" / "python")
