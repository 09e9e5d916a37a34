"""A worker plugin that SIGKILLs its own worker process when it starts a given stage's task."""

from __future__ import annotations

import os
import signal

from distributed.diagnostics.plugin import WorkerPlugin


class KillOnStage(WorkerPlugin):
    """The first worker to start executing a task of `stage` records its pid and dies (once)."""

    def __init__(self, stage: str, marker: str) -> None:
        self.stage = stage
        self.marker = marker

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing" or not isinstance(key, tuple):
            return
        if not str(key[0]).startswith(f"{self.stage}-"):
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
