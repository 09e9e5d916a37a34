"""A plain numpy reference for pyramid levels, sharing no code with the builder's kernels.

`reduce_level0(block, fill, method, factor)` pools a level-0 block `[T, B, H, W]` straight to a
level (no cascade) with the joint band mask: a pixel counts only where every band is valid.
The verifier compares sampled tiles of each level with it, so a kernel bug, a cascade bug or a
mask bug is seen by code that did not make it.

What "exact" means, checked as stated: counts, mode (ties to the smallest label), min and max
are bitwise equal to this reference; a float mean at level k is within `mean_tolerance` (k ulps
of the window's largest magnitude) of the float64 mean of its level-0 window, each cascade step
rounding once to the output dtype; an integer sum is exact, a float sum within the same bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "angle_gap",
    "angle_units",
    "class_counts",
    "decoded_level0",
    "mean_tolerance",
    "reduce_level0",
]

MODE_CELLS = 1 << 24  # windows x labels counted at once by the mode reference
_CF_KEYS = ("_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned")
_RANGE_KEYS = ("valid_range", "valid_min", "valid_max")
_NODATA_WORDS = {"nodata", "nodatavalue", "fill", "fillvalue", "missing", "missingvalue"}


def decoded_level0(raw: np.ndarray, attrs: dict[str, Any], zarr_fill: Any) -> np.ndarray:
    """Level-0 values as float64, NaN where there is no data: xarray's own CF decoding
    (`_FillValue`, `missing_value`, `scale_factor`/`add_offset`, `_Unsigned`), then the CF valid
    range and non-finite values, which xarray leaves to its user. With no CF attribute, zarr's
    fill_value is nodata unless `flag_values` names it a class. Written apart from
    `toolkit.cf`, which the builder reads level 0 through."""
    import base64
    import struct

    import xarray as xr

    enc = {k: attrs[k] for k in (*_CF_KEYS, *_RANGE_KEYS) if k in attrs}
    fv = enc.get("_FillValue")
    if isinstance(fv, str) and raw.dtype.kind == "f":  # xarray's zarr v3 form: base64 float64
        enc["_FillValue"] = (
            fv
            if fv in ("NaN", "Infinity", "-Infinity")
            else struct.unpack("<d", base64.b64decode(fv))[0]
        )
        enc["_FillValue"] = float(enc["_FillValue"])
    if not enc and zarr_fill is not None:
        flags = [float(f) for f in np.ravel(attrs.get("flag_values", []))]
        names = str(attrs.get("flag_meanings", "")).split()
        named = dict(zip(flags, names, strict=True)) if len(names) == len(flags) else {}
        meaning = named.get(float(zarr_fill), "").lower().replace("_", "")
        is_class = float(zarr_fill) in flags and meaning not in _NODATA_WORDS
        if not is_class:  # zarr's fill is nodata unless a class (not "no data") is named so
            enc["_FillValue"] = zarr_fill
    # xarray decodes the fill, packing and sign; several sentinels make it warn, so
    # `missing_value` and the range are applied below
    coded = {k: v for k, v in enc.items() if k not in ("missing_value", *_RANGE_KEYS)}
    var = xr.Variable(tuple(f"d{i}" for i in range(raw.ndim)), raw, attrs=coded)
    out = np.array(
        xr.conventions.decode_cf_variable("v", var, decode_times=False).values, dtype=np.float64
    )
    out[~np.isfinite(out)] = np.nan
    stored = raw
    if str(enc.get("_Unsigned", "")).lower() == "true" and raw.dtype.kind == "i":
        stored = raw.view(f"u{raw.dtype.itemsize}")
    if "missing_value" in enc:
        out[np.isin(stored, np.ravel(enc["missing_value"]))] = np.nan
    lo = hi = None
    if "valid_range" in enc:
        lo, hi = enc["valid_range"]
    lo = enc.get("valid_min", lo)
    hi = enc.get("valid_max", hi)
    if lo is None and hi is None:
        return out
    bounds = [b for b in (lo, hi) if b is not None]
    packed = "scale_factor" in enc or "add_offset" in enc
    # a packed array's range in integers bounds the stored values, in floats the decoded ones
    against = (
        stored.astype(np.float64) if not packed or all(isinstance(b, int) for b in bounds) else out
    )
    with np.errstate(invalid="ignore"):
        if lo is not None:
            out[~(against >= lo)] = np.nan
        if hi is not None:
            out[~(against <= hi)] = np.nan
    return out


def _valid(block: np.ndarray, fill: Any) -> np.ndarray:
    if block.dtype.kind == "f":
        ok = ~np.isnan(block)
        if fill is not None and not np.isnan(float(fill)):
            ok &= block != fill
        return ok
    return block != fill if fill is not None else np.ones(block.shape, bool)


def _windows(a: np.ndarray, factor: int, pad: Any) -> np.ndarray:
    """[..., H, W] -> [..., h, w, factor*factor], the edge padded with `pad`."""
    h, w = -(-a.shape[-2] // factor), -(-a.shape[-1] // factor)
    full = np.full((*a.shape[:-2], h * factor, w * factor), pad, dtype=a.dtype)
    full[..., : a.shape[-2], : a.shape[-1]] = a
    full = full.reshape((*a.shape[:-2], h, factor, w, factor))
    return np.moveaxis(full, -3, -2).reshape((*a.shape[:-2], h, w, factor * factor))


def reduce_level0(
    block: np.ndarray, fill: Any, method: str, factor: int, attrs: dict[str, Any] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(values [T, B, h, w] as float64 (mean, float sum) or the input dtype, count [T, h, w])."""
    joint = _valid(block, fill).all(axis=1)  # [T, H, W]
    win_ok = _windows(joint, factor, False)  # [T, h, w, f*f]
    count = win_ok.sum(axis=-1).astype(np.uint32)
    ok = win_ok[:, None]  # [T, 1, h, w, f*f] broadcasts over bands
    if method in ("mean", "sum"):
        vals = _windows(block.astype(np.float64), factor, 0.0)
        total = np.where(ok, vals, 0.0).sum(axis=-1)
        if method == "sum":
            out = total if block.dtype.kind == "f" else total.astype(np.int64)
            if block.dtype.kind != "f":  # exact integer sums: add as integers
                ints = _windows(block.astype(np.int64), factor, 0)
                out = np.where(ok, ints, 0).sum(axis=-1)
            return out, count
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / count[:, None], count
    if method in ("min", "max"):
        big = np.inf if method == "min" else -np.inf
        vals = _windows(block.astype(np.float64), factor, big)
        pick = np.where(ok, vals, big)
        out = pick.min(axis=-1) if method == "min" else pick.max(axis=-1)
        if (
            block.dtype.kind != "f"
        ):  # an empty window's +-inf has no integer: compare only count > 0
            return np.where(count[:, None] > 0, out, 0).astype(block.dtype), count
        return out, count
    if method == "mode":
        return _mode(block, ok, factor), count
    if method == "circular_mean":
        return _circular(block, ok, factor, angle_units(attrs or {})), count
    raise ValueError(f"no reference for method {method!r}")


