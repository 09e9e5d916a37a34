"""NOAA GRIB sources as virtual jobs: listing discovery, `.idx` refs with the stale check.

`NoaaVirtualRegionJob` implements `discover_available` (a file is ready once its data object
and its `.idx` are listed; the listing's own last_modified rides on every ref, so Icechunk
refuses a ref whose object was re-uploaded since) and `file_refs` (index GET, 16-byte header
check, catalog match) for any NODD-shaped bucket, and `expected_cells` from the source's own
field list (a vertical group may be spread over several file types). A dataset supplies the
source, the template, the coords it expects and its update window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.virtual.job import (
    Available,
    VirtualRegionJob,
    discover_available_by_obstore_listing,
    list_available,
)
from toolkit.virtual.refs import SourceFileCoord, VirtualRef, canon
from toolkit.virtual.sources.noaa import Member, NoaaSource
from toolkit.virtual.sources.resolve import resolve_file

__all__ = [
    "NoaaCoord",
    "NoaaVirtualRegionJob",
    "discover_available_by_obstore_listing",
]


@dataclass(frozen=True)
class NoaaCoord(SourceFileCoord):
    """One NOAA file: (init time, lead time[, member]) of one file type in `source`'s bucket."""

    init_time: np.datetime64
    lead_time: np.timedelta64
    member: Member = None
    file_type: str = ""
    url: str = ""
    data_vars: tuple[str, ...] = ()
    member_label: Any = None  # the ensemble_member coordinate label, when it differs from member

    def get_url(self) -> str:
        return self.url

    def get_index_url(self) -> str:
        return self.url + ".idx"

    def out_loc(self) -> dict[str, Any]:
        loc: dict[str, Any] = {"init_time": self.init_time, "lead_time": self.lead_time}
        if self.member is not None:
            loc["ensemble_member"] = self.member if self.member_label is None else self.member_label
        return loc


def _lead(lead: np.timedelta64) -> timedelta:
    return timedelta(seconds=int(np.timedelta64(lead, "s").astype("int64")))


def _py_time(t: np.datetime64) -> datetime:
    return datetime.fromisoformat(str(np.datetime64(t, "s")))


