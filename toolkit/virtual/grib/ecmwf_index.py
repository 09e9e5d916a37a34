"""ECMWF's `.index` sidecars -> an inventory in the wgrib2 spelling (pure: no I/O).

ECMWF's open data puts a `.index` beside each GRIB2 file: JSON lines, one per message, with
`_offset` and `_length` and the message's MARS keys (`param` as ECMWF's shortName, `levtype`,
`levelist`, `step`, `date`, `time`, ...). Each line is read into the field it names (the
shortName's GRIB2 parameter and fixed surface, as ECMWF encodes them: `grib_params.ECMWF`,
`grib_params.AIFS` for MARS class "ai") and spelled
as `identity` spells a message read from its own sections, so a dataset's variables match the
same records whether its files are found through `.index`, `scan` or `whole`. A parameter the
table lacks keeps its ECMWF name (`param=NAME`), which no wgrib2 spelling matches.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime, timedelta

from toolkit.virtual.grib.errors import InvalidIndexError
from toolkit.virtual.grib.identity import element_of, level_of
from toolkit.virtual.grib.index import Inventory, LineFields, Window
from toolkit.virtual.grib_params import AIFS, ECMWF, EcmwfParameter

__all__ = ["scan_ecmwf_index", "spell"]

ECMF = 98  # ECMWF's centre number
TABLES = {"ai": AIFS}  # by the line's MARS class; ECMWF's (IFS, "od") otherwise

_REQUIRED = ("_offset", "_length", "param", "levtype", "step", "date", "time")


def spell(line: dict[str, object], url: str = "<index>", n: int = 1) -> tuple[str, str, str]:
    """(element, level, window) of one `.index` line, as wgrib2 would list its message."""
    key = tuple(str(line.get(k, "")) for k in ("class", "param", "levtype", "levelist", "step"))
    try:
        return _spelled(key)  # type: ignore[arg-type]
    except ValueError as err:
        raise InvalidIndexError(url, f"line {n}: {err}") from None


@functools.lru_cache(maxsize=4096)
def _spelled(key: tuple[str, str, str, str, str]) -> tuple[str, str, str]:
    """The spelling of a line's keys: the same few hundred for every file of a dataset."""
    mars_class, name, levtype, levelist, step = key
    param: EcmwfParameter | None = TABLES.get(mars_class, ECMWF).get(name)
    try:
        start, _, end = step.partition("-")
        a = timedelta(hours=int(start))
        b = timedelta(hours=int(end)) if end else a
    except ValueError:
        raise ValueError(f"step {step!r} is not hours or a range") from None
    if param is None:
        return f"param={name}", f"levtype={levtype}", Window.instant(b).render()
    value: float | None = param.height
    if param.surface == 100:  # pressure levels, in hPa in the index and Pa on the surface
        try:
            value = float(levelist) * 100
        except ValueError:
            raise ValueError("a pressure level needs levelist") from None
    element = element_of(*param.code, ECMF, param.local_table)
    level = level_of((param.surface, value), None)
    window = (
        Window.instant(b)
        if param.step_type == "instant"
        else Window(param.step_type, a if end else timedelta(0), b)
    )
    return element, level, window.render()


def scan_ecmwf_index(text: str, url: str = "<index>") -> Inventory:
    """Validate a `.index` (JSON per line, offsets increasing, ranges inside each other's gaps)
    and keep it as an inventory whose ranges are the sidecar's own `_offset` and `_length`."""
    numbers: list[int] = []
    offsets: list[int] = []
    date_texts: list[str] = []
    elements: list[str] = []
    levels: list[str] = []
    windows: list[str] = []
    last_end = 0
    last_length = None
    for n, line in _lines(text, url):
        if not isinstance(line, dict) or any(k not in line for k in _REQUIRED):
            missing = [k for k in _REQUIRED if not isinstance(line, dict) or k not in line]
            raise InvalidIndexError(url, f"line {n}: lacks {', '.join(missing)}")
        offset, length = line["_offset"], line["_length"]
        if not (isinstance(offset, int) and isinstance(length, int)) or length <= 0:
            raise InvalidIndexError(url, f"line {n}: _offset and _length must be whole bytes")
        if offset < last_end:
            raise InvalidIndexError(
                url, f"line {n}: message at {offset} overlaps the one before (ends at {last_end})"
            )
        if offsets and offset != last_end:
            raise InvalidIndexError(
                url, f"line {n}: message at {offset}, the one before ends at {last_end}"
            )
        element, level, window = spell(line, url, n)
        numbers.append(len(numbers) + 1)
        offsets.append(offset)
        date_texts.append(f"d={line['date']}{str(line['time']).zfill(4)[:2]}")
        elements.append(element)
        levels.append(level)
        windows.append(window)
        last_end, last_length = offset + length, length
    if not offsets:
        raise InvalidIndexError(url, "no records")
    dates = {d: _date(d, url) for d in dict.fromkeys(date_texts)}
    fields = LineFields(columns=(elements, levels, windows, [""] * len(offsets)))
    return Inventory(url, numbers, None, offsets, date_texts, dates, fields, last_length)


def _lines(text: str, url: str) -> list[tuple[int, object]]:
    """(line number, parsed JSON) of the non-blank lines: one parse for the whole sidecar
    (a C call), line by line only to name the line that is not JSON."""
    numbered = [(n, raw) for n, raw in enumerate(text.splitlines(), 1) if raw.strip()]
    try:
        parsed = json.loads("[" + ",".join(raw for _, raw in numbered) + "]")
        if len(parsed) == len(numbered):
            return [(n, line) for (n, _), line in zip(numbered, parsed, strict=True)]
    except json.JSONDecodeError:
        pass
    out = []
    for n, raw in numbered:
        try:
            out.append((n, json.loads(raw)))
        except json.JSONDecodeError as err:
            raise InvalidIndexError(url, f"line {n}: not JSON ({err.msg})") from None
    return out


def _date(text: str, url: str) -> datetime:
    try:
        return datetime.strptime(text, "d=%Y%m%d%H").replace(tzinfo=UTC)
    except ValueError:
        raise InvalidIndexError(
            url, f"date and time {text[2:]!r} are not YYYYMMDD and HHMM"
        ) from None
