"""Validation of a virtual dataset: manifest completeness, then decode health on a sample.

Completeness re-runs the dataset's own coord generation over a window and probes the manifest
for every cell each source file should fill (`write.expected_of`), grouped per append-dim
position and variable, so a gap is named (position, variable, the missing cells) rather than
counted. Manifest probes only: no source byte is read. Positions past the store's committed
extent are skipped (the source may not have published them); an interior gap fails.

Decode health decodes a bounded sample of the cells that are present, each sample its own
graph node (a Plan stage with one task per sample), through xarray/zarr and gribberish's codec
exactly as a reader would, and checks the values are finite somewhere and inside the variable's
valid range. A ref to a file that was re-uploaded or corrupted fails here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit.engine import run
from toolkit.plan import Plan, Report, Stage
from toolkit.tasks import stable
from toolkit.virtual import repo as R
from toolkit.virtual.grib.message import sections
from toolkit.virtual.layout import committed_extent
from toolkit.virtual.refs import canon, chunk_key
from toolkit.virtual.template import Template
from toolkit.virtual.write import Job, expected_of

__all__ = [
    "Cell",
    "Completeness",
    "SampleResult",
    "ValidationFailed",
    "ValidationReport",
    "completeness",
    "decode_health",
    "validate",
]


class ValidationFailed(RuntimeError):
    """A completeness gap or a sample that does not decode to plausible values."""


@dataclass(frozen=True)
class Cell:
    """One chunk: a variable at a label for every non-grid dim (sorted (dim, label) pairs)."""

    variable: str
    loc: tuple[tuple[str, Any], ...]

    @property
    def key(self) -> str:
        return f"{self.variable}@" + ",".join(f"{d}={_text(v)}" for d, v in self.loc)


def _text(label: Any) -> str:
    if isinstance(label, np.datetime64):
        return str(np.datetime64(label, "s"))
    if isinstance(label, np.timedelta64):
        return f"{int(np.timedelta64(label, 's').astype('int64')) // 3600}h"
    return str(label)


@dataclass(frozen=True)
class Completeness:
    """Per (position, variable): expected and present cell counts, and the missing cells."""

    append_dim: str
    positions: tuple[Any, ...]  # checked, oldest first
    expected: dict[tuple[Any, str], int]
    missing: dict[tuple[Any, str], tuple[Cell, ...]]
    present: tuple[Cell, ...]
    skipped_positions: tuple[Any, ...] = ()  # past the committed extent
    failures: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures


def completeness(
    job: Job,
    *,
    start: Any = None,
    end: Any = None,
    branch: str = "main",
    min_present_fraction: Sequence[float] = (1.0,),
) -> Completeness:
    """Probe every expected cell of the files in [start, end) and name the gaps.

    `min_present_fraction` is indexed newest position first; older positions use its last
    value, which must be 1.0 (an old position is either complete or has a gap).
    """
    tiers = tuple(float(x) for x in min_present_fraction)
    if not tiers or tiers[-1] != 1.0 or any(not 0.0 <= x <= 1.0 for x in tiers):
        raise ValueError(f"min_present_fraction {tiers} must end with 1.0, each in [0, 1]")
    t = job.template
    region = job.region(start, end)
    session = R.readonly(job.repo.open(fresh=True), branch)
    extent = committed_extent(session, t) or 0
    geom = t.geometry(extent)
    cells: list[tuple[Any, Cell, tuple[str, tuple[int, ...]]]] = []
    skipped: set[Any] = set()
    for coord in region.files():
        pos = coord.out_loc()[t.append_dim]
        for var, loc in expected_of(job, coord):
            ck = chunk_key(geom, var, loc)
            if ck is None:  # the label is past the committed extent: not published yet
                skipped.add(canon(pos))
                continue
            cells.append((pos, Cell(var, tuple(sorted(loc.items()))), (ck.variable, ck.index)))
    present_flags = R.chunks_present(session, [k for _, _, k in cells])
    expected: dict[tuple[Any, str], int] = {}
    missing: dict[tuple[Any, str], list[Cell]] = {}
    present: list[Cell] = []
    for (pos, cell, _), here in zip(cells, present_flags, strict=True):
        group = (pos, cell.variable)
        expected[group] = expected.get(group, 0) + 1
        if here:
            present.append(cell)
        else:
            missing.setdefault(group, []).append(cell)
    positions = sorted({pos for pos, _ in expected}, key=canon)
    failures = []
    if not positions:
        failures.append(
            f"no {t.append_dim} position in [{start}, {end}) is within the store's extent "
            f"({extent}): nothing to validate"
        )
    for age, pos in enumerate(reversed(positions)):
        need = tiers[min(age, len(tiers) - 1)]
        for (p, var), n in sorted(expected.items(), key=lambda kv: kv[0][1]):
            if canon(p) != canon(pos):
                continue
            gone = missing.get((p, var), [])
            have = n - len(gone)
            if have < math.ceil(need * n - 1e-9):
                shown = ", ".join(c.key for c in gone[:5]) + (" ..." if len(gone) > 5 else "")
                failures.append(
                    f"{t.append_dim}={_text(pos)} {var}: {have}/{n} cells have refs "
                    f"(need {need:.0%}); missing {shown}"
                )
    return Completeness(
        t.append_dim,
        tuple(positions),
        expected,
        {k: tuple(v) for k, v in missing.items()},
        tuple(present),
        tuple(sorted(skipped)),
        tuple(failures),
    )


# ----------------------------------------------------------------------------- decode health


@dataclass(frozen=True)
class SampleResult:
    cell: str
    ok: bool
    reason: str = ""
    finite: float = 0.0  # fraction of finite values; 0.0: the chunk decodes entirely to NaN
    low: float = math.nan
    high: float = math.nan
    variable: str = ""


@dataclass(frozen=True)
class Decode:
    """One sample = one node: open main as a reader does and decode one chunk.

    The chunk's bytes (the source range its ref names) are first walked section by section:
    a message whose sections do not add up is named without being handed to the decoder,
    which loops forever on some (gribberish 1.9 on a zeroed body)."""

    repo: R.RepoRef
    branch: str
    valid_range: tuple[tuple[str, tuple[float, float]], ...] = ()
    template: Template | None = None

    def __call__(self, cell: Cell) -> tuple[SampleResult, ...]:
        import xarray as xr

        var = cell.variable
        try:
            session = R.readonly(self.repo.open(), self.branch)
            if self.template is not None:
                self.check_structure(session, cell)
            ds = xr.open_zarr(session.store, consolidated=False, chunks=None)
            values = np.asarray(ds[var].sel(dict(cell.loc)).values, dtype="float64")
        except Exception as err:  # any failure to read or decode is the finding
            return (SampleResult(cell.key, False, _one_line(err), variable=var),)
        finite = np.isfinite(values)
        if not finite.any():  # judged per variable, over all its samples (`all_nan_failures`)
            return (SampleResult(cell.key, True, "decodes entirely to NaN/inf", variable=var),)
        low, high = float(values[finite].min()), float(values[finite].max())
        frac = float(finite.mean())
        bounds = dict(self.valid_range).get(var)
        if bounds is not None and (low < bounds[0] or high > bounds[1]):
            why = (
                f"values [{low:g}, {high:g}] outside the valid range [{bounds[0]:g}, {bounds[1]:g}]"
            )
            return (SampleResult(cell.key, False, why, frac, low, high, var),)
        return (SampleResult(cell.key, True, "", frac, low, high, var),)

    def check_structure(self, session: Any, cell: Cell) -> None:
        assert self.template is not None
        geom = self.template.geometry(committed_extent(session, self.template) or 0)
        ck = chunk_key(geom, cell.variable, dict(cell.loc))
        data = None if ck is None else R.chunk_bytes(session, ck.key)
        if data is not None:
            sections(data, f"{cell.key} (its source byte range)")


def _one_line(err: Exception) -> str:
    """An error as one line: Icechunk's span its cause over several, with Rust frames."""
    lines = [ln.strip(" \t│×├─▶╰|") for ln in str(err).splitlines()]
    text = "; ".join(ln for ln in lines if ln and not ln.startswith(("at ", "in ")))
    return f"{type(err).__name__}: {text}"[:400]


