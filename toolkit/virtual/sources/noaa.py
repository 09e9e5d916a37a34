"""NOAA GRIB sources on the NODD buckets: where a file lives, which index records it must carry.

A source is a set of file types per (init time, lead time[, member]) and a catalog of variables.
A variable names its index element, its index level (a literal string for a root variable, a
``{level:g}`` format for a vertical group so ``1000`` and ``0.01`` render as the index spells
them) and its step type + statistic period, from which the expected window at a lead time
follows. Each field is owned by exactly one file type; a vertical group may spread its levels
over several files (GFS pgrb2/pgrb2b, GEFS pgrb2a/pgrb2b), the first listed file wins a level
both carry. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import compress
from typing import Any

from toolkit.virtual.grib.errors import InvalidIndexError, MissingRecordError
from toolkit.virtual.grib.index import IndexRecord, Inventory, Window, parse_window
from toolkit.virtual.grib.kinds import check_kind, sidecar_key
from toolkit.virtual.grib_params import EcmwfParameter

Member = (
    int | str | None
)  # None: deterministic; int: ensemble member (0 = control); "mean"/"spread"


def as_lead(lead: timedelta | int | float) -> timedelta:
    """Lead time from a timedelta or a number of hours."""
    return lead if isinstance(lead, timedelta) else timedelta(hours=lead)


_HOUR = timedelta(hours=1)


def lead_hours(lead: timedelta | int | float) -> int:
    hours = as_lead(lead) / _HOUR
    if hours != int(hours):
        raise ValueError(f"NOAA file names need whole-hour lead times, got {hours} h")
    return int(hours)


@dataclass(frozen=True)
class GribVariable:
    """One catalog variable: how its records are spelled in the index and which file owns them."""

    name: str
    element: str
    level: str
    file_type: str
    step_type: str = "instant"
    period_hours: int | None = None  # statistic reset period; None = since init
    levels: tuple[float, ...] = ()  # vertical group coordinate values owned by `file_type`
    extra_levels: tuple[
        tuple[str, tuple[float, ...]], ...
    ] = ()  # (file type, levels), lower priority
    # a statistic the source publishes at lead 0 as a zero-length window (ECMWF's `tp` at step
    # 0, a field of zeros); NOAA's omit it. Out of the repr: a dataset's identity is unchanged
    at_lead_zero: bool = field(default=False, repr=False)
    # the provider's own description (ECMWF's shortName and its table entry): the CF
    # attributes come from it instead of the wgrib2 element's
    short_name: str | None = field(default=None, repr=False)
    ecmwf: EcmwfParameter | None = field(default=None, repr=False)

    def __hash__(self) -> int:
        """By name: equal variables share it, and a match hashes a field per record (the
        generated hash would walk `levels`, dozens of floats, every time)."""
        return hash(self.name)

    def __post_init__(self) -> None:
        if self.step_type not in ("instant", "accum", "avg", "max", "min"):
            raise ValueError(f"{self.name}: unknown step type {self.step_type!r}")
        if self.is_vertical != bool(self.levels or self.extra_levels):
            raise ValueError(
                f"{self.name}: a '{{level:g}}' level needs levels, and levels need one"
            )

    @property
    def is_vertical(self) -> bool:
        return "{level" in self.level

    def all_levels(self) -> tuple[float, ...]:
        return tuple(sorted({*self.levels, *(lv for _, lvs in self.extra_levels for lv in lvs)}))

    def owner(self, level: float | None = None) -> str:
        """The one file type that owns this variable (at `level`)."""
        if not self.is_vertical or level in self.levels:
            return self.file_type
        for file_type, levels in self.extra_levels:
            if level in levels:
                return file_type
        raise KeyError(f"{self.name} has no level {level:g}")

    def index_level(self, level: float | None = None) -> str:
        if not self.is_vertical:
            return self.level
        if level is None:
            raise ValueError(f"{self.name} is a vertical group: give a level")
        return self.level.format(level=level)

    def window(self, lead: timedelta | int | float) -> Window | None:
        """The window the index spells at `lead`, or None where the source has no such field
        (a statistic at lead 0, unless `at_lead_zero`)."""
        lead = as_lead(lead)
        if self.step_type == "instant":
            return Window.instant(lead)
        if lead <= timedelta(0):
            return Window(self.step_type, lead, lead) if self.at_lead_zero else None
        if self.period_hours is None:
            return Window(self.step_type, timedelta(0), lead)
        period = timedelta(hours=self.period_hours)
        periods_before = -(-lead // period) - 1  # ceil(lead / period) - 1
        return Window(self.step_type, periods_before * period, lead)


@dataclass(frozen=True)
class Field:
    """One variable at one level: one index record and one output chunk per file."""

    variable: GribVariable
    level: float | None = None

    def __hash__(self) -> int:
        return hash((self.variable.name, self.level))

    @property
    def key(self) -> tuple[str, float | None]:
        return (self.variable.name, self.level)

    def describe(self, lead: timedelta) -> str:
        window = self.variable.window(lead)
        return f"{self.variable.element}:{self.variable.index_level(self.level)}:{window.render() if window else '-'}"


@dataclass(frozen=True)
class KnownMissing:
    """Records a source is known to publish some files without; their absence is not an error."""

    file_type: str
    element: str
    level: str
    leads_hours: tuple[int, ...] | None = None  # None: any lead
    members: tuple[Member, ...] | None = None  # None: any member

    def covers(
        self, file_type: str, element: str, level: str, lead: timedelta, member: Member
    ) -> bool:
        return (
            self.file_type == file_type
            and self.element == element
            and self.level == level
            and (self.leads_hours is None or lead_hours(lead) in self.leads_hours)
            and (self.members is None or member in self.members)
        )


DISCOVERY = ("list", "probe")


@dataclass
class NoaaSource:
    """A bucket whose GRIB files carry a wgrib2 `.idx` sidecar: its key layout and catalog.

    `key_format` spells a data file's key from `init` (a datetime), `lead` (whole hours),
    `file_type` and `member`, e.g. ``"{init:%Y%m%d}/model.t{init:%H}z.{file_type}.f{lead:03d}"``;
    HRRR, GFS and GEFS compute theirs.
    """

    bucket: str = ""
    variables: tuple[GribVariable, ...] = ()
    known_missing: tuple[KnownMissing, ...] = ()
    name: str = "noaa"
    region: str = "us-east-1"
    file_types: tuple[str, ...] = field(default_factory=tuple)
    key_format: str = ""
    # how a file's messages are found (toolkit.virtual.grib.kinds); out of the repr, which
    # identifies a dataset, so NOAA's datasets keep their identity
    index: str = field(default="wgrib2", repr=False)
    # how the files are found: "list" (a listing per directory) or "probe" (a HEAD per file
    # the window expects, for HTTP servers and buckets without LIST)
    discovery: str = field(default="list", repr=False)

    def __post_init__(self) -> None:
        check_kind(self.index, self.name)
        if self.discovery not in DISCOVERY:
            raise ValueError(
                f"{self.name}: discovery={self.discovery!r} is not a way to find files; use "
                + " or ".join(repr(d) for d in DISCOVERY)
            )
        self._check_catalog()

    # -- layout -----------------------------------------------------------------------------
    def data_key(
        self, init: datetime, lead: timedelta | int, file_type: str, member: Member = None
    ) -> str:
        if not self.key_format:
            raise ValueError(f"{self.name}: no key_format: say how a data file's key is spelled")
        return self.key_format.format(
            init=init, lead=lead_hours(lead), file_type=file_type, member=member
        )

    def index_key(
        self, init: datetime, lead: timedelta | int, file_type: str, member: Member = None
    ) -> str | None:
        """The data file's sidecar (None for `index` kinds without one)."""
        return sidecar_key(self.index, self.data_key(init, lead, file_type, member))

    def data_url(
        self, init: datetime, lead: timedelta | int, file_type: str, member: Member = None
    ) -> str:
        return f"{self.bucket.rstrip('/')}/{self.data_key(init, lead, file_type, member)}"

    def index_url(
        self, init: datetime, lead: timedelta | int, file_type: str, member: Member = None
    ) -> str | None:
        key = self.index_key(init, lead, file_type, member)
        return None if key is None else f"{self.bucket.rstrip('/')}/{key}"

    # -- catalog ----------------------------------------------------------------------------
    def _check_catalog(self) -> None:
        if self.file_types:
            for var in self.variables:
                owners = (
                    {var.owner(lv) for lv in var.all_levels()}
                    if var.is_vertical
                    else {var.file_type}
                )
                unknown = owners - set(self.file_types)
                if unknown:
                    raise ValueError(
                        f"{self.name}: {var.name} names unknown file types {sorted(unknown)}"
                    )
        names = [v.name for v in self.variables]
        if len(names) != len(set(names)):
            raise ValueError(f"{self.name}: duplicate variable names")

    def variable(self, name: str) -> GribVariable:
        for var in self.variables:
            if var.name == name:
                return var
        raise KeyError(f"{self.name} has no variable {name!r}")

    def _owned(self, file_type: str, variables: Iterable[GribVariable] | None) -> list[Field]:
        out: list[Field] = []
        for var in self.variables if variables is None else variables:
            if var.is_vertical:
                out += [Field(var, lv) for lv in var.all_levels() if var.owner(lv) == file_type]
            elif var.file_type == file_type:
                out.append(Field(var))
        return out

    def fields(
        self, file_type: str, lead: timedelta | int, variables: Iterable[GribVariable] | None = None
    ) -> list[Field]:
        """Fields the file of `file_type` at `lead` owns (statistics are absent at lead 0)."""
        lead = as_lead(lead)
        return [f for f in self._owned(file_type, variables) if f.variable.window(lead) is not None]

    def absent_fields(
        self, file_type: str, lead: timedelta | int, variables: Iterable[GribVariable] | None = None
    ) -> list[Field]:
        """Fields the file of `file_type` would own but the source structurally omits at `lead`
        (statistics at lead 0): reported as absent, never looked up, never an error."""
        lead = as_lead(lead)
        return [f for f in self._owned(file_type, variables) if f.variable.window(lead) is None]

    def _wanted(
        self, file_type: str, lead: timedelta, variables: Iterable[GribVariable] | None
    ) -> tuple[list[Field], dict[tuple[str, str], list[tuple[Field, Window, str]]]]:
        """The owned fields in catalog order, and by (element, level): each with its window and
        that window's spelling. What a match looks up, the same for every file of a (file
        type, lead); memoized on the instance."""
        memo: dict[Any, Any] = self.__dict__.setdefault("_wanted_memo", {})
        key = (file_type, lead)
        if variables is None and key in memo:
            return memo[key]
        order = self.fields(file_type, lead, variables)
        spelled: dict[tuple[str, str], list[tuple[Field, Window, str]]] = {}
        for fld in order:
            var = fld.variable
            want = var.window(lead)
            assert want is not None  # `fields` leaves out what has no window at `lead`
            spelled.setdefault((var.element, var.index_level(fld.level)), []).append(
                (fld, want, want.render())
            )
        if variables is None:
            memo[key] = (order, spelled)
        return order, spelled

    def match(
        self,
        records: Sequence[IndexRecord],
        file_type: str,
        lead: timedelta | int,
        member: Member = None,
        *,
        url: str = "<index>",
        variables: Iterable[GribVariable] | None = None,
    ) -> dict[Field, IndexRecord]:
        """Each owned field's one record (`match_lines`, with the records built)."""
        lines = self.match_lines(records, file_type, lead, member, url=url, variables=variables)
        return {fld: records[i] for fld, i in lines}

    def match_lines(
        self,
        records: Sequence[IndexRecord],
        file_type: str,
        lead: timedelta | int,
        member: Member = None,
        *,
        url: str = "<index>",
        variables: Iterable[GribVariable] | None = None,
    ) -> list[tuple[Field, int]]:
        """Each owned field with the position in `records` of its one record, in catalog
        order. A field with no record raises MissingRecordError (naming the file) unless it is
        known-missing; a field with several is an invalid index. Sub-message fields a
        reference cannot isolate are refused (SubMessageError).

        One pass over the text columns (C-speed: the lines not spelled as a wanted (element,
        level) cost a dict probe each); windows are parsed only where the text is not the
        spelling asked for, and no record is built: the write loop reads an `Inventory`'s
        offsets and lengths off its columns."""
        lead = as_lead(lead)
        order, spelled = self._wanted(file_type, lead, variables)
        elements, levels, windows = _text_columns(records)
        hits: dict[Field, list[int]] = {}
        wanted = map(spelled.__contains__, zip(elements, levels, strict=True))
        for i in compress(range(len(elements)), wanted):
            window = windows[i]
            for fld, want, text in spelled[elements[i], levels[i]]:
                if window == text or parse_window(window) == want:
                    hits.setdefault(fld, []).append(i)
        found: list[tuple[Field, int]] = []
        missing: list[str] = []
        subs = not isinstance(records, Inventory) or records.subs is not None
        for fld in order:
            lines = hits.get(fld)
            if lines is None:
                var = fld.variable
                element, level = var.element, var.index_level(fld.level)
                if not any(
                    k.covers(file_type, element, level, lead, member) for k in self.known_missing
                ):
                    missing.append(fld.describe(lead))
                continue
            if len(lines) > 1:
                labels = ", ".join(records[i].label for i in lines)
                raise InvalidIndexError(url, f"{fld.describe(lead)} matches records {labels}")
            if subs:
                records[lines[0]].check_referenceable(url)
            found.append((fld, lines[0]))
        if missing:
            shown = "; ".join(missing[:5]) + (
                f"; and {len(missing) - 5} more" if len(missing) > 5 else ""
            )
            raise MissingRecordError(url, f"index lacks {len(missing)} expected record(s): {shown}")
        return found


