"""CF metadata of GRIB2 parameters: one table every virtual dataset shares. Pure: no I/O.

A variable keeps its name; its attributes say what it is the way CF readers look for it:
`units` (UDUNITS), `long_name`, `standard_name` where the CF table has one, `short_name` (the
GRIB element as the index spells it) and `grib_parameter` (discipline/category/number, so
the entry can be checked against the WMO code tables). A statistic adds `cell_methods`.
Direction variables carry standard names ending in `_direction`: a reducer picks a circular
mean from that suffix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AIFS",
    "ECMWF",
    "PARAMETERS",
    "EcmwfParameter",
    "Parameter",
    "coord_attrs",
    "level_attrs",
    "variable_attrs",
]


@dataclass(frozen=True)
class Parameter:
    """One GRIB2 parameter: its (discipline, category, number) and its CF description."""

    code: tuple[int, int, int]
    units: str
    long_name: str
    standard_name: str | None = None


def _p(code: str, units: str, long_name: str, standard_name: str | None = None) -> Parameter:
    d, c, n = (int(x) for x in code.split("/"))
    return Parameter((d, c, n), units, long_name, standard_name)


# By element short name (wgrib2's spelling in the .idx). Codes >= 192 are NCEP local entries.
# fmt: off
PARAMETERS: dict[str, Parameter] = {
    # discipline 0, meteorological
    "TMP": _p("0/0/0", "K", "temperature", "air_temperature"),
    "TMAX": _p("0/0/4", "K", "maximum temperature", "air_temperature"),
    "TMIN": _p("0/0/5", "K", "minimum temperature", "air_temperature"),
    "DPT": _p("0/0/6", "K", "dew point temperature", "dew_point_temperature"),
    "SPFH": _p("0/1/0", "kg kg-1", "specific humidity", "specific_humidity"),
    "RH": _p("0/1/1", "%", "relative humidity", "relative_humidity"),
    "PWAT": _p("0/1/3", "kg m-2", "precipitable water", "atmosphere_mass_content_of_water_vapor"),
    "PRATE": _p("0/1/7", "kg m-2 s-1", "precipitation rate", "precipitation_flux"),
    "TPRATE": _p("0/1/52", "kg m-2 s-1", "total precipitation rate", "precipitation_flux"),
    "APCP": _p("0/1/8", "kg m-2", "total precipitation", "precipitation_amount"),
    "CRAIN": _p("0/1/192", "1", "categorical rain (1: yes, 0: no)"),
    "WDIR": _p("0/2/0", "degree", "wind direction (from which blowing)", "wind_from_direction"),
    "WIND": _p("0/2/1", "m s-1", "wind speed", "wind_speed"),
    "UGRD": _p("0/2/2", "m s-1", "u-component of wind", "eastward_wind"),
    "VGRD": _p("0/2/3", "m s-1", "v-component of wind", "northward_wind"),
    "GUST": _p("0/2/22", "m s-1", "wind speed (gust)", "wind_speed_of_gust"),
    "PRES": _p("0/3/0", "Pa", "pressure", "air_pressure"),
    "PRMSL": _p("0/3/1", "Pa", "pressure reduced to mean sea level", "air_pressure_at_mean_sea_level"),
    "HGT": _p("0/3/5", "m", "geopotential height", "geopotential_height"),
    "DSWRF": _p("0/4/192", "W m-2", "downward short-wave radiation flux"),
    "DLWRF": _p("0/5/192", "W m-2", "downward long-wave radiation flux"),
    "TCDC": _p("0/6/1", "%", "total cloud cover", "cloud_area_fraction"),
    "CAPE": _p("0/7/6", "J kg-1", "convective available potential energy", "atmosphere_convective_available_potential_energy"),
    "REFC": _p("0/16/196", "dBZ", "composite (column maximum) radar reflectivity"),
    "VIS": _p("0/19/0", "m", "visibility", "visibility_in_air"),
    # discipline 10, oceanographic: waves
    "HTSGW": _p("10/0/3", "m", "significant height of combined wind waves and swell", "sea_surface_wave_significant_height"),
    "WVDIR": _p("10/0/4", "degree", "direction of wind waves", "sea_surface_wind_wave_from_direction"),
    "WVHGT": _p("10/0/5", "m", "significant height of wind waves", "sea_surface_wind_wave_significant_height"),
    "WVPER": _p("10/0/6", "s", "mean period of wind waves", "sea_surface_wind_wave_mean_period"),
    "SWDIR": _p("10/0/7", "degree", "direction of swell waves", "sea_surface_swell_wave_from_direction"),
    "SWELL": _p("10/0/8", "m", "significant height of swell waves", "sea_surface_swell_wave_significant_height"),
    "SWPER": _p("10/0/9", "s", "mean period of swell waves", "sea_surface_swell_wave_mean_period"),
    # the primary wave's direction is the spectral peak's; CF's `_at_variance_spectral_density_
    # maximum` name would hide the `_direction` suffix a circular reducer keys on
    "DIRPW": _p("10/0/10", "degree", "primary wave direction", "sea_surface_wave_from_direction"),
    "PERPW": _p("10/0/11", "s", "primary wave mean period", "sea_surface_wave_period_at_variance_spectral_density_maximum"),
    "DIRSW": _p("10/0/12", "degree", "secondary wave direction", "sea_surface_secondary_swell_wave_from_direction"),
    "PERSW": _p("10/0/13", "s", "secondary wave mean period", "sea_surface_secondary_swell_wave_mean_period"),
    "WWSDIR": _p("10/0/14", "degree", "direction of combined wind waves and swell", "sea_surface_wave_from_direction"),
    "MWSPER": _p("10/0/15", "s", "mean period of combined wind waves and swell", "sea_surface_wave_mean_period"),
}
# fmt: on


@dataclass(frozen=True)
class EcmwfParameter:
    """An ECMWF shortName as ECMWF's GRIB2 encodes it (parameter, fixed surface: code table 4.5
    with its value, or the `.index` line's levelist for pressure levels; a statistic runs from
    step 0) and as ecCodes describes it (`units` as ecCodes spells them)."""

    code: tuple[int, int, int]
    surface: int
    height: float | None
    units: str
    long_name: str
    standard_name: str | None = None
    step_type: str = "instant"
    local_table: int = 0


def _e(
    code: str, surface: int, height: float | None, units: str, long_name: str,
    standard_name: str | None = None, step_type: str = "instant", local_table: int = 0,
) -> EcmwfParameter:  # fmt: skip
    d, c, n = (int(x) for x in code.split("/"))
    return EcmwfParameter(
        (d, c, n), surface, height, units, long_name, standard_name, step_type, local_table
    )


# ECMWF's open data by shortName (IFS: MARS class "od"), from ecCodes' GRIB2 concepts for
# centre 98: total precipitation is a local entry (0/1/193, local table 1) in metres.
# fmt: off
ECMWF: dict[str, EcmwfParameter] = {
    "2t": _e("0/0/0", 103, 2.0, "K", "2 metre temperature", "air_temperature"),
    "2d": _e("0/0/6", 103, 2.0, "K", "2 metre dewpoint temperature", "dew_point_temperature"),
    "10u": _e("0/2/2", 103, 10.0, "m s**-1", "10 metre U wind component", "eastward_wind"),
    "10v": _e("0/2/3", 103, 10.0, "m s**-1", "10 metre V wind component", "northward_wind"),
    "100u": _e("0/2/2", 103, 100.0, "m s**-1", "100 metre U wind component", "eastward_wind"),
    "100v": _e("0/2/3", 103, 100.0, "m s**-1", "100 metre V wind component", "northward_wind"),
    "msl": _e("0/3/0", 101, None, "Pa", "mean sea level pressure", "air_pressure_at_mean_sea_level"),
    "sp": _e("0/3/0", 1, None, "Pa", "surface pressure", "surface_air_pressure"),
    "tp": _e("0/1/193", 1, None, "m", "total precipitation", "lwe_thickness_of_precipitation_amount", "accum", 1),
    "t": _e("0/0/0", 100, None, "K", "temperature", "air_temperature"),
    "u": _e("0/2/2", 100, None, "m s**-1", "U component of wind", "eastward_wind"),
    "v": _e("0/2/3", 100, None, "m s**-1", "V component of wind", "northward_wind"),
    "q": _e("0/1/0", 100, None, "kg kg**-1", "specific humidity", "specific_humidity"),
    "r": _e("0/1/1", 100, None, "%", "relative humidity", "relative_humidity"),
    "gh": _e("0/3/5", 100, None, "gpm", "geopotential height", "geopotential_height"),
}
# AIFS (MARS class "ai", under aifs-single/ from 2025-02-25): total precipitation is WMO's
# 0/1/52 accumulated, in kg m-2 (paramId 228228)
AIFS: dict[str, EcmwfParameter] = {
    **ECMWF,
    "tp": _e("0/1/52", 1, None, "kg m**-2", "total precipitation", "precipitation_amount", "accum"),
}
# fmt: on

# (element, index level) whose CF name is not the element's own: the field at that surface
AT_LEVEL: dict[tuple[str, str], str] = {
    ("PRES", "surface"): "surface_air_pressure",
    ("TMP", "surface"): "surface_temperature",
    ("DSWRF", "surface"): "surface_downwelling_shortwave_flux_in_air",
    ("DLWRF", "surface"): "surface_downwelling_longwave_flux_in_air",
}

# winds on a projected grid (HRRR's Lambert conformal) are relative to the grid's axes
GRID_RELATIVE = {"UGRD": "x_wind", "VGRD": "y_wind"}

CELL_METHODS = {"accum": "sum", "avg": "mean", "max": "maximum", "min": "minimum"}
STATISTIC = {"accum": "accumulation", "avg": "average", "max": "maximum", "min": "minimum"}

_LOCAL = re.compile(r"var discipline=(\d+) .*parmcat=(\d+) parm=(\d+)")


def variable_attrs(
    element: str,
    level: str,
    step_type: str = "instant",
    period_hours: int | None = None,
    *,
    grid_relative_winds: bool = False,
    ecmwf: EcmwfParameter | None = None,
    short_name: str | None = None,
) -> dict[str, Any]:
    """CF attributes of the field `element` at `level` (as the index spells them; a vertical
    group's `{level:g}` level names its coordinate instead). An element the table lacks still
    gets `short_name` and `long_name`, never a guessed unit. An ECMWF field (`ecmwf`, its
    entry of ECMWF/AIFS, `short_name` its shortName) is described as ecCodes describes it."""
    if ecmwf is not None:
        return _ecmwf_attrs(ecmwf, short_name or element, level, step_type, period_hours)
    p = PARAMETERS.get(element)
    local = _LOCAL.match(element)
    if p is not None:
        short, code, name = element, p.code, p.long_name
    elif local:  # wgrib2 spells a parameter it has no name for by its numbers
        code = tuple(int(x) for x in local.groups())
        short, name = "var{}_{}_{}".format(*code), "GRIB2 parameter {}/{}/{}".format(*code)
    else:
        short, code, name = element, None, element
    if "{level" not in level:
        name = f"{name}, {level}"
    if step_type in STATISTIC:
        what = STATISTIC[step_type]
        span = f"{period_hours} h {what}" if period_hours is not None else f"{what} since init"
        name = f"{name}, {span}"
    out: dict[str, Any] = {"short_name": short, "long_name": name}
    if code is not None:
        out["grib_parameter"] = "/".join(map(str, code))
    if p is None:
        return out
    out["units"] = p.units
    standard = AT_LEVEL.get((element, level), p.standard_name)
    if grid_relative_winds and element in GRID_RELATIVE:
        standard = GRID_RELATIVE[element]
        out["long_name"] = out["long_name"].replace("of wind", "of wind (grid-relative)", 1)
    if standard is not None:
        out["standard_name"] = standard
    if step_type in CELL_METHODS:
        out["cell_methods"] = f"time: {CELL_METHODS[step_type]}"
    return out


def _ecmwf_attrs(
    p: EcmwfParameter, short: str, level: str, step_type: str, period_hours: int | None
) -> dict[str, Any]:
    name = p.long_name
    if "{level" not in level and p.surface == 100:
        name = f"{name}, {level}"
    if step_type in STATISTIC:
        what = STATISTIC[step_type]
        span = f"{period_hours} h {what}" if period_hours is not None else f"{what} since init"
        name = f"{name}, {span}"
    out: dict[str, Any] = {
        "short_name": short,
        "long_name": name,
        "units": p.units,
        "grib_parameter": "/".join(map(str, p.code)),
        "grib_centre": "ecmf",
    }
    if p.standard_name is not None:
        out["standard_name"] = p.standard_name
    if step_type in CELL_METHODS:
        out["cell_methods"] = f"time: {CELL_METHODS[step_type]}"
    return out


def level_attrs(spellings: set[str]) -> dict[str, Any]:
    """Attributes of the `level` coordinate from how its variables' index levels are spelled:
    pressure in hPa when every one is ``{level:g} mb``, else a plain number naming the level."""
    if spellings == {"{level:g} mb"}:
        return {
            "units": "hPa",
            "long_name": "pressure level",
            "standard_name": "air_pressure",
            "positive": "down",
        }
    shown = " | ".join(sorted(s.replace("{level:g}", "N") for s in spellings))
    return {"units": "1", "long_name": f"level N of {shown}"}


def coord_attrs(dim: str) -> dict[str, Any]:
    """CF attributes of the coordinates the templates use (time units come with the encoding)."""
    return dict(COORDS.get(dim, {}))


# fmt: off
COORDS: dict[str, dict[str, Any]] = {
    "init_time": {"standard_name": "forecast_reference_time", "long_name": "forecast initialization time"},
    "lead_time": {"standard_name": "forecast_period", "long_name": "forecast lead time"},
    "valid_time": {"standard_name": "time", "long_name": "valid time (init_time + lead_time)"},
    "time": {"standard_name": "time", "long_name": "valid time (analysis)"},
    "latitude": {"units": "degrees_north", "standard_name": "latitude", "long_name": "latitude"},
    "longitude": {"units": "degrees_east", "standard_name": "longitude", "long_name": "longitude"},
    "ensemble_member": {"long_name": "ensemble member ('mean': ensemble mean)"},
    "x": {"units": "m", "standard_name": "projection_x_coordinate", "long_name": "x coordinate of projection"},
    "y": {"units": "m", "standard_name": "projection_y_coordinate", "long_name": "y coordinate of projection"},
}
# fmt: on
