"""The pyramid planner (pure): level geometry, shard alignment, pruning, gate targets.

Input is values: each variable's array metadata and the keys listed under its prefix. Output is
a `PyramidPlan`: for every level, the output arrays' geometry and the stable list of output
shards (one task each). All levels follow from the level-0 listing, so the whole graph is planned
once and the same plan is recorded beside the output for reruns and the verifier. A level's
shards are held as columns (`ShardList`: a raveled grid index each, in key order) and the listing
is read a page at a time, so a store of 10^7 objects plans in seconds and tens of bytes per
object on the client (`toolkit.pyramid.shardkeys`).

Shard alignment. Along each spatial axis a level's shard size `s_k` is chosen so that no parent
shard partly overlaps a child shard: either half a parent shard is a whole number of child
shards (`(s_{k-1} / 2) % s_k == 0`, the first levels when level-0 shards are large) or a child
shard covers a whole number of parent shards (`(2 s_k) % s_{k-1} == 0`, deeper levels). Keeping
`s_k = s_{k-1}` always satisfies the second, so a valid size always exists.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from itertools import product
from typing import Any, overload

import numpy as np
from zarr.core.chunk_key_encodings import ChunkKeyEncoding, parse_chunk_key_encoding

from toolkit.cf import Decoding, direction
from toolkit.kernels import METHODS
from toolkit.pyramid import shardkeys
from toolkit.pyramid.settings import MAX_SHARD, MIXED, Settings, kernel
from toolkit.tasks import stable

__all__ = [
    "ArrayMeta",
    "LevelPlan",
    "PlanError",
    "PyramidPlan",
    "RecordedLevel",
    "RecordedPlan",
    "RootNode",
    "ShardList",
    "ShardTask",
    "Targets",
    "VarLevel",
    "check_coordinate",
    "check_dtype",
    "check_level_contents",
    "check_level_names",
    "child_shard_size",
    "choose_methods",
    "declared_classes",
    "decode_keys",
    "desired_shard",
    "flagged",
    "inner_chunk",
    "level_count",
    "max_levels",
    "plan_pyramid",
    "task_bytes",
]

TILE = 512
GROW_BELOW = 1024  # shards smaller than this grow level by level (tile chunks inside shards)
MAX_CLASSES = 64  # declared classes a mode pyramid carries counts of (more: re-read level 0)


class PlanError(ValueError):
    """The store cannot be planned as asked; the message names the array and the cause."""


@dataclass(frozen=True)
class ArrayMeta:
    """What the planner needs to know about one level-0 array."""

    name: str
    shape: tuple[int, ...]
    dims: tuple[str, ...]
    grid: tuple[int, ...]  # the object grid: shard shape if sharded, else chunk shape
    chunks: tuple[int, ...]  # inner chunk shape
    dtype: str
    fill_value: Any
    key_encoding: dict[str, Any] = field(
        default_factory=lambda: {"name": "default", "configuration": {"separator": "/"}}
    )
    cf: Decoding | None = None  # how CF says to read the stored values (`toolkit.cf.decoding`)
    circle: tuple[float, float, float] = (0.017453292519943295, 0.0, 360.0)  # an angle's units

    @property
    def encoding(self) -> ChunkKeyEncoding:
        return parse_chunk_key_encoding(self.key_encoding)

    @property
    def packed(self) -> bool:
        return self.cf is not None and self.cf.packed

    @property
    def value_bytes(self) -> int:
        """Bytes of one value as the kernels see it (a packed integer unpacks to float64)."""
        return np.dtype(self.cf.quantity_dtype if self.packed else self.dtype).itemsize  # type: ignore[union-attr]


@dataclass(frozen=True)
class ShardTask:
    """One output shard of one variable at one level: the data object and its count object."""

    group: str
    var: str
    index: tuple[int, ...]
    data_key: str
    count_key: str
    classes_key: str | None = None  # the class-count object of a cascading mode level

    @property
    def key(self) -> str:
        return self.data_key

    @property
    def objects(self) -> tuple[str, ...]:
        extra = (self.classes_key,) if self.classes_key else ()
        return (self.data_key, self.count_key, *extra)


@dataclass(frozen=True)
class VarLevel:
    """One variable's arrays at one level: the data array and its count plane."""

    var: str
    shape: tuple[int, ...]
    dims: tuple[str, ...]
    shards: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    fill_value: Any
    count_shape: tuple[int, ...]
    count_dims: tuple[str, ...]
    count_shards: tuple[int, ...]
    count_chunks: tuple[int, ...]
    key_encoding: dict[str, Any]
    classes: tuple[int, ...] = ()  # mode with declared classes: their per-window counts cascade
    classes_dtype: str = "uint16"
    # a direction's circular mean (radians per unit, lowest value, period); not composable
    # from a coarser level's angles, so every level pools level 0 (factor 2^k)
    circle: tuple[float, float, float] | None = None
    method: str = "mean"  # this variable's reducer (a store may hold quantities and classes)

    @property
    def count_name(self) -> str:
        return f"{self.var}_count"

    @property
    def classes_name(self) -> str:
        """The class-count array: level-0 pixels of each class in each window."""
        return f"{self.var}_class_count"

    @property
    def class_dim(self) -> str:
        return f"{self.var}_class"

    def classes_layout(
        self,
    ) -> tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
        """(shape, dims, shards, chunks) of the class-count array: the class axis before y, x,
        whole in every shard and chunk."""
        n = len(self.classes)

        def put(t: tuple[Any, ...], v: Any) -> tuple[Any, ...]:
            return (*t[:-2], v, *t[-2:])

        return (
            put(self.shape, n),
            put(self.dims, self.class_dim),
            put(self.shards, n),
            put(self.chunks, n),
        )

    def grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-n // s) for n, s in zip(self.shape, self.shards, strict=True))

    @property
    def encoding(self) -> ChunkKeyEncoding:
        return parse_chunk_key_encoding(self.key_encoding)


