"""Validation of a virtual dataset: does what an update committed hold, read and keep up?

Four checks over one window (by default the dataset's update window at the fire), against one
pinned snapshot of main, so each sees the same commits:

- completeness (`toolkit.virtual.completeness`): the fraction of expected source files each
  append-dim position holds, tiered newest first; manifest probes only;
- data currency: the newest position with data is no older than the dataset's expected
  latency at the fire (a source that stopped publishing fails instead of passing quietly);
- replicas: each replica's main holds the same refs for the window as the primary's (a replica
  one commit ahead, as replicas commit first, passes);
- decode health: a bounded sample of the present cells, newest positions first (`pick_samples`),
  each sample a graph node (a gated Plan stage), decoded through xarray and gribberish's codec
  exactly as a reader would: finite somewhere, inside the variable's valid range.

Validation has its own time bound (`deadline`): a check not started by then, and each sample
not decoded by then, is named as unfinished, which fails (nothing unchecked passes).
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from toolkit import icechunk as R
from toolkit.engine import Runner, runner_of
from toolkit.plan import Gate, Plan, Report, Stage
from toolkit.tasks import stable
from toolkit.virtual.completeness import Cell, Completeness, completeness, label_text, window_of
from toolkit.virtual.dataset import region_bounds
from toolkit.virtual.grib.message import sections
from toolkit.virtual.layout import committed_extent
from toolkit.virtual.refs import canon, chunk_key
from toolkit.virtual.template import Template
from toolkit.virtual.write import Job

__all__ = [
    "Cell",
    "Completeness",
    "SampleResult",
    "ValidationFailed",
    "ValidationReport",
    "completeness",
    "currency_failures",
    "decode_health",
    "pick_samples",
    "replica_failures",
    "validate",
]


class ValidationFailed(RuntimeError):
    """A completeness gap or a sample that does not decode to plausible values."""


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
    finished: bool = True  # False: the validation bound passed before this sample's turn


@dataclass(frozen=True)
class Decode:
    """One sample = one node: open the pinned snapshot as a reader does, decode one chunk.

    The chunk's bytes (the source range its ref names) are first walked section by section:
    a message whose sections do not add up is named without being handed to the decoder,
    which loops forever on some (gribberish 1.9 on a zeroed body). A node that starts after
    `deadline` (epoch seconds) decodes nothing and says so."""

    repo: R.RepoRef
    branch: str
    valid_range: tuple[tuple[str, tuple[float, float]], ...] = ()
    template: Template | None = None
    snapshot: str | None = None
    deadline: float | None = None

    def __call__(self, cell: Cell) -> tuple[SampleResult, ...]:
        from toolkit.virtual.reader import open_dataset

        var = cell.variable
        if _past(self.deadline):
            return (SampleResult(cell.key, False, "not decoded", variable=var, finished=False),)
        try:
            if self.template is not None:
                self.check_structure(cell)
            ds = open_dataset(
                self.repo.store, branch=self.branch, snapshot=self.snapshot, chunks=None
            )
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

    def check_structure(self, cell: Cell) -> None:
        assert self.template is not None
        session = R.readonly(self.repo.open(), self.branch, self.snapshot)
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


@dataclass(frozen=True)
class SampledRefs:
    """The decode gate's observation: which sampled cells have a ref in the pinned snapshot
    (what must exist for a sample to mean anything), probed in the manifest, not reported."""

    job: Job
    cells: tuple[Cell, ...]
    branch: str
    snapshot: str | None

    def __call__(self) -> list[str]:
        t = self.job.template
        session = R.readonly(self.job.repo.open(fresh=True), self.branch, self.snapshot)
        geom = t.geometry(committed_extent(session, t) or 0)
        keys = [(c, chunk_key(geom, c.variable, dict(c.loc))) for c in self.cells]
        probed = [(c, k) for c, k in keys if k is not None]
        here = R.chunks_present(session, [(k.variable, k.index) for _, k in probed])
        return [c.key for (c, _), ok in zip(probed, here, strict=True) if ok]


def decode_plan(
    job: Job,
    samples: Sequence[Cell],
    branch: str = "main",
    *,
    snapshot: str | None = None,
    deadline: float | None = None,
) -> Plan:
    cells = tuple(samples)
    return Plan(
        f"virtual-validate-{job.repo.url}",
        (
            Stage(
                "decode",
                stable(cells),
                Decode(job.repo, branch, _valid_ranges(job), job.template, snapshot, deadline),
                gate=Gate(
                    SampledRefs(job, cells, branch, snapshot), want=tuple(c.key for c in cells)
                ),
                combine=_concat,
                retries=0,
                resume=False,  # a sample's ref existing is the gate's concern, not "done"
            ),
        ),
        work_bytes=_sample_bytes(job.template, cells),
    )


def _sample_bytes(template: Template, cells: Sequence[Cell]) -> int:
    """What the samples decode (one chunk each): the `auto` executor keeps a few in this
    process when no cluster was given, and runs them on the cluster when one was."""
    sizes = {
        name: math.prod(template.chunks(name)) * np.dtype(v.dtype).itemsize
        for name, v in template.variables.items()
    }
    return sum(sizes.get(c.variable, 0) for c in cells)


def decode_health(
    job: Job,
    samples: Sequence[Cell],
    *,
    branch: str = "main",
    snapshot: str | None = None,
    deadline: float | None = None,
    runner: Runner | None = None,
) -> tuple[Report, tuple[SampleResult, ...]]:
    if not samples:
        raise ValidationFailed("no references present to sample: decode health cannot pass")
    runner = runner or Runner()
    report = runner.run(decode_plan(job, samples, branch, snapshot=snapshot, deadline=deadline))
    return report, tuple(report.stage("decode").result or ())


# ----------------------------------------------------------------------------- currency, replicas


def currency_failures(
    job: Job, comp: Completeness, fire_time: Any, latency: Any = None
) -> list[str]:
    """The newest position with data must be at most the dataset's latency old at the fire."""
    limit = job.dataset.latency if latency is None else np.timedelta64(latency, "ns")
    dim = job.template.append_dim
    if limit is None or fire_time is None:
        return []
    labels = [dict(c.loc).get(dim) for c in comp.present]
    times = [np.datetime64(x, "ns") for x in labels if isinstance(x, np.datetime64)]
    fire = np.datetime64(fire_time, "ns")
    hours = f"{limit / np.timedelta64(1, 'h'):g} h"
    if not times:
        return [
            f"data currency: no {dim} in the window has data at the fire "
            f"{label_text(np.datetime64(fire, 's'))} (expected within {hours}): "
            "is the source publishing?"
        ]
    newest = max(times)
    age = fire - newest
    if age > limit:
        return [
            f"data currency: the newest {dim} with data, {label_text(newest)}, is "
            f"{age / np.timedelta64(1, 'h'):g} h old at the fire "
            f"{label_text(np.datetime64(fire, 's'))}, more than the expected {hours}: the "
            "source may have stopped publishing"
        ]
    return []