def _text_columns(
    records: Sequence[IndexRecord],
) -> tuple[Sequence[str], Sequence[str], Sequence[str]]:
    """Element, level and window text of every record: an inventory's own columns."""
    if isinstance(records, Inventory):
        return records.elements, records.levels, records.windows
    return (
        [r.element for r in records],
        [r.level for r in records],
        [r.window_text for r in records],
    )


def _ymd(init: datetime) -> str:
    # fields, not strftime: a key is spelled per file per pass (a plan of 20,000 files makes
    # 100,000), and strftime cost a third of making a file's coord
    return f"{init.year:04d}{init.month:02d}{init.day:02d}"


def _hh(init: datetime) -> str:
    return f"{init.hour:02d}"


# ------------------------------------------------------------------------------------- HRRR

_HRRR_PRS_LEVELS = tuple(float(p) for p in range(50, 1001, 25))


def _hrrr_variables() -> tuple[GribVariable, ...]:
    sfc, prs = "sfc", "prs"
    return (
        GribVariable("temperature_2m", "TMP", "2 m above ground", sfc),
        GribVariable("dew_point_temperature_2m", "DPT", "2 m above ground", sfc),
        GribVariable("relative_humidity_2m", "RH", "2 m above ground", sfc),
        GribVariable("wind_u_10m", "UGRD", "10 m above ground", sfc),
        GribVariable("wind_v_10m", "VGRD", "10 m above ground", sfc),
        GribVariable("wind_u_80m", "UGRD", "80 m above ground", sfc),
        GribVariable("wind_v_80m", "VGRD", "80 m above ground", sfc),
        GribVariable("wind_gust_surface", "GUST", "surface", sfc),
        GribVariable("max_wind_10m", "WIND", "10 m above ground", sfc, "max", 1),
        GribVariable("pressure_surface", "PRES", "surface", sfc),
        GribVariable("precipitation_surface", "APCP", "surface", sfc, "accum", 1),
        GribVariable("precipitation_since_init_surface", "APCP", "surface", sfc, "accum", None),
        GribVariable("precipitation_rate_surface", "PRATE", "surface", sfc),
        GribVariable("total_cloud_cover_atmosphere", "TCDC", "entire atmosphere", sfc),
        GribVariable("downward_short_wave_radiation_flux_surface", "DSWRF", "surface", sfc),
        GribVariable("composite_reflectivity", "REFC", "entire atmosphere", sfc),
        GribVariable("visibility_surface", "VIS", "surface", sfc),
        GribVariable("categorical_rain_surface", "CRAIN", "surface", sfc),
        GribVariable(
            "local_16_201_atmosphere",
            "var discipline=0 center=7 local_table=1 parmcat=16 parm=201",
            "entire atmosphere",
            sfc,
        ),
        GribVariable("temperature", "TMP", "{level:g} mb", prs, levels=_HRRR_PRS_LEVELS),
        GribVariable("geopotential_height", "HGT", "{level:g} mb", prs, levels=_HRRR_PRS_LEVELS),
        GribVariable("wind_u", "UGRD", "{level:g} mb", prs, levels=_HRRR_PRS_LEVELS),
        GribVariable("wind_v", "VGRD", "{level:g} mb", prs, levels=_HRRR_PRS_LEVELS),
    )


