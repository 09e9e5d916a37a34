"""A virtual dataset as one frozen value, and the pure rules over it.

`Dataset` = a `Template` (what the store looks like), a `GribSource` (where the files are and
what each carries), the rules for which leads an init publishes and which cycles an update
fire takes, and the repo settings (the provider's container, manifest splitting). Real and
user datasets are values built by small functions (`toolkit.virtual.builtin`,
`toolkit.virtual.define`); nothing subclasses anything. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit.virtual.gribsource import (
    GribCoord,
    GribSource,
    probe_loc,
    probe_var,
)
from toolkit.virtual.refs import canon
from toolkit.virtual.template import Template

if TYPE_CHECKING:
    from toolkit.storage import Store

__all__ = [
    "AllLeads",
    "Analysis",
    "Dataset",
    "LatestCycles",
    "RepoSettings",
    "ShortCycles",
    "at_lead_zero",
    "check_tiers",
    "in_region",
    "probe",
    "region_bounds",
    "source_leads",
    "with_source",
    "withheld",
]


@dataclass(frozen=True)
class AllLeads:
    """Every init publishes every template lead."""

    def __call__(self, init: np.datetime64, leads: np.ndarray) -> np.ndarray:
        return leads

    def mask(self, inits: np.ndarray, leads: np.ndarray) -> np.ndarray:
        return np.ones((len(inits), len(leads)), dtype=bool)


@dataclass(frozen=True)
class ShortCycles:
    """Inits on the `every_hours` cycles publish every lead; the others up to `max_lead_hours`
    (HRRR: 48 h on 00/06/12/18 UTC, 18 h on the other hours)."""

    every_hours: int
    max_lead_hours: int

    def __call__(self, init: np.datetime64, leads: np.ndarray) -> np.ndarray:
        hour = int(np.datetime64(init, "h").astype("int64")) % 24
        if hour % self.every_hours == 0:
            return leads
        return leads[leads <= np.timedelta64(self.max_lead_hours, "h")]

    def mask(self, inits: np.ndarray, leads: np.ndarray) -> np.ndarray:
        """bool[init, lead] for many inits at once (what `__call__` says of each)."""
        hours = np.asarray(inits).astype("datetime64[h]").astype("int64") % 24
        long = hours % self.every_hours == 0
        short = np.asarray(leads) <= np.timedelta64(self.max_lead_hours, "h")
        return long[:, None] | short[None, :]


@dataclass(frozen=True)
class Analysis:
    """An analysis dataset: the append dim is valid time (`valid_dim`), with no lead dim.

    Position T takes each instant variable from lead 0 of init T, and each statistic (an
    accumulation, an average: absent at lead 0) from lead `stat_lead_hours` of the init that
    many hours before T. At the extending edge a statistics file waits while its position's
    lead-0 file is still pending (`withheld`), so the newest position appears only with its
    lead-0 fields and readers never see a ragged leading edge; interior positions fill in.
    """

    stat_lead_hours: int = 1
    valid_dim: str = "time"

    def __post_init__(self) -> None:
        if self.stat_lead_hours < 1:
            raise ValueError(f"stat_lead_hours must be >= 1, not {self.stat_lead_hours}")

    @property
    def leads(self) -> np.ndarray:
        """The source leads the dataset reads: 0 and the statistics' lead."""
        return np.array([0, self.stat_lead_hours], dtype="timedelta64[h]").astype("timedelta64[ns]")

    def takes(self, step_type: str, lead: Any) -> bool:
        """Whether a variable of `step_type` is read from a file at `lead`."""
        at_zero = np.timedelta64(lead, "ns") == np.timedelta64(0, "ns")
        return at_zero if step_type == "instant" else not at_zero

    def mask(self, inits: np.ndarray, leads: np.ndarray) -> np.ndarray:
        return np.ones((len(inits), len(leads)), dtype=bool)


def source_leads(dataset: Dataset) -> np.ndarray:
    """The lead times the dataset's files are at: the template's, or an analysis' own."""
    if isinstance(dataset.leads, Analysis):
        return dataset.leads.leads
    return np.asarray(dataset.template.coords["lead_time"])


def at_lead_zero(c: Any) -> bool:
    """Whether source file `c` is a lead-0 (an analysis hour's instant) file."""
    return bool(np.timedelta64(c.lead_time, "ns") == np.timedelta64(0, "ns"))


def withheld(
    dataset: Dataset,
    available: Sequence[Any],
    pending: Sequence[Any],
    ingested_through: Any = None,
) -> set[str]:
    """Keys of `available` files to defer this tick: an analysis' statistics files at the
    extending edge whose position's lead-0 file is pending and not among them.

    The edge is every position past the newest one a lead-0 file covers: `ingested_through`
    (the newest position whose lead-0 file the store holds; None: none) or a lead-0 file
    available now, which lands in the same commit. A position at or before it is interior
    (readers already see newer hours), so its statistics fill in as they arrive even if its
    lead 0 never publishes; only the newest hours wait, so the leading edge is never ragged.
    Forecasts withhold nothing (their newest init is normally partial)."""
    rule = dataset.leads
    if not isinstance(rule, Analysis):
        return set()

    def at(c: Any) -> np.datetime64:
        return np.datetime64(c.out_loc()[rule.valid_dim], "ns")

    here = {c.key for c in available}
    covered = [at(c) for c in available if at_lead_zero(c)]
    if ingested_through is not None:
        covered.append(np.datetime64(ingested_through, "ns"))
    through = max(covered, default=None)
    waiting = {canon(at(c)) for c in pending if at_lead_zero(c) and c.key not in here}
    return {
        c.key
        for c in available
        if not at_lead_zero(c) and canon(at(c)) in waiting and (through is None or at(c) > through)
    }


