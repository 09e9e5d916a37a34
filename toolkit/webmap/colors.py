"""How values become colours: a style from the variable's CF metadata, a lookup table from
matplotlib's colormaps, PNG bytes from Pillow. Pure: numbers in, bytes out.

A continuous variable is drawn with 256 colours between `vmin` and `vmax` (CF `valid_range`
or `valid_min`/`valid_max` when the data say them, else the 2nd..98th percentile of the
coarsest level, so one outlier does not wash the map out). A variable with `flag_values` and
`flag_meanings` is categorical: one colour per class and a legend of the meanings. Nodata
(NaN after CF decoding) is transparent.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Style", "legend", "paint", "png", "style_of"]

CONTINUOUS = "viridis"
CLASSES = "tab10"
OTHER_CLASS = (128, 128, 128, 255)  # a value no flag names


@dataclass(frozen=True)
class Style:
    """What a tile's pixels are painted with, and what the legend says."""

    colormap: str = CONTINUOUS
    vmin: float = 0.0
    vmax: float = 1.0
    units: str = ""
    label: str = ""
    classes: tuple[tuple[float, str], ...] = ()  # (flag value, meaning), when categorical
    lut: np.ndarray = field(default_factory=lambda: lookup(CONTINUOUS), repr=False, compare=False)

    @property
    def categorical(self) -> bool:
        return bool(self.classes)


def lookup(name: str, n: int = 256) -> np.ndarray:
    """(n, 4) uint8 RGBA of matplotlib's colormap `name`."""
    from matplotlib import colormaps

    try:
        cmap = colormaps[name]
    except KeyError:
        raise ValueError(
            f"unknown colormap {name!r}: use a matplotlib name such as viridis, magma, RdBu_r"
        ) from None
    return np.asarray(cmap(np.linspace(0.0, 1.0, n), bytes=True), dtype=np.uint8)


def class_colors(name: str, n: int) -> np.ndarray:
    """(n, 4) uint8 RGBA, one per class: a qualitative map's own first n colours, or n evenly
    spaced samples of a continuous one."""
    from matplotlib import colormaps

    lookup(name)  # the one-line refusal of an unknown name
    colors = getattr(colormaps[name], "colors", None)
    if colors is not None and len(colors) >= n:
        rgb = np.asarray(colors, dtype=np.float64)[:n, :3]
        return np.column_stack([np.rint(rgb * 255), np.full(n, 255)]).astype(np.uint8)
    return lookup(name, max(n, 2))[:n]


def _floats(v: Any) -> list[float]:
    if isinstance(v, str):
        return [float(t) for t in v.replace(",", " ").split()]
    return [float(t) for t in np.atleast_1d(np.asarray(v, dtype=np.float64))]


def style_of(
    attrs: Mapping[str, Any],
    sample: np.ndarray | None = None,
    colormap: str | None = None,
    value_range: tuple[float, float] | None = None,
) -> Style:
    """The style of a variable from its CF attributes; `sample` (decoded values, NaN for
    nodata) sets the range when neither the caller nor the attributes do."""
    units = str(attrs.get("units", ""))
    label = str(attrs.get("long_name") or attrs.get("standard_name") or "")
    meanings = str(attrs.get("flag_meanings", "")).split()
    if "flag_values" in attrs and meanings:
        values = _floats(attrs["flag_values"])
        if len(values) == len(meanings):
            name = colormap or (CLASSES if len(values) <= 10 else "tab20")
            lut = class_colors(name, len(values))
            return Style(name, min(values), max(values), units, label,
                         tuple(zip(values, meanings, strict=True)), lut)  # fmt: skip
    name = colormap or CONTINUOUS
    lo, hi = value_range or _range(attrs, sample)
    return Style(name, lo, hi, units, label, (), lookup(name))


def _range(attrs: Mapping[str, Any], sample: np.ndarray | None) -> tuple[float, float]:
    if "valid_range" in attrs:
        lo, hi = _floats(attrs["valid_range"])[:2]
        return lo, hi
    if "valid_min" in attrs and "valid_max" in attrs:
        return _floats(attrs["valid_min"])[0], _floats(attrs["valid_max"])[0]
    if sample is not None:
        v = np.asarray(sample, dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size:
            lo, hi = (float(q) for q in np.percentile(v, [2, 98]))
            return (lo, hi) if hi > lo else (lo - 0.5, lo + 0.5)
    return 0.0, 1.0


def paint(values: np.ndarray, style: Style, inside: np.ndarray | None = None) -> np.ndarray:
    """(h, w, 4) uint8 RGBA of `values`: transparent where NaN or outside the data."""
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v) if inside is None else inside & np.isfinite(v)
    if style.categorical:
        out = np.empty((*v.shape, 4), np.uint8)
        out[...] = OTHER_CLASS
        for i, (flag, _) in enumerate(style.classes):
            out[v == flag] = style.lut[i]
        out[~ok] = 0
        return out
    n = len(style.lut) - 1
    t = np.where(ok, v - style.vmin, 0.0) * (n / ((style.vmax - style.vmin) or 1.0))
    idx = np.clip(np.rint(t, out=t), 0, n, out=t).astype(np.intp)
    idx[~ok] = n + 1  # the transparent row below
    return np.take(np.vstack([style.lut, np.zeros((1, 4), np.uint8)]), idx, axis=0)


def png(rgba: np.ndarray) -> bytes:
    """PNG bytes of an RGBA image (fast zlib level: tiles are made per request)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgba), "RGBA").save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def _hex(c: np.ndarray) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(x) for x in c[:3]))


def legend(style: Style, stops: int = 11) -> dict[str, Any]:
    """What the page draws: a gradient with its range and units, or one swatch per class."""
    if style.categorical:
        return {
            "kind": "classes",
            "units": style.units,
            "label": style.label,
            "classes": [
                {"value": v, "meaning": m, "color": _hex(style.lut[i])}
                for i, (v, m) in enumerate(style.classes)
            ],
        }
    picks = np.rint(np.linspace(0, len(style.lut) - 1, stops)).astype(int)
    return {
        "kind": "continuous",
        "units": style.units,
        "label": style.label,
        "colormap": style.colormap,
        "vmin": style.vmin,
        "vmax": style.vmax,
        "colors": [_hex(style.lut[i]) for i in picks],
    }
