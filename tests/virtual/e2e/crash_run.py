"""Run one write loop or backfill in a fresh process that dies at a crash point.

    python -m tests.virtual.e2e.crash_run run|backfill|update SRC REPO REPLICA POINT
    python -m tests.virtual.e2e.crash_run rounds SRC REPO REPLICA POINT NTH

`rounds`: a backfill in rounds of 3 files that dies the NTH time it reaches POINT. Exits CRASH_EXIT when the hook fired (the process died mid-step), 0 when it never did.
"""

from __future__ import annotations

import sys

import numpy as np

from tests.virtual.e2e.hooks import ExitAt, ExitAtNth, at_steps, sim_job
from toolkit.virtual.write import ensure_repo, run


def main(argv: list[str]) -> int:
    mode, src, repo, replica, point, *nth = argv
    job = sim_job(src, repo, replica)
    hook = ExitAtNth(point, int(nth[0]), []) if nth else ExitAt(point)
    with at_steps(hook):
        if mode == "run":
            ensure_repo(job)
            run(job)
        elif mode == "update":
            import time

            from toolkit.virtual.update import update

            fire = np.datetime64("2025-08-01T18", "ns")
            update(job, fire_time=fire, scheduled_at=time.time(), deadline_seconds=60)
        else:
            from toolkit.virtual.backfill import backfill

            backfill(
                job,
                start=np.datetime64("2025-08-01T00", "ns"),
                workers=2,
                executor="sync",
                round_files=3 if mode == "rounds" else None,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
