"""Where a dataset's files are and what each must carry: a GRIB2 archive with `.idx` sidecars.

A `GribSource` is a value: the catalog (layout of keys, variables, known omissions), the store
the files are read from (the provider's bucket, a mirror, a local copy), the file types and
members the dataset takes. The pure functions over it say which file holds what and where its
probe cell is; `toolkit.virtual.source_io` does the I/O. No class here is meant to be subclassed.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit.virtual.refs import SourceFileCoord, VirtualRef, canon
from toolkit.virtual.sources.noaa import Member, NoaaSource
from toolkit.virtual.template import Template

if TYPE_CHECKING:
    from toolkit.storage import Store

__all__ = [
    "GribCoord",
    "GribSource",
    "expected_cells",
    "file_coord",
    "probe_loc",
    "probe_var",
    "variables_of",
    "with_modified",
]


@dataclass(frozen=True, slots=True)
class GribCoord(SourceFileCoord):
    """One file: (init time, lead time[, member]) of one file type, at `url`. Slotted: a
    plan holds one per file (millions for a multi-year backfill)."""

    init_time: np.datetime64
    lead_time: np.timedelta64
    member: Member = None
    file_type: str = ""
    url: str = ""
    data_vars: tuple[str, ...] = ()
    member_label: Any = None  # the ensemble_member coordinate label, when it differs from member
    valid_dim: str | None = None  # an analysis: the file fills valid time (init + lead) here

    def get_url(self) -> str:
        return self.url

    def get_index_url(self) -> str:
        return self.url + ".idx"

    def out_loc(self) -> dict[str, Any]:
        loc: dict[str, Any]
        if self.valid_dim is not None:
            loc = {self.valid_dim: np.datetime64(self.init_time + self.lead_time, "ns")}
        else:
            loc = {"init_time": self.init_time, "lead_time": self.lead_time}
        if self.member is not None:
            loc["ensemble_member"] = self.member if self.member_label is None else self.member_label
        return loc


@dataclass(frozen=True)
class GribSource:
    """A GRIB2 archive with wgrib2 `.idx` sidecars, read from `store`.

    `member_labels`, when given, is the `ensemble_member` coordinate label of each of `members`
    (e.g. GEFS spells its ensemble mean "mean" and its members "0".."30").
    """

    catalog: NoaaSource
    store: Store
    file_types: tuple[str, ...]
    members: tuple[Member, ...] = (None,)
    member_labels: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        unknown = set(self.file_types) - set(self.catalog.file_types or self.file_types)
        if unknown:
            raise ValueError(
                f"{self.catalog.name}: unknown file types {sorted(unknown)} "
                f"(the source has {self.catalog.file_types})"
            )
        if self.member_labels is not None and len(self.member_labels) != len(self.members):
            raise ValueError(f"{self.catalog.name}: one member label per member, please")

    def label_of(self, member: Member) -> Any:
        if self.member_labels is None:
            return None
        return self.member_labels[self.members.index(member)]


def as_timedelta(lead: np.timedelta64) -> timedelta:
    return timedelta(seconds=int(np.timedelta64(lead, "s").astype("int64")))


def as_datetime(t: np.datetime64) -> datetime:
    return datetime.fromisoformat(str(np.datetime64(t, "s")))


def variables_of(source: GribSource, file_type: str, lead: Any) -> tuple[str, ...]:
    """The variables a file of `file_type` at `lead` carries (catalog order)."""
    lead = lead if isinstance(lead, timedelta) else as_timedelta(lead)
    fields = source.catalog.fields(file_type, lead)
    return tuple(dict.fromkeys(f.variable.name for f in fields))


def file_coord(
    source: GribSource,
    init: tuple[np.datetime64, datetime],
    lead: tuple[np.timedelta64, timedelta],
    member: Member,
    file_type: str,
    names: tuple[str, ...],
    valid_dim: str | None = None,
) -> GribCoord:
    """One file's coord, its init and lead given both ways (label, Python time) so a plan
    converts each once; `names` (its variables) depend only on its (file type, lead)."""
    key = source.catalog.data_key(init[1], lead[1], file_type, member)
    return GribCoord(
        init[0],
        lead[0],
        member,
        file_type,
        source.store.object_url(key),
        names,
        source.label_of(member),
        valid_dim,
    )


def with_modified(
    refs: list[VirtualRef], url: str, modified: _dt.datetime | None
) -> list[VirtualRef]:
    """Stamp the listing's last_modified on the refs into `url` (Icechunk refuses re-uploads)."""
    if modified is None:
        return refs
    return [
        dataclasses.replace(r, last_modified=modified)
        if r.last_modified is None and r.location == url
        else r
        for r in refs
    ]