def _window_refs(
    session: Any, job: Job, lo: int, hi: int
) -> dict[tuple[str, tuple[int, ...]], Any]:
    out: dict[tuple[str, tuple[int, ...]], Any] = {}
    for name in job.template.variables:
        for index, ref in R.chunk_refs(session, name, (lo, hi)).items():
            out[(name, index)] = ref
    return out


def replica_failures(job: Job, start: Any, end: Any, *, snapshot: str | None = None) -> list[str]:
    """Each replica's main against the primary's (at `snapshot`): the same refs (location,
    offset, length) for every chunk of the window. A replica one commit ahead -- it commits
    first, so a primary commit that failed leaves it there -- passes when its parent matches."""
    t = job.template
    lo, hi = region_bounds(t.coords[t.append_dim], start, end)
    primary = _window_refs(R.readonly(job.repo.open(fresh=True), "main", snapshot), job, lo, hi)
    out = []
    for rep in job.replicas:
        try:
            repo = rep.open(fresh=True)
        except Exception as err:
            out.append(f"replica {rep.url}: cannot be opened ({_one_line(err)})")
            continue
        heads = [c.id for c in R.history(repo, "main", limit=2)]
        diffs: list[str] = []
        for i, snap in enumerate(heads):
            got = _window_refs(R.readonly(repo, "main", snap), job, lo, hi)
            if got == primary:
                diffs = []
                break
            if i == 0:
                diffs = _ref_diffs(primary, got)
        if diffs:
            out.append(
                f"replica {rep.url}: {len(diffs)} chunk ref(s) of the window differ from the "
                f"primary {job.repo.url}'s (e.g. {'; '.join(diffs[:3])}); re-run the window's "
                "backfill into the replica with --overwrite-chunks"
            )
    return out


def _ref_diffs(primary: dict[Any, Any], replica: dict[Any, Any]) -> list[str]:
    out = []
    for key in sorted(set(primary) | set(replica)):
        a, b = primary.get(key), replica.get(key)
        if a != b:
            out.append(f"{key[0]}{list(key[1])}: primary {_ref(a)}, replica {_ref(b)}")
    return out


def _ref(r: Any) -> str:
    return "no ref" if r is None else f"{r[0]} @{r[1]}+{r[2]}"


# ----------------------------------------------------------------------------- the whole check


