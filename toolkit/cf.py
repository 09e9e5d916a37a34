"""What an array's stored numbers mean under the CF conventions (pure): nodata and packing.

Every reader of level 0 (the pyramid's planner, the values its kernels pool, verify's metadata,
a repo's level 0) asks `decoding(name, dtype, fill_value, attrs)` once; nothing else reads
`_FillValue`, `missing_value`, `valid_min`/`valid_max`/`valid_range`, `scale_factor`,
`add_offset` or `_Unsigned`.

It reads a zarr v3 array the way xarray decodes one written by `to_zarr` (the CF `_FillValue`,
base64 for floats, and `missing_value` are nodata; `scale_factor`/`add_offset` unpack; zarr's
own `fill_value` is then only what a missing chunk reads as), plus what xarray leaves to its
user: values outside the CF valid range, and non-finite values. An array with no CF encoding
attribute keeps zarr's convention: its `fill_value` is nodata, unless CF `flag_values` declares
that value a class.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "ENCODING_ATTRS",
    "CFError",
    "Decoding",
    "circle",
    "crs_as_coords",
    "decoding",
    "direction",
    "fill_attr",
    "grid_mappings",
]

# the attributes that say how stored values encode the quantity: stale on a decoded output
ENCODING_ATTRS = (
    "_FillValue",
    "missing_value",
    "valid_min",
    "valid_max",
    "valid_range",
    "scale_factor",
    "add_offset",
    "_Unsigned",
)


class CFError(ValueError):
    """An attribute that CF readers cannot use: one line naming the array, the attribute, the fix."""


@dataclass(frozen=True)
class Decoding:
    """How to read one array's stored values.

    `dtype` is the dtype values are compared in (the stored one, or its `_Unsigned` view);
    `nodata` are stored values meaning "no data", `fill` the one a class map writes for them;
    the valid range bounds stored values when `range_stored`, else decoded ones."""

    dtype: str
    nodata: tuple[Any, ...] = ()
    fill: Any = None
    valid_min: float | None = None
    valid_max: float | None = None
    range_stored: bool = True
    scale: float | None = None
    offset: float | None = None
    view: str | None = None  # `_Unsigned`: the stored bytes are read as this dtype

    @property
    def packed(self) -> bool:
        """`scale_factor`/`add_offset`: the stored integers encode a quantity."""
        return self.scale is not None or self.offset is not None

    @property
    def masks(self) -> bool:
        """Some stored value can be nodata (a sentinel or a valid range)."""
        return bool(self.nodata) or self.valid_min is not None or self.valid_max is not None

    @property
    def quantity_dtype(self) -> str:
        """The dtype decoded values have: float64 when packed, else the stored dtype."""
        return "float64" if self.packed else self.dtype

    def describe(self) -> str:
        """One line for the plan's output: what is nodata, how values unpack."""
        parts = []
        if self.nodata:
            parts.append("nodata " + ", ".join(_show(v) for v in self.nodata))
        if np.dtype(self.dtype).kind == "f":
            parts.append("non-finite is nodata")
        if self.valid_min is not None or self.valid_max is not None:
            parts.append(f"valid {_show(self.valid_min)}..{_show(self.valid_max)}")
        if self.packed:
            parts.append(f"x {_show(self.scale or 1)} + {_show(self.offset or 0)}")
        if self.view:
            parts.append(f"read as {self.view}")
        return "; ".join(parts) or "every value valid"

    def stored(self, values: np.ndarray) -> np.ndarray:
        """The values as compared: stored, or viewed as `_Unsigned` says."""
        return values.view(self.view) if self.view else values

    def valid(self, values: np.ndarray) -> np.ndarray:
        """True where a stored value is data: not nodata, finite, inside the valid range."""
        v = self.stored(values)
        ok = np.ones(v.shape, dtype=bool)
        if v.dtype.kind == "f":
            ok &= np.isfinite(v)
        for nd in self.nodata:
            ok &= v != v.dtype.type(nd)
        if self.valid_min is not None or self.valid_max is not None:
            r = v if self.range_stored else self._unpack(v)
            if self.valid_min is not None:
                ok &= r >= self.valid_min
            if self.valid_max is not None:
                ok &= r <= self.valid_max
        return ok

    def decode(self, values: np.ndarray) -> np.ndarray:
        """Decoded floats, NaN where there is no data (a quantity's values)."""
        v = self.stored(values)
        out = self._unpack(v) if self.packed else v.astype(_float_of(v.dtype), copy=True)
        out[~self.valid(values)] = np.nan
        return out

    def classes(self, values: np.ndarray) -> np.ndarray:
        """Stored values with every kind of nodata written as `fill` (a class map's values)."""
        v = self.stored(values)
        bad = ~self.valid(values)
        if not bad.any():
            return v
        out = v.copy()
        out[bad] = v.dtype.type(self.fill)
        return out

    def _unpack(self, v: np.ndarray) -> np.ndarray:
        out = v.astype(np.float64)
        if self.scale is not None:
            out *= self.scale
        if self.offset is not None:
            out += self.offset
        return out


