"""Numba reducers for pyramids (pure, nogil, cached).

Every reducer pools a block `values[B, H, W]` by a factor into `out[B, ceil(H/f), ceil(W/f)]`
and writes the joint valid count into `count[ceil(H/f), ceil(W/f)]`. Validity is a per-pixel
weight `weights[H, W]` shared by every band (the joint mask across the band dimension): at level 0
it is 0/1 (valid in every band), further up it is the parent level's count plane. Partial windows
at the bottom/right edge are pooled over the pixels they have, never trimmed.

Factor 2 (every cascade step) has its own row-pair mean kernel, bitwise equal to the general one;
at level 0 it fuses the joint mask into the same pass (`pool_level0`), so no weights plane is made.

Nothing here allocates per call beyond its outputs and a row of scratch, touches global state or
warns, so the kernels are safe to run from many threads at once (`nogil=True`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

__all__ = [
    "METHODS",
    "classes_level0",
    "joint_valid",
    "mode_of_class_counts",
    "pool",
    "pool_circular",
    "pool_classes",
    "pool_level0",
    "pool_mode",
]

METHODS = ("mean", "mode", "min", "max", "sum", "circular_mean")
# a direction's window mean is nodata when its unit vectors cancel: resultant length per pixel
# (0 for opposite directions, 1 for identical ones) at or below this
CIRCULAR_CANCEL = 1e-6
HALF = np.dtype(np.float16)  # numba has no float16: such blocks pool as float32


def _half(values: np.ndarray, out_dtype: np.dtype | None) -> bool:
    return values.dtype == HALF or (out_dtype is not None and np.dtype(out_dtype) == HALF)


def _single(dtype: np.dtype) -> np.dtype:
    """float16 widened to float32, which holds every float16 exactly."""
    return np.dtype(np.float32) if np.dtype(dtype) == HALF else np.dtype(dtype)


def _half_fill(fill: float | int | None) -> float | None:
    """A fill as the float16 stored values hold it (-9999 is stored as -10000)."""
    return None if fill is None else float(np.float16(fill))


@njit(nogil=True, cache=True)
def _joint_valid_float(values, fill, fill_is_nan, out):  # pragma: no cover - numba
    nb, h, w = values.shape
    for y in range(h):
        for x in range(w):
            ok = 1
            for b in range(nb):
                v = values[b, y, x]
                if v != v or (not fill_is_nan and v == fill):
                    ok = 0
                    break
            out[y, x] = ok


@njit(nogil=True, cache=True)
def _joint_valid_int(values, fill, out):  # pragma: no cover - numba
    nb, h, w = values.shape
    for y in range(h):
        for x in range(w):
            ok = 1
            for b in range(nb):
                if values[b, y, x] == fill:
                    ok = 0
                    break
            out[y, x] = ok


def joint_valid(values: np.ndarray, fill: float | int) -> np.ndarray:
    """uint32 0/1 plane: 1 where the pixel is valid in every band (`values` is [B, H, W]).

    Invalid means NaN or equal to `fill` (the array's fill_value, NaN for most float stores).
    """
    if values.ndim != 3:
        raise ValueError(f"joint_valid wants [band, y, x], got shape {values.shape}")
    if values.dtype == HALF:
        values, fill = values.astype(np.float32), _half_fill(fill)  # type: ignore[assignment]
    out = np.empty(values.shape[1:], dtype=np.uint32)
    if values.dtype.kind == "f":
        fill_f = float(fill) if fill is not None else np.nan
        _joint_valid_float(values, values.dtype.type(fill_f), bool(np.isnan(fill_f)), out)
    else:
        _joint_valid_int(values, values.dtype.type(fill), out)
    return out


@njit(nogil=True, cache=True)
def _pool_count(weights, f, count):  # pragma: no cover - numba
    h, w = weights.shape
    oh, ow = count.shape
    for oy in range(oh):
        for ox in range(ow):
            count[oy, ox] = 0
    for y in range(h):
        oy = y // f
        for x in range(w):
            count[oy, x // f] += weights[y, x]


@njit(nogil=True, cache=True)
def _pool_mean(values, weights, f, count, out, nodata):  # pragma: no cover - numba
    nb, h, w = values.shape
    oh, ow = count.shape
    acc = np.zeros(ow, dtype=np.float64)
    for b in range(nb):
        for oy in range(oh):
            acc[:] = 0.0
            for y in range(oy * f, min(h, oy * f + f)):
                for x in range(w):
                    wt = weights[y, x]
                    if wt != 0:
                        acc[x // f] += np.float64(values[b, y, x]) * wt
            for ox in range(ow):
                c = count[oy, ox]
                out[b, oy, ox] = acc[ox] / c if c != 0 else nodata


@njit(nogil=True, cache=True)
def _pool_sum(values, weights, f, count, out, nodata):  # pragma: no cover - numba
    nb, h, w = values.shape
    oh, ow = count.shape
    acc = np.zeros(ow, dtype=out.dtype)
    for b in range(nb):
        for oy in range(oh):
            acc[:] = 0
            for y in range(oy * f, min(h, oy * f + f)):
                for x in range(w):
                    if weights[y, x] != 0:
                        acc[x // f] += values[b, y, x]
            for ox in range(ow):
                out[b, oy, ox] = acc[ox] if count[oy, ox] != 0 else nodata


@njit(nogil=True, cache=True)
def _pool_extreme(values, weights, f, count, out, nodata, want_max):  # pragma: no cover
    nb, h, w = values.shape
    oh, ow = count.shape
    acc = np.empty(ow, dtype=out.dtype)
    seen = np.zeros(ow, dtype=np.bool_)
    for b in range(nb):
        for oy in range(oh):
            seen[:] = False
            for y in range(oy * f, min(h, oy * f + f)):
                for x in range(w):
                    if weights[y, x] == 0:
                        continue
                    ox = x // f
                    v = values[b, y, x]
                    if not seen[ox]:
                        acc[ox] = v
                        seen[ox] = True
                    elif (want_max and v > acc[ox]) or (not want_max and v < acc[ox]):
                        acc[ox] = v
            for ox in range(ow):
                out[b, oy, ox] = acc[ox] if seen[ox] else nodata


@njit(nogil=True, cache=True)
def _pool_mode(values, weights, f, count, out, nodata):  # pragma: no cover - numba
    nb, h, w = values.shape
    oh, ow = count.shape
    buf = np.empty(f * f, dtype=values.dtype)
    for b in range(nb):
        for oy in range(oh):
            for ox in range(ow):
                n = 0
                for y in range(oy * f, min(h, oy * f + f)):
                    for x in range(ox * f, min(w, ox * f + f)):
                        if weights[y, x] != 0:
                            buf[n] = values[b, y, x]
                            n += 1
                if n == 0:
                    out[b, oy, ox] = nodata
                    continue
                s = np.sort(buf[:n])
                best = s[0]
                best_n = 0
                run = 0
                for i in range(n):
                    if i > 0 and s[i] != s[i - 1]:
                        run = 0
                    run += 1
                    # strictly greater: among equal counts the first (smallest) label wins
                    if run > best_n:
                        best_n = run
                        best = s[i]
                out[b, oy, ox] = best


@njit(nogil=True, cache=True)
def _pool_mode_table(values, weights, f, count, out, nodata, size):  # pragma: no cover - numba
    """Mode by counting: a table of `size` counters (labels 0..size-1), incremented per valid
    pixel while the leader is tracked (a strictly higher count wins, an equal count goes to
    the smaller label), then only the touched counters reset. No sort, no buffer."""
    nb, h, w = values.shape
    oh, ow = count.shape
    table = np.zeros(size, dtype=np.int32)
    for b in range(nb):
        for oy in range(oh):
            y0 = oy * f
            y1 = min(h, y0 + f)
            for ox in range(ow):
                x0 = ox * f
                x1 = min(w, x0 + f)
                best = 0
                best_n = 0
                for y in range(y0, y1):
                    for x in range(x0, x1):
                        if weights[y, x] != 0:
                            v = values[b, y, x]
                            c = table[v] + 1
                            table[v] = c
                            if c > best_n or (c == best_n and v < best):
                                best_n = c
                                best = v
                if best_n == 0:
                    out[b, oy, ox] = nodata
                    continue
                out[b, oy, ox] = best
                for y in range(y0, y1):
                    for x in range(x0, x1):
                        table[values[b, y, x]] = 0


@njit(nogil=True, cache=True)
def _pool_mode_rows8(values, weights, f, count, out, nodata):  # pragma: no cover - numba
    """Mode of uint8 labels by counting, a row of output windows at a time: one 256-counter
    table per output column, so the inner loop runs along the input row; the leader is a
    branch-free key (count, then the smaller label), and touched counters reset after."""
    nb, h, w = values.shape
    oh, ow = count.shape
    table = np.zeros((ow, 256), dtype=np.int32)
    best = np.zeros(ow, dtype=np.int32)
    for b in range(nb):
        for oy in range(oh):
            y0 = oy * f
            y1 = min(h, y0 + f)
            best[:] = 0
            for y in range(y0, y1):
                row = values[b, y]
                wrow = weights[y]
                for ox in range(ow):
                    t = table[ox]
                    k = best[ox]
                    for x in range(ox * f, min(w, ox * f + f)):
                        v = np.int32(row[x])
                        ok = np.int32(wrow[x] != 0)
                        c = t[v] + ok
                        t[v] = c
                        k = max(k, ok * ((c << 16) | (65535 - v)))
                    best[ox] = k
            orow = out[b, oy]
            for ox in range(ow):
                k = best[ox]
                orow[ox] = (65535 - (k & 65535)) if k != 0 else nodata
            for y in range(y0, y1):
                row = values[b, y]
                for ox in range(ow):
                    t = table[ox]
                    for x in range(ox * f, min(w, ox * f + f)):
                        t[row[x]] = 0


@njit(inline="always")
def _mode_key(v, ok, a, wa, b, wb, c, wc, d, wd):  # pragma: no cover - numba
    """A candidate's rank in its 2x2 window: its count above all, then the smaller label."""
    n = wa * (a == v) + wb * (b == v) + wc * (c == v) + wd * (d == v)
    return ok * ((n << 17) | (65535 - v))


@njit(nogil=True, cache=True)
def _mode2_cell(values, weights, count, out, nodata, b, oy, ox):  # pragma: no cover - numba
    """One edge window (a missing right column or bottom row weighs nothing)."""
    h, w = values.shape[1], values.shape[2]
    y0 = 2 * oy
    y1 = y0 + 1 if y0 + 1 < h else y0
    hy = 1 if y0 + 1 < h else 0
    x0 = 2 * ox
    x1 = x0 + 1 if x0 + 1 < w else x0
    hx = 1 if x0 + 1 < w else 0
    a, va = np.int64(values[b, y0, x0]), np.int64(weights[y0, x0] != 0)
    bb, vb = np.int64(values[b, y0, x1]), np.int64((weights[y0, x1] != 0) & (hx == 1))
    c, vc = np.int64(values[b, y1, x0]), np.int64((weights[y1, x0] != 0) & (hy == 1))
    d, vd = np.int64(values[b, y1, x1]), np.int64((weights[y1, x1] != 0) & (hx == 1) & (hy == 1))
    ka = _mode_key(a, va, a, va, bb, vb, c, vc, d, vd)
    kb = _mode_key(bb, vb, a, va, bb, vb, c, vc, d, vd)
    kc = _mode_key(c, vc, a, va, bb, vb, c, vc, d, vd)
    kd = _mode_key(d, vd, a, va, bb, vb, c, vc, d, vd)
    k = max(max(ka, kb), max(kc, kd))
    out[b, oy, ox] = (65535 - (k & 65535)) if k else nodata
    if b == 0:
        count[oy, ox] = (
            weights[y0, x0]
            + hx * weights[y0, x1]
            + hy * weights[y1, x0]
            + hx * hy * weights[y1, x1]
        )


@njit(nogil=True, cache=True)
def _mode2(values, weights, count, out, nodata):  # pragma: no cover - numba
    """Factor-2 mode of labels < 65536: each window's four candidates ranked by a key (count,
    then the smaller label) with no branch on the data, and the count plane in the same pass;
    bitwise the general kernels. Full windows run a row pair at a time on int32 keys (the
    loop vectorises); the odd last column and row take the edge path."""
    nb, h, w = values.shape
    oh, ow = count.shape
    hf, wf = h >> 1, w >> 1
    for b in range(nb):
        for oy in range(hf):
            r0 = values[b, 2 * oy]
            r1 = values[b, 2 * oy + 1]
            m0 = weights[2 * oy]
            m1 = weights[2 * oy + 1]
            orow = out[b, oy]
            crow = count[oy]
            for ox in range(wf):
                x = 2 * ox
                a, bb = np.int32(r0[x]), np.int32(r0[x + 1])
                c, d = np.int32(r1[x]), np.int32(r1[x + 1])
                wa, wb = np.int32(m0[x] != 0), np.int32(m0[x + 1] != 0)
                wc, wd = np.int32(m1[x] != 0), np.int32(m1[x + 1] != 0)
                ka = _mode_key(a, wa, a, wa, bb, wb, c, wc, d, wd)
                kb = _mode_key(bb, wb, a, wa, bb, wb, c, wc, d, wd)
                kc = _mode_key(c, wc, a, wa, bb, wb, c, wc, d, wd)
                kd = _mode_key(d, wd, a, wa, bb, wb, c, wc, d, wd)
                k = max(max(ka, kb), max(kc, kd))
                orow[ox] = (65535 - (k & 65535)) if k != 0 else nodata
                if b == 0:
                    crow[ox] = m0[x] + m0[x + 1] + m1[x] + m1[x + 1]
            if ow > wf:
                _mode2_cell(values, weights, count, out, nodata, b, oy, wf)
        if oh > hf:
            for ox in range(ow):
                _mode2_cell(values, weights, count, out, nodata, b, hf, ox)


# --- factor 2: the path every cascade level takes ------------------------------------------------
# One pass over a pair of input rows per output row, window offsets by shifts, no integer division
# and no data-dependent branches in the inner loop (invalid pixels add +0.0 through a select).
# The sum is taken in the general kernel's order (row 0 left, row 0 right, row 1 left, row 1 right,
# from +0.0, float64), so the results are bitwise those of `_pool_mean`: adding +0.0 never changes
# an accumulator that starts at +0.0 under round-to-nearest. A missing bottom row is a zero-weight
# row; a missing right column is the scalar tail.


@njit(nogil=True, cache=True)
def _count_rows2(m0, m1, crow):  # pragma: no cover - numba
    w = m0.shape[0]
    wf = w >> 1
    for ox in range(wf):
        x = ox << 1
        crow[ox] = np.uint32(m0[x]) + np.uint32(m0[x + 1]) + np.uint32(m1[x]) + np.uint32(m1[x + 1])
    if crow.shape[0] > wf:
        crow[wf] = np.uint32(m0[w - 1]) + np.uint32(m1[w - 1])


def _weighted(v, w):  # pragma: no cover - numba compiles the overload below instead
    return v * w


@overload(_weighted, inline="always")
def _weighted_typed(v, w):  # pragma: no cover - numba
    """`v * w`, except for a uint8 weight: that is level 0's 0/1 mask, whose pixels are selected
    on it, so `v` itself (v * 1.0 is v; 1.3x faster measured without the multiply)."""
    if isinstance(w, types.Integer) and w.bitwidth == 8:
        return lambda v, w: v
    return lambda v, w: v * w


@njit(nogil=True, cache=True)
def _mean_rows2(r0, r1, m0, m1, crow, orow, nodata):  # pragma: no cover - numba
    w = r0.shape[0]
    wf = w >> 1
    for ox in range(wf):
        x = ox << 1
        # Every load happens whatever the weight: a load under the condition keeps the branch
        # (LLVM may not speculate it), which mispredicts on scattered nodata (5x slower).
        pa = _weighted(np.float64(r0[x]), m0[x])
        pb = _weighted(np.float64(r0[x + 1]), m0[x + 1])
        pc = _weighted(np.float64(r1[x]), m1[x])
        pd = _weighted(np.float64(r1[x + 1]), m1[x + 1])
        s = 0.0
        s += pa if m0[x] != 0 else 0.0
        s += pb if m0[x + 1] != 0 else 0.0
        s += pc if m1[x] != 0 else 0.0
        s += pd if m1[x + 1] != 0 else 0.0
        n = crow[ox]
        orow[ox] = s / n if n != 0 else nodata
    if orow.shape[0] > wf:
        x = w - 1
        pa = _weighted(np.float64(r0[x]), m0[x])
        pc = _weighted(np.float64(r1[x]), m1[x])
        s = 0.0
        s += pa if m0[x] != 0 else 0.0
        s += pc if m1[x] != 0 else 0.0
        n = crow[wf]
        orow[wf] = s / n if n != 0 else nodata


@njit(nogil=True, cache=True)
def _mean2(values, weights, count, out, nodata):  # pragma: no cover - numba
    """Count-weighted factor-2 mean; `weights` is 0/1 (level 0) or the parent's count plane."""
    nb, h, w = values.shape
    oh = count.shape[0]
    zero = np.zeros(w, dtype=weights.dtype)
    for oy in range(oh):
        y0 = oy << 1
        y1 = y0 + 1 if y0 + 1 < h else y0
        m1 = weights[y1] if y1 != y0 else zero
        _count_rows2(weights[y0], m1, count[oy])
        for b in range(nb):
            _mean_rows2(
                values[b, y0], values[b, y1], weights[y0], m1, count[oy], out[b, oy], nodata
            )


@njit(nogil=True, cache=True)
def _valid_rows2(values, y0, y1, fill, m0, m1):  # pragma: no cover - numba
    """Joint validity (every band) of rows y0 and y1 into m0, m1 (m1 all 0 when y1 == y0).

    Valid is `v == v and v != fill`: a NaN `fill` makes the second test always true, so one
    branch-free expression serves NaN-filled floats, floats with a fill and integers alike.
    """
    nb, _, w = values.shape
    one = np.uint8(1)
    for x in range(w):
        m0[x] = one
        m1[x] = one if y1 != y0 else np.uint8(0)
    for b in range(nb):
        for x in range(w):
            v = values[b, y0, x]
            m0[x] &= np.uint8((v == v) & (v != fill))
        if y1 != y0:
            for x in range(w):
                v = values[b, y1, x]
                m1[x] &= np.uint8((v == v) & (v != fill))


@njit(nogil=True, cache=True)
def _mean2_level0(values, fill, count, out, nodata):  # pragma: no cover - numba
    """Factor-2 mean of level 0 with the joint mask computed per row pair (no weights plane)."""
    nb, h, w = values.shape
    oh = count.shape[0]
    m0 = np.empty(w, dtype=np.uint8)
    m1 = np.empty(w, dtype=np.uint8)
    for oy in range(oh):
        y0 = oy << 1
        y1 = y0 + 1 if y0 + 1 < h else y0
        _valid_rows2(values, y0, y1, fill, m0, m1)
        _count_rows2(m0, m1, count[oy])
        for b in range(nb):
            _mean_rows2(values[b, y0], values[b, y1], m0, m1, count[oy], out[b, oy], nodata)


def _out_shape(values: np.ndarray, f: int) -> tuple[int, int, int]:
    nb, h, w = values.shape
    return nb, -(-h // f), -(-w // f)


def _check(values: np.ndarray, weights: np.ndarray, f: int) -> None:
    if values.ndim != 3 or weights.ndim != 2 or values.shape[1:] != weights.shape:
        raise ValueError(
            f"pool wants values [band, y, x] and weights [y, x] of the same plane, got "
            f"{values.shape} and {weights.shape}"
        )
    if f < 1:
        raise ValueError(f"pool factor must be >= 1, got {f}")


def _out_dtype(values: np.ndarray, method: str, out_dtype: np.dtype | None) -> np.dtype:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: choose one of {', '.join(METHODS)}")
    dtype = np.dtype(out_dtype) if out_dtype is not None else values.dtype
    if method == "mean" and dtype.kind != "f":
        raise ValueError(f"mean needs a float output dtype, got {dtype}")
    if method == "mode" and values.dtype.kind not in "iu":
        raise ValueError(f"mode is for categorical integers, not {values.dtype} data")
    return dtype


def pool(
    values: np.ndarray,
    weights: np.ndarray,
    method: str,
    nodata: float | int,
    factor: int = 2,
    out_dtype: np.dtype | None = None,
    fast: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Pool [B, H, W] by `factor`; returns (out [B, h, w], count [h, w] uint32).

    `weights` is the valid count per input pixel (0/1 at level 0, a count plane above): mean
    is count-weighted (float64 accumulator), so pooling a pooled level gives the same answer as
    pooling level 0 directly; sum/min/max/mode consider pixels with a non-zero weight.
    Mode pools labels, not counts: it is exact only when applied to level 0.
    A factor-2 mean takes the dedicated row-pair kernel (bitwise equal to the general one), and
    mode of uint8/uint16 labels ranks or counts (a table per output column for uint8) instead
    of sorting each window;
    `fast=False` forces the general kernels, the reference the fast paths are tested on.
    float16 (in or out) pools in float32 and is returned in the dtype asked for: a min or max
    exactly, since it picks a value.
    """
    if _half(values, out_dtype):
        want = np.dtype(out_dtype) if out_dtype is not None else values.dtype
        wide = values.astype(np.float32) if values.dtype == HALF else values
        nd = _half_fill(nodata) if want == HALF else nodata
        out, count = pool(wide, weights, method, nd, factor, _single(want), fast)  # type: ignore[arg-type]
        return out.astype(want), count
    _check(values, weights, factor)
    dtype = _out_dtype(values, method, out_dtype)
    nb, oh, ow = _out_shape(values, factor)
    weights = np.ascontiguousarray(weights, dtype=np.uint32)
    count = np.empty((oh, ow), dtype=np.uint32)
    out = np.empty((nb, oh, ow), dtype=dtype)
    nd = dtype.type(nodata)
    values = np.ascontiguousarray(values)
    if fast and factor == 2 and method == "mean":
        _mean2(values, weights, count, out, nd)
        return out, count
    small_labels = values.dtype.kind == "u" and values.dtype.itemsize <= 2
    if fast and factor == 2 and method == "mode" and small_labels:
        _mode2(values, weights, count, out, nd)  # the count plane from the same pass
        return out, count
    _pool_count(weights, factor, count)
    if method == "mean":
        _pool_mean(values, weights, factor, count, out, nd)
    elif method == "sum":
        _pool_sum(values.astype(dtype, copy=False), weights, factor, count, out, nd)
    elif method in ("min", "max"):
        _pool_extreme(
            values.astype(dtype, copy=False), weights, factor, count, out, nd, method == "max"
        )
    elif fast and values.dtype == np.uint8:
        _pool_mode_rows8(values, weights, factor, count, out, nd)
    elif fast and small_labels:
        _pool_mode_table(values, weights, factor, count, out, nd, 1 << (8 * values.dtype.itemsize))
    else:
        _pool_mode(values, weights, factor, count, out, nd)
    return out, count


def pool_level0(
    values: np.ndarray,
    fill: float | int,
    method: str,
    nodata: float | int,
    factor: int = 2,
    out_dtype: np.dtype | None = None,
    fast: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Pool level-0 values [B, H, W] whose nodata is `fill`: `pool(values, joint_valid(...))`.

    A factor-2 mean fuses the joint mask into the pooling pass (a row pair at a time, so no
    weights plane is written and read back); everything else goes through `joint_valid` + `pool`.
    """
    if values.ndim != 3:
        raise ValueError(f"pool_level0 wants [band, y, x], got shape {values.shape}")
    if _half(values, out_dtype):  # as `pool` does
        want = np.dtype(out_dtype) if out_dtype is not None else values.dtype
        wide, fill0 = values, fill
        if values.dtype == HALF:
            wide, fill0 = values.astype(np.float32), _half_fill(fill)  # type: ignore[assignment]
        nd = _half_fill(nodata) if want == HALF else nodata
        out, count = pool_level0(wide, fill0, method, nd, factor, _single(want), fast)  # type: ignore[arg-type]
        return out.astype(want), count
    if not (fast and factor == 2 and method == "mean"):
        return pool(values, joint_valid(values, fill), method, nodata, factor, out_dtype, fast)
    dtype = _out_dtype(values, method, out_dtype)
    nb, oh, ow = _out_shape(values, factor)
    count = np.empty((oh, ow), dtype=np.uint32)
    out = np.empty((nb, oh, ow), dtype=dtype)
    values = np.ascontiguousarray(values)
    if values.dtype.kind == "f":  # no fill (None) or a NaN fill: the v == v test alone
        fill_v = values.dtype.type(float(fill) if fill is not None else np.nan)
    else:
        fill_v = values.dtype.type(fill)
    _mean2_level0(values, fill_v, count, out, dtype.type(nodata))
    return out, count


@njit(nogil=True, cache=True)
def _pool_circular(
    values, valid, f, to_rad, lo, period, tol, count, out, nodata
):  # pragma: no cover
    nb, h, w = values.shape
    oh, ow = count.shape
    for oy in range(oh):
        y1 = min(oy * f + f, h)
        for ox in range(ow):
            x1 = min(ox * f + f, w)
            n = 0
            for y in range(oy * f, y1):
                for x in range(ox * f, x1):
                    n += valid[y, x]
            count[oy, ox] = n
            for b in range(nb):
                s = 0.0
                c = 0.0
                for y in range(oy * f, y1):
                    for x in range(ox * f, x1):
                        if valid[y, x]:
                            a = np.float64(values[b, y, x]) * to_rad
                            s += np.sin(a)
                            c += np.cos(a)
                if n == 0 or np.sqrt(s * s + c * c) <= tol * n:
                    out[b, oy, ox] = nodata
                else:
                    ang = np.arctan2(s, c) / to_rad
                    out[b, oy, ox] = lo + (ang - lo) % period


def pool_circular(
    values: np.ndarray,
    fill: float | int,
    circle: tuple[float, float, float],
    nodata: float,
    factor: int = 2,
    out_dtype: np.dtype | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Circular mean of level-0 directions [B, H, W] by `factor`: the direction of the mean
    unit vector (350 and 10 degrees average to 0, not 180), back in the values' units and in
    [lo, lo + period); nodata where no pixel is valid or the vectors cancel (resultant length
    at most CIRCULAR_CANCEL per pixel). `circle` is (radians per unit, lo, period)."""
    if values.ndim != 3:
        raise ValueError(f"pool_circular wants [band, y, x], got shape {values.shape}")
    dtype = np.dtype(out_dtype) if out_dtype is not None else np.dtype(np.float32)
    if _half(values, dtype):  # as `pool` does
        wide, fill0 = values, fill
        if values.dtype == HALF:
            wide, fill0 = values.astype(np.float32), _half_fill(fill)  # type: ignore[assignment]
        nd = _half_fill(nodata) if dtype == HALF else nodata
        out, count = pool_circular(wide, fill0, circle, nd, factor, _single(dtype))  # type: ignore[arg-type]
        return out.astype(dtype), count
    valid = joint_valid(values, fill)
    nb, oh, ow = _out_shape(values, factor)
    count = np.empty((oh, ow), dtype=np.uint32)
    out = np.empty((nb, oh, ow), dtype=dtype)
    to_rad, lo, period = circle
    _pool_circular(
        np.ascontiguousarray(values), valid, factor, float(to_rad), float(lo), float(period),
        CIRCULAR_CANCEL, count, out, dtype.type(nodata),
    )  # fmt: skip
    return out, count


def pool_mode(
    values: np.ndarray, valid: np.ndarray, factor: int, nodata: int
) -> tuple[np.ndarray, np.ndarray]:
    """Mode of every `factor`x`factor` level-0 window (ties to the smallest label)."""
    return pool(values, valid, "mode", nodata, factor)


# --- mode at cascade cost: per-window class counts carried from level to level -----------------
# A mode level keeps, beside its labels, how many level-0 pixels of each declared class fell in
# each window ([L, h, w], classes in ascending label order). The next level's counts are 2x2 sums
# of these, so its mode (the first largest count: ties go to the smallest label) is exactly the
# mode of its level-0 window, and level 0 is read once, by the first level.


@njit(nogil=True, cache=True)
def _class_counts0(values, lo, lut, f, counts, count):  # pragma: no cover - numba
    """`lut[clamp(v - lo + 1)]` is v's class, L for nodata, L + 1 for a stray value: every pixel
    lands in some row of `counts` [L + 2, h, w] with no branch on the data."""
    h, w = values.shape
    nl = counts.shape[0] - 2
    top = lut.shape[0] - 1
    counts[:] = 0
    count[:] = 0
    for y in range(h):
        oy = y // f
        crow = count[oy]
        for x in range(w):
            d = min(max(np.int64(values[y, x]) - lo + 1, 0), top)
            c = lut[d]
            ox = x // f
            counts[c, oy, ox] += 1
            crow[ox] += np.uint32(c < nl)


@njit(nogil=True, cache=True)
def _class_row(row, lo, lut, direct, even, odd):  # pragma: no cover - numba
    """Class indices of one level-0 row, even and odd columns apart (L: nodata, L + 1: stray;
    a missing last odd column stays as it was set); returns the stray count. `direct`: the
    table covers every value of the row's dtype (uint8, uint16), so no clamping."""
    top = lut.shape[0] - 1
    stray_c = lut.max()
    w = row.shape[0]
    stray = 0
    if direct:
        for ox in range(w >> 1):
            a = lut[row[2 * ox]]
            b = lut[row[2 * ox + 1]]
            even[ox] = a
            odd[ox] = b
            stray += (a == stray_c) + (b == stray_c)
        if w & 1:
            a = lut[row[w - 1]]
            even[w >> 1] = a
            stray += a == stray_c
        return stray
    for ox in range(w >> 1):
        a = lut[min(max(np.int64(row[2 * ox]) - lo + 1, 0), top)]
        b = lut[min(max(np.int64(row[2 * ox + 1]) - lo + 1, 0), top)]
        even[ox] = a
        odd[ox] = b
        stray += (a == stray_c) + (b == stray_c)
    if w & 1:
        a = lut[min(max(np.int64(row[w - 1]) - lo + 1, 0), top)]
        even[w >> 1] = a
        stray += a == stray_c
    return stray


@njit(nogil=True, cache=True)
def _classes2(values, lo, lut, direct, labels, nodata, counts, count, out):  # pragma: no cover
    """Factor 2 from level 0, one pass: each output row's class counts by comparisons, the
    count plane, and the mode ranked by a key (count, then the smaller class) as the counts
    are made; every inner loop is a simple one over output columns (they vectorise; no
    scatter). Returns the stray pixel count."""
    h = values.shape[0]
    nl, oh, ow = counts.shape
    e0 = np.full(ow, nl, dtype=np.int32)
    o0 = np.full(ow, nl, dtype=np.int32)  # a missing last column stays nodata
    e1 = np.full(ow, nl, dtype=np.int32)
    o1 = np.full(ow, nl, dtype=np.int32)
    n = np.empty(ow, dtype=np.int32)
    key = np.empty(ow, dtype=np.int32)
    tally = np.empty(ow, dtype=np.int32)
    stray = 0
    for oy in range(oh):
        y0 = 2 * oy
        stray += _class_row(values[y0], lo, lut, direct, e0, o0)
        if y0 + 1 < h:
            stray += _class_row(values[y0 + 1], lo, lut, direct, e1, o1)
        else:
            e1[:] = nl
            o1[:] = nl
        key[:] = 0
        tally[:] = 0
        for c in range(nl):
            cc = np.int32(c)
            tie = np.int32(255 - c)
            for ox in range(ow):
                n[ox] = (
                    np.int32(e0[ox] == cc)
                    + np.int32(o0[ox] == cc)
                    + np.int32(e1[ox] == cc)
                    + np.int32(o1[ox] == cc)
                )
            row = counts[c, oy]
            for ox in range(ow):
                row[ox] = n[ox]
            for ox in range(ow):
                tally[ox] += n[ox]
            for ox in range(ow):
                key[ox] = max(key[ox], (n[ox] << 8) | tie)
        crow = count[oy]
        orow = out[oy]
        for ox in range(ow):
            k = key[ox]
            crow[ox] = tally[ox]
            orow[ox] = labels[255 - (k & 255)] if (k >> 8) != 0 else nodata
    return stray


@njit(nogil=True, cache=True)
def _pool_classes2(src, labels, nodata, dst, count, out):  # pragma: no cover - numba
    """Factor-2 sums of class counts, the count plane and the mode in one pass (as `_classes2`);
    a missing last row or column adds nothing."""
    nl, h, w = src.shape
    _, oh, ow = dst.shape
    wf = w >> 1
    zero = np.zeros(w, dtype=src.dtype)
    key = np.zeros(ow, dtype=np.int64)
    for oy in range(oh):
        y0 = 2 * oy
        crow = count[oy]
        key[:] = 0
        crow[:] = 0
        for c in range(nl):
            r0 = src[c, y0]
            r1 = src[c, y0 + 1] if y0 + 1 < h else zero
            drow = dst[c, oy]
            tie = np.int64(255 - c)
            for ox in range(wf):
                x = 2 * ox
                n = np.int64(r0[x]) + np.int64(r0[x + 1]) + np.int64(r1[x]) + np.int64(r1[x + 1])
                drow[ox] = n
                crow[ox] += np.uint32(n)
                key[ox] = max(key[ox], (n << 8) | tie)
            if ow > wf:
                n = np.int64(r0[w - 1]) + np.int64(r1[w - 1])
                drow[wf] = n
                crow[wf] += np.uint32(n)
                key[wf] = max(key[wf], (n << 8) | tie)
        orow = out[oy]
        for ox in range(ow):
            k = key[ox]
            orow[ox] = labels[255 - (k & 255)] if (k >> 8) != 0 else nodata


@njit(nogil=True, cache=True)
def _mode_of_counts(counts, labels, nodata, out):  # pragma: no cover - numba
    """Rank each class by a key (its count, then the smaller class index) with no branch on
    the data; a window whose best count is 0 is nodata."""
    nl, oh, ow = counts.shape
    key = np.zeros(ow, dtype=np.int64)
    for oy in range(oh):
        key[:] = 0
        for c in range(nl):
            row = counts[c, oy]
            tie = np.int64(255 - c)
            for ox in range(ow):
                key[ox] = max(key[ox], (np.int64(row[ox]) << 8) | tie)
        for ox in range(ow):
            k = key[ox]
            out[oy, ox] = labels[255 - (k & 255)] if (k >> 8) != 0 else nodata


class StrayLabel(ValueError):
    """A level-0 value that is neither nodata nor one of the declared classes."""

    def __init__(self, value: int, n: int, labels: np.ndarray, at: tuple[int, int]) -> None:
        self.value, self.n, self.labels, self.at = value, n, labels, at
        super().__init__(
            f"{n} pixel(s) hold {value}, which is neither nodata nor one of the declared "
            f"classes {labels.tolist()} (flag_values)"
        )


def class_lut(
    labels: np.ndarray, fill: int, dtype: np.dtype | None = None
) -> tuple[int, np.ndarray, bool]:
    """(lo, lut, direct) for the class kernels: lut[v - lo + 1] is v's class index, L for
    `fill`, L + 1 for anything else (its two ends catch every value outside the table). For
    uint8 and uint16 data the table covers the whole dtype instead: lut[v] (direct)."""
    nl = len(labels)
    direct = dtype is not None and np.dtype(dtype).kind == "u" and np.dtype(dtype).itemsize <= 2
    if direct:
        lut = np.full(1 << (8 * np.dtype(dtype).itemsize), nl + 1, dtype=np.int32)
        lut[labels.astype(np.int64)] = np.arange(nl)
        lut[int(fill)] = nl
        return 0, lut, True
    lo = min(int(labels[0]), int(fill))
    hi = max(int(labels[-1]), int(fill))
    lut = np.full(hi - lo + 3, nl + 1, dtype=np.int32)
    lut[labels.astype(np.int64) - lo + 1] = np.arange(nl)
    lut[int(fill) - lo + 1] = nl
    return lo, lut, False


def classes_level0(
    values: np.ndarray,
    fill: int,
    labels: np.ndarray,
    factor: int = 2,
    dtype: np.dtype | str = "uint16",
    out_dtype: np.dtype | str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mode of each window of a level-0 plane `values[H, W]` from its class counts:
    (mode [h, w], counts [L, h, w] in `dtype`, valid count [h, w] uint32). `labels` is sorted
    ascending (at most 256); `fill` is nodata, and the mode's nodata; any other value raises
    `StrayLabel` (its counts would be lost, and the mode with them)."""
    if values.ndim != 2 or values.dtype.kind not in "iu":
        raise ValueError(
            f"class counts want an integer [y, x] plane, got {values.dtype} {values.shape}"
        )
    if not 0 < len(labels) <= 256:
        raise ValueError(f"class counts take 1 to 256 classes, got {len(labels)}")
    h, w = values.shape
    oh, ow = -(-h // factor), -(-w // factor)
    nl = len(labels)
    out_t = np.dtype(out_dtype or values.dtype)
    labels64 = np.asarray(labels, dtype=np.int64)
    count = np.empty((oh, ow), dtype=np.uint32)
    if factor == 2:
        lo, lut, direct = class_lut(labels, fill, values.dtype)
        counts = np.empty((nl, oh, ow), dtype=dtype)
        out = np.empty((oh, ow), dtype=out_t)
        values = np.ascontiguousarray(values)
        nodata = out_t.type(fill)
        stray = _classes2(values, lo, lut, direct, labels64, nodata, counts, count, out)
    else:
        lo, lut, _ = class_lut(labels, fill)
        scratch = np.empty((nl + 2, oh, ow), dtype=dtype)
        _class_counts0(np.ascontiguousarray(values), lo, lut, factor, scratch, count)
        stray = int(scratch[nl + 1].sum())
        counts = scratch[:nl]
        out = mode_of_class_counts(counts, labels, fill, out_t)
    if stray:
        where = np.argwhere((values != fill) & ~np.isin(values, labels))
        y, x = (int(i) for i in where[0])
        raise StrayLabel(int(values[y, x]), len(where), labels, (y, x))
    return out, counts, count


def pool_classes(
    counts: np.ndarray,
    labels: np.ndarray,
    nodata: int,
    out_dtype: np.dtype | str,
    dtype: np.dtype | str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The next level from class counts [L, H, W]: factor-2 sums (partial edge windows sum what
    they have), and their mode: (mode [h, w], counts [L, h, w] in `dtype`, count [h, w])."""
    nl, h, w = counts.shape
    out_counts = np.empty((nl, -(-h // 2), -(-w // 2)), dtype=dtype or counts.dtype)
    count = np.empty(out_counts.shape[1:], dtype=np.uint32)
    out = np.empty(out_counts.shape[1:], dtype=out_dtype)
    labels64 = np.asarray(labels, dtype=np.int64)
    _pool_classes2(
        np.ascontiguousarray(counts), labels64, out.dtype.type(nodata), out_counts, count, out
    )
    return out, out_counts, count


def mode_of_class_counts(
    counts: np.ndarray, labels: np.ndarray, nodata: int, out_dtype: np.dtype | str
) -> np.ndarray:
    """The label with the largest count in each window (ties: the smaller label); `nodata`
    where a window counts nothing."""
    out = np.empty(counts.shape[1:], dtype=out_dtype)
    _mode_of_counts(np.ascontiguousarray(counts), labels, out.dtype.type(nodata), out)
    return out