@dataclass(frozen=True, eq=False)
class ShardList(Sequence[ShardTask]):
    """A level's output shards as columns, in the order of their data keys (as `stable` sorts
    them, with the same digest): each row a variable (`vars[which]`) and the shard's raveled
    index in that variable's grid. 10 bytes a shard on the client instead of a `ShardTask`;
    iterating makes the tasks, slicing (a worker's stripe) gives a smaller list, which is what
    travels. The planner's `TaskList` of a level (`toolkit.tasks.TaskList`)."""

    group: str
    vars: tuple[VarLevel, ...]
    band_axes: tuple[int | None, ...]
    which: np.ndarray  # uint16: the variable of each row
    lin: np.ndarray  # int64: the shard's index in its variable's grid, raveled

    @classmethod
    def of(
        cls,
        group: str,
        vars: tuple[VarLevel, ...],
        band_axes: tuple[int | None, ...],
        lins: Sequence[np.ndarray],
    ) -> ShardList:
        """The list of each variable's shards `lins[i]` (raveled, any order), sorted by key."""
        made = cls(group, vars, band_axes, np.empty(0, np.uint16), np.empty(0, np.int64))
        which, lin = shardkeys.sort_rows(made._spellings("data"), made._grids(), lins)
        return cls(group, vars, band_axes, which, lin)

    def _grids(self) -> list[tuple[int, ...]]:
        return [v.grid_shape() for v in self.vars]

    def _spellings(self, kind: str) -> list[shardkeys.Spelling]:
        name = {"data": "var", "count": "count_name", "classes": "classes_name"}[kind]
        return [
            shardkeys.Spelling.of(f"{self.group}/{getattr(v, name)}/", v.encoding)
            for v in self.vars
        ]

    def __len__(self) -> int:
        return len(self.lin)

    @overload
    def __getitem__(self, i: int) -> ShardTask: ...
    @overload
    def __getitem__(self, i: slice) -> ShardList: ...
    def __getitem__(self, i: int | slice) -> ShardTask | ShardList:
        if isinstance(i, slice):
            return replace(self, which=self.which[i], lin=self.lin[i])
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"shard {i} of a list of {n}")
        return next(iter(self[i % n : i % n + 1]))

    def __iter__(self) -> Iterator[ShardTask]:
        data, count, classes = (self._spellings(k) for k in ("data", "count", "classes"))
        for i, a, b in shardkeys.runs(self.which):
            v, ax = self.vars[i], self.band_axes[i]
            idx = shardkeys.unravel(self.lin[a:b], v.grid_shape())
            keys = data[i].keys(idx)
            counts = count[i].keys(np.delete(idx, ax, axis=1) if ax is not None else idx)
            kinds = classes[i].keys(_class_index(idx)) if v.classes else [None] * len(keys)
            for t, k, c, m in zip(idx.tolist(), keys, counts, kinds, strict=True):
                yield ShardTask(self.group, v.var, tuple(t), k, c, m)

    def keys_of(self, kind: str, var: int) -> Iterator[str]:
        """Variable `var`'s keys of one kind ("data", "count", "classes") in row order: sorted
        (dropping the band index, always 0, or adding the class axis at 0 keeps the order)."""
        spelling = self._spellings(kind)[var]
        v, ax = self.vars[var], self.band_axes[var]
        lin = self.lin[self.which == var]
        keys = []
        for s in range(0, len(lin), shardkeys.BLOCK):
            idx = shardkeys.unravel(lin[s : s + shardkeys.BLOCK], v.grid_shape())
            if kind == "count" and ax is not None:
                idx = np.delete(idx, ax, axis=1)
            elif kind == "classes":
                idx = _class_index(idx)
            block = spelling.keys(idx)
            if spelling.encoding is None:
                yield from block
            else:  # a custom encoding's keys need not sort as their indices
                keys += block
        yield from sorted(keys)

    @property
    def keys(self) -> list[str]:
        data, grids = self._spellings("data"), self._grids()
        return [
            k
            for i, a, b in shardkeys.runs(self.which)
            for k in data[i].keys(shardkeys.unravel(self.lin[a:b], grids[i]))
        ]

    @cached_property
    def digest(self) -> str:
        """What `stable(list(self)).digest` is: the hash of the data keys in order."""
        data, grids = self._spellings("data"), self._grids()
        return shardkeys.digest_rows(data, grids, self.which, self.lin)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardList):
            return NotImplemented
        return (self.group, len(self), self.digest) == (other.group, len(other), other.digest)

    def __hash__(self) -> int:
        return hash((self.group, self.digest))

    def __repr__(self) -> str:
        return f"ShardList({self.group!r}, {len(self)} shards)"


def _class_index(idx: np.ndarray) -> np.ndarray:
    """A shard's index in its class-count array: the class axis (whole, index 0) before y, x."""
    return np.insert(idx, idx.shape[1] - 2, 0, axis=1)


@dataclass(frozen=True)
class Targets(Collection[str]):
    """A level's gate targets, every shard's objects (data, count, class counts), sorted, made
    when iterated: a gate ships the level's columns rather than a string per object."""

    tasks: ShardList

    def __len__(self) -> int:
        per = np.array([3 if v.classes else 2 for v in self.tasks.vars], np.int64)
        counts = np.bincount(self.tasks.which, minlength=len(per))[: len(per)]
        return int(counts @ per)

    def __iter__(self) -> Iterator[str]:
        t = self.tasks
        streams = [
            t.keys_of(kind, i)
            for i, v in enumerate(t.vars)
            for kind in ("data", "count", *(("classes",) if v.classes else ()))
        ]
        return heapq.merge(*streams)

    def __contains__(self, key: object) -> bool:
        return any(k == key for k in self)


@dataclass(frozen=True)
class LevelPlan:
    k: int
    group: str
    parent: str  # "" for level 0 (the root arrays)
    factor: int
    shape: tuple[int, int]  # spatial (y, x)
    vars: tuple[VarLevel, ...]
    tasks: ShardList

    def var(self, name: str) -> VarLevel:
        for v in self.vars:
            if v.var == name:
                return v
        raise KeyError(f"level {self.group} has no variable {name!r}")

    @property
    def targets(self) -> Targets:
        """Every task's objects, sorted; a lazy collection (its length costs nothing)."""
        return Targets(self.tasks)


