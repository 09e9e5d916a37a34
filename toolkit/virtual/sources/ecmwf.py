"""ECMWF's open data as catalogs: where each file is, which messages become which variables.

Pure: no I/O. Keys, cycles and encodings as ECMWF publishes them on ``s3://ecmwf-forecasts``
(the facts, with their sources, are in docs/virtual.md): one GRIB2 file per (cycle, step)
holding every field of that step, ECMWF's `.index` beside it (``index="ecmwf"``), one message
per field. Variables are spelled as wgrib2 lists ECMWF's messages, built from ECMWF's own
table (`grib_params.ECMWF` / `AIFS`) so that the spelling and the CF attributes come from
one entry per shortName.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from toolkit.virtual.grib.identity import element_of, level_of
from toolkit.virtual.grib_params import AIFS, ECMWF, EcmwfParameter
from toolkit.virtual.sources.noaa import GribVariable, Member, NoaaSource, lead_hours

__all__ = [
    "BUCKET",
    "PRESSURE_LEVELS",
    "REGION",
    "AifsSingle",
    "EcmwfOpenData",
    "IfsOper",
    "ecmwf_variable",
]

BUCKET = "s3://ecmwf-forecasts"
REGION = "eu-central-1"
FILE_TYPE = "oper-fc"
ECMF = 98
# the pressure levels both models publish for `t` (hPa)
PRESSURE_LEVELS = (1000, 925, 850, 700, 600, 500, 400, 300, 250, 200, 150, 100, 50)

# the `ifs/` folder level exists from this cycle on
IFS_FOLDER_FROM = datetime(2024, 2, 28, 6)
# AIFS single: `aifs/` before, one day under `experimental/`, then `aifs-single/`
AIFS_EXPERIMENTAL_FROM = datetime(2025, 2, 24, 6)
AIFS_SINGLE_FROM = datetime(2025, 2, 25, 6)


def ecmwf_variable(
    name: str,
    short_name: str,
    table: dict[str, EcmwfParameter] = ECMWF,
    levels: tuple[float, ...] = (),
    file_type: str = "grib2",
) -> GribVariable:
    """The variable holding ECMWF's `short_name`, spelled as its messages read (wgrib2's
    inventory spelling) with the CF attributes of its table entry. Accumulations run from
    step 0 and are published at step 0 too (a field of zeros)."""
    p = table[short_name]
    element = element_of(*p.code, ECMF, p.local_table)
    level = "{level:g} mb" if p.surface == 100 else level_of((p.surface, p.height), None)
    return GribVariable(
        name,
        element,
        level,
        file_type,
        p.step_type,
        None,
        tuple(float(x) for x in levels),
        at_lead_zero=p.step_type != "instant",
        short_name=short_name,
        ecmwf=p,
    )


def _variables(table: dict[str, EcmwfParameter]) -> tuple[GribVariable, ...]:
    return (
        ecmwf_variable("temperature_2m", "2t", table, file_type=FILE_TYPE),
        ecmwf_variable("wind_u_10m", "10u", table, file_type=FILE_TYPE),
        ecmwf_variable("wind_v_10m", "10v", table, file_type=FILE_TYPE),
        ecmwf_variable("pressure_reduced_to_mean_sea_level", "msl", table, file_type=FILE_TYPE),
        ecmwf_variable("precipitation_surface", "tp", table, file_type=FILE_TYPE),
        ecmwf_variable("temperature", "t", table, PRESSURE_LEVELS, FILE_TYPE),
    )


def _file(init: datetime, lead: timedelta | int) -> str:
    return f"{init:%Y%m%d%H}0000-{lead_hours(lead)}h-oper-fc.grib2"


@dataclass
class EcmwfOpenData(NoaaSource):
    """What both models share on ECMWF's bucket: `YYYYMMDD/HHz/FOLDER/FILE`, one file per
    (cycle, step) with its `.index`; a model says its `folder` for a cycle."""

    bucket: str = BUCKET
    region: str = REGION
    file_types: tuple[str, ...] = (FILE_TYPE,)
    index: str = field(default="ecmwf", repr=False)

    def folder(self, init: datetime) -> str:
        raise NotImplementedError

    def data_key(
        self, init: datetime, lead: timedelta | int, file_type: str, member: Member = None
    ) -> str:
        return f"{init:%Y%m%d}/{init:%H}z/{self.folder(init)}/{_file(init, lead)}"


@dataclass
class IfsOper(EcmwfOpenData):
    """IFS HRES, oper stream, 0.25°: ``YYYYMMDD/HHz/ifs/0p25/oper/YYYYMMDDHH0000-Sh-oper-fc.grib2``
    (no ``ifs/`` before 2024-02-28 06z)."""

    variables: tuple[GribVariable, ...] = field(default_factory=lambda: _variables(ECMWF))
    name: str = "ecmwf-ifs-oper"

    def folder(self, init: datetime) -> str:
        return "ifs/0p25/oper" if init >= IFS_FOLDER_FROM else "0p25/oper"


@dataclass
class AifsSingle(EcmwfOpenData):
    """AIFS single, 0.25°: ``YYYYMMDD/HHz/aifs-single/0p25/oper/...-oper-fc.grib2`` (``aifs/``
    before 2025-02-24 06z, ``aifs-single/0p25/experimental/oper/`` for the day after)."""

    variables: tuple[GribVariable, ...] = field(default_factory=lambda: _variables(AIFS))
    name: str = "ecmwf-aifs-single"

    def folder(self, init: datetime) -> str:
        if init < AIFS_EXPERIMENTAL_FROM:
            return "aifs/0p25/oper"
        if init < AIFS_SINGLE_FROM:
            return "aifs-single/0p25/experimental/oper"
        return "aifs-single/0p25/oper"
