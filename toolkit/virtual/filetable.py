"""The files of a region as columns: the task list of a backfill at archive scale (pure).

A 10-year HRRR backfill is ~4 million files. One object per file costs ~10 us and ~220 B
each to plan, on the client, before any work starts. A `FileTable` holds four integer columns
instead (positions into the template's inits and leads and the source's members and file
types), built with numpy in one pass, and a digest of them. Its order, (init, lead, member, file
type), is fixed by the positions, so it is stable by construction and striping it is slicing
it: a block is a smaller table, shipped as its columns, and turned into `GribCoord`s on the
worker that runs it. The task key of a file stays its URL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, overload

import numpy as np

from toolkit.virtual.dataset import Analysis, Dataset, region_bounds, source_leads
from toolkit.virtual.gribsource import (
    GribCoord,
    as_datetime,
    as_timedelta,
    file_coord,
    variables_of,
)
from toolkit.virtual.refs import canon

__all__ = ["FileTable", "Keys", "file_table", "file_tasks", "published_mask"]


def published_mask(rule: Callable[..., Any], inits: np.ndarray, leads: np.ndarray) -> np.ndarray:
    """bool[init, lead]: which leads each init publishes. A rule with a vectorised `mask` (the
    shipped ones) is asked once; any other callable once per init."""
    if hasattr(rule, "mask"):
        return np.asarray(rule.mask(inits, leads), dtype=bool)
    out = np.zeros((len(inits), len(leads)), dtype=bool)
    for i, init in enumerate(inits):
        out[i] = np.isin(leads, rule(init, leads))
    return out


def names_of(dataset: Dataset, file_type: str, lead: Any) -> tuple[str, ...]:
    """The variables the dataset reads from a file of `file_type` at `lead`: all it carries,
    or for an analysis those its rule takes from that lead."""
    names = variables_of(dataset.source, file_type, lead)
    rule = dataset.leads
    if isinstance(rule, Analysis):
        t = dataset.template
        names = tuple(
            n for n in names if n in t.variables and rule.takes(t.variables[n].step_type, lead)
        )
    return names


def file_table(dataset: Dataset, start: Any = None, end: Any = None) -> FileTable:
    """Every file the template expects in [start, end), as columns, in append-dim order.

    For an analysis the `init` column holds valid-time positions; a file's init is its
    position's label less its lead."""
    t, src = dataset.template, dataset.source
    labels, leads = t.coords[t.append_dim], source_leads(dataset)
    lo, hi = region_bounds(labels, start, end)
    published = published_mask(dataset.leads, labels[lo:hi], leads)
    # a file's variables depend only on its (lead, file type): the catalog is asked once a pair
    carries = np.array(
        [[bool(names_of(dataset, ft, lead)) for ft in src.file_types] for lead in leads],
        dtype=bool,
    ).reshape(len(leads), len(src.file_types))
    cube = published[:, :, None, None] & carries[None, :, None, :]
    cube = np.broadcast_to(cube, (hi - lo, len(leads), len(src.members), len(src.file_types)))
    flat = np.flatnonzero(cube)
    i, j, m, f = np.unravel_index(flat, cube.shape)
    return FileTable(
        dataset,
        (i + lo).astype(np.int32),
        j.astype(np.int32),
        m.astype(np.int16),
        f.astype(np.int16),
    )