def _concat(parts: list[tuple[SampleResult, ...]]) -> tuple[SampleResult, ...]:
    return tuple(r for p in parts for r in p)


def all_nan_failures(samples: Sequence[SampleResult], allowed: Sequence[str] = ()) -> list[str]:
    """A variable fails when every chunk sampled of it decodes entirely to NaN, unless
    `allowed` (the dataset's `allow_all_nan_vars`) names it."""
    by_var: dict[str, list[SampleResult]] = {}
    for r in samples:
        by_var.setdefault(r.variable, []).append(r)
    out = []
    for var, rs in by_var.items():
        if var not in allowed and all(r.ok and r.finite == 0.0 for r in rs):
            out.append(
                f"decode {var}: all {len(rs)} sampled chunk(s) decode entirely to NaN "
                f"(e.g. {rs[0].cell}); if that is expected, list it in allow_all_nan_vars"
            )
    return out


def _spread[X](items: Sequence[X], k: int) -> list[X]:
    """Up to `k` of `items`: the first, the last, then evenly between."""
    if k < 1 or not items:
        return []
    m = min(k, len(items))
    idx = sorted({round(i * (len(items) - 1) / max(1, m - 1)) for i in range(m)})
    return [items[i] for i in idx]


def _label(cell: Cell, dim: str) -> Any:
    return canon(dict(cell.loc).get(dim))