@dataclass(frozen=True)
class PyramidPlan:
    method: str  # the reducer every variable shares, or MIXED (each VarLevel has its own)
    band_dim: str | None
    variables: tuple[str, ...]
    spatial_dims: tuple[str, str]
    base_shape: tuple[int, int]
    levels: tuple[LevelPlan, ...]
    naive: tuple[int, ...]  # tasks per level before pruning
    source_digest: str  # hash of the level-0 shard listing the plan was derived from
    max_shard: int = MAX_SHARD
    method_from: str = "given"  # why these operators (`choose_methods`), joined
    notes: tuple[str, ...] = ()  # told to the user with the plan and the build's report
    circular: tuple[str, ...] = ()  # variables whose mean is circular (directions)
    reading: tuple[str, ...] = ()  # how each variable's level 0 is read (`Decoding.describe`)
    # each level-0 shard's content fingerprint {var: {"i.j": `source.settle_print`}}: recorded
    # beside the plan, not in it (two stores of the same data have other fingerprints, and the
    # same plan); an in-place edit shows here
    prints: Mapping[str, Mapping[str, str]] = field(default_factory=dict, compare=False)
    operators_from: tuple[tuple[str, str], ...] = ()  # (variable, why its operator)

    @property
    def operators(self) -> dict[str, str]:
        """Each variable's operator as the user names it (`circular_mean` for directions)."""
        return {
            v.var: "circular_mean" if v.circle is not None else v.method
            for v in self.levels[0].vars
        }

    @property
    def digest(self) -> str:
        parts = [_Key(f"{lvl.group}:{lvl.tasks.digest}") for lvl in self.levels]
        carried = {v.var: v.classes for v in self.levels[0].vars if v.classes}
        if carried:  # what the class counts count is part of what was built
            parts.append(_Key("classes:" + json.dumps(carried, sort_keys=True)))
        parts.append(_Key("settings:" + json.dumps(self.settings.core(), sort_keys=True)))
        return stable(parts).digest[:16] + self.source_digest[:8]

    def level(self, group: str) -> LevelPlan:
        for lvl in self.levels:
            if lvl.group == group:
                return lvl
        raise KeyError(f"no level {group!r} in the plan (levels: {[x.group for x in self.levels]})")

    @property
    def settings(self) -> Settings:
        """What the levels are built with: recorded, and agreed with by later builds."""
        return Settings(
            operators=self.operators,
            band_dim=self.band_dim,
            levels=len(self.levels),
            max_shard=self.max_shard,
            spatial_dims=self.spatial_dims,
            classes={v.var: v.classes for v in self.levels[0].vars if v.classes},
            why=dict(self.operators_from),
        )

    def to_json(self) -> str:
        return RecordedPlan.of(self).to_json()


@dataclass(frozen=True)
class RecordedLevel:
    """One level as a plan record holds it: its geometry and the data keys of its shards."""

    group: str
    parent: str
    factor: int
    shape: tuple[int, ...]
    tasks_digest: str
    vars: tuple[VarLevel, ...]
    keys: tuple[str, ...]

    def var(self, name: str) -> VarLevel:
        for v in self.vars:
            if v.var == name:
                return v
        raise KeyError(f"recorded level {self.group} has no variable {name!r}")


@dataclass(frozen=True)
class RecordedPlan:
    """A plan as a build records it beside the levels (`.pyramid/plan`) and reads it back:
    its settings, digests and every level's geometry and shard keys (`to_json` writes what
    `from_json` reads; the task objects themselves are the planner's, re-planned from level 0)."""

    digest: str
    source_digest: str
    settings: Settings
    method_from: str
    operators_from: Mapping[str, str]
    base_shape: tuple[int, ...]
    naive: tuple[int, ...]
    levels: tuple[RecordedLevel, ...]

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(lvl.group for lvl in self.levels)

    def level(self, group: str) -> RecordedLevel:
        return next(lvl for lvl in self.levels if lvl.group == group)

    @classmethod
    def of(cls, p: PyramidPlan) -> RecordedPlan:
        levels = tuple(
            RecordedLevel(
                lvl.group, lvl.parent, lvl.factor, lvl.shape, lvl.tasks.digest, lvl.vars,
                tuple(lvl.tasks.keys),
            )
            for lvl in p.levels
        )  # fmt: skip
        return cls(
            p.digest, p.source_digest, p.settings, p.method_from, dict(p.operators_from),
            p.base_shape, p.naive, levels,
        )  # fmt: skip

    def to_json(self) -> str:
        doc = {
            "digest": self.digest,
            "source_digest": self.source_digest,
            **self.settings.core(),
            "method_from": self.method_from,
            "operators": dict(self.settings.operators),
            "operators_from": dict(self.operators_from),
            "spatial_dims": list(self.settings.spatial_dims),
            "base_shape": list(self.base_shape),
            "naive": list(self.naive),
            "level_plans": [
                {
                    "group": lvl.group,
                    "parent": lvl.parent,
                    "factor": lvl.factor,
                    "shape": list(lvl.shape),
                    "tasks_digest": lvl.tasks_digest,
                    "vars": [asdict(v) for v in lvl.vars],
                    "keys": list(lvl.keys),
                }
                for lvl in self.levels
            ],
        }
        return json.dumps(doc, indent=1)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RecordedPlan:
        """The plan a record holds; KeyError/TypeError/ValueError when it is not one. Fields
        of a variable an older build did not record are what it planned then (its operator's
        kernel, no class counts, no circle)."""
        plans = doc["level_plans"]
        first = plans[0]["vars"] if plans else []
        classes = {v["var"]: v.get("classes") or () for v in first}
        settings = Settings.from_record(doc, classes=classes)
        levels = tuple(
            RecordedLevel(
                group=str(lp["group"]),
                parent=str(lp.get("parent", "")),
                factor=int(lp["factor"]),
                shape=tuple(int(n) for n in lp["shape"]),
                tasks_digest=str(lp.get("tasks_digest", "")),
                vars=tuple(_recorded_var(v, k, settings) for v in lp["vars"]),
                keys=tuple(str(key) for key in lp["keys"]),
            )
            for k, lp in enumerate(plans, start=1)
        )
        return cls(
            digest=str(doc["digest"]),
            source_digest=str(doc["source_digest"]),
            settings=settings,
            method_from=str(doc.get("method_from") or "given"),
            operators_from={str(n): str(w) for n, w in (doc.get("operators_from") or {}).items()},
            base_shape=tuple(int(n) for n in doc.get("base_shape") or ()),
            naive=tuple(int(n) for n in doc.get("naive") or ()),
            levels=levels,
        )


TUPLES = ("shape", "dims", "shards", "chunks", "count_shape", "count_dims", "count_shards",
          "count_chunks", "classes")  # fmt: skip


def _recorded_var(d: Mapping[str, Any], k: int, settings: Settings) -> VarLevel:
    """A `VarLevel` of level `k` as recorded (`asdict`); what an older build did not record
    is what it planned."""
    names = {f.name for f in fields(VarLevel)}
    given = {n: tuple(d[n]) if n in TUPLES else d[n] for n in names if n in d}
    if given.get("circle") is not None:
        given["circle"] = tuple(given["circle"])
    op = settings.operators.get(str(d["var"]), settings.method)
    given.setdefault("method", kernel(op))
    given.setdefault("classes_dtype", classes_dtype(k))
    if not isinstance(given["key_encoding"], Mapping):
        raise TypeError(f"key_encoding of {d['var']!r} is not an object")
    return VarLevel(**given)