@dataclass
class HRRR(NoaaSource):
    """HRRR CONUS: ``hrrr.YYYYMMDD/conus/hrrr.tHHz.wrf{sfc,prs}fFF.grib2``."""

    bucket: str = "s3://noaa-hrrr-bdp-pds"
    variables: tuple[GribVariable, ...] = field(default_factory=_hrrr_variables)
    name: str = "hrrr"
    file_types: tuple[str, ...] = ("sfc", "prs")

    def data_key(
        self, init: datetime, lead: timedelta | int, file_type: str, member: Member = None
    ) -> str:
        if file_type not in self.file_types or member is not None:
            raise ValueError(
                f"hrrr has file types {self.file_types} and no members, not {file_type!r}/{member!r}"
            )
        return f"hrrr.{_ymd(init)}/conus/hrrr.t{_hh(init)}z.wrf{file_type}f{lead_hours(lead):02d}.grib2"


# ------------------------------------------------------------------------------------- GFS

_GFS_LEVELS = (
    0.01,
    0.02,
    0.04,
    0.07,
    0.1,
    0.2,
    0.4,
    0.7,
    1,
    2,
    3,
    5,
    7,
    10,
    15,
    20,
    30,
    40,
    50,
    70,
    100,
    150,
    200,
    250,
    300,
    350,
    400,
    450,
    500,
    550,
    600,
    650,
    700,
    750,
    800,
    850,
    900,
    925,
    950,
    975,
    1000,
)
_GFS_B_LEVELS = (125, 175, 225, 275, 325, 375, 425, 475, 525, 575, 625, 675, 725, 775, 825, 875)


