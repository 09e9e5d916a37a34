"""GRIB2 files as ECMWF's open data writes them, made with ecCodes (an encoder nobody here
wrote): centre ecmf with its local section (MARS class, type, stream), CCSDS packing, the
regular grid scanned from latitude 90 and longitude 180, one message per field, and the
`.index` sidecar with each message's real `_offset` and `_length`, its keys as ECMWF spells
them (`step` the end step, also for accumulations). Values are seeded noise, so a decode that
reads the wrong message, the wrong order or the wrong scale cannot pass.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

eccodes = __import__("pytest").importorskip("eccodes")

# shortName -> (paramId, levtype); AIFS's tp is WMO's 0/1/52 (paramId 228228)
PARAM_IDS = {
    "2t": 167, "10u": 165, "10v": 166, "msl": 151, "tp": 228,
    "t": 130, "u": 131, "v": 132, "q": 133, "r": 157, "gh": 156,
}  # fmt: skip
PRESSURE = ("t", "u", "v", "q", "r", "gh")  # on pressure levels
AIFS_TP = 228228


@dataclass(frozen=True)
class Field:
    short_name: str
    level: int | None = None  # hPa, for the PRESSURE fields


@dataclass(frozen=True)
class Grid:
    """A regular grid as ECMWF scans it: 90 -> -90, first longitude 180 (= -180)."""

    ni: int = 16
    nj: int = 9

    @property
    def latitude(self) -> np.ndarray:
        return np.linspace(90.0, -90.0, self.nj)

    @property
    def longitude(self) -> np.ndarray:
        return -180.0 + (360.0 / self.ni) * np.arange(self.ni)


def values(f: Field, init: datetime, step: int, grid: Grid) -> np.ndarray:
    """Seeded noise around a plausible value (zeros for tp at step 0, as ECMWF publishes)."""
    if f.short_name == "tp" and step == 0:
        return np.zeros((grid.nj, grid.ni))
    if grid.ni * grid.nj > 100_000:  # a full-size grid: smooth, so CCSDS keeps files small
        lat = np.linspace(90.0, -90.0, grid.nj)[:, None]
        wave = np.sin(np.arange(grid.ni) / 50.0 + (f.level or 0) + step)[None, :]
        scale = 0.001 if f.short_name == "tp" else 10.0
        return scale * (30 + np.cos(np.deg2rad(lat)) * wave) + 0.01 * step
    seed = zlib.crc32(repr((f.short_name, f.level, init.isoformat(), step)).encode())
    noise = np.random.default_rng(seed).standard_normal((grid.nj, grid.ni))
    base, spread = {
        "2t": (288.0, 10.0),
        "10u": (0.0, 5.0),
        "10v": (0.0, 5.0),
        "msl": (101325.0, 800.0),
        "tp": (0.004 * step, 0.002),
        "t": (250.0 + 0.03 * (f.level or 0), 8.0),
        "u": (0.0, 10.0),
        "v": (0.0, 10.0),
        "q": (0.005, 0.002),
        "r": (60.0, 20.0),
        "gh": (5000.0, 100.0),
    }[f.short_name]
    out = base + spread * noise
    return np.abs(out) if f.short_name in ("tp", "q") else out


def message(
    f: Field,
    init: datetime,
    step: int,
    grid: Grid,
    *,
    aifs: bool = False,
    packing: str = "grid_ccsds",
) -> bytes:
    """One field as ECMWF encodes it."""
    h = eccodes.codes_grib_new_from_samples("GRIB2")
    try:
        for key, value in {
            "centre": 98, "subCentre": 0, "tablesVersion": 34, "significanceOfReferenceTime": 1,
            "productionStatusOfProcessedData": 0, "typeOfProcessedData": 1,
            "dataDate": int(f"{init:%Y%m%d}"), "dataTime": init.hour * 100,
            "setLocalDefinition": 1, "localDefinitionNumber": 1,
        }.items():  # fmt: skip
            eccodes.codes_set_long(h, key, value)
        for key, text in {
            "marsClass": "ai" if aifs else "od", "marsType": "fc", "marsStream": "oper",
            "experimentVersionNumber": "0001",
        }.items():  # fmt: skip
            eccodes.codes_set_string(h, key, text)
        eccodes.codes_set_long(h, "Ni", grid.ni)
        eccodes.codes_set_long(h, "Nj", grid.nj)
        eccodes.codes_set(h, "latitudeOfFirstGridPointInDegrees", 90.0)
        eccodes.codes_set(h, "longitudeOfFirstGridPointInDegrees", 180.0)
        eccodes.codes_set(h, "latitudeOfLastGridPointInDegrees", -90.0)
        eccodes.codes_set(h, "longitudeOfLastGridPointInDegrees", 180.0 - 360.0 / grid.ni)
        eccodes.codes_set(h, "iDirectionIncrementInDegrees", 360.0 / grid.ni)
        eccodes.codes_set(h, "jDirectionIncrementInDegrees", 180.0 / (grid.nj - 1))
        eccodes.codes_set_long(h, "scanningMode", 0)
        if f.short_name == "tp":  # accumulated from step 0: template 4.8 before the paramId
            eccodes.codes_set_long(h, "productDefinitionTemplateNumber", 8)
            eccodes.codes_set_long(h, "paramId", AIFS_TP if aifs else PARAM_IDS["tp"])
            eccodes.codes_set_long(h, "typeOfStatisticalProcessing", 1)
            eccodes.codes_set_string(h, "stepType", "accum")
            eccodes.codes_set_long(h, "startStep", 0)
            eccodes.codes_set_long(h, "endStep", step)
        else:
            eccodes.codes_set_long(h, "productDefinitionTemplateNumber", 0)
            eccodes.codes_set_long(h, "paramId", PARAM_IDS[f.short_name])
            if f.level is not None:
                eccodes.codes_set_string(h, "typeOfLevel", "isobaricInhPa")
                eccodes.codes_set_long(h, "level", f.level)
            eccodes.codes_set_long(h, "step", step)
        eccodes.codes_set_string(h, "packingType", packing)
        eccodes.codes_set_long(h, "bitsPerValue", 16)
        eccodes.codes_set_values(h, values(f, init, step, grid).ravel())
        return eccodes.codes_get_message(h)
    finally:
        eccodes.codes_release(h)


def index_line(msg: bytes, offset: int) -> str:
    """The message's `.index` line, its keys read back by ecCodes, in ECMWF's order."""
    h = eccodes.codes_new_from_message(msg)
    try:
        get = lambda key: eccodes.codes_get_string(h, key)  # noqa: E731
        line: dict[str, object] = {
            "domain": "g", "date": get("dataDate"), "time": f"{eccodes.codes_get_long(h, 'dataTime'):04d}",
            "expver": get("experimentVersionNumber"), "class": get("marsClass"), "type": get("marsType"),
            "stream": get("marsStream"),
        }  # fmt: skip
        step = str(eccodes.codes_get_long(h, "endStep"))
        if get("typeOfLevel") == "isobaricInhPa":
            line |= {
                "step": step,
                "levelist": str(eccodes.codes_get_long(h, "level")),
                "levtype": "pl",
            }
        elif get("stepType") == "instant":
            line |= {"step": step, "levtype": "sfc"}
        else:  # ECMWF lists levtype first for statistics
            line |= {"levtype": "sfc", "step": step}
        line |= {"param": get("shortName"), "_offset": offset, "_length": len(msg)}
        return json.dumps(line)
    finally:
        eccodes.codes_release(h)


def write(
    root: Path, key: str, fields: list[Field], init: datetime, step: int, grid: Grid,
    *, aifs: bool = False, sidecar: bool = True,
) -> Path:  # fmt: skip
    """One file of `fields` at `root/key`, its `.index` beside it (the extension replaced)."""
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    messages = [message(f, init, step, grid, aifs=aifs) for f in fields]
    path.write_bytes(b"".join(messages))
    if sidecar:
        offsets = np.cumsum([0, *map(len, messages)])[:-1]
        lines = [index_line(m, int(o)) for m, o in zip(messages, offsets, strict=True)]
        path.with_suffix(".index").write_text("\n".join(lines) + "\n")
    return path


def lonlat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The grid of a file's first message as ecCodes' point iterator gives it."""
    with path.open("rb") as fh:
        h = eccodes.codes_grib_new_from_file(fh)
        try:
            nj, ni = eccodes.codes_get(h, "Nj"), eccodes.codes_get(h, "Ni")
            lons = eccodes.codes_get_array(h, "longitudes").reshape(nj, ni)
            lats = eccodes.codes_get_array(h, "latitudes").reshape(nj, ni)
            return lons[0], lats[:, 0]
        finally:
            eccodes.codes_release(h)


def decoded(path: Path) -> dict[tuple[str, int | None, int], np.ndarray]:
    """ecCodes' decode of every message of a file, by (shortName, level or None, end step)."""
    out = {}
    with path.open("rb") as fh:
        while (h := eccodes.codes_grib_new_from_file(fh)) is not None:
            try:
                name = eccodes.codes_get(h, "shortName")
                level = eccodes.codes_get(h, "level") if name in PRESSURE else None
                nj, ni = eccodes.codes_get(h, "Nj"), eccodes.codes_get(h, "Ni")
                step = eccodes.codes_get(h, "endStep")
                out[(name, level, step)] = eccodes.codes_get_values(h).reshape(nj, ni)
            finally:
                eccodes.codes_release(h)
    return out
