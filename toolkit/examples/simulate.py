"""A local NOAA-shaped GRIB archive, written into any toolkit.storage Store.

Real GRIB2 (encoded by ecCodes) plus a wgrib2-format ``.idx`` per file, laid out exactly like
the NODD bucket of the chosen source, with values that are a known function of
(variable, init time, lead time, member[, level]) so decoded data can be checked exactly.

Create and publish::

    from toolkit import storage
    from toolkit.examples import simulate

    store = storage.open_store("memory://sim")           # or a path, or s3://bucket/prefix
    archive = simulate.make_archive(
        store, kind="gefs",                                # "gfs", "hrrr" (no members), "gefs"
        inits=[datetime(2025, 8, 1, 0), datetime(2025, 8, 1, 6)],
        leads=[0, 3, 6],                                   # hours
        members=[0, 1, 2],                                 # gefs only: ints, "mean"
        publish=True,                                      # False: write nothing yet
    )
    archive.source         # toolkit.virtual.sources.noaa.GFS / GEFS with bucket = store.url and
                           # the simulated catalog sim_variables(file_type) (6 variables below)
    archive.file_type      # "pgrb2" (gfs) or "pgrb2s" (gefs): one file type per (init, lead, member)
    archive.files()        # every SimFile(init, lead, member), sorted by (init, lead, member)
    archive.publish(f)     # write one file (data object first, then its .idx); publish([f, g])
                           # several; publish() all. An update-loop test releases files one by one.
    archive.data_key(f), archive.index_key(f), archive.data_url(f)   # keys are relative to store

Layout (the real NODD key layout, relative to the store)::

    gfs:  gfs.20250801/06/atmos/gfs.t06z.pgrb2.0p25.f007            (+ ".idx")
    gefs: gefs.20250801/06/atmos/pgrb2sp25/gep01.t06z.pgrb2s.0p25.f007  (gec00 = member 0,
          geavg = "mean")
    hrrr: hrrr.20250801/conus/hrrr.t06z.wrfsfcf01.grib2

Each file holds, in this order, one message per field: temperature_2m (TMP, 2 m above ground),
wind_u_10m, wind_v_10m (UGRD/VGRD, 10 m above ground), pressure_reduced_to_mean_sea_level
(PRMSL), precipitation_surface (APCP, 6-hourly reset accumulation; absent at lead 0) and the
vertical group temperature (TMP, ``{level:g} mb`` at SIM_LEVELS = 0.4, 500, 1000 mb).

Turning a published file into references (what a virtual job's file_refs does)::

    from toolkit.virtual.sources.idx_refs import resolve_file
    resolved = resolve_file(store, archive.source, f.init, f.lead, archive.file_type, f.member,
                            file_size=size_from_listing)
    for field, record in resolved.fields.items():   # field.variable.name, field.level
        ref = (resolved.url, record.offset, record.length)  # one chunk of field.variable.name
    # codec for each array: toolkit.virtual.grib.decode.codec_config(field.variable.name)

Expected values (exact: quarter steps, packed losslessly with decimal scale 2)::

    simulate.expected_values("temperature_2m", init, lead_hours, member)            # (32, 48)
    simulate.expected_values("temperature", init, lead_hours, member, level=500.0)  # vertical
    archive.expected(f, "precipitation_surface")                                     # same thing

Statistics (precipitation) are absent at lead 0, as in the real sources. The grid is a 0.25°
patch, ``GRID_SHAPE = (32, 48)``, north-first, from ``LAT0``/``LON0``.

Bad cases (each is detected by `toolkit.virtual.grib.fetch.locate` + `source.match` with an
error naming the file)::

    archive.reupload(f)            # new data object, old .idx left in place -> stale index
    archive.truncate(f)            # data object cut inside its last message
    archive.publish(f, drop=[("wind_v_10m", None)])   # a message missing from file and index
    archive.index_only(f)          # .idx published, data object absent
    archive.publish(f, submessages=True)  # wind_u_10m + wind_v_10m share one message (N.1/N.2)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from toolkit import storage
from toolkit.virtual.grib.index import IndexRecord, Window
from toolkit.virtual.grib.message import join_fields
from toolkit.virtual.sources.noaa import (
    GEFS,
    GFS,
    HRRR,
    GribVariable,
    Member,
    NoaaSource,
    as_lead,
)

GRID_SHAPE = (32, 48)
LAT0, LON0, STEP = 50.0, 250.0, 0.25
SIM_LEVELS = (0.4, 500.0, 1000.0)


@dataclass(frozen=True)
class _Param:
    discipline: int
    category: int
    number: int
    surface: int  # typeOfFirstFixedSurface
    surface_value: float | None
    base: float
    amplitude: float


# GRIB parameter + a value recipe for every simulated variable (index spellings come from the catalog).
_PARAMS: dict[str, _Param] = {
    "temperature_2m": _Param(0, 0, 0, 103, 2, 280.0, 12.0),
    "wind_u_10m": _Param(0, 2, 2, 103, 10, 0.0, 8.0),
    "wind_v_10m": _Param(0, 2, 3, 103, 10, 1.0, 6.0),
    "pressure_reduced_to_mean_sea_level": _Param(0, 3, 1, 101, None, 101000.0, 900.0),
    "precipitation_surface": _Param(0, 1, 8, 1, None, 2.0, 2.0),
    "temperature": _Param(0, 0, 0, 100, None, 250.0, 10.0),
}


def sim_variables(file_type: str) -> tuple[GribVariable, ...]:
    """The simulated catalog, spelled as the real NOAA indexes spell these variables."""
    return (
        GribVariable("temperature_2m", "TMP", "2 m above ground", file_type),
        GribVariable("wind_u_10m", "UGRD", "10 m above ground", file_type),
        GribVariable("wind_v_10m", "VGRD", "10 m above ground", file_type),
        GribVariable("pressure_reduced_to_mean_sea_level", "PRMSL", "mean sea level", file_type),
        GribVariable("precipitation_surface", "APCP", "surface", file_type, "accum", 6),
        GribVariable("temperature", "TMP", "{level:g} mb", file_type, levels=SIM_LEVELS),
    )


SIM_VARIABLES = sim_variables("pgrb2")


def _member_index(member: Member) -> float:
    if member is None:
        return 0.0
    if member == "mean":
        return 0.5
    if member == "spread":
        return 1.5
    return float(member)


def lats_lons() -> tuple[np.ndarray, np.ndarray]:
    ny, nx = GRID_SHAPE
    return LAT0 - STEP * np.arange(ny), LON0 + STEP * np.arange(nx)


def expected_values(
    name: str,
    init: datetime,
    lead: timedelta | int,
    member: Member = None,
    level: float | None = None,
    generation: int = 0,
) -> np.ndarray:
    """The field the simulator writes for (variable, init, lead, member[, level]), float64 (32, 48).

    `generation` > 0 is what `reupload` writes instead (so a stale reference is visibly wrong).
    """
    p = _PARAMS[name]
    hours = as_lead(lead) / timedelta(hours=1)
    lat, lon = lats_lons()
    pattern = (
        np.sin(np.radians(lat * 3.0 + p.number * 20))[:, None]
        * np.cos(np.radians(lon * 2.0))[None, :]
    )
    shift = (
        0.25 * hours
        + 0.5 * _member_index(member)
        + 0.25 * init.hour
        + 0.5 * (init.toordinal() % 7)
        + (0.0 if level is None else 0.01 * level)
        + 3.75 * generation
    )
    # Quarter steps: x100 they are integers and the float32 reference value is exact, so
    # simple packing with decimal scale 2 round-trips them bit for bit.
    return np.round((p.base + p.amplitude * pattern + shift) * 4) / 4


@dataclass(frozen=True)
class SimFile:
    """One simulated source file: (init time, lead hours, member)."""

    init: datetime
    lead: int
    member: Member = None

    @property
    def lead_time(self) -> timedelta:
        return timedelta(hours=self.lead)


# ----------------------------------------------------------------------------- encoding


def _stat_code(step_type: str) -> int:
    return {"avg": 0, "accum": 1, "max": 2, "min": 3}[step_type]


def encode_message(
    var: GribVariable,
    values: np.ndarray,
    init: datetime,
    window: Window,
    member: Member,
    level: float | None,
    missing: bool = False,
) -> bytes:
    """One GRIB2 message (ecCodes) on the simulator's grid; `missing`: every point masked by
    the bitmap (a reader decodes it entirely to NaN)."""
    import eccodes

    p = _PARAMS[var.name]
    ny, nx = GRID_SHAPE
    lat, lon = lats_lons()
    ensemble = isinstance(member, int)
    statistic = window.step_type != "instant"
    pdt = (11 if ensemble else 8) if statistic else (1 if ensemble else 0)
    h = eccodes.codes_grib_new_from_samples("regular_ll_sfc_grib2")
    try:
        keys: list[tuple[str, object]] = [
            ("centre", 7),
            ("Ni", nx),
            ("Nj", ny),
            ("latitudeOfFirstGridPointInDegrees", float(lat[0])),
            ("longitudeOfFirstGridPointInDegrees", float(lon[0])),
            ("latitudeOfLastGridPointInDegrees", float(lat[-1])),
            ("longitudeOfLastGridPointInDegrees", float(lon[-1])),
            ("iDirectionIncrementInDegrees", STEP),
            ("jDirectionIncrementInDegrees", STEP),
            ("dataDate", int(f"{init:%Y%m%d}")),
            ("dataTime", int(f"{init:%H%M}")),
            ("productDefinitionTemplateNumber", pdt),
            ("discipline", p.discipline),
            ("parameterCategory", p.category),
            ("parameterNumber", p.number),
            ("typeOfFirstFixedSurface", p.surface),
        ]
        if level is not None:  # isobaric: Pa, scaled to stay integral for levels like 0.4 mb
            keys += [
                ("scaleFactorOfFirstFixedSurface", 0),
                ("scaledValueOfFirstFixedSurface", round(level * 100)),
            ]
        elif p.surface_value is not None:
            keys += [
                ("scaleFactorOfFirstFixedSurface", 0),
                ("scaledValueOfFirstFixedSurface", int(p.surface_value)),
            ]
        keys += [("indicatorOfUnitOfTimeRange", 1)]
        if statistic:
            start = int(window.start / timedelta(hours=1))
            end = int(window.end / timedelta(hours=1))
            keys += [
                ("forecastTime", start),
                ("typeOfStatisticalProcessing", _stat_code(window.step_type)),
                ("indicatorOfUnitForTimeRange", 1),
                ("lengthOfTimeRange", end - start),
            ]
        else:
            keys += [("forecastTime", int(window.end / timedelta(hours=1)))]
        if ensemble:
            keys += [
                ("typeOfEnsembleForecast", 2 if member == 0 else 3),
                ("perturbationNumber", int(member)),
                ("numberOfForecastsInEnsemble", 31),
            ]
        keys += [("packingType", "grid_simple"), ("decimalScaleFactor", 2)]
        if missing:
            keys += [("bitmapPresent", 1), ("missingValue", 9999.0)]
            values = np.full(values.shape, 9999.0)
        for key, value in keys:
            eccodes.codes_set(h, key, value)
        eccodes.codes_set_values(h, np.ascontiguousarray(values, dtype=np.float64).ravel())
        return bytes(eccodes.codes_get_message(h))
    finally:
        eccodes.codes_release(h)


def _ens_suffix(member: Member) -> tuple[str, ...]:
    if member is None:
        return ()
    if member == "mean":
        return ("ens mean",)
    if member == "spread":
        return ("ens spread",)
    return ("ENS=low-res ctl",) if member == 0 else (f"ENS=+{member}",)


def render_index(records: Sequence[IndexRecord]) -> str:
    """A wgrib2 inventory: one ``N[.k]:OFFSET:d=..:ELEMENT:LEVEL:WINDOW:[EXTRA]`` line per record."""
    return "".join(r.line() + "\n" for r in records)


# ----------------------------------------------------------------------------- the archive


@dataclass
class SimArchive:
    """A simulated archive in `store`; nothing is written until `publish`."""

    store: storage.Store
    source: NoaaSource
    file_type: str
    inits: tuple[datetime, ...]
    leads: tuple[int, ...]
    members: tuple[Member, ...] = (None,)
    _generation: dict[SimFile, int] = field(default_factory=dict)

    def files(self) -> list[SimFile]:
        return sorted(
            (SimFile(i, lead, m) for i in self.inits for lead in self.leads for m in self.members),
            key=lambda f: (f.init, f.lead, _member_index(f.member)),
        )

    def data_key(self, f: SimFile) -> str:
        return self.source.data_key(f.init, f.lead, self.file_type, f.member)

    def index_key(self, f: SimFile) -> str:
        return self.data_key(f) + ".idx"

    def data_url(self, f: SimFile) -> str:
        return storage.object_url(self.store, self.data_key(f))

    def expected(self, f: SimFile, name: str, level: float | None = None) -> np.ndarray:
        return expected_values(name, f.init, f.lead, f.member, level)

    def encode(
        self,
        f: SimFile,
        *,
        drop: Iterable[tuple[str, float | None]] = (),
        submessages: bool = False,
        generation: int = 0,
        all_nan: Iterable[str] = (),
    ) -> tuple[bytes, str]:
        """(GRIB bytes, .idx text) of one file; the variables in `all_nan` masked everywhere."""
        masked = set(all_nan)
        dropped = set(drop)
        fields = [
            fld for fld in self.source.fields(self.file_type, f.lead) if fld.key not in dropped
        ]
        lead = f.lead_time
        messages: list[list[tuple[bytes, IndexRecord]]] = []
        for fld in fields:
            var = fld.variable
            window = var.window(lead)
            assert window is not None
            values = expected_values(var.name, f.init, lead, f.member, fld.level, generation)
            data = encode_message(
                var, values, f.init, window, f.member, fld.level, var.name in masked
            )
            rec = IndexRecord(
                number=0,
                submessage=None,
                offset=0,
                length=len(data),
                init=f.init,
                element=var.element,
                level=var.index_level(fld.level),
                window_text=window.render(),
                extra=_ens_suffix(f.member),
            )
            messages.append([(data, rec)])
        if submessages:
            messages = _pair_winds(messages)
        blob = bytearray()
        records: list[IndexRecord] = []
        for number, group in enumerate(messages, start=1):
            offset = len(blob)
            if len(group) == 1:
                data, rec = group[0]
                records.append(_at(rec, number, None, offset))
            else:
                data = join_fields([d for d, _ in group])
                records += [
                    _at(rec, number, k, offset) for k, (_, rec) in enumerate(group, start=1)
                ]
            blob += data
        return bytes(blob), render_index(records)

    def publish(
        self,
        files: SimFile | Iterable[SimFile] | None = None,
        *,
        drop: Iterable[tuple[str, float | None]] = (),
        submessages: bool = False,
        all_nan: Iterable[str] = (),
    ) -> list[SimFile]:
        """Write data then index for each file (all files when None); returns what it wrote.
        `all_nan`: variables whose messages are masked everywhere (decode to NaN)."""
        targets = (
            self.files()
            if files is None
            else [files]
            if isinstance(files, SimFile)
            else list(files)
        )
        drop = tuple(drop)
        for f in targets:
            data, index = self.encode(f, drop=drop, submessages=submessages, all_nan=all_nan)
            storage.put(self.store, self.data_key(f), data)
            storage.put(self.store, self.index_key(f), index.encode())
        return targets

    # -- bad cases ---------------------------------------------------------------------------
    def reupload(self, f: SimFile) -> None:
        """Replace the data object (new values, one extra leading message) and keep the old
        index: every offset it names is still in range, none is right."""
        old = storage.get(self.store, self.index_key(f)).data.decode()
        old_last = int(old.strip().splitlines()[-1].split(":")[1])
        generation = self._generation.get(f, 0) + 1
        data, _ = self.encode(f, generation=generation)
        spans, pos = [], 0
        while pos < len(data):
            length = int.from_bytes(data[pos + 8 : pos + 16], "big")
            spans.append((pos, length))
            pos += length
        for start, length in spans:  # pick a leading extra message that shifts the old offsets off
            new = data[start : start + length] + data
            starts = {0} | {length + s for s, _ in spans}
            if old_last not in starts and old_last < len(new):
                break
        else:
            raise AssertionError(f"cannot make a stale re-upload of {self.data_key(f)}")
        self._generation[f] = generation
        storage.put(self.store, self.data_key(f), new)

    def truncate(self, f: SimFile, keep: int | None = None) -> int:
        """Cut the data object (default: halfway into its last message); returns the new size."""
        data = storage.get(self.store, self.data_key(f)).data
        if keep is None:
            index = storage.get(self.store, self.index_key(f)).data.decode()
            last = int(index.strip().splitlines()[-1].split(":")[1])
            keep = last + (len(data) - last) // 2
        storage.put(self.store, self.data_key(f), data[:keep])
        return keep

    def index_only(self, f: SimFile) -> None:
        """Publish the index of a file whose data object is absent."""
        _, index = self.encode(f)
        storage.put(self.store, self.index_key(f), index.encode())
        if storage.exists(self.store, self.data_key(f)):
            storage.delete(self.store, self.data_key(f))


def _at(rec: IndexRecord, number: int, submessage: int | None, offset: int) -> IndexRecord:
    from dataclasses import replace

    return replace(rec, number=number, submessage=submessage, offset=offset, length=None)


def _pair_winds(
    messages: list[list[tuple[bytes, IndexRecord]]],
) -> list[list[tuple[bytes, IndexRecord]]]:
    """Put the 10 m V wind into the 10 m U wind's message, as older inventories do."""
    out: list[list[tuple[bytes, IndexRecord]]] = []
    u_group: list[tuple[bytes, IndexRecord]] | None = None
    for group in messages:
        rec = group[0][1]
        if rec.element == "UGRD" and rec.level == "10 m above ground":
            u_group = list(group)
            out.append(u_group)
        elif rec.element == "VGRD" and rec.level == "10 m above ground" and u_group is not None:
            u_group.extend(group)
        else:
            out.append(group)
    return out