@dataclass(frozen=True)
class ValidationReport:
    completeness: Completeness
    samples: tuple[SampleResult, ...] = ()
    decode_report: Report | None = field(default=None, compare=False)
    allow_all_nan: tuple[str, ...] = ()
    currency: tuple[str, ...] = ()
    replicas: tuple[str, ...] = ()
    unfinished: tuple[str, ...] = ()  # checks the time bound stopped before they ran
    extra: tuple[str, ...] = ()  # the caller's own findings (an update's given-up files)
    snapshot: str | None = None

    @property
    def failures(self) -> list[str]:
        out = list(self.completeness.failures)
        out += list(self.currency) + list(self.replicas)
        out += [f"decode {s.cell}: {s.reason}" for s in self.samples if s.finished and not s.ok]
        late = [s.cell for s in self.samples if not s.finished]
        if late:
            out.append(
                f"decode health unfinished: {len(late)} of {len(self.samples)} sample(s) not "
                f"decoded within the validation time bound (e.g. {late[0]})"
            )
        out += all_nan_failures([s for s in self.samples if s.finished], self.allow_all_nan)
        if not self.samples and self.completeness.positions and "decode" not in self.unfinished:
            out.append("no sample decoded")
        out += [f"{name}: not run, the validation time bound passed" for name in self.unfinished]
        out += list(self.extra)
        return out

    @property
    def ok(self) -> bool:
        return not self.failures


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.time() >= deadline


@dataclass(frozen=True)
class Asked:
    """What `validate` is asked: the window ([start, end), or the update window at
    `fire_time`), the decode samples (`sample` cells over the `positions` newest positions,
    at most `max_positions`), which variables completeness counts and at which tiers, the
    branch, the `deadline` (epoch seconds) and `extra` failures carried in."""

    start: Any = None
    end: Any = None
    fire_time: Any = None
    sample: int = 16
    positions: int | str = 1
    max_positions: int | None = None
    branch: str = "main"
    min_present_fraction: Sequence[float] | None = None
    include_vars: Collection[str] = ()
    exclude_vars: Collection[str] = ()
    deadline: float | None = None
    extra: Sequence[str] = ()


RUN_KEYWORDS = ("cluster", "executor", "progress")


def validate(job: Job, runner: Runner | None = None, **keywords: Any) -> ValidationReport:
    """Completeness, data currency, replicas, then decode health, over one pinned snapshot.

    `keywords` are `Asked`'s fields (`start=`, `fire_time=`, `sample=`, ...). The window is
    [start, end), or with neither the dataset's update window at `fire_time` (default: now).
    Data currency runs when the window is the fire's (`fire_time` given, or no window given).
    Decode health samples the `positions` newest positions with data (`pick_samples`: every
    variable, first/interior/last leads, every member; up to `sample` cells when that is
    more). `deadline` (epoch seconds) bounds the whole: what it stops is named in
    `unfinished`, and fails. `runner` runs the decode samples (or the one `cluster=`/
    `executor=`/`progress=` make): on its cluster when one is given, else in this process
    unless the samples are large (the `auto` executor).
    """
    run = {k: keywords.pop(k) for k in RUN_KEYWORDS if k in keywords}
    unknown = sorted(set(keywords) - {f.name for f in fields(Asked)})
    if unknown:
        raise TypeError(f"validate() got unexpected keyword argument(s): {', '.join(unknown)}")
    return _validate(job, Asked(**keywords), runner_of(runner, "auto", **run))


def _validate(job: Job, asked: Asked, runner: Runner) -> ValidationReport:
    start, end, fire_time, branch = asked.start, asked.end, asked.fire_time, asked.branch
    sample, positions, max_positions = asked.sample, asked.positions, asked.max_positions
    deadline, extra = asked.deadline, asked.extra
    _check_positions(positions, max_positions)  # before any work
    operational = fire_time is not None or (start is None and end is None)
    if operational and fire_time is None:
        fire_time = np.datetime64("now", "s")
    start, end = window_of(job, start, end, fire_time)
    repo = job.repo.open(fresh=True)
    snapshot = R.snapshot_of(repo, branch)
    unfinished: list[str] = []
    comp = completeness(
        job,
        start=start,
        end=end,
        snapshot=snapshot,
        min_present_fraction=asked.min_present_fraction,
        include_vars=asked.include_vars,
        exclude_vars=asked.exclude_vars,
        session=R.readonly(repo, branch, snapshot),
    )  # always runs, however late: the cheapest and most basic check
    currency = currency_failures(job, comp, fire_time) if operational else []
    replicas: list[str] = []
    if job.replicas:
        if _past(deadline):
            unfinished.append("replica check")
        else:
            replicas = replica_failures(job, start, end, snapshot=snapshot)
    samples = pick_samples(
        comp.present,
        sample,
        append_dim=job.template.append_dim,
        positions=positions,
        max_positions=max_positions,
    )
    found = ValidationReport(
        comp,
        allow_all_nan=job.dataset.allow_all_nan_vars,
        currency=tuple(currency),
        replicas=tuple(replicas),
        extra=tuple(extra),
        snapshot=snapshot,
    )
    if not samples:
        return replace(found, unfinished=tuple(unfinished))
    if _past(deadline):
        return replace(found, unfinished=(*unfinished, "decode"))
    report, results = decode_health(
        job,
        samples,
        branch=branch,
        snapshot=snapshot,
        deadline=deadline,
        runner=runner,
    )
    return replace(found, samples=results, decode_report=report, unfinished=tuple(unfinished))
