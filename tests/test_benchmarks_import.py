"""Every benchmark module imports: a rename in toolkit that a benchmark still uses fails here,
not at the next rerun (virtual_tick and virtual_pyramid once imported AUDIT_EVENT from where it
no longer lived)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted(
    p.stem for p in (Path(__file__).parents[1] / "benchmarks").glob("*.py") if p.stem[0] != "_"
)


def test_there_are_benchmarks() -> None:
    assert {"virtual_tick", "pyramid_kernels", "virtual_throughput"} <= set(BENCHMARKS)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_module_imports(name: str) -> None:
    from benchmarks.measures import MEASURES

    module = importlib.import_module(f"benchmarks.{name}")
    if name in {m.benchmark for m in MEASURES.values()}:  # one that writes results runs
        assert callable(getattr(module, "main", None)), f"benchmarks/{name}.py has no main()"