@dataclass(frozen=True, eq=False)
class FileTable(Sequence[GribCoord]):
    """Files as positions: `init` into the template's append dim, `lead` into its lead times,
    `member` and `file_type` into the source's. Indexing gives a `GribCoord`, slicing a table."""

    dataset: Dataset
    init: np.ndarray
    lead: np.ndarray
    member: np.ndarray
    file_type: np.ndarray

    def __len__(self) -> int:
        return len(self.init)

    @overload
    def __getitem__(self, i: int) -> GribCoord: ...
    @overload
    def __getitem__(self, i: slice) -> FileTable: ...
    def __getitem__(self, i: int | slice) -> GribCoord | FileTable:
        if isinstance(i, slice):
            return self.take(i)
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"file {i} of a table of {n}")
        return next(iter(self.take(slice(i % n, i % n + 1))))

    def take(self, rows: slice | np.ndarray) -> FileTable:
        """The rows `rows` (a slice or a boolean/integer index) as a table of their own."""
        return FileTable(
            self.dataset, self.init[rows], self.lead[rows], self.member[rows], self.file_type[rows]
        )

    def __iter__(self) -> Iterator[GribCoord]:
        """The coords, made here (on the worker that runs a block): each init's, lead's and
        (file type, lead)'s conversions once, not once per file."""
        t, src = self.dataset.template, self.dataset.source
        labels, leads = t.coords[t.append_dim], source_leads(self.dataset)
        rule = self.dataset.leads
        valid_dim = rule.valid_dim if isinstance(rule, Analysis) else None
        whens: dict[int | tuple[int, int], tuple[np.datetime64, Any]] = {}
        lead_of: dict[int, tuple[np.timedelta64, Any]] = {}
        names: dict[tuple[int, int], tuple[str, ...]] = {}
        for p, q, m, f in zip(
            self.init.tolist(),
            self.lead.tolist(),
            self.member.tolist(),
            self.file_type.tolist(),
            strict=True,
        ):
            at = (p, q) if valid_dim else p  # an analysis file's init is its valid time - lead
            if at not in whens:
                init = np.datetime64(labels[p], "ns")
                if valid_dim:
                    init = init - np.timedelta64(leads[q], "ns")
                whens[at] = (init, as_datetime(init))
            if q not in lead_of:
                lead_of[q] = (np.timedelta64(leads[q], "ns"), as_timedelta(leads[q]))
            if (f, q) not in names:
                names[f, q] = names_of(self.dataset, src.file_types[f], leads[q])
            yield file_coord(
                src,
                whens[at],
                lead_of[q],
                src.members[m],
                src.file_types[f],
                names[f, q],
                valid_dim,
            )

    def __repr__(self) -> str:
        return f"FileTable({self.dataset.name!r}, {len(self)} files)"

    @cached_property
    def digest(self) -> str:
        """The hash of what the table names: the dataset, its source's store, the labels and
        positions of every file, the key layout (equal tables hash equal in every process)."""
        t, src = self.dataset.template, self.dataset.source
        h = hashlib.sha256(f"{self.dataset.name}\0{src.store.url}\0{src.file_types}".encode())
        h.update(repr(src.members).encode())
        for column in (self.init, self.lead, self.member, self.file_type):
            h.update(np.ascontiguousarray(column).tobytes())
        labels = t.coords[t.append_dim]
        if len(self):
            region = labels[int(self.init.min()) : int(self.init.max()) + 1]
            h.update(
                repr([canon(x) for x in region]).encode()
                if region.dtype == object
                else np.ascontiguousarray(region).tobytes()
            )
        h.update(np.asarray(source_leads(self.dataset)).tobytes())
        if len(self):  # the key layout too: the first and the last file's URL
            h.update(f"\0{self[0].key}\0{self[-1].key}".encode())
        return h.hexdigest()

    @property
    def keys(self) -> list[str]:
        return [c.key for c in self]

    def through(self, last: Any) -> FileTable:
        """The files whose append label is at or before `last` (None: all)."""
        if last is None:
            return self
        t = self.dataset.template
        labels = t.coords[t.append_dim]
        present = np.unique(self.init)
        keep = np.array([canon(labels[p]) <= canon(last) for p in present.tolist()], dtype=bool)
        return self.take(np.isin(self.init, present[keep]))


@dataclass(frozen=True)
class Keys(Collection[str]):
    """A table's task keys (its files' URLs), made when iterated: what a gate wants, shipped
    as the table's columns rather than a string per file."""

    table: FileTable

    def __len__(self) -> int:
        return len(self.table)

    def __iter__(self) -> Iterator[str]:
        return (c.key for c in self.table)

    def __contains__(self, key: object) -> bool:
        return any(k == key for k in self)


def file_tasks(dataset: Dataset, start: Any = None, end: Any = None) -> list[GribCoord]:
    """Every file the template expects in [start, end), one coord each, in append-dim order."""
    return list(file_table(dataset, start, end))