def _order(label: Any) -> tuple[int, Any]:
    """Sorts canonical labels of one dim: times by their nanoseconds, anything else as text."""
    return (0, label[1]) if isinstance(label, tuple) else (1, str(label))


def _check_positions(positions: int | str, max_positions: int | None) -> None:
    if not (positions == "all" or (isinstance(positions, int) and positions >= 1)):
        raise ValueError(f"positions must be an int >= 1 or 'all', not {positions!r}")
    if max_positions is not None and max_positions < 1:
        raise ValueError(f"max_positions must be >= 1, not {max_positions}")


def _best(pool: list[Cell], want: dict[str, Any], k: int) -> Cell:
    """A cell of `pool` at every label of `want` (dim -> label) if there is one, else at any one
    of them, else any; the k-th of the fits, so successive picks rotate through levels."""
    (d1, l1), (d2, l2) = want.items()
    for need in (((d1, l1), (d2, l2)), ((d1, l1),), ((d2, l2),)):
        fit = [c for c in pool if all(_label(c, d) == lb for d, lb in need)]
        if fit:
            return fit[k % len(fit)]
    return pool[k % len(pool)]


def pick_samples(
    present: Sequence[Cell],
    n: int = 0,
    *,
    append_dim: str = "init_time",
    positions: int | str = 1,
    max_positions: int | None = None,
    lead_dim: str = "lead_time",
    member_dim: str = "ensemble_member",
) -> list[Cell]:
    """The cells decode health decodes, newest positions first.

    At each of the `positions` newest positions with data ("all": every one, evenly capped to
    `max_positions`): every variable once, their leads rotating over the position's first,
    interior and last lead and their members over every ensemble member; then a cell for any
    of those leads or members still unsampled (so at most variables + 3 + members cells a
    position); past that, up to `n` cells in all, spread evenly over those positions' cells.
    """
    by_pos: dict[Any, list[Cell]] = {}
    for c in present:
        by_pos.setdefault(_label(c, append_dim), []).append(c)
    newest = sorted(by_pos, key=_order, reverse=True)
    _check_positions(positions, max_positions)
    if positions == "all":
        chosen = _spread(newest, max_positions or len(newest))
    else:
        chosen = newest[: int(positions)]
    out: dict[str, Cell] = {}
    for pos in chosen:
        cells = by_pos[pos]
        leads = _spread(sorted({_label(c, lead_dim) for c in cells}, key=_order), 3)
        members = sorted({_label(c, member_dim) for c in cells}, key=_order)
        mine: list[Cell] = []

        by_var: dict[str, list[Cell]] = {}
        for c in cells:
            by_var.setdefault(c.variable, []).append(c)
        for k, pool in enumerate(by_var.values()):
            want = {lead_dim: leads[k % len(leads)], member_dim: members[k % len(members)]}
            mine.append(_best(pool, want, k))
        for dim, wanted in ((lead_dim, leads), (member_dim, members)):
            have = {_label(c, dim) for c in mine}
            for label in wanted:
                if label not in have:
                    mine.append(next(c for c in cells if _label(c, dim) == label))
        for c in mine:
            out.setdefault(c.key, c)
    if n > len(out):
        rest = [c for pos in chosen for c in by_pos[pos] if c.key not in out]
        for c in _spread(rest, n - len(out)):
            out.setdefault(c.key, c)
    return list(out.values())


