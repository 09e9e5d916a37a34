"""One stage on a Dask cluster, streamed: its work submitted in windows as nodes finish.

A stage's stable task list is cut into blocks as the run goes (`cut`): a node per task, the
user's N stripes, or, for `workers=AUTO`, guided blocks cut for the cluster as it is when each
is cut (`toolkit.tasks.guided_blocks`), so workers that join mid-stage get the rest of it. The
client keeps a bounded number of nodes in flight (`in_flight`) and submits the next ones, in one
message of at most WINDOW_NODES nodes, as earlier ones finish. Each window is a small graph:

    done  (the done-set of the window's key range, when its probe lists a range cheaply)
    work  (a node per block: `<stage>-<digest>`, index)
    fold  (the window's results folded in a bounded tree: `<stage>-combine-...`)
    settle (a settled stage's: the fold's value settled on the cluster, `<stage>-settle-...`)

The client keeps only counts (and the stage's combined value, which a later stage's tasks are
made from), releasing each window's futures once its fold is read. Once every window is in, the
gate observes what must exist: in pages of GATE_PAGE wanted keys, each listing its own key range,
when the gate's listing can (`per_range`), else in one node as before. No task, message or
client structure holds every key of a huge stage. Bookkeeping keys carry `-done-`, `-combine-`,
`-settle-`, `-gate-` or `-shared`, so the dashboard's task stream keeps work and bookkeeping apart.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.engine.cluster import ClusterUnreachable, no_scheduler, total_threads
from toolkit.engine.graph import (
    COMBINE_FAN_IN,
    GATE_FAN_IN,
    Key,
    Packed,
    Partial,
    StageSummary,
    Tick,
    check_gate,
    fold,
    observe_done,
    run_block,
    run_task,
    settled,
)
from toolkit.plan import AUTO, IncompleteStageError, Stage, TaskError, task_context
from toolkit.tasks import block_bounds, guided_blocks

log = logging.getLogger("toolkit.engine")

WINDOW_NODES = 1024  # nodes per submission (and in flight, for a stage with a node per task)
NODES_PER_THREAD = 4  # AUTO: stripe nodes in flight per thread, queued work an adaptive cluster
# scales up for (dask-gateway's and Coiled's `adapt(maximum=...)` add workers for it)
GUIDED_SHARE = 4  # AUTO: a block is a (share x threads)-th of what remains when it is cut
AUTO_NODES = 256  # AUTO: blocks are at least 1/AUTO_NODES of the stage (a bounded tail)
MAX_NODE_TASKS = 16384  # tasks one node carries (its message stays a few MB)
GATE_PAGE = 16384  # wanted keys one gate page checks


class ClusterLost(ClusterUnreachable):
    """The scheduler went away mid-run; certified stages are kept, and a rerun resumes."""


def cut(stage: Stage, threads: Callable[[], int]) -> Iterator[tuple[int, int]]:
    """The stage's blocks of its stable task list, in order, each cut when asked for."""
    n = len(stage.tasks)
    if stage.workers is None:
        return ((i, i + 1) for i in range(n))
    if stage.workers == AUTO:
        floor = max(1, -(-n // AUTO_NODES))
        return guided_blocks(n, threads, GUIDED_SHARE, floor, max(floor, MAX_NODE_TASKS))
    count = stage.node_count
    return (block_bounds(n, i, count) for i in range(count))


def in_flight(stage: Stage, threads: int) -> int:
    """How many of the stage's work nodes may be submitted and unfinished at once."""
    if stage.workers is None:
        return max(WINDOW_NODES, 2 * threads)
    if stage.workers == AUTO:
        return NODES_PER_THREAD * threads
    return stage.node_count  # the user's N stripes run side by side


# ----------------------------------------------------------------------------- node functions


def observe_block(per_block: Callable[[Sequence[Any]], frozenset[str]], block: Any) -> Any:
    """A window's done-set: its block's tasks that exist already (one range listed)."""
    return per_block(block)


def done_within(done: frozenset[str], block: Any) -> frozenset[str]:
    """A window's share of the stage's done-set (next to it: only the share travels)."""
    return frozenset(t.key for t in block if t.key in done)


def check_page(
    stage: str, per_range: Callable[[str, str], frozenset[str]], want: Sequence[str]
) -> tuple[int, int, tuple[str, ...]]:
    """One gate page: (wanted keys present, wanted keys, the first ten missing)."""
    have = per_range(want[0], want[-1]) if want else frozenset()
    missing = [k for k in want if k not in have]
    return len(want) - len(missing), len(want), tuple(missing[:10])


# ----------------------------------------------------------------------------- the client loop


@dataclass
class Window:
    """One submission: its work nodes' futures and its fold's."""

    index: int
    work: dict[Any, tuple[int, int, int]]  # future -> (node index, start, stop)
    futures: list[Any]  # everything the client holds of it
    fold: Any = None


@dataclass
class StageRun:
    """The client's side of one stage: what is in flight, what is folded."""

    client: Any
    stage: Stage
    digest: str
    before: StageSummary | None
    counter: Any
    ticker: Callable[[str, int], Tick | None] | None
    resources: dict[str, float] | None
    service: Packed | None = None  # the stage's service, pickled once
    whole: Any = None  # the future of the stage's done-set, when its probe lists whole
    nodes: int = 0
    windows: int = 0
    folded: Partial | None = None

    @property
    def name(self) -> str:
        return self.stage.name

    def submit(self, graph: dict[Key, Any], keys: list[Key]) -> list[Any]:
        with warnings.catch_warnings():
            # A commit stage's tasks carry the forks its work stage returned (packed, yet
            # megabytes for a large backfill), and they ride in the graph on purpose: a node
            # retried after its worker died finds them there. distributed's advice to load
            # large data with Dask does not apply.
            warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
            return self.client.get(
                graph,
                keys,
                sync=False,
                retries=self.stage.retries,
                resources=self.resources,  # only workers checked for this run (engine.ship)
            )

    def gathered(self, key: Key, fn: Callable[..., Any], *args: Any) -> Any:
        """One bookkeeping node's result, read here (a done-set: its keys, not the stage's)."""
        from dask.task_spec import Task

        (fut,) = self.submit({key: Task(key, fn, *args)}, [key])
        try:
            return fut.result()
        except Exception as err:
            raise self.fail(err, "what it has done already") from None
        finally:
            fut.release()

    def done_in(self, start: int, stop: int) -> frozenset[str]:
        """The done tasks of [start, stop): that range listed by one node (a probe that lists
        a range), or picked by one node from the stage's done-set, which another node observed
        once and keeps on the cluster (a local folder, an Icechunk view: listed whole)."""
        from dask.task_spec import Task, TaskRef

        probe = self.stage.done_probe
        per_block = getattr(probe.source, "per_block", None) if probe.source else None
        key = (f"{self.name}-done-{self.digest}", self.windows)
        if per_block is not None:
            return self.gathered(key, observe_block, per_block, self.stage.tasks[start:stop])
        if probe.source is None:
            return frozenset()
        whole = f"{self.name}-done-{self.digest}"
        if self.whole is None:
            (self.whole,) = self.submit({whole: Task(whole, observe_done, probe)}, [whole])
        return self.gathered(key, done_within, TaskRef(whole), self.stage.tasks[start:stop])

    def window(self, blocks: list[tuple[int, int]]) -> Window:
        """Submit the nodes of `blocks`. A work node depends on nothing: its service and its
        block's done-set travel in it (the service pickled once per stage, `Packed`), so the
        scheduler places it on whichever allowed worker is free, never next to an input."""
        from dask.task_spec import Task, TaskRef

        stage, name = self.stage, self.name
        done = self.done_in(blocks[0][0], blocks[-1][1])
        if self.service is None:
            self.service = Packed.of(stage.service)
        index = self.windows
        self.windows += 1
        graph: dict[Key, Any] = {}
        work: list[tuple[Key, int, int, int]] = []
        for start, stop in blocks:
            i = self.nodes
            self.nodes += 1
            key = (f"{name}-{self.digest}", i)
            block = stage.tasks[start:stop]
            mine = frozenset(t.key for t in block if t.key in done) if done else frozenset()
            if stage.workers is None:
                args: tuple[Any, ...] = (name, self.service, block[0], mine)
                graph[key] = Task(key, run_task, *args, _data_producer=True)
            else:
                tick = self.ticker(name, i) if self.ticker is not None else None
                args = (name, self.service, block, tick, mine)  # columns stay columns
                graph[key] = Task(key, run_block, *args, _data_producer=True)
            work.append((key, i, start, stop))
        level, keys = 0, [w[0] for w in work]
        fan_in = COMBINE_FAN_IN if stage.combine is not None else GATE_FAN_IN
        while len(keys) > 1 or level == 0:
            nxt: list[Key] = []
            for j in range(0, len(keys), fan_in):
                key = (f"{name}-combine-{self.digest}", index, level, j // fan_in)
                deps = (TaskRef(k) for k in keys[j : j + fan_in])
                graph[key] = Task(key, fold, stage.combine, *deps)
                nxt.append(key)
            keys, level = nxt, level + 1
        if stage.settle is not None:  # settled where it was folded: only its value travels on
            key = (f"{name}-settle-{self.digest}", index)
            graph[key] = Task(key, settled, stage.settle, stage.combine, TaskRef(keys[0]))
            keys = [key]
        futures = self.submit(graph, [w[0] for w in work] + keys)
        mine_of = {f: (i, s, e) for f, (_, i, s, e) in zip(futures, work, strict=False)}
        return Window(index, mine_of, futures, futures[-1])

    def fail(self, err: BaseException, what: str) -> BaseException:
        """The failure as the user reads it: a service's own exception (it names its task),
        a lost scheduler, or what broke naming the tasks it concerned, never a node's key."""
        if task_context(err) is not None or isinstance(err, IncompleteStageError):
            return err
        if lost(self.client, err):
            address = getattr(self.client.scheduler, "address", "?")
            return ClusterLost(
                f"lost the Dask scheduler at {address} during stage {self.name!r}; the stages "
                "before it are kept: rerun the same command to resume"
            )
        return TaskError(self.name, what, type(err).__name__, str(err))


def lost(client: Any, err: BaseException) -> bool:
    """The scheduler connection is gone (the futures were cancelled under the run, or a
    message to the scheduler found its connection closed)."""
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError

    if isinstance(err, (FutureCancelledError, CommClosedError)) or client.status not in (
        "running",
        "newly-created",
    ):
        return True
    address = getattr(client.scheduler, "address", None)  # the client may not know yet: ask
    return isinstance(address, str) and no_scheduler(address) is not None


def error_of(fut: Any) -> BaseException:
    """Why a future did not finish: its exception, or its state (a cancelled future has no
    exception to give: asking raises)."""
    return fut.exception() if fut.status == "error" else RuntimeError(fut.status)


def label(stage: Stage, start: int, stop: int) -> str:
    """The tasks a block holds, as a failure names them."""
    first, last = stage.tasks[start].key, stage.tasks[stop - 1].key
    return first if stop - start == 1 else f"{first}..{last} ({stop - start} tasks)"


def run_stage(
    client: Any,
    stage: Stage,
    digest: str,
    previous: StageSummary | None,
    counter: Any,
    ticker: Callable[[str, int], Tick | None] | None,
    resources: dict[str, float] | None,
) -> StageSummary:
    """Run one stage's windows and its gate; return its certified summary."""
    from distributed import as_completed

    before = dataclasses.replace(previous, value=None) if previous is not None else None
    run = StageRun(client, stage, digest, before, counter, ticker, resources)
    blocks = cut(stage, lambda: total_threads(client))
    windows: dict[Any, Window] = {}  # fold future -> its window
    owner: dict[Any, tuple[int, int, int]] = {}  # work future not yet counted -> its block
    pending = as_completed()
    running = 0
    started = time.time()
    striped = stage.workers is not None

    def refill() -> None:
        nonlocal running
        room = in_flight(stage, total_threads(client) if stage.workers == AUTO else 1) - running
        if stage.settle is not None:  # whole windows, one at a time: one settle at once
            room = 0 if windows else WINDOW_NODES
        if not striped and room < WINDOW_NODES // 2 and running:
            return  # a stage of a node per task refills by half windows
        take = [b for _, b in zip(range(min(room, WINDOW_NODES)), blocks, strict=False)]
        if not take:
            return
        w = run.window(take)
        windows[w.fold] = w
        owner.update(w.work)
        running += len(take)
        for f in (*w.work, w.fold):
            pending.add(f)

    def finished(fut: Any) -> None:
        nonlocal running
        i, start, stop = owner.pop(fut)
        running -= 1
        counter.finish(stage.name, i, stop - start, striped)

    try:
        refill()
        for fut in pending:
            w = windows.pop(fut, None)
            if w is not None:  # a window folded: keep its counts, release all of it
                if fut.status != "finished":
                    raise run.fail(error_of(fut), f"the results of {len(w.work)} nodes")
                part = fut.result()
                run.folded = part if run.folded is None else fold(stage.combine, run.folded, part)
                for f in w.work:
                    if f in owner:  # its completion not heard yet: it is in the fold
                        finished(f)
                for f in w.futures:
                    f.release()
            elif fut in owner:
                if fut.status in ("lost", "pending"):
                    continue  # its result went with a lost worker: it reruns, its fold counts it
                if fut.status != "finished":
                    _, start, stop = owner[fut]
                    raise run.fail(error_of(fut), label(stage, start, stop))
                finished(fut)
            refill()
        return gate(run, started)
    except Exception as err:  # a submission or a read that met a scheduler gone away
        if (
            task_context(err) is None
            and not isinstance(err, ClusterUnreachable)
            and lost(client, err)
        ):
            raise run.fail(err, "its nodes") from None
        raise
    finally:
        for w in windows.values():
            for f in w.futures:
                f.release()
        if run.whole is not None:
            run.whole.release()


def gate(run: StageRun, started: float) -> StageSummary:
    """Observe what must exist once every window is in: page by page where the gate's listing
    lists a key range, else in one node (which also sees the combined value it may explain)."""
    from dask.task_spec import Task

    stage, name = run.stage, run.name
    folded = run.folded or Partial(0, 0, started, time.time(), None)
    g = stage.gate
    per_range = getattr(g.observe, "per_range", None) if g is not None else None
    if g is None or g.want is None or g.explain is not None or per_range is None:
        key = f"{name}-gate-{run.digest}"
        explained = g is not None and g.explain is not None  # only then does it read the value
        sent = folded if explained else dataclasses.replace(folded, value=None)
        graph = {key: Task(key, check_gate, name, len(stage.tasks), run.nodes, g, None, sent)}
        (fut,) = run.submit(graph, [key])
        try:
            summary = fut.result()
        except Exception as err:
            raise run.fail(err, "its gate") from None
        finally:
            fut.release()
        return dataclasses.replace(summary, value=folded.value)
    have = total = 0
    missing: list[str] = []
    pages = enumerate(itertools.batched(g.want, GATE_PAGE))  # made as they go: never all keys
    while window := list(itertools.islice(pages, WINDOW_NODES)):
        graph: dict[Key, Any] = {}
        for p, page in window:
            key = (f"{name}-gate-{run.digest}", p)
            graph[key] = Task(key, check_page, name, per_range, page)
        futures = run.submit(graph, list(graph))
        try:
            for f in futures:
                try:
                    h, t, first = f.result()
                except Exception as err:
                    raise run.fail(err, "its gate") from None
                have, total = have + h, total + t
                missing += first[: 10 - len(missing)]
        finally:
            for f in futures:
                f.release()
    if have < total:
        raise IncompleteStageError(name, have, total, missing)
    return StageSummary(
        name,
        len(stage.tasks),
        folded.written,
        folded.skipped,
        folded.started,
        folded.finished,
        have,
        total,
        folded.value,
        run.nodes,
    )
