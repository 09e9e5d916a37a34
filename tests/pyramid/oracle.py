"""Slow numpy references for the pyramid reducers, straight from level 0."""

from __future__ import annotations

import numpy as np


def valid0(values: np.ndarray, fill) -> np.ndarray:
    """Joint validity of [B, H, W] level-0 values."""
    if values.dtype.kind == "f":
        bad = np.isnan(values)
        if fill is not None and not np.isnan(fill):
            bad |= values == fill
    else:
        bad = values == fill
    return ~bad.any(axis=0)


def windows(a: np.ndarray, f: int):
    """Yield (oy, ox, window) for every f x f window of the last two axes (edges partial)."""
    h, w = a.shape[-2:]
    for oy in range(-(-h // f)):
        for ox in range(-(-w // f)):
            yield oy, ox, a[..., oy * f : oy * f + f, ox * f : ox * f + f]


def reduce0(values: np.ndarray, fill, method: str, f: int, nodata, out_dtype=None):
    """(out [B, h, w], count [h, w]) by the direct definition, one window at a time."""
    valid = valid0(values, fill)
    nb, h, w = values.shape
    oh, ow = -(-h // f), -(-w // f)
    dtype = np.dtype(out_dtype) if out_dtype is not None else values.dtype
    out = np.full((nb, oh, ow), nodata, dtype=dtype)
    count = np.zeros((oh, ow), dtype=np.uint32)
    for oy, ox, win in windows(values, f):
        m = valid[oy * f : oy * f + f, ox * f : ox * f + f]
        count[oy, ox] = m.sum()
        if not m.any():
            continue
        for b in range(nb):
            vals = win[b][m]
            if method == "mean":
                out[b, oy, ox] = vals.astype(np.float64).sum() / m.sum()
            elif method == "sum":
                out[b, oy, ox] = vals.astype(dtype).sum(dtype=dtype)
            elif method == "min":
                out[b, oy, ox] = vals.min()
            elif method == "max":
                out[b, oy, ox] = vals.max()
            elif method == "mode":
                labels, counts = np.unique(vals, return_counts=True)
                out[b, oy, ox] = labels[np.argmax(counts)]  # unique is sorted: ties -> smallest
    return out, count