def _float_of(dtype: np.dtype) -> np.dtype:
    if dtype.kind == "f":
        return dtype
    return np.dtype(np.float32 if dtype.itemsize <= 2 else np.float64)


def _show(v: Any) -> str:
    return "-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def _number(name: str, attr: str, raw: Any, dtype: np.dtype) -> Any:
    """One attribute value as a number of `dtype`'s kind; xarray writes a float `_FillValue`
    of a zarr v3 array as base64 of a little-endian float64, zarr as "NaN"/"Infinity"."""
    value = raw
    if isinstance(raw, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if raw in special:
            value = special[raw]
        else:
            try:
                packed = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                packed = b""
            if len(packed) not in (4, 8):
                raise CFError(
                    f"array {name!r}: {attr} {raw!r} is neither a number nor a base64-encoded "
                    "float; write it as a number"
                )
            value = struct.unpack("<d" if len(packed) == 8 else "<f", packed)[0]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CFError(f"array {name!r}: {attr} {raw!r} is not a number; write it as a number")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if isinstance(value, float) and not value.is_integer():
            raise CFError(
                f"array {name!r}: {attr} {raw!r} is not an integer but the array is {dtype}; "
                "write it as one of the array's values"
            )
        if not info.min <= value <= info.max:
            raise CFError(
                f"array {name!r}: {attr} {raw!r} does not fit {dtype} "
                f"({info.min}..{info.max}); write it as a value the array can hold"
            )
        return int(value)
    return float(value)


def _numbers(name: str, attr: str, raw: Any, dtype: np.dtype) -> list[Any]:
    items = raw if isinstance(raw, list | tuple) else [raw]
    return [_number(name, attr, x, dtype) for x in items]


def _scalar(name: str, attr: str, raw: Any) -> float:
    if isinstance(raw, list | tuple) and len(raw) == 1:
        raw = raw[0]
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise CFError(f"array {name!r}: {attr} {raw!r} is not a finite number; write it as one")
    return float(raw)


def fill_attr(value: Any, dtype: Any) -> Any:
    """A `_FillValue` attribute as xarray writes it on a zarr v3 array (base64 for floats)."""
    if np.dtype(dtype).kind == "f":
        return base64.b64encode(struct.pack("<d", float(value))).decode()
    return int(value)


def decoding(name: str, dtype: Any, fill_value: Any, attrs: Mapping[str, Any]) -> Decoding:
    """How CF says to read the stored values of array `name` (dtype, zarr `fill_value`, attrs).

    Raises CFError naming the attribute that cannot be used."""
    base = np.dtype(dtype)
    view: str | None = None
    unsigned = str(attrs.get("_Unsigned", "")).lower()
    if base.kind in "iu" and unsigned in ("true", "false"):
        want = "u" if unsigned == "true" else "i"
        if base.kind != want:
            view = f"{want}{base.itemsize}"
    dt = np.dtype(view or base)

    def as_stored(attr: str) -> list[Any]:
        # nodata attributes hold stored values; written for the signed dtype, viewed unsigned
        values = _numbers(name, attr, attrs[attr], base)
        if view:
            values = [np.asarray(v, base).view(dt).item() for v in values]
        return values

    cf_attrs = [a for a in ENCODING_ATTRS if a in attrs]
    nodata: list[Any] = []
    if "_FillValue" in attrs:
        nodata += as_stored("_FillValue")
    if "missing_value" in attrs:
        nodata += as_stored("missing_value")
    if not cf_attrs and fill_value is not None:
        fv = fill_value.item() if hasattr(fill_value, "item") else fill_value
        usable = dt.kind in "iu" or (isinstance(fv, int | float) and math.isfinite(fv))
        if usable and not _names_a_class(attrs, float(fv)):  # zarr's fill is nodata
            nodata.append(int(fv) if dt.kind in "iu" else float(fv))
    nodata = [v for v in dict.fromkeys(nodata) if not (isinstance(v, float) and math.isnan(v))]

    scale = (
        _scalar(name, "scale_factor", attrs["scale_factor"]) if "scale_factor" in attrs else None
    )
    offset = _scalar(name, "add_offset", attrs["add_offset"]) if "add_offset" in attrs else None
    if scale == 0:
        raise CFError(
            f"array {name!r}: scale_factor 0 makes every value {offset or 0}; fix the attribute"
        )
    if (scale is not None or offset is not None) and dt.kind not in "iuf":
        raise CFError(f"array {name!r}: scale_factor/add_offset on {dt} values cannot unpack")

    lo = hi = None
    raw_bounds: list[Any] = []
    if "valid_range" in attrs:
        rng = attrs["valid_range"]
        if not isinstance(rng, list | tuple) or len(rng) != 2:
            raise CFError(
                f"array {name!r}: valid_range {rng!r} is not [min, max]; write two numbers"
            )
        lo, hi = (_scalar(name, "valid_range", x) for x in rng)
        raw_bounds += list(rng)
    if "valid_min" in attrs:
        lo = _scalar(name, "valid_min", attrs["valid_min"])
        raw_bounds.append(attrs["valid_min"])
    if "valid_max" in attrs:
        hi = _scalar(name, "valid_max", attrs["valid_max"])
        raw_bounds.append(attrs["valid_max"])
    if lo is not None and hi is not None and lo > hi:
        raise CFError(
            f"array {name!r}: valid range {lo:g}..{hi:g} is empty (min above max); "
            "fix valid_range/valid_min/valid_max"
        )
    # CF: a packed array's valid range is in the packed type (integers) or, written in the
    # unpacked type (floats), bounds the unpacked values
    packed = scale is not None or offset is not None
    range_stored = not packed or all(
        isinstance(b, int) and not isinstance(b, bool) for b in _flat(raw_bounds)
    )

    fill = nodata[0] if nodata else None
    if fill is None and dt.kind in "iu":  # what a class map writes where a window has no data
        fill = _outside(dt, lo if range_stored else None, hi if range_stored else None)
        if fill is None:
            fill = _unused(dt, attrs.get("flag_values"))
    return Decoding(
        dtype=dt.name,
        nodata=tuple(nodata),
        fill=fill,
        valid_min=lo,
        valid_max=hi,
        range_stored=range_stored,
        scale=scale,
        offset=offset,
        view=view,
    )


NODATA_MEANING = re.compile(r"^(no_?data|fill|missing)(_?value)?$", re.I)


def _names_a_class(attrs: Mapping[str, Any], value: float) -> bool:
    """CF `flag_values` declares `value` a class (one whose meaning is not "no data")."""
    flags = attrs.get("flag_values")
    if flags is None:
        return False
    values = [float(f) for f in np.atleast_1d(np.asarray(flags)).tolist()]
    if value not in values:
        return False
    meanings = str(attrs.get("flag_meanings", "")).split()
    meaning = meanings[values.index(value)] if len(meanings) == len(values) else ""
    return not NODATA_MEANING.match(meaning)


def _flat(xs: list[Any]) -> list[Any]:
    out: list[Any] = []
    for x in xs:
        out += list(x) if isinstance(x, list | tuple) else [x]
    return out


def _outside(dt: np.dtype, lo: float | None, hi: float | None) -> int | None:
    """An integer of `dt` outside the valid range: the nodata a class map writes when CF
    declares only a range."""
    info = np.iinfo(dt)
    if hi is not None and hi < info.max:
        return math.floor(hi) + 1
    if lo is not None and lo > info.min:
        return math.ceil(lo) - 1
    return None


def _unused(dt: np.dtype, flags: Any) -> int:
    """The largest integer of `dt` that names no declared class."""
    taken = {int(f) for f in np.atleast_1d(np.asarray(flags)).tolist()} if flags else set()
    v = int(np.iinfo(dt).max)
    while v in taken:
        v -= 1
    return v


RADIANS = ("rad", "radian", "radians")


def direction(attrs: Mapping[str, Any]) -> str | None:
    """The CF standard_name when it names a direction (`*_direction`: wind_from_direction,
    sea_surface_wave_from_direction, ...), else None. A float in degrees without such a name
    (a slope, a latitude) is no direction."""
    name = str(attrs.get("standard_name", ""))
    return name if name.endswith("_direction") else None


def circle(attrs: Mapping[str, Any]) -> tuple[float, float, float]:
    """(radians per unit, lowest value, period) of an angle: radians when `units` says so,
    else degrees; [-half, half) when the valid range starts below zero, else [0, period)."""
    rad = str(attrs.get("units", "")).strip().lower() in RADIANS
    period = 2 * math.pi if rad else 360.0
    lows = [attrs.get("valid_min"), *(attrs.get("valid_range") or [None])[:1]]
    low = min((float(v) for v in lows if isinstance(v, int | float)), default=0.0)
    return (1.0 if rad else math.pi / 180, -period / 2 if low < 0 else 0.0, period)


def grid_mappings(text: str) -> set[str]:
    """The variables a CF `grid_mapping` attribute names: "crs", or the extended form
    "crs: x y crs2: lat lon"."""
    if ":" not in text:
        return set(text.split()[:1])
    return {t[:-1] for t in text.split() if t.endswith(":")}


def crs_as_coords(ds: Any, decode_coords: Any = True) -> Any:
    """An xarray Dataset with its CF grid-mapping variables (named by a `grid_mapping`
    attribute, e.g. `spatial_ref`) as coordinates, as `decode_coords="all"` makes them:
    rioxarray reads a CRS and a transform only from a coordinate. `decode_coords=False`
    keeps the file's view."""
    if decode_coords is False:
        return ds
    named: set[str] = set()
    for v in ds.variables.values():
        named |= grid_mappings(str(v.attrs.get("grid_mapping", "")))
    return ds.set_coords(sorted(named & set(ds.data_vars)))
