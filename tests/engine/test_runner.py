"""The `Runner` and its executors behind one protocol (issue 51, item 1): an executor is a
class with `name` and `stages(plan, run_id, counter)`; a job runs on one it has never heard
of without a line of the job or of `engine/run.py` changing. Real jobs, real stores."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import zarr

from toolkit import storage
from toolkit.engine import InProcess, Runner, runner_of
from toolkit.engine.graph import StageSummary
from toolkit.examples import synthetic
from toolkit.plan import Plan
from toolkit.pyramid import build, verify


class Killed(RuntimeError):
    """The process a `Killing` executor stood for died."""


@dataclass
class Recording:
    """In this process, noting each plan it ran."""

    name: str = "recording"
    plans: list[str] = field(default_factory=list)

    def stages(self, plan: Plan, run_id: str, counter: object) -> list[StageSummary]:
        self.plans.append(plan.name)
        return InProcess().stages(plan, run_id, counter)


@dataclass
class Killing:
    """Runs the plan's first `survive` stages, then dies before the next: a lost process."""

    survive: int
    name: str = "killing"

    def stages(self, plan: Plan, run_id: str, counter: object) -> list[StageSummary]:
        from dataclasses import replace

        InProcess().stages(replace(plan, stages=plan.stages[: self.survive]), run_id, counter)
        raise Killed(f"died after {self.survive} stage(s) of {plan.name}")


def _store(tmp_path) -> storage.Store:
    store = storage.open_store(str(tmp_path / "level0.zarr"))
    synthetic.write_store(store, shape=(200, 300), shards=(32, 32), seed=3)
    return store


def test_a_job_runs_on_an_executor_it_has_never_heard_of(tmp_path) -> None:
    store = _store(tmp_path)
    mine = Recording()
    report = build(store, levels=2, runner=Runner(executor=mine))
    assert report.executor == "recording" and mine.plans == [report.plan]
    assert {s.name for s in report.stages} >= {"2x", "4x"}
    level = zarr.open_array(str(tmp_path / "level0.zarr" / "4x" / "field"), mode="r")[...]
    assert level.shape == (50, 75) and np.isfinite(level).any()
    assert verify(store, runner=Runner(executor=mine)).ok
    assert mine.plans[-1].startswith("pyramid-verify")


def test_a_run_killed_by_its_executor_resumes_on_another(tmp_path) -> None:
    """Stages certified before the executor died are not run again by the next executor."""
    store = _store(tmp_path)
    with pytest.raises(Killed):
        build(store, levels=3, runner=Runner(executor=Killing(survive=2)))  # 2x, 4x, then lost
    again = build(store, levels=3, runner=Runner(executor="sync"))
    first = again.stages[0]
    assert first.skipped == first.tasks > 0  # the certified first level: listed, not rebuilt
    assert sum(s.written for s in again.stages[1:]) > 0  # the rest built now
    assert verify(store, executor="sync").ok


def test_the_documented_keywords_make_the_runner_and_both_at_once_are_refused(tmp_path) -> None:
    store = _store(tmp_path)
    assert build(store, levels=1, executor="sync").executor == "sync"
    with pytest.raises(TypeError, match="give runner= or cluster=, not both"):
        build(store, runner=Runner(), cluster="tcp://127.0.0.1:1")
    assert runner_of(None, "dask").executor == "dask"  # a job's own default
    assert runner_of(None, "dask", executor="sync").executor == "sync"
    with pytest.raises(ValueError, match="executor must be 'auto', 'dask' or 'sync'"):
        Runner(executor="threads")  # type: ignore[arg-type]