def _gfs_variables() -> tuple[GribVariable, ...]:
    a = "pgrb2"
    levels = tuple(float(x) for x in _GFS_LEVELS)
    extra = (("pgrb2b", tuple(float(x) for x in _GFS_B_LEVELS)),)
    return (
        GribVariable("temperature_2m", "TMP", "2 m above ground", a),
        GribVariable("relative_humidity_2m", "RH", "2 m above ground", a),
        GribVariable("maximum_temperature_2m", "TMAX", "2 m above ground", a, "max", 6),
        GribVariable("minimum_temperature_2m", "TMIN", "2 m above ground", a, "min", 6),
        GribVariable("wind_u_10m", "UGRD", "10 m above ground", a),
        GribVariable("wind_v_10m", "VGRD", "10 m above ground", a),
        GribVariable("wind_u_100m", "UGRD", "100 m above ground", a),
        GribVariable("wind_gust_surface", "GUST", "surface", a),
        GribVariable("pressure_reduced_to_mean_sea_level", "PRMSL", "mean sea level", a),
        GribVariable("precipitation_surface", "APCP", "surface", a, "accum", 6),
        GribVariable("precipitation_rate_surface", "PRATE", "surface", a),
        GribVariable("precipitation_rate_avg_surface", "PRATE", "surface", a, "avg", 6),
        GribVariable("total_cloud_cover_atmosphere", "TCDC", "entire atmosphere", a, "avg", 6),
        GribVariable("downward_short_wave_radiation_flux_surface", "DSWRF", "surface", a, "avg", 6),
        GribVariable("downward_long_wave_radiation_flux_surface", "DLWRF", "surface", a, "avg", 6),
        GribVariable(
            "precipitable_water_atmosphere",
            "PWAT",
            "entire atmosphere (considered as a single layer)",
            a,
        ),
        GribVariable("cape_surface", "CAPE", "surface", a),
        GribVariable("temperature", "TMP", "{level:g} mb", a, levels=levels, extra_levels=extra),
        GribVariable(
            "geopotential_height", "HGT", "{level:g} mb", a, levels=levels, extra_levels=extra
        ),
        GribVariable("wind_u", "UGRD", "{level:g} mb", a, levels=levels, extra_levels=extra),
        GribVariable("wind_v", "VGRD", "{level:g} mb", a, levels=levels, extra_levels=extra),
        GribVariable(
            "relative_humidity", "RH", "{level:g} mb", a, levels=levels, extra_levels=extra
        ),
    )


