"""NOAA GRIB sources as virtual jobs: listing discovery, `.idx` refs with the stale check.

`NoaaVirtualRegionJob` implements `discover_available` (a file is ready once its data object
and its `.idx` are listed) and `file_refs` (index GET, 16-byte header check, catalog match) for
any NODD-shaped bucket. A dataset supplies the source, the template, the coords it expects and
its update window.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.virtual.job import VirtualRegionJob
from toolkit.virtual.refs import SourceFileCoord, VirtualRef
from toolkit.virtual.sources.noaa import Member, NoaaSource
from toolkit.virtual.sources.resolve import resolve_file

__all__ = [
    "NoaaCoord",
    "NoaaVirtualRegionJob",
    "discover_available_by_obstore_listing",
]


def discover_available_by_obstore_listing(
    pending: Sequence[SourceFileCoord],
    *,
    store: storage.Store,
    location_prefix: str,
    require_index: bool,
) -> list[tuple[SourceFileCoord, int]]:
    """Pending files whose data object (and index, when required) `store` lists now.

    One listing per distinct directory of the pending files; sizes come from the listing.
    """
    prefix = location_prefix.rstrip("/") + "/"
    keys: dict[SourceFileCoord, str] = {}
    for c in pending:
        url = c.get_url()
        if not url.startswith(prefix):
            raise ValueError(f"{url} is not under the source prefix {prefix}")
        keys[c] = url[len(prefix) :]
    listed: dict[str, int] = {}
    for d in sorted({posixpath.dirname(k) for k in keys.values()}):
        for info in storage.list_objects(store, d):
            listed[info.key] = info.size
    out = []
    for c, k in keys.items():
        if k in listed and (not require_index or f"{k}.idx" in listed):
            out.append((c, listed[k]))
    return out


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
        self, init: np.datetime64, lead: np.timedelta64, member: Member, file_type: str
    ) -> NoaaCoord:
        src = self.source()
        lead_td = timedelta(seconds=int(np.timedelta64(lead, "s").astype("int64")))
        names = tuple(dict.fromkeys(f.variable.name for f in src.fields(file_type, lead_td)))
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

    def generate_source_file_coords(self) -> list[SourceFileCoord]:
        t = self.template()
        out: list[SourceFileCoord] = []
        for init in t.coords[t.append_dim]:
            if not self.in_region(init):
                continue
            for lead in self.leads(init):
                for m in self.members():
                    for ft in self.file_types():
                        c = self.coord(init, lead, m, ft)
                        if c.data_vars:
                            out.append(c)
        return out

    def discover_available(
        self, pending: Sequence[SourceFileCoord], ingested_through: Any
    ) -> list[tuple[SourceFileCoord, int]]:
        assert self.source_store is not None
        return discover_available_by_obstore_listing(
            pending,
            store=self.source_store,
            location_prefix=self.source_store.url,
            require_index=True,
        )

    def file_refs(self, coord: SourceFileCoord, size: int) -> list[VirtualRef]:
        assert isinstance(coord, NoaaCoord) and self.source_store is not None
        lead = timedelta(seconds=int(np.timedelta64(coord.lead_time, "s").astype("int64")))
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