@dataclass(frozen=True)
class NoaaVirtualRegionJob(VirtualRegionJob):
    """Base for HRRR/GFS/GEFS-shaped datasets: `source_store` is the bucket (or a local copy)."""

    source_store: storage.Store | None = None

    def source(self) -> NoaaSource:
        raise NotImplementedError

    def file_types(self) -> tuple[str, ...]:
        return self.source().file_types[:1]

    def members(self) -> tuple[Member, ...]:
        return (None,)

    def member_label(self, member: Member) -> Any:
        """The `ensemble_member` label of `member` (override when the coordinate spells it
        differently, e.g. GEFS's ensemble mean)."""
        return None

    def leads(self, init: np.datetime64) -> Any:
        """The lead times the source publishes for `init` (default: every template lead)."""
        return self.template().coords["lead_time"]

    def representative_probe_loc(self, coord: SourceFileCoord, var: str) -> dict[str, Any]:
        """As the base, but a vertical group spread over several file types is probed at the
        first template level *this* file owns (the base's first level may live in another file)."""
        loc = super().representative_probe_loc(coord, var)
        if "level" in loc and isinstance(coord, NoaaCoord) and coord.file_type:
            gv = self.source().variable(var)
            if gv.is_vertical and gv.owner(float(loc["level"])) != coord.file_type:
                for lv in self.template().coords["level"]:
                    if lv in gv.all_levels() and gv.owner(float(lv)) == coord.file_type:
                        loc["level"] = lv
                        break
        return loc

    def coord(
        self,
        init: np.datetime64,
        lead: np.timedelta64,
        member: Member,
        file_type: str,
        names: tuple[str, ...] | None = None,
    ) -> NoaaCoord:
        """One file's coord; `names` (its variables) may be passed in when already known for
        its (file type, lead): they depend on nothing else."""
        src = self.source()
        lead_td = _lead(lead)
        if names is None:
            names = self.variables_of(file_type, lead_td)
        key = src.data_key(_py_time(init), lead_td, file_type, member)
        assert self.source_store is not None
        url = f"{self.source_store.url.rstrip('/')}/{key}"
        return NoaaCoord(
            np.datetime64(init, "ns"),
            np.timedelta64(lead, "ns"),
            member,
            file_type,
            url,
            names,
            self.member_label(member),
        )

    def variables_of(self, file_type: str, lead: Any) -> tuple[str, ...]:
        """The template variables a file of `file_type` at `lead` carries (catalog order)."""
        fields = self.source().fields(file_type, _lead(lead))
        return tuple(dict.fromkeys(f.variable.name for f in fields))

    def generate_source_file_coords(self) -> list[SourceFileCoord]:
        t = self.template()
        out: list[SourceFileCoord] = []
        # A file's variables depend only on its (file type, lead): matched against the catalog
        # once per pair for this listing, not once per file (most of a plan's time otherwise).
        names: dict[tuple[str, Any], tuple[str, ...]] = {}
        for init in t.coords[t.append_dim]:
            if not self.in_region(init):
                continue
            for lead in self.leads(init):
                for m in self.members():
                    for ft in self.file_types():
                        pair = (ft, lead)
                        if pair not in names:
                            names[pair] = self.variables_of(ft, lead)
                        if names[pair]:
                            out.append(self.coord(init, lead, m, ft, names[pair]))
        return out

    def discover_available(
        self, pending: Sequence[SourceFileCoord], ingested_through: Any
    ) -> list[Available]:
        """Listed data object and `.idx`, with the listing's size and last_modified."""
        assert self.source_store is not None
        return list(
            list_available(
                pending,
                store=self.source_store,
                location_prefix=self.source_store.url,
                require_index=True,
            )
        )

    def expected_cells(self, coord: SourceFileCoord) -> list[tuple[str, dict[str, Any]]]:
        """The (variable[, level]) cells this file owns, from `source.fields(file_type, lead)`:
        a vertical group spread over several file types (GFS pgrb2/pgrb2b) expects each level
        from the one file that carries it, and statistics absent at lead 0 are not expected."""
        assert isinstance(coord, NoaaCoord)
        t = self.template()
        levels = {canon(lv) for lv in t.coords.get("level", ())}
        base = coord.out_loc()
        out: list[tuple[str, dict[str, Any]]] = []
        src = self.source()
        lead = _lead(coord.lead_time)
        for fld in src.fields(coord.file_type, lead):
            name = fld.variable.name
            if name not in t.variables or any(  # optional: some files lack it, by design
                k.covers(
                    coord.file_type,
                    fld.variable.element,
                    fld.variable.index_level(fld.level),
                    lead,
                    coord.member,
                )
                for k in src.known_missing
            ):
                continue
            loc = dict(base)
            if fld.level is not None:
                if canon(fld.level) not in levels:
                    continue  # a level the dataset's template does not carry
                loc["level"] = fld.level
            out.append((name, loc))
        return out

    def file_refs(self, coord: SourceFileCoord, size: int) -> list[VirtualRef]:
        assert isinstance(coord, NoaaCoord) and self.source_store is not None
        lead = _lead(coord.lead_time)
        resolved = resolve_file(
            self.source_store,
            self.source(),
            _py_time(coord.init_time),
            lead,
            coord.file_type,
            coord.member,
            file_size=size,
        )
        if resolved.url != coord.get_url():
            raise ValueError(f"resolved {resolved.url} for coord {coord.get_url()}")
        base = coord.out_loc()
        refs = []
        for fld, rec in resolved.fields.items():
            loc = dict(base)
            if fld.level is not None:
                loc["level"] = fld.level
            refs.append(
                VirtualRef.make(fld.variable.name, loc, resolved.url, rec.offset, rec.length)
            )
        return refs
