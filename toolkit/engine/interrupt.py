"""Ctrl-C and SIGTERM: one line, exit 128 + the signal, no traceback, no worker left behind.

Every job writes idempotently and resumes what exists, so an interrupted command loses only the
tasks in flight: rerunning it converges to the bytes of an uninterrupted run. A terminal's
Ctrl-C (SIGINT, exit 130) and a scheduler's stop (SIGTERM from Kubernetes, systemd, cron; exit
143) are treated alike: the first unwinds the command as a KeyboardInterrupt, so its cluster is
closed by the same code as on success; a second one exits at once.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

LINE = "interrupted: rerun to resume"
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_active: Interrupts | None = None


def interrupted() -> bool:
    """A SIGINT or SIGTERM arrived during this command: whatever it raised is the interrupt."""
    return _active is not None and _active.signum is not None


def ending_says(line: str) -> None:
    """For a command that runs until interrupted (`toolkit serve`): the line its Ctrl-C
    prints instead of "rerun to resume", which would be wrong there; the exit code stays."""
    if _active is not None:
        _active.line = line


class Interrupts:
    """Within the block, SIGINT and SIGTERM raise KeyboardInterrupt once; a second one prints
    `LINE`, kills the worker processes this process started and exits without cleanup (the
    user asked twice). Handlers are installed in the main thread only (signal's rule) and
    restored on exit. `say` prints a line to stderr."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.line = LINE  # what is said once the command unwound (`ending_says`)
        self.signum: int | None = None
        self._saved: dict[int, Any] = {}

    @property
    def code(self) -> int:
        """The shell's convention for a death by signal: 128 + its number (130, 143)."""
        return 128 + (self.signum or signal.SIGINT)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            if _swallowed_here(frame):  # raised here, Python would print it and carry on
                threading.Timer(RESEND, os.kill, (os.getpid(), signum)).start()
                return
            self.signum = signum
            raise KeyboardInterrupt
        os.write(2, f"{LINE}\n".encode())  # not through `say`: its lock may be held right now
        reap_children(grace=0.0)
        multiprocessing.util._exit_function()  # release its semaphores: no leak warning after
        os._exit(self.code)

    def __enter__(self) -> Interrupts:
        global _active
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._saved[sig] = signal.signal(sig, self._handler)
        _active = self
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        for sig, previous in self._saved.items():
            signal.signal(sig, previous)
        self._saved.clear()
        _active = None

    def finish(self, last_word: bool = True) -> int:
        """After the command unwound: end what is left of an embedded cluster interrupted while
        it started (distributed's own exit hook would fail on it with a traceback), print the
        line, return the exit code. With `last_word`, the line stays the last one on stderr:
        a thread the interrupt left mid-I/O (zarr's loop, a pool) that dies noisily on the way
        out writes to nothing."""
        logging.disable(logging.CRITICAL)  # a half-started cluster's complaints, on the way out
        reap_children(grace=5.0)
        spec = sys.modules.get("distributed.deploy.spec")
        if spec is not None:
            atexit.unregister(spec.close_clusters)
        self.say(self.line)
        if last_word:
            sys.stderr.flush()
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        return self.code


# Code an exception cannot leave: it is printed as "Exception ignored in ..." and the code
# below goes on (distributed's gc callback, finalizers). A signal landing there is sent again.
SWALLOWING = frozenset({"_gc_callback", "__del__", "_remove"})
RESEND = 0.05  # seconds


def _swallowed_here(frame: FrameType | None) -> bool:
    depth = 0
    while frame is not None and depth < 64:
        if frame.f_code.co_name in SWALLOWING:
            return True
        frame, depth = frame.f_back, depth + 1
    return False


def reap_children(grace: float) -> None:
    """Terminate the processes this process spawned (embedded workers), kill what is left
    after `grace` seconds."""
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)