def angle_units(attrs: dict[str, Any]) -> tuple[float, float]:
    """(units per full turn, lowest angle) of a direction, from its CF attributes."""
    turn = (
        2 * np.pi if str(attrs.get("units", "")).lower() in ("rad", "radian", "radians") else 360.0
    )
    lows = [attrs.get("valid_min"), *(attrs.get("valid_range") or [None])[:1]]
    negative = any(isinstance(v, int | float) and v < 0 for v in lows)
    return turn, -turn / 2 if negative else 0.0


CANCEL = 1e-6  # a window whose unit vectors sum to at most this per pixel has no direction


def _circular(
    block: np.ndarray, ok: np.ndarray, factor: int, units: tuple[float, float]
) -> np.ndarray:
    """The direction of each window's mean unit vector (complex exponentials), NaN where none."""
    turn, low = units
    z = np.exp(1j * _windows(block.astype(np.float64), factor, 0.0) * (2 * np.pi / turn))
    total = np.where(ok, z, 0).sum(axis=-1)
    n = np.broadcast_to(ok, z.shape).sum(axis=-1)
    ang = np.angle(total) * turn / (2 * np.pi)
    out = low + np.mod(ang - low, turn)
    out[(n == 0) | (np.abs(total) <= CANCEL * n)] = np.nan
    return out


def angle_gap(a: np.ndarray, b: np.ndarray, turn: float) -> np.ndarray:
    """How far apart two angles are around the circle (0 for 359.99 and 0.01 - 0.02)."""
    d = np.mod(np.asarray(a, np.float64) - b, turn)
    return np.minimum(d, turn - d)


def _mode(block: np.ndarray, ok: np.ndarray, factor: int) -> np.ndarray:
    """The most frequent valid label of each window, ties to the smallest (labels sorted);
    a window with no valid pixel gets the smallest label (compare only where count > 0)."""
    labels, codes = np.unique(block, return_inverse=True)
    codes = _windows(codes.reshape(block.shape), factor, 0)
    ok = np.broadcast_to(ok, codes.shape)
    lead, n = codes.shape[:-1], codes.shape[-1]
    flat_codes, flat_ok = codes.reshape(-1, n), ok.reshape(-1, n)
    out = np.zeros(flat_codes.shape[0], dtype=block.dtype)
    step = max(1, MODE_CELLS // max(1, len(labels)))
    for s in range(0, flat_codes.shape[0], step):
        c, k = flat_codes[s : s + step], flat_ok[s : s + step]
        rows = np.repeat(np.arange(len(c)), n).reshape(c.shape)
        tally = np.zeros((len(c), len(labels)), dtype=np.int64)
        np.add.at(tally, (rows[k], c[k]), 1)
        best = labels[np.argmax(tally, axis=1)]  # argmax: the first, so the smallest label
        out[s : s + step] = best
    return out.reshape(lead)


def class_counts(block: np.ndarray, fill: Any, labels: np.ndarray, factor: int) -> np.ndarray:
    """How many valid pixels of each label every window holds: [T, L, h, w] int64 for a
    level-0 block [T, H, W] (one band: class counts are kept for single-band mode only)."""
    ok = _valid(block, fill)
    out = [
        _windows((block == label) & ok, factor, False).sum(axis=-1, dtype=np.int64)
        for label in labels
    ]
    return np.stack(out, axis=1)


def mean_tolerance(level: int, window_abs_max: np.ndarray, dtype: Any) -> np.ndarray:
    """How far a built mean at `level` may sit from the float64 window mean: each cascade step
    rounds once (half an ulp of at most the window's largest magnitude); k ulps bounds k steps
    with a factor of two to spare."""
    ulp = np.spacing(np.asarray(window_abs_max, dtype=np.dtype(dtype)).astype(np.dtype(dtype)))
    return level * ulp.astype(np.float64)
