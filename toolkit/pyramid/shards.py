"""Per-shard services (I/O): compute one output shard from its source region and write it.

The mean/min/max/sum cascade reads the parent level and its count plane, count-weighted: min,
max, counts and integer sums equal the reducer on the level-0 window bitwise; a float mean or
sum at level k is within k ulps (of the window's largest magnitude) of it, each step rounding
once (`toolkit.pyramid.reference` states and checks this). Mode is not composable from modes,
so a mode level with declared classes (CF flag_values) writes how many level-0 pixels of each
class its windows hold, and the next level sums those 2x2: exact, and level 0 is read once.
Mode without declared classes reads the level-0 window itself (factor 2^k), in row bands to
bound memory: exact, at the price of one level-0 read per level. Every shard is written, an
all-nodata one included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr

from toolkit import kernels, storage
from toolkit.cf import Decoding
from toolkit.engine.listing import KeysBetween, ranged
from toolkit.pyramid.geometry import ShardTask, VarLevel, region, source_region

Memo = dict[tuple[str, bool], Any]  # (path, opened for writing) -> the zarr array
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
    from_classes: bool = False  # src_path is the parent's class counts (mode cascade)
    cf: Decoding | None = None  # level 0: how CF says to read its stored values

    def level0(self, raw: np.ndarray, method: str) -> tuple[np.ndarray, Any]:
        """Level-0 values as the kernels pool them, and their nodata: a quantity decoded to
        floats with NaN for every kind of nodata (packed, float, or integers that declare
        none), a class map (or an integer quantity with nodata) in its stored dtype with every
        kind of nodata written as the one fill."""
        cf = self.cf
        if cf is None:
            return raw, self.src_fill
        kind = np.dtype(cf.dtype).kind
        if method == "mode":
            return cf.classes(raw), cf.fill
        plain = kind == "f" and not cf.packed and cf.valid_min is None and cf.valid_max is None
        if plain and len(cf.nodata) <= 1 and not np.isinf(raw).any():
            # the common float field: NaN and at most one sentinel, which the kernels mask in
            # their own pass; no decoded copy of the block
            return raw, cf.nodata[0] if cf.nodata else np.nan
        if cf.packed or kind == "f" or not cf.masks:
            return cf.decode(raw), np.nan
        return cf.classes(raw), cf.fill

    def path(self, group: str) -> str:
        return f"{group}/{self.out.var}"

    def count_path(self, group: str) -> str:
        return f"{group}/{self.out.count_name}"

    def classes_path(self, group: str) -> str:
        return f"{group}/{self.out.classes_name}"


def open_array(
    store: storage.Store, path: str, write: bool = False, memo: Memo | None = None
) -> Any:
    """Open an array as it is now, one small GET. Kept only where nothing can change its
    metadata while the memo lives: `memo`, one run's (`BuildShard.arrays`: a level's arrays
    are made before its stage and the run reads nothing it rewrites), or the store's own
    `arrays`: a view of one Icechunk fork, made for one worker's stripe. Never across runs: a
    warm worker serves many, and a store recreated at the same URL (or a level rebuilt with
    another shard layout) must not be written through metadata read for an earlier one."""
    if memo is None:
        memo = getattr(store, "arrays", None)  # a view of one fixed session may keep its opens
    if memo is not None and (path, write) in memo:
        return memo[(path, write)]
    config = {"write_empty_chunks": True} if write else None
    with storage.zarr_metadata(store, path):
        arr = zarr.open_array(
            store.zarr(read_only=not write), path=path, mode="r+" if write else "r", config=config
        )
    if memo is not None:
        memo[(path, write)] = arr
    return arr


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


def _with_class_axis(reg: tuple[slice, ...], n: int) -> tuple[slice, ...]:
    return (*reg[:-2], slice(0, n), *reg[-2:])


def compute(
    store: storage.Store, spec: VarSource, method: str, index: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(data, count, class counts or None) of one output shard, exactly as the builder writes
    them."""
    return compute_region(store, spec, method, region(spec.out, index))


