"""Engine overhead: 10,000 no-op tasks through the gated graph vs a plain `client.map`.

Same LocalCluster, same tasks, one run. Reports seconds and the ratio gated / plain.
    .venv/bin/python -m benchmarks engine_overhead
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from benchmarks._report import write
from toolkit.engine import Gate, Plan, Stage, run
from toolkit.tasks import stable


@dataclass(frozen=True)
class Noop:
    n: int

    @property
    def key(self) -> str:
        return f"noop/{self.n:06d}"


def noop(task: Noop) -> int:
    return task.n


def no_objects() -> frozenset[str]:
    return frozenset()


def main(n: int = 10_000) -> None:
    from distributed import Client, LocalCluster

    tasks = stable(Noop(i) for i in range(n))
    rows = []
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as lc,
        Client(lc) as client,
    ):
        client.submit(noop, Noop(0)).result()  # warm the workers
        t0 = time.perf_counter()
        futures = client.map(noop, list(tasks), pure=False)
        client.gather(futures)
        plain = time.perf_counter() - t0
        del futures
        for label, workers in (("one node per task", None), ("8 stripe nodes", 8)):
            plan = Plan(
                f"bench-{label}",
                (
                    Stage(
                        "noop",
                        tasks,
                        noop,
                        Gate(no_objects),
                        workers=workers,
                        per_task=True,
                        resume=False,
                    ),
                ),
            )
            t0 = time.perf_counter()
            run(plan, cluster=client)
            gated = time.perf_counter() - t0
            rows.append(
                {
                    "graph": label,
                    "tasks": n,
                    "gated_s": gated,
                    "client_map_s": plain,
                    "ratio_gated_over_map": gated / plain,
                }
            )
    write("engine_overhead", rows, "10,000 no-op tasks, LocalCluster 2 process workers x 1 thread.")


if __name__ == "__main__":
    main()
