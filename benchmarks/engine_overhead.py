"""Engine overhead: 10,000 no-op tasks through the gated graph vs a plain `client.map`.

Same LocalCluster, same tasks, one run: rounds in rotating order, each contender starting on
an idle scheduler (median of each). The gated plan
sends its stage as one graph in one `client.get` (done node, 10,000 work nodes, gate), waits
for the gate and releases the stage; `client.map` sends the same 10,000 calls and gathers them.
The stripe row is a different thing and says so: 8 nodes that each run 1,250 tasks measure
batching (8 scheduler tasks instead of 10,000), not the engine's overhead.
    .venv/bin/python -m benchmarks engine_overhead
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from benchmarks._report import write
from toolkit.engine import Each, Gate, Plan, Stage, compile_plan, run
from toolkit.tasks import stable

ROUNDS = 5


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


# The same no-op, defined the way a notebook cell or a script defines it: in `__main__`, so
# cloudpickle sends it by value (a worker cannot import it).
_CELL = """
def noop(task):
    return task.n
"""


def notebook_noop() -> object:
    cell: dict[str, object] = {"__name__": "__main__"}
    exec(_CELL, cell)  # the point: code with no module a worker could import
    return cell["noop"]


def plan(tasks: object, workers: int | None, service: object = noop) -> Plan:
    stripe = service if workers is None else Each(service)  # type: ignore[arg-type]
    stage = Stage("noop", tasks, stripe, Gate(no_objects), workers=workers, resume=False)
    return Plan(f"bench-{workers}", (stage,))


def quiesce(client: object) -> None:
    """Wait until the scheduler has forgotten the last contender's 10,000 keys: releasing them
    takes the scheduler seconds, and must not be billed to whoever runs next."""

    def held(dask_scheduler: object) -> int:
        return len(dask_scheduler.tasks)  # type: ignore[attr-defined]

    while client.run_on_scheduler(held):  # type: ignore[attr-defined]
        time.sleep(0.05)


def main(n: int = 10_000, rounds: int = ROUNDS) -> None:
    from distributed import Client, LocalCluster

    tasks = stable(Noop(i) for i in range(n))
    cell = notebook_noop()
    times: dict[str, list[float]] = {
        "map": [], "gated": [], "striped": [], "map_nb": [], "gated_nb": []
    }  # fmt: skip
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as lc,
        Client(lc) as client,
    ):
        client.submit(noop, Noop(0)).result()  # warm the workers

        def plain(fn: object = noop) -> None:
            futures = client.map(fn, list(tasks), pure=False)
            client.gather(futures)

        contenders = {
            "map": plain,
            "gated": lambda: run(plan(tasks, None), cluster=client),
            "striped": lambda: run(plan(tasks, 8), cluster=client),
            "map_nb": lambda: plain(cell),
            "gated_nb": lambda: run(plan(tasks, None, cell), cluster=client),
        }
        for r in range(rounds):
            order = list(contenders)
            order = order[r % len(order) :] + order[: r % len(order)]  # nobody always goes first
            for name in order:
                quiesce(client)
                t0 = time.perf_counter()
                contenders[name]()
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    rows = [
        {
            "graph": "client.map (the peer)",
            "scheduler_tasks": n,
            "median_s": med["map"],
            "ratio_over_map": 1.0,
        },
        {
            "graph": "gated plan, one node per task",
            "scheduler_tasks": len(compile_plan(plan(tasks, None))),
            "median_s": med["gated"],
            "ratio_over_map": med["gated"] / med["map"],
        },
        {
            "graph": "client.map of a notebook-defined function (the peer)",
            "scheduler_tasks": n,
            "median_s": med["map_nb"],
            "ratio_over_map": med["map_nb"] / med["map"],
        },
        {
            "graph": "gated plan, a notebook-defined service",
            "scheduler_tasks": len(compile_plan(plan(tasks, None, cell))),
            "median_s": med["gated_nb"],
            "ratio_over_map": med["gated_nb"] / med["map_nb"],
        },
        {
            "graph": "batching: 8 stripe nodes of 1,250 tasks (not engine overhead)",
            "scheduler_tasks": len(compile_plan(plan(tasks, 8))),
            "median_s": med["striped"],
            "ratio_over_map": med["striped"] / med["map"],
        },
    ]
    write(
        "engine_overhead",
        rows,
        f"{n:,} no-op tasks, LocalCluster 2 process workers x 1 thread, median of {rounds} "
        "rounds in rotating order, the scheduler idle before each. The notebook rows define "
        "the no-op in `__main__` (sent by value); their ratio is over the notebook-defined "
        "client.map.",
    )


if __name__ == "__main__":
    main()
