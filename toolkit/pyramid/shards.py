"""Per-shard services (I/O): compute one output shard from its source region and write it.

The mean/min/max/sum cascade reads the parent level and its count plane, count-weighted: min,
max, counts and integer sums equal the reducer on the level-0 window bitwise; a float mean or
sum at level k is within k ulps (of the window's largest magnitude) of it, each step rounding
once (`toolkit.pyramid.reference` states and checks this). Mode is not composable, so a mode
level reads the level-0 window itself (factor 2^k), in row bands to bound memory: exact, at the
price of one level-0 read per mode level. Every shard is written, an all-nodata one included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from toolkit import kernels, storage
from toolkit.pyramid.plan import ShardTask, VarLevel, region, source_region

MODE_BAND_PIXELS = 1 << 24  # level-0 pixels per band read for a mode shard


@dataclass(frozen=True)
class VarSource:
    """Where one variable of one level comes from."""

    out: VarLevel
    src_path: str  # "temp" (level 0) or "2x/temp"
    src_count_path: str | None  # None: weights are level-0 joint validity
    src_fill: Any
    src_shape: tuple[int, ...]
    factor: int
    band_axis: int | None

    def path(self, group: str) -> str:
        return f"{group}/{self.out.var}"

    def count_path(self, group: str) -> str:
        return f"{group}/{self.out.count_name}"


def open_array(store: storage.Store, path: str, write: bool = False) -> Any:
    """Open an array as it is now. Never cached across tasks: a warm worker serves many runs,
    and a store recreated at the same URL (or a level rebuilt with another shard layout) must
    not be written through metadata read for an earlier one. One small GET per open."""
    config = {"write_empty_chunks": True} if write else None
    return zarr.open_array(
        store.zarr(read_only=not write), path=path, mode="r+" if write else "r", config=config
    )


def _to_canonical(a: np.ndarray, band_axis: int | None) -> tuple[np.ndarray, tuple[int, ...]]:
    """[..., y, x] -> ([T, B, y, x], leading shape without band)."""
    a = a[..., np.newaxis, :, :] if band_axis is None else np.moveaxis(a, band_axis, -3)
    lead = a.shape[:-3]
    return a.reshape((-1, *a.shape[-3:])), lead


def _from_canonical(a: np.ndarray, lead: tuple[int, ...], band_axis: int | None) -> np.ndarray:
    a = a.reshape((*lead, *a.shape[-3:]))
    if band_axis is None:
        return a[..., 0, :, :]
    return np.moveaxis(a, -3, band_axis)


def _count_region(sel: tuple[slice, ...], band_axis: int | None) -> tuple[slice, ...]:
    return tuple(s for d, s in enumerate(sel) if d != band_axis)


def _level0_weights(vals: np.ndarray, fill: Any) -> np.ndarray:
    return (
        np.stack([kernels.joint_valid(v, fill) for v in vals])
        if len(vals)
        else np.zeros((0, *vals.shape[-2:]), np.uint32)
    )


def compute(
    store: storage.Store, spec: VarSource, method: str, index: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """(data, count) of one output shard, exactly as the builder writes them."""
    out = spec.out
    reg = region(out, index)
    if method == "mode" and spec.src_count_path is None:
        return _compute_banded(store, spec, reg)
    sreg = source_region(reg, spec.factor, spec.src_shape, spec.band_axis)
    raw = np.asarray(open_array(store, spec.src_path)[sreg])
    vals, lead = _to_canonical(raw, spec.band_axis)
    weights = None  # level 0: the kernel derives the joint mask from the values and fill
    if spec.src_count_path is not None:
        cnt = np.asarray(
            open_array(store, spec.src_count_path)[_count_region(sreg, spec.band_axis)]
        )
        weights = cnt.reshape((-1, *cnt.shape[-2:]))
    return _pool_all(vals, weights, lead, spec, method)


def _pool_all(
    vals: np.ndarray,
    weights: np.ndarray | None,
    lead: tuple[int, ...],
    spec: VarSource,
    method: str,
) -> tuple[np.ndarray, np.ndarray]:
    out = spec.out
    datas, counts = [], []
    for t in range(vals.shape[0]):
        if weights is None:
            d, c = kernels.pool_level0(
                vals[t], spec.src_fill, method, out.fill_value, spec.factor, np.dtype(out.dtype)
            )
        else:
            d, c = kernels.pool(
                vals[t], weights[t], method, out.fill_value, spec.factor, np.dtype(out.dtype)
            )
        datas.append(d)
        counts.append(c)
    data = _from_canonical(np.stack(datas), lead, spec.band_axis)
    count = np.stack(counts).reshape((*lead, *counts[0].shape))
    return data, count


def _compute_banded(
    store: storage.Store, spec: VarSource, reg: tuple[slice, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Mode straight from level 0, a band of output rows at a time."""
    f = spec.factor
    rows = reg[-2]
    width = (reg[-1].stop - reg[-1].start) * f
    step = max(1, MODE_BAND_PIXELS // max(1, width * f * f))
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for r0 in range(rows.start, rows.stop, step):
        sub = (*reg[:-2], slice(r0, min(rows.stop, r0 + step)), reg[-1])
        sreg = source_region(sub, f, spec.src_shape, spec.band_axis)
        raw = np.asarray(open_array(store, spec.src_path)[sreg])
        vals, lead = _to_canonical(raw, spec.band_axis)
        parts.append(_pool_all(vals, None, lead, spec, "mode"))
    return (
        np.concatenate([p[0] for p in parts], axis=-2),
        np.concatenate([p[1] for p in parts], axis=-2),
    )


@dataclass(frozen=True)
class BuildShard:
    """The service of one level: compute a shard, write its count plane, then its data."""

    store: storage.Store
    group: str
    method: str
    sources: tuple[VarSource, ...]

    def spec(self, var: str) -> VarSource:
        for s in self.sources:
            if s.out.var == var:
                return s
        raise KeyError(f"level {self.group} has no variable {var!r}")

    def __call__(self, task: ShardTask) -> str:
        spec = self.spec(task.var)
        data, count = compute(self.store, spec, self.method, task.index)
        reg = region(spec.out, task.index)
        # count first: the data object is the task's "done" marker
        open_array(self.store, spec.count_path(self.group), True)[
            _count_region(reg, spec.band_axis)
        ] = count
        open_array(self.store, spec.path(self.group), True)[reg] = data
        return task.key


@dataclass(frozen=True)
class DoneShards:
    """Tasks whose data and count objects both exist (resume skips exactly these)."""

    store: storage.Store
    group: str
    tasks: tuple[ShardTask, ...]

    def __call__(self) -> frozenset[str]:
        have = set(storage.list_keys(self.store, self.group + "/"))
        return frozenset(t.key for t in self.tasks if t.data_key in have and t.count_key in have)


def source_block(
    store: storage.Store, spec: VarSource, index: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """The source values [T, B, H, W] and weights [T, H, W] a shard pools (for verification)."""
    reg = region(spec.out, index)
    sreg = source_region(reg, spec.factor, spec.src_shape, spec.band_axis)
    vals, _ = _to_canonical(np.asarray(open_array(store, spec.src_path)[sreg]), spec.band_axis)
    if spec.src_count_path is None:
        return vals, _level0_weights(vals, spec.src_fill)
    cnt = np.asarray(open_array(store, spec.src_count_path)[_count_region(sreg, spec.band_axis)])
    return vals, cnt.reshape((-1, *cnt.shape[-2:]))


def count_region(spec: VarSource, index: tuple[int, ...]) -> tuple[slice, ...]:
    return _count_region(region(spec.out, index), spec.band_axis)