def compute_region(
    store: storage.Store,
    spec: VarSource,
    method: str,
    reg: tuple[slice, ...],
    memo: Memo | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """`compute` over any shard-aligned output region (several shards along a leading dim)."""
    out = spec.out
    if method == "mode" and out.classes:
        return _compute_classes(store, spec, reg, memo)
    if (method == "mode" or out.circle is not None) and spec.src_count_path is None:
        return (*_compute_banded(store, spec, reg, method, memo), None)
    sreg = source_region(reg, spec.factor, spec.src_shape, spec.band_axis)
    raw = storage.read(store, open_array(store, spec.src_path, memo=memo), sreg)
    weights = None  # level 0: the kernel derives the joint mask from the values and fill
    fill = spec.src_fill
    if spec.src_count_path is not None:
        cnt = storage.read(
            store,
            open_array(store, spec.src_count_path, memo=memo),
            _count_region(sreg, spec.band_axis),
        )
        weights = cnt.reshape((-1, *cnt.shape[-2:]))
    else:
        raw, fill = spec.level0(raw, method)
    vals, lead = _to_canonical(raw, spec.band_axis)
    return (*_pool_all(vals, weights, lead, spec, method, fill), None)


class StrayClass(ValueError):
    """Level 0 holds a value that is neither nodata nor a declared class (names the array)."""


def _compute_classes(
    store: storage.Store, spec: VarSource, reg: tuple[slice, ...], memo: Memo | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mode from class counts: level 0's classes counted per 2x2 window, or the parent's
    counts summed 2x2; the mode is the class with the most (ties: the smaller label)."""
    out = spec.out
    labels = np.asarray(out.classes)
    n = len(labels)
    sreg = source_region(reg, 2, spec.src_shape, None)
    if spec.from_classes:
        arr = open_array(store, spec.src_path, memo=memo)
        raw = storage.read(store, arr, _with_class_axis(sreg, n))
        lead = raw.shape[:-3]
        src = raw.reshape((-1, *raw.shape[-3:]))
        pooled = [
            kernels.pool_classes(s, labels, out.fill_value, out.dtype, out.classes_dtype)
            for s in src
        ]
    else:
        arr = open_array(store, spec.src_path, memo=memo)
        raw, fill = spec.level0(storage.read(store, arr, sreg), "mode")
        lead = raw.shape[:-2]
        planes = raw.reshape((-1, *raw.shape[-2:]))
        try:
            pooled = [
                kernels.classes_level0(p, fill, labels, 2, out.classes_dtype, out.dtype)
                for p in planes
            ]
        except kernels.StrayLabel as err:
            y, x = sreg[-2].start + err.at[0], sreg[-1].start + err.at[1]
            raise StrayClass(
                f"array {out.var!r}: {err}, the first at level-0 y={y}, x={x}; add {err.value} "
                "to its flag_values and flag_meanings, or set those pixels to its fill value"
            ) from None
    data = np.stack([m for m, _, _ in pooled])
    counts = np.stack([c for _, c, _ in pooled])
    valid = np.stack([v for _, _, v in pooled])
    return (
        data.reshape((*lead, *data.shape[-2:])),
        valid.reshape((*lead, *valid.shape[-2:])),
        counts.reshape((*lead, *counts.shape[-3:])),
    )


def _pool_all(
    vals: np.ndarray,
    weights: np.ndarray | None,
    lead: tuple[int, ...],
    spec: VarSource,
    method: str,
    fill: Any,
) -> tuple[np.ndarray, np.ndarray]:
    out = spec.out
    datas, counts = [], []
    for t in range(vals.shape[0]):
        if out.circle is not None:
            d, c = kernels.pool_circular(
                vals[t], fill, out.circle, out.fill_value, spec.factor, np.dtype(out.dtype)
            )
        elif weights is None:
            d, c = kernels.pool_level0(
                vals[t], fill, method, out.fill_value, spec.factor, np.dtype(out.dtype)
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
    store: storage.Store,
    spec: VarSource,
    reg: tuple[slice, ...],
    method: str,
    memo: Memo | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Mode (or a circular mean) straight from level 0, a band of output rows at a time."""
    f = spec.factor
    rows = reg[-2]
    width = (reg[-1].stop - reg[-1].start) * f
    step = max(1, MODE_BAND_PIXELS // max(1, width * f * f))
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for r0 in range(rows.start, rows.stop, step):
        sub = (*reg[:-2], slice(r0, min(rows.stop, r0 + step)), reg[-1])
        sreg = source_region(sub, f, spec.src_shape, spec.band_axis)
        arr = open_array(store, spec.src_path, memo=memo)
        raw, fill = spec.level0(storage.read(store, arr, sreg), method)
        vals, lead = _to_canonical(raw, spec.band_axis)
        parts.append(_pool_all(vals, None, lead, spec, method, fill))
    return (
        np.concatenate([p[0] for p in parts], axis=-2),
        np.concatenate([p[1] for p in parts], axis=-2),
    )


@dataclass(frozen=True)
class BuildShard:
    """The service of one level: compute a shard, write its count plane, then its data.

    `arrays`: the arrays its shards opened, kept for the next shard served by this object (an
    open is a metadata GET and ~1.4 ms of zarr: 12% of a small build's warm time). One object
    serves one run in process; a copy that travels to a worker arrives with none."""

    store: storage.Store
    group: str
    method: str  # the plan's (a label): each variable pools with its own `VarLevel.method`
    sources: tuple[VarSource, ...]
    arrays: Memo = field(default_factory=dict, init=False, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "arrays"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in {**state, "arrays": {}}.items():
            object.__setattr__(self, k, v)

    def spec(self, var: str) -> VarSource:
        for s in self.sources:
            if s.out.var == var:
                return s
        raise KeyError(f"level {self.group} has no variable {var!r}")

    def __call__(self, task: ShardTask) -> str:
        spec = self.spec(task.var)
        self._write(spec, region(spec.out, task.index))
        return task.key

    def together(self, ax: int | None, tasks: Sequence[ShardTask]) -> None:
        """A run of `runs` (consecutive along leading axis `ax`): one read, one pooling pass and
        one write over the region its shards make up; each plane is pooled alone, so every
        shard is exactly what `__call__` writes."""
        spec = self.spec(tasks[0].var)
        first, last = region(spec.out, tasks[0].index), region(spec.out, tasks[-1].index)
        if ax is not None:
            first = (*first[:ax], slice(first[ax].start, last[ax].stop), *first[ax + 1 :])
        self._write(spec, first)

    def _write(self, spec: VarSource, reg: tuple[slice, ...]) -> None:
        memo = self.arrays
        data, count, classes = compute_region(self.store, spec, spec.out.method, reg, memo)
        # count (and class counts) first: the data object is the task's "done" marker
        open_array(self.store, spec.count_path(self.group), True, memo)[
            _count_region(reg, spec.band_axis)
        ] = count
        if classes is not None:
            open_array(self.store, spec.classes_path(self.group), True, memo)[
                _with_class_axis(reg, len(spec.out.classes))
            ] = classes
        open_array(self.store, spec.path(self.group), True, memo)[reg] = data


def run_axis(tasks: Sequence[ShardTask]) -> int | None:
    """The leading axis along which one variable's tasks vary most (None: no leading axis)."""
    lead = len(tasks[0].index) - 2
    if lead < 1:
        return None
    return max(range(lead), key=lambda ax: len({t.index[ax] for t in tasks}))


def runs(tasks: Sequence[ShardTask], limit: int) -> list[tuple[int | None, list[ShardTask]]]:
    """`tasks` in runs one region covers: one variable, the same index but along its
    `run_axis`, consecutive there, at most `limit` long; each with its axis."""
    by_var: dict[str, list[ShardTask]] = {}
    for t in tasks:
        by_var.setdefault(t.var, []).append(t)
    out: list[tuple[int | None, list[ShardTask]]] = []
    for mine in by_var.values():
        ax = run_axis(mine)
        if ax is None:
            out += [(None, [t]) for t in mine]
            continue
        groups: dict[tuple[int, ...], list[ShardTask]] = {}
        for t in mine:
            groups.setdefault((*t.index[:ax], *t.index[ax + 1 :]), []).append(t)
        for group in groups.values():
            run: list[ShardTask] = []
            for t in sorted(group, key=lambda t: t.index[ax]):
                if run and (t.index[ax] != run[-1].index[ax] + 1 or len(run) >= limit):
                    out.append((ax, run))
                    run = []
                run.append(t)
            out.append((ax, run))
    return out


@dataclass(frozen=True)
class DoneShards:
    """Tasks whose data and count objects both exist (resume skips exactly these)."""

    store: storage.Store
    group: str
    tasks: Sequence[ShardTask]  # the level's stable list (columns: `ShardList`)

    def __call__(self) -> frozenset[str]:
        have = set(storage.list_keys(self.store, self.group + "/"))
        return frozenset(t.key for t in self.tasks if all(k in have for k in t.objects))

    @property
    def per_block(self) -> DoneBetween | None:
        """How the engine observes one contiguous block's done tasks (per-stripe done-sets),
        when a key range lists cheaply; it carries no task list, only the store and level."""
        return (
            DoneBetween(KeysBetween(self.store, self.group + "/")) if ranged(self.store) else None
        )


@dataclass(frozen=True)
class DoneBetween:
    """The done tasks of one contiguous block of the stable list, from a listing of the key
    range its objects span."""

    listing: KeysBetween

    def __call__(self, block: Sequence[ShardTask]) -> frozenset[str]:
        objects = [k for t in block for k in t.objects]
        if not objects:
            return frozenset()
        have = self.listing(min(objects), max(objects))
        return frozenset(t.key for t in block if all(k in have for k in t.objects))


def count_region(spec: VarSource, index: tuple[int, ...]) -> tuple[slice, ...]:
    return _count_region(region(spec.out, index), spec.band_axis)