def sim_source(kind: str, store: storage.Store) -> tuple[NoaaSource, str]:
    """The source (bucket = the store's URL, simulated catalog) and file type for `kind`."""
    if kind == "gfs":
        return GFS(bucket=store.url, variables=sim_variables("pgrb2")), "pgrb2"
    if kind == "gefs":
        return GEFS(bucket=store.url, variables=sim_variables("pgrb2s")), "pgrb2s"
    if kind == "hrrr":
        return HRRR(bucket=store.url, variables=sim_variables("sfc")), "sfc"
    raise ValueError(f"simulated archive kind must be 'gfs', 'gefs' or 'hrrr', not {kind!r}")


def make_archive(
    store: storage.Store,
    *,
    kind: str = "gfs",
    inits: Sequence[datetime],
    leads: Sequence[int],
    members: Sequence[Member] | None = None,
    publish: bool = True,
) -> SimArchive:
    """A simulated archive of `kind` ("gfs", "gefs" or "hrrr") in `store`, published unless
    told not to."""
    source, file_type = sim_source(kind, store)
    if kind in ("gfs", "hrrr") and members not in (None, [None], (None,)):
        raise ValueError(f"the {kind} layout has no ensemble members")
    archive = SimArchive(
        store=store,
        source=source,
        file_type=file_type,
        inits=tuple(inits),
        leads=tuple(int(x) for x in leads),
        members=tuple(members) if members else ((0,) if kind == "gefs" else (None,)),
    )
    if publish:
        archive.publish()
    return archive