@dataclass
class GFS(NoaaSource):
    """GFS 0.25°: ``gfs.YYYYMMDD/HH/atmos/gfs.tHHz.pgrb2{,b}.0p25.fFFF``."""

    bucket: str = "s3://noaa-gfs-bdp-pds"
    variables: tuple[GribVariable, ...] = field(default_factory=_gfs_variables)
    name: str = "gfs"
    file_types: tuple[str, ...] = ("pgrb2", "pgrb2b")

    def data_key(
        self, init: datetime, lead: timedelta | int, file_type: str, member: Member = None
    ) -> str:
        if file_type not in self.file_types or member is not None:
            raise ValueError(
                f"gfs has file types {self.file_types} and no members, not {file_type!r}/{member!r}"
            )
        hh = _hh(init)
        return f"gfs.{_ymd(init)}/{hh}/atmos/gfs.t{hh}z.{file_type}.0p25.f{lead_hours(lead):03d}"


# ------------------------------------------------------------------------------------- GEFS

_GEFS_DIRS = {
    "pgrb2a": ("pgrb2ap5", "0p50"),
    "pgrb2b": ("pgrb2bp5", "0p50"),
    "pgrb2s": ("pgrb2sp25", "0p25"),
}
_GEFS_A = {
    "TMP": (10, 50, 100, 200, 250, 500, 700, 850, 925, 1000),
    "HGT": (10, 50, 100, 200, 250, 300, 500, 700, 850, 925, 1000),
    "UGRD": (10, 50, 100, 200, 250, 300, 400, 500, 700, 850, 925, 1000),
    "RH": (10, 50, 100, 200, 250, 500, 700, 850, 925, 1000),
}
_GEFS_B = {
    "TMP": (
        1,
        2,
        3,
        5,
        7,
        20,
        30,
        70,
        150,
        300,
        350,
        400,
        450,
        550,
        600,
        650,
        750,
        800,
        900,
        950,
        975,
    ),
    "HGT": (1, 2, 3, 5, 7, 20, 30, 70, 150, 350, 400, 450, 550, 600, 650, 750, 800, 900, 950, 975),
    "UGRD": (1, 2, 3, 5, 7, 20, 30, 70, 150, 350, 450, 550, 600, 650, 750, 800, 900, 950, 975),
    "RH": (20, 30, 70, 150, 300, 350, 400, 450, 550, 600, 650, 750, 800, 900, 950, 975),
}


