"""Manifest completeness: the fraction of expected source files each append-dim position holds.

The dataset's own coord generation says which files a window expects (structural absences,
such as accumulations at lead 0, are never expected); each file's expected cells are probed in
the manifest (`write.expected_of`), and a file counts as present only when every one of its
cells has a ref. Positions are held to tiers indexed newest first (`min_present_fraction`; the
last, 1.0, holds every older position), so the newest may still be publishing while an interior
gap fails, named by file. Positions past the store's extent are skipped and named: the source
may not have published them, which is data currency's concern. Manifest probes only.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolkit import icechunk as R
from toolkit.virtual.dataset import check_tiers
from toolkit.virtual.layout import committed_extent
from toolkit.virtual.refs import canon, chunk_cell
from toolkit.virtual.write import Job, expected_of

__all__ = ["Cell", "Completeness", "completeness", "label_text", "narrow", "window_of"]


@dataclass(frozen=True)
class Cell:
    """One chunk: a variable at a label for every non-grid dim (sorted (dim, label) pairs)."""

    variable: str
    loc: tuple[tuple[str, Any], ...]

    @property
    def key(self) -> str:
        return f"{self.variable}@" + ",".join(f"{d}={label_text(v)}" for d, v in self.loc)


def label_text(label: Any) -> str:
    if isinstance(label, np.datetime64):
        return str(np.datetime64(label, "s"))
    if isinstance(label, np.timedelta64):
        return f"{int(np.timedelta64(label, 's').astype('int64')) // 3600}h"
    return str(label)


@dataclass(frozen=True)
class Completeness:
    """Per append-dim position: the files expected, those missing (with their missing cells)."""

    append_dim: str
    window: tuple[Any, Any]
    positions: tuple[Any, ...]  # checked, oldest first
    files: dict[Any, tuple[str, ...]]  # position -> every file expected there
    missing: dict[Any, dict[str, tuple[Cell, ...]]]  # position -> file -> cells without a ref
    present: tuple[Cell, ...]
    skipped_positions: tuple[Any, ...] = ()  # past the committed extent
    failures: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def expected_files(self) -> int:
        return sum(len(v) for v in self.files.values())

    @property
    def missing_files(self) -> list[str]:
        return [url for by_file in self.missing.values() for url in by_file]


def window_of(job: Job, start: Any, end: Any, fire_time: Any = None) -> tuple[Any, Any]:
    """[start, end) as given, or, with neither, the dataset's update window at `fire_time`
    (default: now) -- bounded, as an operational check must be, never the whole archive."""
    if start is not None or end is not None:
        return start, end
    if job.dataset.window is None:
        raise ValueError(
            f"dataset {job.dataset.name!r} has no update window: give the window to check "
            "(--start/--end)"
        )
    fire = np.datetime64("now", "s") if fire_time is None else fire_time
    return job.dataset.window(np.datetime64(fire, "ns"))


def narrow(
    job: Job,
    files: Sequence[tuple[Any, list[tuple[str, dict[str, Any]]]]],
    include_vars: Collection[str] = (),
    exclude_vars: Collection[str] = (),
) -> list[tuple[Any, list[tuple[str, dict[str, Any]]]]]:
    """The files carrying the chosen variables, whole. A choice that splits a source file
    (some of its variables in, some out) is refused: presence is judged per file."""
    if not include_vars and not exclude_vars:
        return list(files)
    names = set(job.template.variables)
    unknown = sorted((set(include_vars) | set(exclude_vars)) - names)
    if unknown:
        raise ValueError(
            f"dataset {job.dataset.name!r} has no variable {', '.join(unknown)} "
            f"(its variables: {', '.join(names)})"
        )
    chosen = (set(include_vars) or names) - set(exclude_vars)
    out = []
    for coord, cells in files:
        carried = {var for var, _ in cells}
        inside = carried & chosen
        if inside and inside != carried:
            raise ValueError(
                f"the variables chosen split source file {coord.get_url()}: it carries "
                f"{', '.join(sorted(inside))} and also {', '.join(sorted(carried - inside))}; "
                "include or exclude whole files' variables"
            )
        if inside:
            out.append((coord, cells))
    return out


def completeness(
    job: Job,
    *,
    start: Any = None,
    end: Any = None,
    fire_time: Any = None,
    branch: str = "main",
    snapshot: str | None = None,
    min_present_fraction: Sequence[float] | None = None,
    include_vars: Collection[str] = (),
    exclude_vars: Collection[str] = (),
    session: Any = None,
) -> Completeness:
    """Probe every expected cell of the window's files and judge each position by its tier.

    The window is [start, end), or the dataset's update window at `fire_time` (`window_of`).
    Tiers default to the dataset's `min_present_fraction`. A window holding fewer checked
    positions than there are tiers fails: the last tier would never be applied.
    """
    tiers = check_tiers(
        job.dataset.min_present_fraction if min_present_fraction is None else min_present_fraction
    )
    t = job.template
    start, end = window_of(job, start, end, fire_time)
    if session is None:
        session = R.readonly(job.repo.open(fresh=True), branch, snapshot)
    extent = committed_extent(session, t) or 0
    geom = t.geometry(extent)
    owned: dict[Any, Any] = {}  # files of one (file type, lead, variables) own the same fields
    files = narrow(
        job,
        [(c, expected_of(job, c, owned)) for c in job.region(start, end).files()],
        include_vars,
        exclude_vars,
    )
    probes: list[tuple[Any, str, Cell, tuple[str, tuple[int, ...]]]] = []
    expected: dict[Any, list[str]] = {}
    skipped: dict[Any, Any] = {}
    memo: dict[Any, Any] = {}  # this pass's label -> position (and cell plans)
    for coord, cells in files:
        pos = coord.out_loc()[t.append_dim]
        keys = [(var, loc, chunk_cell(geom, var, loc, memo)) for var, loc in cells]
        if any(ix is None for _, _, ix in keys):  # past the committed extent: not published yet
            skipped[canon(pos)] = pos
            continue
        url = coord.get_url()
        expected.setdefault(pos, []).append(url)
        for var, loc, ix in keys:
            assert ix is not None
            probes.append((pos, url, Cell(var, tuple(sorted(loc.items()))), (var, ix)))
    here = R.chunks_present(session, [k for *_, k in probes])
    missing: dict[Any, dict[str, list[Cell]]] = {}
    present: list[Cell] = []
    for (pos, url, cell, _), ok in zip(probes, here, strict=True):
        if ok:
            present.append(cell)
        else:
            missing.setdefault(pos, {}).setdefault(url, []).append(cell)
    positions = sorted(expected, key=canon)
    failures = []
    if not positions:
        failures.append(
            f"no {t.append_dim} position in [{_bound(start)}, {_bound(end)}) is within the "
            f"store's extent ({extent} positions): nothing to validate"
        )
    elif len(positions) < len(tiers):
        failures.append(
            f"the window [{_bound(start)}, {_bound(end)}) holds {len(positions)} {t.append_dim} "
            f"position(s) with files to check, fewer than the {len(tiers)} completeness tiers "
            f"{tiers}: the last tier (1.0) would never apply; widen the window"
        )
    for age, pos in enumerate(reversed(positions)):
        need = tiers[min(age, len(tiers) - 1)]
        n = len(expected[pos])
        gone = missing.get(pos, {})
        have = n - len(gone)
        if have < math.ceil(need * n - 1e-9):
            shown = "; ".join(_gap(url, cells) for url, cells in list(gone.items())[:5])
            more = f" and {len(gone) - 5} more" if len(gone) > 5 else ""
            failures.append(
                f"{t.append_dim}={label_text(pos)}: {have}/{n} files have refs "
                f"(need {need:.0%}); missing {shown}{more}"
            )
    return Completeness(
        t.append_dim,
        (start, end),
        tuple(positions),
        {p: tuple(v) for p, v in expected.items()},
        {p: {u: tuple(c) for u, c in by.items()} for p, by in missing.items()},
        tuple(present),
        tuple(v for _, v in sorted(skipped.items())),
        tuple(failures),
    )


def _gap(url: str, cells: Sequence[Cell]) -> str:
    return f"{url} ({len(cells)} cell(s): {', '.join(c.key for c in cells[:3])}{' ...' if len(cells) > 3 else ''})"


def _bound(label: Any) -> str:
    return "..." if label is None else label_text(np.datetime64(label, "s"))