@dataclass(frozen=True)
class LatestCycles:
    """An update fire takes the `cycles` newest `every_hours` cycles at or before the fire."""

    cycles: int
    every_hours: int

    def __call__(self, fire_time: Any) -> tuple[np.datetime64, np.datetime64]:
        fire = np.datetime64(fire_time, "ns")
        step = np.timedelta64(self.every_hours, "h").astype("timedelta64[ns]").astype("int64")
        ns = fire.astype("int64")
        newest = np.datetime64(int(ns - ns % step), "ns")
        start = newest - np.timedelta64(self.every_hours * (self.cycles - 1), "h")
        return start, fire + np.timedelta64(1, "ns")


@dataclass(frozen=True)
class RepoSettings:
    """The repo's config as plain data (Icechunk's objects do not pickle; built where used).

    `home` is the provider's bucket (an anonymous S3 container in `home_region`); a source
    read from anywhere else gets a container of its own. `split` sizes manifests along the
    append dim: an int, or `{path regex: size, None: default}`; None keeps one manifest.
    """

    split: int | Mapping[str | None, int] | None = 1000
    home: str | None = None
    home_region: str | None = None


@dataclass(frozen=True, eq=False)
class Dataset:
    """One virtual dataset: what it writes, where it reads, and its rules."""

    name: str
    template: Template
    source: GribSource
    settings: RepoSettings = field(default_factory=RepoSettings)
    window: Any = None  # fire time -> (start, end): LatestCycles or any picklable callable
    leads: Any = field(default_factory=AllLeads)  # (init, template leads) -> published leads
    title: str = ""
    # variables whose sampled chunks may all decode to NaN (e.g. a field masked everywhere at
    # lead 0); they still fail on decode errors
    allow_all_nan_vars: tuple[str, ...] = ()
    # completeness tiers: the fraction of expected files each append-dim position must hold,
    # newest position first; older positions are held to the last, which must be 1.0
    min_present_fraction: tuple[float, ...] = (1.0,)
    # data currency: the newest position with data is at most this old at a fire (None: the
    # update window's span, e.g. 3 cycles of 6 h = 18 h)
    expected_latency: np.timedelta64 | None = None

    def __post_init__(self) -> None:
        tiers = check_tiers(
            self.min_present_fraction, f"dataset {self.name!r}: min_present_fraction"
        )
        object.__setattr__(self, "min_present_fraction", tiers)
        unknown = sorted(set(self.allow_all_nan_vars) - set(self.template.variables))
        if unknown:
            raise ValueError(
                f"dataset {self.name!r}: allow_all_nan_vars names {unknown}, which it does not "
                f"have (its variables: {', '.join(self.template.variables)})"
            )

    @property
    def append_dim(self) -> str:
        return self.template.append_dim

    @property
    def latency(self) -> np.timedelta64 | None:
        """How old the newest position with data may be at a fire (see `expected_latency`)."""
        if self.expected_latency is not None:
            return np.timedelta64(self.expected_latency, "ns")
        w = self.window
        if isinstance(w, LatestCycles):
            return np.timedelta64(w.cycles * w.every_hours, "h").astype("timedelta64[ns]")
        return None


def check_tiers(tiers: Any, what: str = "min_present_fraction") -> tuple[float, ...]:
    """Completeness tiers as floats: each in [0, 1], at least one, the last 1.0 (it holds for
    every older position, which is either complete or has a gap)."""
    try:
        out = tuple(float(x) for x in tiers)
    except (TypeError, ValueError):
        raise ValueError(f"{what} {tiers!r} must be fractions, e.g. (0.5, 1.0)") from None
    if not out or out[-1] != 1.0 or any(not 0.0 <= x <= 1.0 for x in out):
        raise ValueError(f"{what} {out} must end with 1.0, each in [0, 1]")
    return out


def in_region(label: Any, start: Any, end: Any) -> bool:
    c = canon(label)
    return (start is None or c >= canon(start)) and (end is None or c < canon(end))


def region_bounds(labels: np.ndarray, start: Any, end: Any) -> tuple[int, int]:
    """[lo, hi) positions of the labels in [start, end): a binary search on a sorted time axis,
    a scan otherwise."""
    if np.issubdtype(labels.dtype, np.datetime64):
        lo = 0 if start is None else int(np.searchsorted(labels, np.datetime64(start, "ns")))
        hi = len(labels) if end is None else int(np.searchsorted(labels, np.datetime64(end, "ns")))
        return lo, max(lo, hi)
    inside = [i for i, x in enumerate(labels) if in_region(x, start, end)]
    return (inside[0], inside[-1] + 1) if inside else (0, 0)


def probe(dataset: Dataset, c: GribCoord) -> tuple[str, dict[str, Any]]:
    """The (variable, out_loc) cell whose presence in the manifest says "file `c` is in"."""
    var = probe_var(dataset.template, c)
    return var, probe_loc(dataset.source, dataset.template, c, var)


def with_source(dataset: Dataset, store: Store) -> Dataset:
    """The same dataset read from `store` (a mirror, a local copy, an emulator)."""
    return dataclasses.replace(dataset, source=dataclasses.replace(dataset.source, store=store))