def expected_cells(
    source: GribSource,
    template: Template,
    c: GribCoord,
    memo: dict[Any, Any] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """The (variable[, level]) cells this file owns, from the catalog's fields for its
    (file type, lead): a vertical group spread over several file types (GFS pgrb2/pgrb2b)
    expects each level from the one file that carries it; statistics absent at lead 0 and
    records the source is known to omit are not expected. `memo`: a dict the caller keeps for
    one pass over many files (the fields are the same for every file of a file type, lead and
    variables: 11,584 GEFS files of one init share 374 lists)."""
    lead = as_timedelta(c.lead_time)
    key = (c.file_type, lead, c.data_vars)
    owned = None if memo is None else memo.get(key)
    if owned is None:
        owned = _owned_fields(source, template, c.file_type, lead, c.data_vars)
        if memo is not None:
            memo[key] = owned
    missing = source.catalog.known_missing
    base = c.out_loc()
    return [
        (name, dict(base) if level is None else {**base, "level": level})
        for name, level, element, index_level in owned
        if not (missing and any(
            k.covers(c.file_type, element, index_level, lead, c.member) for k in missing
        ))
    ]  # fmt: skip


def _owned_fields(
    source: GribSource, template: Template, file_type: str, lead: Any, data_vars: Sequence[str]
) -> list[tuple[str, Any, str, Any]]:
    """(variable name, level or None, GRIB element, index level) of every field a file of
    `file_type` at `lead` owns that the template carries (`expected_cells`)."""
    levels = {canon(lv) for lv in template.coords.get("level", ())}
    out: list[tuple[str, Any, str, Any]] = []
    for fld in source.catalog.fields(file_type, lead):
        var = fld.variable
        if var.name not in template.variables or (data_vars and var.name not in data_vars):
            continue  # not the dataset's, or (an analysis) read from another lead's file
        if fld.level is not None and canon(fld.level) not in levels:
            continue  # a level the dataset's template does not carry
        out.append((var.name, fld.level, var.element, var.index_level(fld.level)))
    return out


def probe_var(template: Template, c: GribCoord) -> str:
    """The variable whose chunk stands for the whole file: its first instant variable."""
    names = list(c.data_vars or template.variables)
    for n in names:
        if template.variables[n].step_type == "instant":
            return n
    return names[0]


def probe_loc(source: GribSource, template: Template, c: GribCoord, var: str) -> dict[str, Any]:
    """Where `var`'s probe cell of file `c` is: its out_loc, each other non-grid dim at its first
    label, except a vertical group spread over several file types, probed at the first level
    *this* file owns (the first template level may live in another file)."""
    loc = dict(c.out_loc())
    for d in template.variables[var].dims:
        if d not in loc and d not in template.grid_dims:
            loc[d] = template.coords[d][0]
    if "level" in loc and c.file_type:
        gv = source.catalog.variable(var)
        if gv.is_vertical and gv.owner(float(loc["level"])) != c.file_type:
            for lv in template.coords["level"]:
                if lv in gv.all_levels() and gv.owner(float(lv)) == c.file_type:
                    loc["level"] = lv
                    break
    return loc