def _gefs_variables() -> tuple[GribVariable, ...]:
    s = "pgrb2s"
    surface = (
        GribVariable("temperature_2m", "TMP", "2 m above ground", s),
        GribVariable("relative_humidity_2m", "RH", "2 m above ground", s),
        GribVariable("maximum_temperature_2m", "TMAX", "2 m above ground", s, "max", 6),
        GribVariable("minimum_temperature_2m", "TMIN", "2 m above ground", s, "min", 6),
        GribVariable("wind_u_10m", "UGRD", "10 m above ground", s),
        GribVariable("wind_v_10m", "VGRD", "10 m above ground", s),
        GribVariable("wind_gust_surface", "GUST", "surface", s),
        GribVariable("pressure_surface", "PRES", "surface", s),
        GribVariable("pressure_reduced_to_mean_sea_level", "PRMSL", "mean sea level", s),
        GribVariable("precipitation_surface", "APCP", "surface", s, "accum", 6),
        GribVariable("categorical_rain_surface", "CRAIN", "surface", s, "avg", 6),
        GribVariable("total_cloud_cover_atmosphere", "TCDC", "entire atmosphere", s, "avg", 6),
        GribVariable("downward_short_wave_radiation_flux_surface", "DSWRF", "surface", s, "avg", 6),
        GribVariable("geopotential_height_cloud_ceiling", "HGT", "cloud ceiling", s),
        GribVariable(
            "precipitable_water_atmosphere",
            "PWAT",
            "entire atmosphere (considered as a single layer)",
            s,
        ),
    )
    names = {
        "TMP": "temperature",
        "HGT": "geopotential_height",
        "UGRD": "wind_u",
        "RH": "relative_humidity",
    }
    vertical = tuple(
        GribVariable(
            names[el],
            el,
            "{level:g} mb",
            "pgrb2a",
            levels=tuple(float(x) for x in _GEFS_A[el]),
            extra_levels=(("pgrb2b", tuple(float(x) for x in _GEFS_B[el])),),
        )
        for el in ("TMP", "HGT", "UGRD", "RH")
    )
    return surface + vertical