def _valid_ranges(job: Job) -> tuple[tuple[str, tuple[float, float]], ...]:
    out = []
    for name, v in job.template.variables.items():
        lo, hi = v.attrs.get("valid_min"), v.attrs.get("valid_max")
        if lo is not None and hi is not None:
            out.append((name, (float(lo), float(hi))))
    return tuple(out)


def decode_plan(job: Job, samples: Sequence[Cell], branch: str = "main") -> Plan:
    return Plan(
        f"virtual-validate-{job.repo.url}",
        (
            Stage(
                "decode",
                stable(samples),
                Decode(job.repo, branch, _valid_ranges(job), job.template),
                combine=_concat,
                retries=0,
            ),
        ),
    )


def decode_health(
    job: Job,
    samples: Sequence[Cell],
    *,
    branch: str = "main",
    cluster: Any = None,
    executor: str = "sync",
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[Report, tuple[SampleResult, ...]]:
    if not samples:
        raise ValidationFailed("no references present to sample: decode health cannot pass")
    report = run(
        decode_plan(job, samples, branch),
        cluster=cluster,
        executor=executor,  # type: ignore[arg-type]
        progress=progress,
    )
    return report, tuple(report.stage("decode").result or ())


@dataclass(frozen=True)
class ValidationReport:
    completeness: Completeness
    samples: tuple[SampleResult, ...] = ()
    decode_report: Report | None = field(default=None, compare=False)

    allow_all_nan: tuple[str, ...] = ()

    @property
    def failures(self) -> list[str]:
        out = list(self.completeness.failures)
        out += [f"decode {s.cell}: {s.reason}" for s in self.samples if not s.ok]
        out += all_nan_failures(self.samples, self.allow_all_nan)
        if not self.samples and self.completeness.positions:
            out.append("no sample decoded")
        return out

    @property
    def ok(self) -> bool:
        return not self.failures


def validate(
    job: Job,
    *,
    start: Any = None,
    end: Any = None,
    sample: int = 16,
    positions: int | str = 1,
    max_positions: int | None = None,
    branch: str = "main",
    min_present_fraction: Sequence[float] = (1.0,),
    cluster: Any = None,
    executor: str = "sync",
    progress: Callable[[str, int, int], None] | None = None,
) -> ValidationReport:
    """Completeness over [start, end), then decode health at the `positions` newest positions
    with data (`pick_samples`: every variable, first/interior/last leads, every member; up to
    `sample` cells when that is more)."""
    _check_positions(positions, max_positions)  # before any work
    comp = completeness(
        job, start=start, end=end, branch=branch, min_present_fraction=min_present_fraction
    )
    samples = pick_samples(
        comp.present,
        sample,
        append_dim=job.template.append_dim,
        positions=positions,
        max_positions=max_positions,
    )
    allowed = job.dataset.allow_all_nan_vars
    if not samples:
        return ValidationReport(comp, allow_all_nan=allowed)
    report, results = decode_health(
        job, samples, branch=branch, cluster=cluster, executor=executor, progress=progress
    )
    return ValidationReport(comp, results, report, allowed)
