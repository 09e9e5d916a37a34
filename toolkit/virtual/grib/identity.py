"""What a GRIB2 message is, read from its own sections, spelled as a wgrib2 inventory line.

A dataset names its variables in the wgrib2 inventory spelling (`TMP:2 m above ground`,
`TMP:850 mb`, `var discipline=0 center=98 local_table=0 parmcat=1 parm=193`, windows such as
`0-6 hour acc fcst`). Files without a sidecar (`index="scan"`, `index="whole"`) and ECMWF's
`.index` (`index="ecmwf"`) are brought to that same spelling, so one definition matches a file
with or without its sidecar and the catalog's match stays one dictionary lookup per record.

Read from the message: section 0 (discipline), section 1 (centre, local table, reference
time), section 4 (category, number, first and second fixed surfaces, forecast time and, for
statistics, the processing and its time range). Pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from toolkit.virtual.grib.errors import InvalidMessageError
from toolkit.virtual.grib.index import Inventory, LineFields, RawParam, Window
from toolkit.virtual.grib.message import INDICATOR_SIZE, parse_indicator
from toolkit.virtual.grib_params import PARAMETERS

__all__ = [
    "HEAD_BYTES",
    "Identity",
    "element_of",
    "identify",
    "inventory_of",
    "level_of",
    "sections_end",
]

HEAD_BYTES = 4096  # what one ranged read takes of a message: sections 0-4 almost always fit

ELEMENTS: dict[tuple[int, int, int], str] = {p.code: name for name, p in PARAMETERS.items()}

# Code table 4.4: the unit of a time range
_TIME_UNITS = {
    0: timedelta(minutes=1),
    1: timedelta(hours=1),
    2: timedelta(days=1),
    10: timedelta(hours=3),
    11: timedelta(hours=6),
    12: timedelta(hours=12),
    13: timedelta(seconds=1),
}
# Code table 4.10: statistical processing, as the catalog's step types
_STATISTICS = {0: "avg", 1: "accum", 2: "max", 3: "min"}
# Product definition templates 4.0-4.15 share octets 10-34 (parameter, times, surfaces); where
# the statistical time range's first entry starts (octet, 1-based, within section 4) in the
# ones that have one
_STAT_RANGE_AT = {8: 47, 9: 60, 10: 48, 11: 50, 12: 49}
_TEMPLATES = range(16)

# Code table 4.5 as wgrib2 prints single surfaces; {v} is the value in the unit wgrib2 uses
_SURFACES = {
    1: "surface",
    2: "cloud base",
    3: "cloud top",
    4: "0C isotherm",
    6: "max wind",
    7: "tropopause",
    8: "top of atmosphere",
    10: "entire atmosphere",
    101: "mean sea level",
    200: "entire atmosphere (considered as a single layer)",
}
_VALUED = {
    100: "{v:g} mb",  # Pa, printed in hPa
    102: "{v:g} m above mean sea level",
    103: "{v:g} m above ground",
    104: "{v:g} sigma level",
    105: "{v:g} hybrid level",
    106: "{v:g} m below ground",
    107: "{v:g} K isentropic level",
    108: "{v:g} mb above ground",
    151: "{v:g} soil level",
    109: "PV={v:g} (Km^2/kg/s) surface",
    241: "{v:g} in sequence",
}
_LAYERS = {
    100: "{a:g}-{b:g} mb",
    103: "{a:g}-{b:g} m above ground",
    106: "{a:g}-{b:g} m below ground",
    108: "{a:g}-{b:g} mb above ground",
}


@dataclass(frozen=True)
class Identity:
    """One field as its sections describe it."""

    discipline: int
    centre: int
    local_table: int
    category: int
    number: int
    surface: tuple[int, float | None]  # (type, value in the surface's SI unit)
    second: tuple[int, float | None] | None  # a layer's other surface
    reference: datetime
    window: Window | None  # None: a product template not read here (`number` holds it)

    @property
    def element(self) -> str:
        if self.window is None:  # listed so, it matches no variable and refuses no file
            return f"product template 4.{self.number}"
        return element_of(
            self.discipline, self.category, self.number, self.centre, self.local_table
        )

    @property
    def level(self) -> str:
        return "" if self.window is None else level_of(self.surface, self.second)

    @property
    def window_text(self) -> str:
        return "" if self.window is None else self.window.render()


def element_of(discipline: int, category: int, number: int, centre: int, local_table: int) -> str:
    """wgrib2's element: its name where the shared table has one, else the numbers (the centre
    and its local table too for a local entry, category or number >= 192)."""
    name = ELEMENTS.get((discipline, category, number))
    if name is not None and category < 192 and number < 192:
        return name
    if category >= 192 or number >= 192:
        if name is not None and centre == 7:  # NCEP's own local entries are in the table
            return name
        return RawParam(discipline, category, number, centre, local_table).element()
    return RawParam(discipline, category, number).element()


def level_of(surface: tuple[int, float | None], second: tuple[int, float | None] | None) -> str:
    """wgrib2's level text of a surface, or a layer between two of the same type."""
    kind, value = surface
    if second is not None and second[0] == kind and kind in _LAYERS and value is not None:
        a, b = (_in_print_unit(kind, v) for v in (value, second[1]))
        return _LAYERS[kind].format(a=a, b=b)
    if kind in _SURFACES:
        return _SURFACES[kind]
    if kind in _VALUED and value is not None:
        return _VALUED[kind].format(v=_in_print_unit(kind, value))
    return f"level type {kind}" + ("" if value is None else f" value {value:g}")