@dataclass(frozen=True)
class _Key:
    key: str


# ----------------------------------------------------------------------------- geometry


def level_count(shape: tuple[int, int], tile: int = TILE) -> int:
    """Levels until the long side fits one tile (at least one level)."""
    n = 1
    while max(-(-shape[0] // 2**n), -(-shape[1] // 2**n)) > tile:
        n += 1
    return n


def _aligned(parent: int, child: int) -> bool:
    return (parent % 2 == 0 and (parent // 2) % child == 0) or (2 * child) % parent == 0


def child_shard_size(parent: int, desired: int = MAX_SHARD) -> int:
    """The largest child shard size <= `desired` along one axis that never partly overlaps a parent.

    Falls back to the parent's own size (a child then covers 2x2 parents), which always aligns.
    """
    for size in range(desired, 0, -1):
        if _aligned(parent, size):
            return size
    return parent


def desired_shard(parent: int, max_shard: int = MAX_SHARD, grow_below: int = GROW_BELOW) -> int:
    """What a level asks of `child_shard_size`.

    Small level-0 shards (or unsharded chunks) below `grow_below` px grow 2x per level (a child
    covers 4x4 parents) so levels get real shards with small chunks inside; from there a child
    keeps the parent's size (covering 2x2 parents, which keeps tasks many and small), and
    shards above `max_shard` split into whole children. A task reads at most (2 * parent)^2 px.
    """
    want = 2 * parent if parent < grow_below else parent
    return min(max_shard, want)


def inner_chunk(shard: int) -> int:
    """Small inner chunks for tile reads: 512 or 256 when they divide the shard, else a divisor <= 512."""
    if shard <= 512:
        return shard
    for c in (512, 256):
        if shard % c == 0:
            return c
    for c in range(512, 0, -1):
        if shard % c == 0 and c >= 64:
            return c
    return shard


def _axis_children(i: int, sp: int, n_parent: int, sc: int) -> range:
    """Child shard indices that parent shard `i` (size sp, axis length n_parent) overlaps."""
    start = i * sp
    stop = min((i + 1) * sp, n_parent)
    return range((start // 2) // sc, (-(-stop // 2) - 1) // sc + 1)


def decode_keys(encoding: ChunkKeyEncoding, keys: Iterable[str], ndim: int) -> set[tuple[int, ...]]:
    """Shard indices of the listed keys (relative to the array); zarr.json and strays are skipped."""
    found: set[tuple[int, ...]] = set()
    for key in keys:
        if key.endswith("zarr.json"):
            continue
        try:
            idx = encoding.decode_chunk_key(key)
        except (ValueError, TypeError):
            continue
        if len(idx) == ndim:
            found.add(tuple(idx))
    return found


# ----------------------------------------------------------------------------- the operator

FLAG_ATTRS = ("flag_values", "flag_meanings", "flag_masks")
MAX_TASK_BYTES = 4 * 2**30  # what one task may read (the source block it pools), by design


def flagged(attrs: Mapping[str, Any]) -> bool:
    """CF says the array holds classes (flag_values/flag_meanings) or bit flags (flag_masks)."""
    return any(k in attrs for k in FLAG_ATTRS)


def choose_methods(
    arrays: Mapping[str, ArrayMeta],
    attrs: Mapping[str, Mapping[str, Any]],
    method: str | Mapping[str, str] | None = None,
    *,
    force: bool = False,
    recorded: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, tuple[str, str]]:
    """{array: (operator, why)}, each array's from what its data means unless given.

    By meaning: CF-flagged arrays (classes) get mode, directions circular_mean, floats and
    packed integers mean, and any other integer array is refused: counts and classes look
    alike, and averaging classes makes fractions that are no class. `method` is given for every
    array, or for those a mapping names; other than mode on a flagged array it is refused
    unless `force`. `recorded`: operators a build already accepted (never refused again)."""
    given = dict(method) if isinstance(method, Mapping) else dict.fromkeys(arrays, method)
    chosen: dict[str, tuple[str, str]] = {}
    for name, a in sorted(arrays.items()):
        kind = np.dtype(a.dtype).kind
        cf = flagged(attrs.get(name, {}))
        said = given.get(name)
        if said is not None:
            if cf and said != "mode" and not force:
                keys = ", ".join(k for k in FLAG_ATTRS if k in attrs.get(name, {}))
                others = ", or name the arrays it is for (--variable)" if len(arrays) > 1 else ""
                raise PlanError(
                    f"array {name!r} has CF {keys}: it holds classes, and --method {said} "
                    f"would make values that are no class; use --method mode, or --force-method{others}"
                )
            chosen[name] = (said, "given")
        elif recorded and name in recorded:
            chosen[name] = recorded[name]
        elif cf:
            chosen[name] = ("mode", "CF flag_values/flag_meanings/flag_masks: classes")
        elif (sn := direction(attrs.get(name, {}))) and (kind == "f" or a.packed):
            chosen[name] = (
                "circular_mean",
                f"CF standard_name {sn}: a direction, averaged circularly",
            )
        elif a.packed:
            chosen[name] = ("mean", "CF scale_factor/add_offset: a packed quantity")
        elif kind == "f":
            chosen[name] = ("mean", "floating point: a quantity")
        elif kind in "iu":
            raise PlanError(
                f"array {name!r} is {a.dtype} with no CF flag_values/flag_meanings: classes or "
                "a quantity? choose --method mode for classes, or mean|min|max|sum for a "
                "quantity (or give it flag_values and flag_meanings)"
            )
        else:
            chosen[name] = ("mean", "")  # refused by the dtype check, with its own message
    return chosen


# ----------------------------------------------------------------------------- planning


def declared_classes(
    arrays: Mapping[str, ArrayMeta], attrs: Mapping[str, Mapping[str, Any]]
) -> dict[str, tuple[int, ...]]:
    """Each integer array's classes from CF `flag_values`, nodata (its fill) left out, when
    there are at most MAX_CLASSES spanning at most 2**16 values; such a mode pyramid carries
    per-class counts from level to level instead of re-reading level 0 for every level."""
    out: dict[str, tuple[int, ...]] = {}
    for name, a in arrays.items():
        flags = attrs.get(name, {}).get("flag_values")
        if flags is None or np.dtype(a.dtype).kind not in "iu":
            continue
        try:
            values = sorted({int(v) for v in np.atleast_1d(np.asarray(flags)).tolist()})
        except (TypeError, ValueError):
            continue
        info = np.iinfo(np.dtype(a.dtype))  # a flag value the dtype cannot hold never occurs
        labels = tuple(
            v
            for v in values
            if info.min <= v <= info.max and (a.fill_value is None or v != int(a.fill_value))
        )
        if 0 < len(labels) <= MAX_CLASSES and labels[-1] - labels[0] < 2**16:
            out[name] = labels
    return out


def classes_dtype(k: int) -> str:
    """Counts of a 2^k x 2^k window: uint16 while 4^k fits, else uint32."""
    return "uint16" if 4**k <= np.iinfo(np.uint16).max else "uint32"


def _output_dtype(method: str, dtype: str, packed: bool = False) -> str:
    dt = np.dtype(dtype)
    kind = dt.kind
    if packed and method != "mode":  # a packed quantity is written decoded
        return "float64" if method == "sum" else "float32"
    if method == "mean":
        return "float64" if dt == np.float64 else "float32"
    if method == "sum":
        return "float64" if kind == "f" else "int64"
    return dt.name


def _output_fill(out_dtype: str, source_fill: Any) -> Any:
    if out_dtype.startswith("float"):
        return float("nan")
    return int(source_fill) if source_fill is not None else 0


def check_dtype(name: str, dtype: np.dtype) -> np.dtype:
    """A dtype a pyramid can pool (integers, floats), or one line naming the array and the fix."""
    if dtype.kind not in "iuf":
        what = {"c": "complex", "b": "boolean", "U": "string", "T": "string", "S": "bytes"}
        raise PlanError(
            f"array {name!r} is {dtype} ({what.get(dtype.kind, 'not a real number type')}): "
            "a pyramid pools real numbers; cast it (e.g. to float32, or uint8 for booleans) "
            "or leave it out with --variable"
        )
    return dtype


def check_coordinate(dim: str, values: np.ndarray, where: str = "") -> None:
    """A spatial coordinate a level can be derived from: every value finite (a level's
    coordinate is the mean of its level-0 window, so one NaN makes a whole cell NaN at every
    level), or one line naming the array, where the first bad value is, and the fix."""
    values = np.asarray(values)
    if values.dtype.kind not in "fc":
        return
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        i = int(bad[0])
        more = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
        raise PlanError(
            f"{where}{'/' if where else ''}{dim}: coordinate array {dim!r} holds {values[i]} at "
            f"index {i} of {values.size}{more}: "
            "a level's coordinates are means of these; write the cell centres there (e.g. "
            "interpolated from the neighbours) and build again"
        )


@dataclass(frozen=True)
class RootNode:
    """A node at the store's root, as the builder must know it before writing beside it:
    `ours` when what this toolkit records marks it as its own (a level group's
    `pyramid:factor`, the records group holding a plan)."""

    kind: str  # "array" or "group"
    ours: bool = False


def check_level_names(
    p: PyramidPlan,
    nodes: Mapping[str, RootNode],
    where: str,
    recorded: Iterable[str] = (),
    records_group: str | None = None,
) -> None:
    """Every node the build writes (its level groups, `records_group`) is free or this
    toolkit's own: a group of that name in `recorded` (the levels its record lists) or marked
    `ours`. A user's array or group there is refused before anything is written, one line
    naming it, with the fix (its data and attributes would be replaced, or mixed with a
    level's)."""
    mine = set(recorded)
    names = [lvl.group for lvl in p.levels] + ([records_group] if records_group else [])
    taken = [
        n
        for n in names
        if n in nodes and not (nodes[n].kind == "group" and (nodes[n].ours or n in mine))
    ]
    if not taken:
        return
    first = taken[0]
    also = f" (also {', '.join(repr(n) for n in taken[1:])})" if len(taken) > 1 else ""
    if first == records_group:
        what, fix = "where the pyramid keeps its records", "rename or move it"
    else:
        k = next(lvl.k for lvl in p.levels if lvl.group == first)
        what = f"where pyramid level {first} goes"
        fewer = f", or build fewer levels (--levels {k - 1})" if k > 1 else ""
        fix = f"rename or move it{fewer}"
    raise PlanError(
        f"{where}/{first}: the store's own {nodes[first].kind} {first!r}, which this toolkit "
        f"did not write, is {what}{also}; {fix}"
    )


def check_level_contents(
    p: PyramidPlan,
    children: Mapping[str, Iterable[str]],
    where: str,
    written: Iterable[str] = (),
    recorded: Iterable[str] | None = None,
) -> None:
    """Inside this toolkit's level groups, only what it writes there: `children` holds each
    existing level group's immediate children (one listing each), `written` the coordinates
    and grid mappings it carries there, `recorded` the variables of the recorded plan (whose
    arrays it wrote; None: no record, the plan's own are taken as its). Anything else is the
    user's: `--rebuild-from` would delete it and a level array of its name overwrite it, so
    the build is refused before writing, naming it."""
    mine = {"zarr.json", "spatial_ref", *written}
    names = p.variables if recorded is None else recorded
    for v in names:
        mine |= {v, f"{v}_count", f"{v}_class_count", f"{v}_class"}  # as `VarLevel` names them
    for group, there in children.items():
        ours = set(mine)
        if recorded is None:  # no record to ask (lost, corrupt): a level variable of this
            # toolkit's is known by the count plane it writes beside it
            for v in (x for x in there if f"{x}_count" in there):
                ours |= {v, f"{v}_count", f"{v}_class_count", f"{v}_class"}
        stray = sorted(set(there) - ours)
        if stray:
            also = f" (also {', '.join(map(repr, stray[1:]))})" if len(stray) > 1 else ""
            raise PlanError(
                f"{where}/{group}/{stray[0]}: {stray[0]!r}, which this toolkit did not write, "
                f"is inside pyramid level {group}{also}, which a build rewrites and a rebuild "
                f"deletes; move it out of {group}/ (e.g. to the store's root) and build again"
            )


def _check_arrays(
    arrays: Mapping[str, ArrayMeta], methods: Mapping[str, str], band_dim: str | None
) -> tuple[tuple[str, str], tuple[int, int]]:
    for method in dict.fromkeys(methods.values()):
        if method not in METHODS:
            raise PlanError(
                f"unknown method {method!r}: choose one of {', '.join(METHODS)} "
                "(nearest is not offered: it aliases continuous data)"
            )
    if not arrays:
        raise PlanError(
            "no variables to pyramid: the store has no array with two spatial dimensions"
        )
    spatial: tuple[str, str] | None = None
    shape: tuple[int, int] | None = None
    for name, a in arrays.items():
        if len(a.shape) < 2 or len(a.dims) != len(a.shape):
            raise PlanError(f"array {name!r}: needs dimension_names with the two spatial dims last")
        sd = (a.dims[-2], a.dims[-1])
        ss = (a.shape[-2], a.shape[-1])
        if spatial is None:
            spatial, shape = sd, ss
        elif (sd, ss) != (spatial, shape):
            raise PlanError(
                f"array {name!r}: spatial dims {sd} shape {ss} differ from {spatial} {shape}; "
                "pyramid variables on one grid at a time (--variable)"
            )
        if band_dim is not None and band_dim not in a.dims[:-2]:
            raise PlanError(
                f"array {name!r}: --band-dim {band_dim!r} is not one of its leading dims {a.dims[:-2]}"
            )
        kind = check_dtype(name, np.dtype(a.dtype)).kind
        if methods[name] == "mode" and kind not in "iu":
            raise PlanError(f"array {name!r}: mode is for categorical integers, not {a.dtype}")
    assert spatial is not None and shape is not None
    return spatial, shape


def _var_level(
    a: ArrayMeta,
    method: str,
    band_dim: str | None,
    shape: tuple[int, int],
    shard_yx: tuple[int, int],
    classes: tuple[int, ...] = (),
    k: int = 1,
    circular: bool = False,
) -> VarLevel:
    lead = len(a.shape) - 2
    out_shape = (*a.shape[:lead], *shape)
    shards: list[int] = []
    chunks: list[int] = []
    for d in range(lead):
        if a.dims[d] == band_dim:
            shards.append(a.shape[d])
            chunks.append(a.shape[d])
        else:
            shards.append(a.grid[d])
            chunks.append(a.chunks[d] if a.grid[d] % a.chunks[d] == 0 else a.grid[d])
    shards.extend(shard_yx)
    chunks.extend(inner_chunk(s) for s in shard_yx)
    keep = [d for d in range(len(out_shape)) if a.dims[d] != band_dim]
    out_dtype = _output_dtype(method, a.dtype, a.packed)
    return VarLevel(
        var=a.name,
        shape=out_shape,
        dims=a.dims,
        shards=tuple(shards),
        chunks=tuple(chunks),
        dtype=out_dtype,
        fill_value=_output_fill(out_dtype, a.fill_value),
        count_shape=tuple(out_shape[d] for d in keep),
        count_dims=tuple(a.dims[d] for d in keep),
        count_shards=tuple(shards[d] for d in keep),
        count_chunks=tuple(chunks[d] for d in keep),
        key_encoding=a.key_encoding,
        classes=classes if (method == "mode" and band_dim is None) else (),
        classes_dtype=classes_dtype(k),
        circle=a.circle if (circular and method == "mean") else None,
        method=method,
    )


def _axis_table(sp: int, n_parent: int, sc: int, n_child: int) -> tuple[np.ndarray, np.ndarray]:
    """(first child, child count) of every parent shard along one axis (`_axis_children` of
    each, clipped to the child grid)."""
    i = np.arange(-(-n_parent // sp), dtype=np.int64)
    start, stop = i * sp, np.minimum((i + 1) * sp, n_parent)
    lo = (start // 2) // sc
    hi = np.minimum((-(-stop // 2) - 1) // sc, -(-n_child // sc) - 1)
    return lo, np.maximum(hi - lo + 1, 0)


def _children(
    present: np.ndarray,
    parent_shards: tuple[int, ...],
    parent_shape: tuple[int, ...],
    child: VarLevel,
    band_axis: int | None,
) -> np.ndarray:
    """The child shards (raveled in `child`'s grid, sorted, unique) that the parent shards
    `present` (raveled in the parent's grid) overlap: per axis from a table of the parent
    indices, a block of parents at a time."""
    pgrid = _grid(parent_shape, parent_shards)
    cgrid = child.grid_shape()
    (ylo, yn), (xlo, xn) = (
        _axis_table(parent_shards[d], parent_shape[d], child.shards[d], child.shape[d])
        for d in (-2, -1)
    )
    out: list[np.ndarray] = []
    for s in range(0, len(present), shardkeys.PAGE):
        idx = shardkeys.unravel(present[s : s + shardkeys.PAGE], pgrid)
        if band_axis is not None:
            idx[:, band_axis] = 0
        inside = (idx[:, :-2] < np.array(cgrid[:-2], np.int64)).all(axis=1)
        idx = idx[inside]
        y0, ny, x0, nx = ylo[idx[:, -2]], yn[idx[:, -2]], xlo[idx[:, -1]], xn[idx[:, -1]]
        lead = tuple(idx[:, :-2].T)
        for dy in range(int(ny.max(initial=0))):
            for dx in range(int(nx.max(initial=0))):
                m = (dy < ny) & (dx < nx)
                kid = (*(c[m] for c in lead), y0[m] + dy, x0[m] + dx)
                out.append(np.ravel_multi_index(kid, cgrid))
    return shardkeys.unique(np.concatenate(out)) if out else np.empty(0, np.int64)


def _task(group: str, v: VarLevel, idx: tuple[int, ...], band_axis: int | None) -> ShardTask:
    enc = parse_chunk_key_encoding(v.key_encoding)
    cidx = tuple(i for d, i in enumerate(idx) if d != band_axis)
    classes_key = None
    if v.classes:
        kidx = (*idx[:-2], 0, *idx[-2:])
        classes_key = f"{group}/{v.classes_name}/{enc.encode_chunk_key(kidx)}"
    return ShardTask(
        group=group,
        var=v.var,
        index=idx,
        data_key=f"{group}/{v.var}/{enc.encode_chunk_key(idx)}",
        count_key=f"{group}/{v.count_name}/{enc.encode_chunk_key(cidx)}",
        classes_key=classes_key,
    )


def plan_pyramid(
    arrays: Mapping[str, ArrayMeta],
    listings: Mapping[str, Iterable[str]],
    *,
    method: str | Mapping[str, str] = "mean",
    band_dim: str | None = None,
    levels: int | None = None,
    max_shard: int = MAX_SHARD,
    method_from: str = "given",
    classes: Mapping[str, tuple[int, ...]] | None = None,
    prints: Mapping[str, Mapping[str, str]] | None = None,
    circular: Sequence[str] = (),
    operators_from: Mapping[str, str] | None = None,
) -> PyramidPlan:
    """Plan every level from the level-0 arrays and their listed shard keys (relative to each
    array); `prints` are the listed objects' fingerprints (key -> `source.fingerprint`).
    `method`: the reducer of every array, or of each (a store of quantities and classes).
    Refused: more levels than halvings to one pixel, and any level whose largest task
    would read more than `MAX_TASK_BYTES`. `classes`: each array's declared classes
    (`declared_classes`), which a mode pyramid without a band dim carries counts of, unless
    a task carrying them would read too much (the classes are then re-read from level 0)."""
    methods = dict.fromkeys(arrays, method) if isinstance(method, str) else dict(method)
    spatial, base = _check_arrays(arrays, methods, band_dim)
    n_levels = _level_count(base, levels)
    found, source_digest = _listed(arrays, listings)
    carried = dict(classes or {})
    shape = _Shape(band_dim, base, n_levels, max_shard)
    while True:
        try:
            out_levels, naive = _plan_levels(arrays, found, methods, shape, carried, circular)
            break
        except _TooManyClasses as err:  # too many classes to carry: re-read
            carried.pop(err.name)
    shared = set(methods.values())
    names = tuple(sorted(arrays))
    return PyramidPlan(
        method=shared.pop() if len(shared) == 1 else MIXED,
        band_dim=band_dim,
        variables=names,
        spatial_dims=spatial,
        base_shape=base,
        levels=tuple(out_levels),
        naive=tuple(naive),
        source_digest=source_digest,
        max_shard=max_shard,
        method_from=method_from,
        prints=_shard_prints(arrays, prints or {}),
        circular=tuple(sorted(n for n in names if n in circular and methods[n] == "mean")),
        operators_from=tuple(sorted((operators_from or {}).items())),
    )


@dataclass(frozen=True)
class _Shape:
    """What every level's geometry follows from: the band dim, level 0's spatial shape, the
    level count and the largest shard side."""

    band_dim: str | None
    base: tuple[int, int]
    levels: int
    max_shard: int


class _TooManyClasses(Exception):
    """A level of `name` whose task would read more than a task may, carrying its classes."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _level_count(base: tuple[int, int], levels: int | None) -> int:
    """`levels`, or down to one tile; refused below one or past one pixel."""
    n_levels = level_count(base, TILE) if levels is None else levels
    if n_levels < 1:
        raise PlanError(f"--levels must be >= 1, got {n_levels}")
    deepest = max_levels(base)
    if n_levels > deepest:
        raise PlanError(
            f"--levels {n_levels}: the {base[0]}x{base[1]} array is one pixel at level "
            f"{deepest} ({2**deepest}x), so at most {deepest} levels are useful; "
            f"use --levels {deepest} or fewer"
        )
    return n_levels


def _listed(
    arrays: Mapping[str, ArrayMeta], listings: Mapping[str, Iterable[str]]
) -> tuple[dict[str, np.ndarray], str]:
    """(each array's level-0 shards the listing holds, within its grid, raveled; the digest of
    them): each listing read a page at a time."""
    present: dict[str, np.ndarray] = {}
    names = sorted(arrays)
    grids = [_grid(arrays[name].shape, arrays[name].grid) for name in names]
    for name, grid in zip(names, grids, strict=True):
        if _prod(grid) >= 2**62:
            raise PlanError(
                f"array {name!r}: its grid of {' x '.join(map(str, grid))} objects is too large "
                "to plan; use larger shards or chunks"
            )
        present[name] = shardkeys.present(arrays[name].encoding, listings.get(name, ()), grid)
    spellings = [shardkeys.Spelling(f"{name}:", ".") for name in names]
    which, lin = shardkeys.sort_rows(spellings, grids, [present[n] for n in names])
    return present, shardkeys.digest_rows(spellings, grids, which, lin)


def _grid(shape: tuple[int, ...], shards: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(-(-n // s) for n, s in zip(shape, shards, strict=True))


def _plan_levels(
    arrays: Mapping[str, ArrayMeta],
    found: Mapping[str, np.ndarray],
    methods: Mapping[str, str],
    shape: _Shape,
    classes: Mapping[str, tuple[int, ...]],
    circular: Sequence[str],
) -> tuple[list[LevelPlan], list[int]]:
    """(every level, its naive task count): each variable's level shaped from its parent
    level, its tasks the parent's present shards' children."""
    names = tuple(sorted(arrays))
    band_dim = shape.band_dim
    present = dict(found)
    prev = {n: (arrays[n].grid, arrays[n].shape, "") for n in names}  # shards, shape, classes
    out_levels: list[LevelPlan] = []
    naive: list[int] = []
    parent_group = ""
    for k in range(1, shape.levels + 1):
        size = (-(-shape.base[0] // 2**k), -(-shape.base[1] // 2**k))
        group = f"{2**k}x"
        vls: list[VarLevel] = []
        band_axes: list[int | None] = []
        n_naive = 0
        for name in names:
            a = arrays[name]
            shards, prev_shape, prev_classes = prev[name]
            py, px = shards[-2:]
            # a level that fits in one shard gets a shard (and chunk) of its own size: a larger
            # one would only encode fill (one-position shards of a repo's small fields)
            sy = min(size[0], child_shard_size(py, desired_shard(py, shape.max_shard)))
            sx = min(size[1], child_shard_size(px, desired_shard(px, shape.max_shard)))
            v = _var_level(
                a, methods[name], band_dim, size, (sy, sx), classes.get(name, ()), k,
                circular=name in circular,
            )  # fmt: skip
            band_axis = a.dims.index(band_dim) if band_dim is not None else None
            kids = _children(present[name], shards, prev_shape, v, band_axis)
            n_naive += _prod(v.grid_shape())
            need = task_bytes(a, v, v.method, k, prev_shape, prev_classes)
            if need > MAX_TASK_BYTES and v.classes:
                raise _TooManyClasses(name)
            if need > MAX_TASK_BYTES:
                raise PlanError(
                    f"level {group} of {name!r}: one {v.method} task would read "
                    f"{need / 2**30:.1f} GiB, over the {MAX_TASK_BYTES / 2**30:g} GiB a task may "
                    f"use; lower --max-shard (now {shape.max_shard}) or --levels (now "
                    f"{shape.levels})"
                )
            vls.append(v)
            band_axes.append(band_axis)
            present[name] = kids
            prev[name] = (v.shards, v.shape, v.classes_dtype)
        tasks = ShardList.of(group, tuple(vls), tuple(band_axes), [present[n] for n in names])
        out_levels.append(LevelPlan(k, group, parent_group, 2**k, size, tuple(vls), tasks))
        naive.append(n_naive)
        parent_group = group
    return out_levels, naive


def _shard_prints(
    arrays: Mapping[str, ArrayMeta], prints: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """{var: {"i.j": fingerprint}} of the listed level-0 shards."""
    out: dict[str, dict[str, str]] = {}
    for name, by_key in prints.items():
        a = arrays.get(name)
        if a is None:
            continue
        for key, fp in by_key.items():
            idx = decode_keys(a.encoding, [key], len(a.shape))
            if idx:
                out.setdefault(name, {})[".".join(map(str, idx.pop()))] = fp
    return out


def edited_in_place(
    then: Mapping[str, Mapping[str, str]] | None, p: PyramidPlan
) -> dict[str, set[tuple[int, ...]]] | None:
    """The level-0 shards (by var) whose content changed since fingerprints `then` were
    recorded, each compared by its content token (the last: `source.settle_print`); objects
    new since then (an append's) are no edit. None when that cannot be told (none recorded,
    or a recorded object is gone)."""
    if not then:
        return None
    if any(not set(v) <= set(p.prints.get(n, {})) for n, v in then.items()):
        return None
    return {
        n: {
            tuple(int(i) for i in k.split("."))
            for k, fp in v.items()
            if k in then.get(n, {}) and then[n][k].split(" ")[-1] != fp.split(" ")[-1]
        }
        for n, v in p.prints.items()
    }


def filled_in_place(
    edited: Mapping[str, set[tuple[int, ...]]],
    then: Mapping[str, Mapping[str, str]],
    p: PyramidPlan,
    arrays: Mapping[str, ArrayMeta],
    grew: Mapping[str, tuple[int, int]],
) -> dict[str, set[tuple[int, ...]]]:
    """`edited` plus the level-0 shards new since the build that lie at its old positions (a
    region write into what was all-nodata, not an append): a shard is an append's only when it
    starts past the old extent of a dim level 0 grew along."""
    out = {n: set(edited.get(n, ())) for n in p.prints}
    for n, now in p.prints.items():
        a = arrays[n]
        for key in set(now) - set(then.get(n, {})):
            idx = tuple(int(i) for i in key.split("."))
            appended = any(
                idx[a.dims.index(d)] * a.grid[a.dims.index(d)] >= x
                for d, (x, _) in grew.items()
                if d in a.dims
            )
            if not appended:
                out[n].add(idx)
    return out


def stale_tasks(
    p: PyramidPlan, arrays: Mapping[str, ArrayMeta], changed: Mapping[str, set[tuple[int, ...]]]
) -> list[list[ShardTask]]:
    """Per level, the tasks whose output depends on a changed level-0 shard: the shards
    overlapping it at level 1, then those overlapping those at the next level, and so on (the
    geometry the planner prunes with); whether or not the plan holds them (a repo build of
    some positions drops the stale levels of the others too)."""
    shards = {n: arrays[n].grid for n in p.variables}
    shapes = {n: arrays[n].shape for n in p.variables}
    cur = {n: _raveled(changed.get(n, ()), shards[n], shapes[n]) for n in p.variables}
    out: list[list[ShardTask]] = []
    for lvl in p.levels:
        tasks: list[ShardTask] = []
        for v in lvl.vars:
            a = arrays[v.var]
            band_axis = a.dims.index(p.band_dim) if p.band_dim else None
            cur[v.var] = _children(cur[v.var], shards[v.var], shapes[v.var], v, band_axis)
            shards[v.var], shapes[v.var] = v.shards, v.shape
            idx = shardkeys.unravel(cur[v.var], v.grid_shape()).tolist()  # sorted by index
            tasks += [_task(lvl.group, v, tuple(i), band_axis) for i in idx]
        out.append(tasks)
    return out


def _raveled(
    cells: Iterable[tuple[int, ...]], shards: tuple[int, ...], shape: tuple[int, ...]
) -> np.ndarray:
    """The cells inside the grid of `shape` by `shards`, raveled, sorted, unique."""
    grid = _grid(shape, shards)
    c = np.array(sorted(cells), np.int64).reshape(-1, len(grid))
    inside = (c >= 0).all(axis=1) & (c < np.array(grid, np.int64)).all(axis=1)
    return shardkeys.unique(np.ravel_multi_index(tuple(c[inside].T), grid))


def position_cells(a: ArrayMeta, positions: Mapping[str, Iterable[int]]) -> list[tuple[int, ...]]:
    """The object-grid cells of `a` that hold any chosen position (by dim name); a dim with no
    choice is taken whole. What a build restricted to those positions probes for."""
    axes: list[Iterable[int]] = []
    for d, (n, g) in enumerate(zip(a.shape, a.grid, strict=True)):
        chosen = positions.get(a.dims[d])
        if chosen is None:
            axes.append(range(-(-n // g)))
        else:
            axes.append(sorted({p // g for p in chosen if 0 <= p < n}))
    return list(product(*axes))


def max_levels(shape: tuple[int, int]) -> int:
    """Halvings until both sides are one pixel (at least one level)."""
    return max(1, *(int(np.ceil(np.log2(n))) if n > 1 else 0 for n in shape))


def task_bytes(
    a: ArrayMeta,
    v: VarLevel,
    method: str,
    k: int,
    parent: tuple[int, ...],
    parent_classes_dtype: str = "",
) -> int:
    """What the largest task of level `k` reads: the block of its source under one shard
    (level 0 for the first level and for mode without class counts, which re-reads it at
    factor 2^k; else the parent level: its count plane, or its class counts for mode)."""
    direct = (method == "mode" and not v.classes) or v.circle is not None
    factor = 2**k if direct else 2
    first = direct or k == 1
    src = a.shape if first else parent
    block = _prod(v.shards[:-2]) * _prod(
        min(s * factor, n) for s, n in zip(v.shards[-2:], src[-2:], strict=True)
    )
    if first:
        return block * a.value_bytes
    if v.classes:
        return block * len(v.classes) * np.dtype(parent_classes_dtype or "uint32").itemsize
    return block * (np.dtype(v.dtype).itemsize + 4)


def _prod(xs: Iterable[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def region(v: VarLevel, index: tuple[int, ...]) -> tuple[slice, ...]:
    """The output array region of one shard (clipped at the array edge)."""
    return tuple(
        slice(i * s, min((i + 1) * s, n)) for i, s, n in zip(index, v.shards, v.shape, strict=True)
    )


def source_region(
    out: tuple[slice, ...], factor: int, src_shape: tuple[int, ...], band_axis: int | None
) -> tuple[slice, ...]:
    """The region of a finer level (by `factor`) that pools into `out`; leading dims pass through."""
    lead = []
    for d, s in enumerate(out[:-2]):
        lead.append(slice(0, src_shape[d]) if d == band_axis else s)
    spatial = [
        slice(s.start * factor, min(s.stop * factor, n))
        for s, n in zip(out[-2:], src_shape[-2:], strict=True)
    ]
    return (*lead, *spatial)