@dataclass
class GEFS(NoaaSource):
    """GEFS: ``gefs.YYYYMMDD/HH/atmos/{pgrb2ap5,pgrb2bp5,pgrb2sp25}/{gec00,gepNN,geavg}.tHHz...``.

    Members: 0 is the control (gec00), 1..30 perturbed (gepNN), "mean" the ensemble mean
    (geavg), "spread" the spread (gespr).
    """

    bucket: str = "s3://noaa-gefs-pds"
    variables: tuple[GribVariable, ...] = field(default_factory=_gefs_variables)
    # GEFS publishes some files without some records; list them here as they are observed.
    # None so far: the real inventories in shared/data list every catalog record for their
    # leads (tests/virtual/sources/test_noaa.py::test_real_gefs_inventories_show_no_omission).
    known_missing: tuple[KnownMissing, ...] = ()
    name: str = "gefs"
    file_types: tuple[str, ...] = ("pgrb2a", "pgrb2b", "pgrb2s")

    @staticmethod
    def member_prefix(member: Member) -> str:
        if member == "mean":
            return "geavg"
        if member == "spread":
            return "gespr"
        if isinstance(member, int) and 0 <= member <= 30:
            return "gec00" if member == 0 else f"gep{member:02d}"
        raise ValueError(f"gefs member must be 0..30, 'mean' or 'spread', not {member!r}")

    def data_key(
        self, init: datetime, lead: timedelta | int, file_type: str, member: Member = None
    ) -> str:
        if file_type not in _GEFS_DIRS:
            raise ValueError(f"gefs has file types {self.file_types}, not {file_type!r}")
        folder, res = _GEFS_DIRS[file_type]
        prefix, hh = self.member_prefix(member), _hh(init)
        return (
            f"gefs.{_ymd(init)}/{hh}/atmos/{folder}/"
            f"{prefix}.t{hh}z.{file_type}.{res}.f{lead_hours(lead):03d}"
        )