def _in_print_unit(kind: int, value: float | None) -> float:
    if value is None:
        return float("nan")
    v = value / 100 if kind in (100, 108) else value  # pressures print in hPa
    return round(v, 6)


def sections_end(head: bytes, url: str = "<bytes>", offset: int = 0) -> int:
    """How many bytes from the message start sections 0-4 take (what `identify` needs)."""
    pos = INDICATOR_SIZE
    while True:
        if pos + 5 > len(head):
            return pos + 5 + 1  # at least this much more to see the next section's header
        (length,) = struct.unpack(">I", head[pos : pos + 4])
        number = head[pos + 4]
        if length < 5 or not 1 <= number <= 7:
            raise InvalidMessageError(
                url, f"message at offset {offset}: bad section {number} of length {length}"
            )
        if number == 4:
            return pos + length
        pos += length


def identify(head: bytes, url: str = "<bytes>", offset: int = 0) -> Identity:
    """The field at the start of `head` (a message's first bytes, through its section 4)."""
    ind = parse_indicator(head[:INDICATOR_SIZE], url, offset)
    found: dict[int, bytes] = {}
    pos = INDICATOR_SIZE
    while 4 not in found:
        if pos + 5 > len(head):
            raise InvalidMessageError(url, f"message at offset {offset}: sections 1-4 not read")
        (length,) = struct.unpack(">I", head[pos : pos + 4])
        number = head[pos + 4]
        if length < 5 or not 1 <= number <= 7 or pos + length > len(head):
            raise InvalidMessageError(
                url, f"message at offset {offset}: bad section {number} of length {length}"
            )
        found.setdefault(number, head[pos : pos + length])
        pos += length
    if 1 not in found:
        raise InvalidMessageError(url, f"message at offset {offset} has no section 1")
    s1, s4 = found[1], found[4]
    centre = struct.unpack(">H", s1[5:7])[0]
    local_table = s1[10]
    year, month, day, hour, minute, second = struct.unpack(">HBBBBB", s1[12:19])
    reference = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    template = struct.unpack(">H", s4[7:9])[0]
    if template not in _TEMPLATES:
        return Identity(
            ind.discipline, centre, local_table, -1, template, (255, None), None, reference, None
        )
    category, number = s4[9], s4[10]
    unit = _unit(s4[17], url, offset)
    start = struct.unpack(">I", s4[18:22])[0] * unit
    surface = (s4[22], _scaled(s4[23], s4[24:28]))
    second_kind = s4[28]
    second_surface = None if second_kind == 255 else (second_kind, _scaled(s4[29], s4[30:34]))
    at = _STAT_RANGE_AT.get(template)
    if at is None:
        window = Window.instant(start)
    else:
        stat = s4[at - 1]
        span = struct.unpack(">I", s4[at + 2 : at + 6])[0] * _unit(s4[at + 1], url, offset)
        step_type = _STATISTICS.get(stat)
        if step_type is None:
            raise InvalidMessageError(
                url, f"message at offset {offset}: statistical processing {stat} is not read here"
            )
        window = Window(step_type, start, start + span)
    return Identity(
        ind.discipline,
        centre,
        local_table,
        category,
        number,
        surface,
        second_surface,
        reference,
        window,
    )


def _unit(code: int, url: str, offset: int) -> timedelta:
    unit = _TIME_UNITS.get(code)
    if unit is None:
        raise InvalidMessageError(url, f"message at offset {offset}: time unit {code} unknown")
    return unit


def _scaled(factor: int, value: bytes) -> float | None:
    """A fixed surface's value: sign-and-magnitude integers as GRIB2 writes them; all ones is
    missing."""
    if factor == 0xFF or value == b"\xff\xff\xff\xff":
        return None
    raw = int.from_bytes(value, "big")
    v = -(raw & 0x7FFFFFFF) if raw & 0x80000000 else raw
    f = -(factor & 0x7F) if factor & 0x80 else factor
    return v / 10**f if f >= 0 else v * 10 ** (-f)


def inventory_of(url: str, found: list[tuple[int, int, Identity]]) -> Inventory:
    """The messages a walk found (offset, length, identity), contiguous from the first, as an
    inventory with closed ranges: what a sidecar would have listed."""
    dates = [f"d={i.reference:%Y%m%d%H}" for _, _, i in found]
    columns = (
        [i.element for _, _, i in found],
        [i.level for _, _, i in found],
        [i.window_text for _, _, i in found],
        [""] * len(found),
    )
    return Inventory(
        url,
        list(range(1, len(found) + 1)),
        None,
        [o for o, _, _ in found],
        dates,
        {f"d={i.reference:%Y%m%d%H}": i.reference for _, _, i in found},
        LineFields(columns=columns),
        found[-1][1],
    )
