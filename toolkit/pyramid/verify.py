"""Prove a pyramid, cheapest check first; every check is a graph node and reports, never raises.

counts vs the recorded plan -> per-level metadata (coordinates recomputed from level 0, its
non-spatial coordinates carried) -> the root diff against the backup -> coverage (every window
with level-0 data has a value, every other is nodata) -> value range (every value within its
level-0 window's) -> sampled shards (existence, joint mask, count range, and tiles compared with
a plain numpy reference pooled straight from level 0, which shares no code with the builder's
kernels) -> an anonymous xarray read of every level. Samples are spread over each level and, for
a repo build, are also the first, middle and last task of every worker stripe.
Each failure names the level, the shard (or node) and the check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit import storage
from toolkit.engine import Plan, Runner, Stage, runner_of
from toolkit.plan import Report
from toolkit.pyramid.failure import Failure
from toolkit.pyramid.geometry import PlanError, PyramidPlan, RecordedPlan, ShardTask, VarLevel
from toolkit.pyramid.home import Home, open_home
from toolkit.pyramid.levels import plan_source, var_sources
from toolkit.pyramid.metadata import carried_coords, same_values
from toolkit.pyramid.shards import VarSource, count_region
from toolkit.pyramid.source import Source, grown_along, growth_note
from toolkit.tasks import stable, stripe

__all__ = ["Failure", "VerifyResult", "verify"]


@dataclass(frozen=True)
class VerifyResult:
    failures: tuple[Failure, ...]
    report: Report | None = None
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class Check:
    """A verification task: one node."""

    kind: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True)
class Sample:
    task: ShardTask

    @property
    def key(self) -> str:
        return f"sample:{self.task.key}"


def _concat(values: list[Any]) -> list[Failure]:
    out: list[Failure] = []
    for v in values:
        out.extend(v)
    return out


# ----------------------------------------------------------------------------- counts


@dataclass(frozen=True)
class CountCheck:
    store: storage.Store
    targets: dict[str, tuple[str, ...]]
    prefixes: dict[str, tuple[str, ...]]  # array prefixes whose objects must all be planned

    def __call__(self, check: Check) -> list[Failure]:
        group = check.name
        want = set(self.targets[group])
        have = {
            k for k in storage.list_keys(self.store, group + "/") if not k.endswith("zarr.json")
        }
        planned_arrays = [k for k in have if k.startswith(self.prefixes[group])]
        out = [
            Failure(group, k, "count", "planned shard object is missing")
            for k in sorted(want - have)
        ]
        out += [
            Failure(group, k, "count", "object not in the plan")
            for k in sorted(set(planned_arrays) - want)
        ]
        if not out and len(want) != len(want & have):
            out.append(Failure(group, "-", "count", f"have {len(want & have)}/{len(want)}"))
        return out


# ----------------------------------------------------------------------------- metadata


@dataclass(frozen=True)
class MetaCheck:
    home: Home  # the root's check is where the pyramid is (a backup, or a repo's history)
    plan: RecordedPlan  # what the levels must match
    coords: dict[str, np.ndarray]  # dim -> level-0 cell centres
    attrs: dict[str, dict[str, Any]]  # level-0 attributes of data vars and CRS vars
    crs: tuple[str, ...]
    node_keys: tuple[str, ...]
    carried: tuple[str, ...] = ()  # level 0's non-spatial coordinates, in every level

    @property
    def store(self) -> Any:
        return self.home.store

    def __call__(self, check: Check) -> list[Failure]:
        if check.name == ".":
            return self.home.root_failures(self.plan)
        return self._level(check.name)

    def _level(self, group: str) -> list[Failure]:
        """A level's nodes as the plan records them and level 0 implies: each variable's
        arrays (and class labels), the coordinates, the CRS variables, the carried
        coordinates, and the level's entry in the root's layout."""
        lvl = self.plan.level(group)
        z = self.store.zarr(read_only=True)
        said: list[tuple[str, str]] = []
        for v in lvl.vars:
            said += self._class_labels(z, group, v) + self._arrays(z, group, v)
        axes, found = self._coordinates(z, group, lvl.factor, lvl.shape)
        said += found + self._crs_vars(z, group, axes, lvl.factor)
        said += [(n, d) for n in self.carried if (d := self._carried(z, group, n))]
        said += self._layout(group, lvl.factor, lvl.shape)
        return [Failure(group, node, "metadata", detail) for node, detail in said]

    def _class_labels(self, z: Any, group: str, v: VarLevel) -> list[tuple[str, str]]:
        """The class coordinate a mode level carries counts of: its labels are the plan's."""
        if not v.classes:
            return []
        try:
            labels = zarr_open(z, f"{group}/{v.class_dim}")[...].tolist()
        except Exception as err:
            return [(v.class_dim, f"class coordinate cannot be opened: {err}")]
        if labels != list(v.classes):
            return [(v.class_dim, f"classes are {labels}, want {list(v.classes)}")]
        return []

    def _arrays(self, z: Any, group: str, v: VarLevel) -> list[tuple[str, str]]:
        """Each array of a variable at the level: its fill value, shape, dims, shards, chunks,
        dtype as the plan records them, and the data's grid mapping as level 0's."""
        out: list[tuple[str, str]] = []
        for name, shape, dims, shards, chunks, dtype in _level_arrays(v):
            try:
                arr = zarr_open(z, f"{group}/{name}")
            except Exception as err:
                out.append((name, f"cannot open: {err}"))
                continue
            fill = v.fill_value if name == v.var else 0
            if not _same_fill(arr.fill_value, fill):
                out.append((name, f"fill_value is {arr.fill_value}, want {fill}"))
            got = {
                "shape": list(arr.shape),
                "dimension_names": list(arr.metadata.dimension_names or []),
                "shards": list(arr.shards or arr.chunks),
                "chunks": list(arr.chunks),
                "dtype": np.dtype(arr.dtype).name,
            }
            said = (list(shape), list(dims), list(shards), list(chunks), dtype)
            want = dict(zip(got, said, strict=True))
            out += [(name, f"{k} is {got[k]}, want {want[k]}") for k in want if got[k] != want[k]]
            gm = self.attrs.get(v.var, {}).get("grid_mapping")
            if name == v.var and arr.attrs.get("grid_mapping") != gm:
                out.append(
                    (name, f"grid_mapping is {arr.attrs.get('grid_mapping')!r}, want {gm!r}")
                )
        return out

    def _coordinates(
        self, z: Any, group: str, f: int, shape: Sequence[int]
    ) -> tuple[dict[str, np.ndarray], list[tuple[str, str]]]:
        """(the level's spatial coordinates that opened, what is wrong with them): each the
        mean of its level-0 window."""
        axes: dict[str, np.ndarray] = {}
        out: list[tuple[str, str]] = []
        for axis, dim in enumerate(self.plan.settings.spatial_dims):
            base0 = np.asarray(self.coords[dim], dtype=np.float64)
            try:
                c = zarr_open(z, f"{group}/{dim}")[...]
            except Exception as err:
                out.append((dim, f"coordinate cannot be opened: {err}"))
                continue
            n = shape[axis]
            if len(c) != n:
                out.append((dim, f"coordinate length {len(c)}, want {n}"))
                continue
            axes[dim] = np.asarray(c, dtype=np.float64)
            want = window_means(base0, f, n)
            scale = float(np.max(np.abs(base0)) or 1.0)
            off = np.flatnonzero(~np.isclose(c, want, rtol=0, atol=1e-12 * scale))
            if off.size:
                i = int(off[0])
                out.append((dim, f"{off.size} coordinate(s) differ from the mean of their "
                                 f"level-0 window (cell {i}: {c[i]!r}, want {want[i]!r})"))  # fmt: skip
        return axes, out

    def _crs_vars(
        self, z: Any, group: str, axes: dict[str, np.ndarray], f: int
    ) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for crs in self.crs:
            try:
                got_attrs = dict(zarr_open(z, f"{group}/{crs}").attrs)
            except Exception as err:
                out.append((crs, f"CRS variable cannot be opened: {err}"))
                continue
            out += [(crs, d) for d in self._crs(got_attrs, self.attrs.get(crs, {}), axes, f)]
        return out

    def _layout(self, group: str, f: int, shape: Sequence[int]) -> list[tuple[str, str]]:
        """The level's entry in the root's multiscales layout: its transform (origin kept,
        pixel size `f` times level 0's; none on an irregular grid), shape and scale."""
        root = storage.get_json(self.store, "zarr.json")
        layout = {
            x["asset"]: x
            for x in root.get("attributes", {}).get("multiscales", {}).get("layout", [])
        }
        item = layout.get(group)
        if item is None:
            return [("zarr.json", "root multiscales layout has no entry for this level")]
        out: list[str] = []
        base = layout.get(".", {}).get("spatial:transform")
        t = item.get("spatial:transform")
        regular = all(_regular(self.coords[d]) for d in self.plan.settings.spatial_dims)
        if not regular:
            if t is not None or base is not None:
                out.append("spatial:transform written for an irregular grid")
        elif base is None or t is None:
            out.append("spatial:transform missing")
        else:
            if (t[2], t[5]) != (base[2], base[5]):
                out.append(f"transform origin {t[2], t[5]} moved from {base[2], base[5]}")
            if not np.allclose([t[0], t[4]], [base[0] * f, base[4] * f]):
                out.append(f"transform pixel size {t[0], t[4]} is not {f}x level 0")
        if item.get("spatial:shape") != list(shape):
            out.append(f"spatial:shape {item.get('spatial:shape')} != {list(shape)}")
        # scale is relative to `derived_from` ("." = level 0, else a level named "<k>x")
        source = item.get("derived_from", ".")
        rel = f / (1 if source == "." else int(str(source).rstrip("x") or 1))
        if item.get("transform", {}).get("scale") != [float(rel), float(rel)]:
            out.append(
                f"transform.scale {item.get('transform')} is not {rel} relative to {source!r}"
            )
        return [("zarr.json", d) for d in out]

    def _carried(self, z: Any, group: str, name: str) -> str | None:
        """A non-spatial coordinate of level 0 (`valid_time`, ...): in the level, as level 0
        holds it (values and attributes)."""
        import zarr

        fix = "; run pyramid build to rewrite the levels' metadata"
        base = zarr.open_array(z, path=name, mode="r")
        try:
            arr = zarr.open_array(z, path=f"{group}/{name}", mode="r")
        except Exception:
            return f"level 0's coordinate {name!r} is missing{fix}"
        if dict(arr.attrs) != dict(base.attrs):
            return f"attributes differ from level 0's{fix}"
        if not same_values(storage.read(self.store, arr), storage.read(self.store, base)):
            return f"values differ from level 0's{fix}"
        return None

    def _crs(
        self, got: dict[str, Any], base: dict[str, Any], axes: dict[str, np.ndarray], f: int
    ) -> list[str]:
        """A level's CRS attributes: level 0's, but a GDAL `GeoTransform` (when level 0 has
        one) that is the level's own: its outer corner and pixel size as the level's
        coordinates state them (none on an irregular grid, where no transform holds)."""
        if _sans_gt(got) != _sans_gt(base):
            return ["CRS attributes differ from level 0"]
        if "GeoTransform" not in base:
            return ["GeoTransform written, level 0 has none"] if "GeoTransform" in got else []
        ydim, xdim = self.plan.settings.spatial_dims
        if not all(_regular(self.coords[d]) for d in (ydim, xdim)):
            return ["GeoTransform written for an irregular grid"] if "GeoTransform" in got else []
        if ydim not in axes or xdim not in axes:
            return []  # the coordinates' own failure says why
        want = []
        for dim in (xdim, ydim):
            c, c0 = axes[dim], np.asarray(self.coords[dim], dtype=np.float64)
            step0 = (c0[-1] - c0[0]) / (len(c0) - 1)
            step = (c[-1] - c[0]) / (len(c) - 1) if len(c) > 1 else step0 * f
            want.append((float(c[0] - step / 2), float(step)))
        (x0, dx), (y0, dy) = want
        want_gt = [x0, dx, 0.0, y0, 0.0, dy]
        fix = "; run pyramid build to rewrite the levels' metadata"
        try:
            gt = [float(x) for x in str(got.get("GeoTransform")).split()]
        except ValueError:
            gt = []
        tol = 1e-6 * max(abs(dx), abs(dy))
        if len(gt) == 6 and np.allclose(gt, want_gt, rtol=0, atol=tol):
            return []
        said = got.get("GeoTransform")
        if said == base["GeoTransform"] and f > 1:
            return [f"GeoTransform {said!r} is level 0's, not this level's {want_gt}{fix}"]
        return [f"GeoTransform {said!r} does not match the level's coordinates {want_gt}{fix}"]


def _level_arrays(v: VarLevel) -> list[tuple[str, Any, Any, Any, Any, str]]:
    """(name, shape, dims, shards, chunks, dtype) of each array a variable has at a level, as
    the plan records them: the data, its count plane, and its class counts (mode with
    declared classes)."""
    out = [
        (v.var, v.shape, v.dims, v.shards, v.chunks, v.dtype),
        (v.count_name, v.count_shape, v.count_dims, v.count_shards, v.count_chunks, "uint32"),
    ]
    if v.classes:
        out.append((v.classes_name, *v.classes_layout(), v.classes_dtype))
    return out


# ----------------------------------------------------------------------------- samples


REFERENCE_PIXELS = 2048  # a sampled tile's level-0 footprint per axis (4 Mpx a band)


@dataclass(frozen=True)
class Level0:
    """Where a variable's level 0 is, for the reference: its path, nodata, band axis."""

    path: str
    band_axis: int | None


@dataclass(frozen=True)
class SampleCheck:
    """One sampled shard: its objects exist, nodata is exactly where the count is 0, and two
    tiles of it (its first and its last corner, where partial windows are) equal the numpy
    reference pooled straight from level 0 (`toolkit.pyramid.reference`), to the exactness
    the reference states."""

    store: storage.Store
    method: str
    sources: dict[str, tuple[VarSource, ...]]  # group -> per-variable sources (geometry only)
    level0: dict[str, Level0]

    def __call__(self, sample: Sample) -> list[Failure]:
        t = sample.task
        spec = next(s for s in self.sources[t.group] if s.out.var == t.var)
        shard = t.data_key

        def fail(check: str, detail: str) -> list[Failure]:
            return [Failure(t.group, shard, check, detail)]

        for key in t.objects:
            if not storage.exists(self.store, key):
                return fail("missing", f"object {key} does not exist")
        from toolkit.pyramid.geometry import region

        reg = region(spec.out, t.index)
        z = self.store.zarr(read_only=True)
        data = storage.read(self.store, zarr_open(z, spec.path(t.group)), reg)
        count = storage.read(
            self.store, zarr_open(z, spec.count_path(t.group)), count_region(spec, t.index)
        )
        out: list[Failure] = []
        canon = _canonical(data, spec.band_axis)
        cnt = count.reshape((-1, *count.shape[-2:]))
        nod = np.isnan(canon) if canon.dtype.kind == "f" else canon == spec.out.fill_value
        if not (spec.out.method == "sum" and canon.dtype.kind != "f"):
            empty = np.broadcast_to((cnt == 0)[:, None, :, :], nod.shape)
            # a circular mean is also nodata where its vectors cancel (checked against the
            # reference below); any other level is nodata exactly where nothing was valid
            wrong = (empty & ~nod) if spec.out.circle is not None else (empty != nod)
            if wrong.any():
                out += fail("joint-mask", "nodata does not match count == 0 in every band")
        factor = int(t.group.rstrip("x"))
        if (cnt > factor**2).any():
            out += fail("count-range", f"a count exceeds the {factor}x{factor} window")
        for tile in _tiles(reg, factor):
            out += self._against_reference(t, spec, reg, tile, canon, cnt, factor, fail)
            if spec.out.classes and not out:
                out += self._classes_against_reference(t, spec, reg, tile, cnt, factor, fail)
        return out

    def _classes_against_reference(
        self, t: ShardTask, spec: VarSource, reg: tuple[slice, ...], tile: tuple[slice, slice],
        cnt: np.ndarray, factor: int, fail: Callable[[str, str], list[Failure]],
    ) -> list[Failure]:  # fmt: skip
        """A mode level's class counts: each window's pixels of each class, counted by numpy
        from level 0, and summing to the count plane."""
        from toolkit.pyramid.reference import class_counts, decoded_level0

        l0 = self.level0[t.var]
        z = self.store.zarr(read_only=True)
        base = zarr_open(z, l0.path)
        labels = np.asarray(spec.out.classes)
        ys, xs = (
            slice((o.start + w.start) * factor, min((o.start + w.stop) * factor, n))
            for o, w, n in zip(reg[-2:], tile, base.shape[-2:], strict=True)
        )
        block = decoded_level0(
            storage.read(self.store, base, (*reg[:-2], ys, xs)), dict(base.attrs), base.fill_value
        )
        want = class_counts(block.reshape((-1, *block.shape[-2:])), np.nan, labels, factor)
        sel = (*reg[:-2], slice(0, len(labels)), *(
            slice(o.start + w.start, o.start + w.stop) for o, w in zip(reg[-2:], tile, strict=True)
        ))  # fmt: skip
        got = storage.read(self.store, zarr_open(z, spec.classes_path(t.group)), sel)
        got = got.reshape((-1, *got.shape[-3:]))
        where = f"tile y {tile[0].start}:{tile[0].stop}, x {tile[1].start}:{tile[1].stop}"
        if not np.array_equal(got.astype(np.int64), want):
            n = int((got != want).sum())
            return fail("classes", f"{n} class count(s) differ from the numpy reference ({where})")
        if not np.array_equal(got.sum(axis=1, dtype=np.int64), cnt[:, tile[0], tile[1]]):
            return fail("classes", f"class counts do not sum to the count plane ({where})")
        return []

    def _against_reference(
        self, t: ShardTask, spec: VarSource, reg: tuple[slice, ...], tile: tuple[slice, slice],
        canon: np.ndarray, cnt: np.ndarray, factor: int, fail: Callable[[str, str], list[Failure]],
    ) -> list[Failure]:  # fmt: skip
        from toolkit.pyramid.reference import (
            angle_gap,
            angle_units,
            decoded_level0,
            mean_tolerance,
            reduce_level0,
        )

        l0 = self.level0[t.var]
        base = zarr_open(self.store.zarr(read_only=True), l0.path)
        lead = [slice(0, base.shape[d]) if d == l0.band_axis else s for d, s in enumerate(reg[:-2])]
        ys, xs = (
            slice((o.start + w.start) * factor, min((o.start + w.stop) * factor, n))
            for o, w, n in zip(reg[-2:], tile, base.shape[-2:], strict=True)
        )
        raw = storage.read(self.store, base, (*lead, ys, xs))
        block = _canonical(decoded_level0(raw, dict(base.attrs), base.fill_value), l0.band_axis)
        method = "circular_mean" if spec.out.circle is not None else spec.out.method
        want, want_count = reduce_level0(block, np.nan, method, factor, dict(base.attrs))
        got, got_count = canon[:, :, tile[0], tile[1]], cnt[:, tile[0], tile[1]]
        where = f"tile y {tile[0].start}:{tile[0].stop}, x {tile[1].start}:{tile[1].stop}"
        if not np.array_equal(got_count, want_count):
            n = int((got_count != want_count).sum())
            return fail("reference", f"{n} count(s) differ from the numpy reference ({where})")
        valid = np.broadcast_to((want_count > 0)[:, None], got.shape)
        if method == "circular_mean":  # float32 angles; nodata also where vectors cancel
            turn = angle_units(dict(base.attrs))[0]
            valid = valid & ~np.isnan(want)
            off = (np.isnan(got) != np.isnan(want)) & (want_count > 0)[:, None]
            off |= valid & ~(angle_gap(got, want, turn) <= turn * 1e-6)
            what = "not within 1e-6 of a turn (or of nodata)"
        elif method == "mean" or (method == "sum" and got.dtype.kind == "f"):
            top, _ = reduce_level0(np.abs(block), np.nan, "max", factor)
            tol = mean_tolerance(int(np.log2(factor)), top, got.dtype)
            off = valid & ~(np.abs(got.astype(np.float64) - want) <= tol)
            what = f"more than {int(np.log2(factor))} ulp(s) of the window's largest value"
        else:
            off = valid & (got != np.where(valid, want, 0).astype(got.dtype))
            what = "not bitwise equal"
        if off.any():
            i = tuple(int(x[0]) for x in np.nonzero(off))
            return fail(
                "reference",
                f"{int(off.sum())} value(s) {what} from the numpy reference pooled from level 0 "
                f"({where}; e.g. {got[i]!r} vs {want[i]!r})",
            )
        return []


@dataclass(frozen=True)
class Window:
    """A window check of one sampled shard (`kind`: "coverage" or "range"): one node."""

    kind: str
    task: ShardTask

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.task.key}"


@dataclass(frozen=True)
class WindowCheck:
    """Each level cell against the level-0 window it pools, on the sampled shard's corner
    tiles (as the reference check), with no reduction: cheaper than the reference.

    coverage: a window with a valid level-0 cell has a count and a value (a direction may still
    cancel out); a window with none is nodata, its count 0.
    range: a value lies within its window's valid level-0 values: min..max for a mean (to
    the cascade's rounding), on the window's arc for a circular mean (when its directions fit
    in half a turn, where the mean direction provably does), one of them for mode, min and
    max. A sum has no such bound."""

    store: storage.Store
    method: str
    sources: dict[str, tuple[VarSource, ...]]
    level0: dict[str, Level0]

    def __call__(self, w: Window) -> list[Failure]:
        t = w.task
        spec = next(s for s in self.sources[t.group] if s.out.var == t.var)
        if not all(storage.exists(self.store, k) for k in t.objects):
            return []  # the reference check names what is missing
        from toolkit.pyramid.geometry import region

        reg = region(spec.out, t.index)
        factor = int(t.group.rstrip("x"))
        out: list[Failure] = []
        for tile in _tiles(reg, factor):
            got, count, block = self._read(t, spec, reg, tile, factor)
            where = f"tile y {tile[0].start}:{tile[0].stop}, x {tile[1].start}:{tile[1].stop}"
            check = self._coverage if w.kind == "coverage" else self._range
            detail = check(spec, got, count, block, factor)
            if detail:
                out.append(Failure(t.group, t.data_key, w.kind, f"{detail} ({where})"))
                break
        return out

    def _read(
        self, t: ShardTask, spec: VarSource, reg: tuple[slice, ...], tile: tuple[slice, slice],
        factor: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """(level values [T, B, h, w] float64, NaN at nodata; its count plane [T, h, w];
        the level-0 windows [T, B, h, w, f*f] float64, NaN where not valid in every band)."""
        from toolkit.pyramid.reference import _windows, decoded_level0

        z = self.store.zarr(read_only=True)
        sel = (*reg[:-2], *(
            slice(o.start + s.start, o.start + s.stop) for o, s in zip(reg[-2:], tile, strict=True)
        ))  # fmt: skip
        raw = _canonical(storage.read(self.store, zarr_open(z, spec.path(t.group)), sel),
                         spec.band_axis)  # fmt: skip
        nod = np.isnan(raw) if raw.dtype.kind == "f" else raw == spec.out.fill_value
        got = np.where(nod, np.nan, raw.astype(np.float64))
        csel = (*count_region(spec, t.index)[:-2], *sel[-2:])
        count = storage.read(self.store, zarr_open(z, spec.count_path(t.group)), csel)
        count = count.reshape((-1, *count.shape[-2:]))
        l0 = self.level0[t.var]
        base = zarr_open(z, l0.path)
        lead = [slice(0, base.shape[d]) if d == l0.band_axis else s for d, s in enumerate(reg[:-2])]
        ys, xs = (
            slice((o.start + s.start) * factor, min((o.start + s.stop) * factor, n))
            for o, s, n in zip(reg[-2:], tile, base.shape[-2:], strict=True)
        )
        raw0 = storage.read(self.store, base, (*lead, ys, xs))
        block = _canonical(decoded_level0(raw0, dict(base.attrs), base.fill_value), l0.band_axis)
        joint = ~np.isnan(block).any(axis=1, keepdims=True)
        block = np.where(joint, block, np.nan)
        return got, count, _windows(block, factor, np.nan)

    def _coverage(
        self, spec: VarSource, got: np.ndarray, count: np.ndarray, block: np.ndarray, f: int
    ) -> str | None:
        has = (~np.isnan(block[:, 0])).any(axis=-1)  # [T, h, w]: a valid level-0 cell
        empty = np.isnan(got).all(axis=1)  # [T, h, w]: nodata in every band
        value = not (spec.out.method == "sum" and np.dtype(spec.out.dtype).kind != "f")
        lost = has & ((count == 0) | (empty if value and spec.out.circle is None else False))
        if lost.any():
            i = tuple(int(x[0]) for x in np.nonzero(lost))
            return (
                f"{int(lost.sum())} window(s) with valid level-0 data are empty at the level "
                f"(e.g. cell {i[1:]})"
            )
        extra = ~has & ((count != 0) | (~empty if value else False))
        if extra.any():
            i = tuple(int(x[0]) for x in np.nonzero(extra))
            return (
                f"{int(extra.sum())} window(s) without level-0 data hold a value or a count "
                f"(e.g. cell {i[1:]})"
            )
        return None

    def _range(
        self, spec: VarSource, got: np.ndarray, count: np.ndarray, block: np.ndarray, f: int
    ) -> str | None:
        if spec.out.method == "sum":
            return None
        ok = ~np.isnan(got) & (~np.isnan(block)).any(axis=-1)
        if spec.out.circle is not None:
            from toolkit.pyramid.reference import angle_units

            turn = angle_units(dict(zarr_open(self.store.zarr(read_only=True),
                                              self.level0[spec.out.var].path).attrs))[0]  # fmt: skip
            off = ok & ~_on_arc(got, block, turn)
            what = "off the arc of its level-0 window's directions"
        elif spec.out.method == "mode":
            off = ok & ~(block == got[..., None]).any(axis=-1)
            what = "not among its level-0 window's labels"
        else:
            # an all-NaN window has no bound (NaN) and is not compared; fmin/fmax skip NaN
            # without the warning nanmin gives (a warnings filter is process-wide, not per
            # thread, and the in-process executor runs these nodes on threads)
            lo, hi = np.fmin.reduce(block, axis=-1), np.fmax.reduce(block, axis=-1)
            tol = 0.0
            if spec.out.method == "mean":
                from toolkit.pyramid.reference import mean_tolerance

                top = np.maximum(np.abs(lo), np.abs(hi))
                tol = mean_tolerance(max(1, int(np.log2(f))), np.nan_to_num(top), spec.out.dtype)
            off = ok & ~((got >= lo - tol) & (got <= hi + tol))
            what = "outside its level-0 window's min..max"
        if off.any():
            i = tuple(int(x[0]) for x in np.nonzero(off))
            return f"{int(off.sum())} value(s) {what} (e.g. cell {i[2:]}: {got[i].item()!r})"
        return None


def _on_arc(got: np.ndarray, block: np.ndarray, turn: float) -> np.ndarray:
    """Whether each direction lies on the shortest arc holding its window's valid directions;
    True where those do not fit in half a turn (no arc bounds their mean) or none is valid."""
    a = np.sort(np.mod(block, turn), axis=-1)  # NaN last
    n = (~np.isnan(a)).sum(axis=-1)
    k = a.shape[-1]
    idx = np.arange(k)
    nxt = np.concatenate([a[..., 1:], a[..., :1] + turn], axis=-1)
    gaps = nxt - a
    last = np.take_along_axis(a, np.maximum(n - 1, 0)[..., None], axis=-1)[..., 0]
    wrap = a[..., 0] + turn - last
    gaps = np.where(idx < (n - 1)[..., None], gaps, -np.inf)
    j = np.nanargmax(np.where(np.isnan(gaps), -np.inf, gaps), axis=-1)
    inner = np.take_along_axis(gaps, j[..., None], axis=-1)[..., 0]
    use_wrap = ~(inner > wrap)
    start = np.where(use_wrap, last, np.take_along_axis(a, j[..., None], axis=-1)[..., 0])
    size = np.where(use_wrap, wrap, inner)
    tol = turn * 1e-6
    into = np.mod(got - start, turn)
    inside_gap = (into > tol) & (into < size - tol)
    return ~inside_gap | (size < turn / 2) | (n == 0)


def _pixel_bytes(src: Any) -> int:
    """The most bytes one level-0 pixel column of a shard holds (leading dims included)."""
    return max(
        (int(np.prod(a.grid[:-2])) * np.dtype(a.dtype).itemsize for a in src.arrays.values()),
        default=8,
    )


def zarr_open(z: Any, path: str) -> Any:
    import zarr

    return zarr.open_array(z, path=path, mode="r")


def _canonical(a: np.ndarray, band_axis: int | None) -> np.ndarray:
    """[..., y, x] -> [T, B, y, x] (B = 1 without a band dim)."""
    a = a[..., None, :, :] if band_axis is None else np.moveaxis(a, band_axis, -3)
    return a.reshape((-1, *a.shape[-3:]))


def _tiles(reg: tuple[slice, ...], factor: int) -> list[tuple[slice, slice]]:
    """The shard's first and last corner tiles (output pixels, relative to the shard) whose
    level-0 footprint is at most REFERENCE_PIXELS a side."""
    side = max(1, REFERENCE_PIXELS // factor)
    h, w = (s.stop - s.start for s in reg[-2:])
    first = (slice(0, min(side, h)), slice(0, min(side, w)))
    last = (slice(max(0, h - side), h), slice(max(0, w - side), w))
    return [first] if first == last else [first, last]


def spread_samples(tasks: Sequence[ShardTask], n: int) -> list[ShardTask]:
    """`n` tasks spread evenly over the list, its first and last among them. (The build runs
    one node per shard, so there are no worker stripes to follow.)"""
    if not tasks:
        return []
    k = min(n, len(tasks))
    picks = sorted({round(i * (len(tasks) - 1) / max(1, k - 1)) for i in range(k)})
    return [tasks[i] for i in picks]


def stripe_samples(tasks: Sequence[ShardTask], stripes: int) -> list[ShardTask]:
    """The first, middle and last task of each of `stripes` contiguous stripes of a level's
    stable task list, as a repo build's workers take them (`toolkit.tasks.stripe`): where a
    worker started, stood midway and stopped. The build's stripe count follows its cluster;
    verifying with a multiple of it keeps every edge of the build's stripes among these."""
    out: list[ShardTask] = []
    for i in range(min(stripes, len(tasks))):
        mine = stripe(tasks, i, min(stripes, len(tasks)), "contiguous")
        out += [mine[0], mine[(len(mine) - 1) // 2], mine[-1]]
    return list(dict.fromkeys(out))


def window_means(values: np.ndarray, factor: int, n: int) -> np.ndarray:
    """The mean of each `factor`-wide window of `values`, computed apart from the builder's
    `level_coords`: a regular axis continued at its spacing, an irregular one padded with NaN
    (its last window averages the cells it has); reshaped, averaged."""
    padded = np.full(n * factor, np.nan)
    padded[: len(values)] = values
    if _regular(values):
        step = (values[-1] - values[0]) / (len(values) - 1)
        tail = np.arange(len(values), n * factor)
        padded[tail] = values[0] + step * tail
    return np.nanmean(padded.reshape(n, factor), axis=1)


def _regular(values: np.ndarray, rtol: float = 1e-6) -> bool:
    """Level 0's axis steps agree within `rtol` (the verifier's own test, not the builder's)."""
    d = np.diff(np.asarray(values, dtype=np.float64))
    return bool(d.size and np.ptp(d) <= rtol * np.abs(d).mean())


def _same_fill(got: Any, want: Any) -> bool:
    try:
        g, w = float(got), float(want)
    except (TypeError, ValueError):
        return bool(got == want)
    return (np.isnan(g) and np.isnan(w)) or g == w


def _sans_gt(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: x for k, x in attrs.items() if k != "GeoTransform"}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


# ----------------------------------------------------------------------------- client


@dataclass(frozen=True)
class ClientCheck:
    """Open every level the way a browser would: read-only, no credentials (unless `private`)."""

    home: Home
    shapes: dict[str, tuple[int, int]]
    variables: tuple[str, ...]
    private: bool = False
    # what a client should see at every level: level 0's CRS attributes per variable, and its
    # cell centres per spatial dim (resolution and bounds follow from them)
    crs: dict[str, dict[str, Any]] = field(default_factory=dict)
    axes: dict[str, np.ndarray] = field(default_factory=dict)

    def seen(self, group: str, ds: Any) -> list[Failure]:
        """CRS, resolution and bounds as xarray shows them, against level 0's."""
        out = []
        factor = 1 if group == "." else int(group.rstrip("x"))
        for v in self.variables:
            want = self.crs.get(v)
            gm = ds[v].attrs.get("grid_mapping")
            if want is None:
                continue
            # a level's GeoTransform is its own (the metadata check proves it)
            if gm not in ds.variables or _sans_gt(ds[gm].attrs) != _sans_gt(want):
                out.append(Failure(group, v, "client", f"CRS via grid_mapping {gm!r} differs"))
            elif group != "." and gm not in ds[v].coords:  # what rioxarray reads a CRS from
                why = "rioxarray finds no CRS; run pyramid build to rewrite the levels' metadata"
                out.append(
                    Failure(group, v, "client", f"CRS variable {gm!r} is no coordinate ({why})")
                )
        for dim, base in self.axes.items():
            if not _regular(base) or dim not in ds.coords:
                continue
            step0 = (base[-1] - base[0]) / (len(base) - 1)
            got = np.asarray(ds[dim].values, dtype=np.float64)
            res = step0 * factor
            if len(got) > 1 and not np.isclose((got[-1] - got[0]) / (len(got) - 1), res):
                out.append(Failure(group, dim, "client", f"resolution is not {res:g}"))
            edge0, edge = base[0] - step0 / 2, got[0] - res / 2
            end0, end = base[-1] + step0 / 2, got[-1] + res / 2
            inside = (end - end0) * np.sign(step0) >= -1e-9 * abs(step0)
            if not np.isclose(edge, edge0, atol=1e-9 * abs(step0)) or not inside:
                out.append(
                    Failure(
                        group, dim, "client",
                        f"bounds {edge:g}..{end:g} do not cover level 0's {edge0:g}..{end0:g} "
                        "from the same origin",
                    )
                )  # fmt: skip
        return out

    def __call__(self, check: Check) -> list[Failure]:
        import xarray as xr

        group = check.name
        options = self.home.options
        opts = {k: v for k, v in options.items() if k not in storage.SECRET_OPTIONS}
        if self.home.url.startswith(("s3://", "gs://", "az://")) and not self.private:
            opts["anonymous"] = True
        try:
            ds = xr.open_zarr(
                self.home.client_zarr(opts, self.private),
                group=None if group == "." else group,
                consolidated=False,
                chunks=None,
            )
            out = []
            for v in self.variables:
                da = ds[v]
                if tuple(da.shape[-2:]) != tuple(self.shapes[group]):
                    out.append(Failure(group, v, "client", f"shape {da.shape} via xarray"))
                da.isel({d: -1 for d in da.dims}).values  # noqa: B018 - a real read
            return out + self.seen(group, ds)
        except Exception as err:
            text = str(err).strip().splitlines()
            detail = f"{type(err).__name__}: {text[0] if text else ''}"
            if isinstance(err, (PermissionError, storage.AccessDenied)) or "403" in str(err):
                detail += " (the store is not public; `verify --private` reads with credentials)"
            return [
                Failure(
                    group,
                    "-",
                    "client",
                    f"anonymous xarray read failed: {detail}"
                    if not self.private
                    else f"xarray read failed: {detail}",
                )
            ]


# ----------------------------------------------------------------------------- entry point


def _stage(name: str, tasks: list[Any], service: Callable[[Any], Any]) -> Stage:
    return Stage(name, stable(tasks), service, None, resume=False, combine=_concat, retries=0)


def verify(
    source: str | storage.Store,
    sample: int = 4,
    cluster: Any = None,
    executor: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    private: bool = False,
    select: Mapping[str, Sequence[str]] | None = None,
    latest: bool = False,
    runner: Runner | None = None,
    options: storage.Options | None = None,
) -> VerifyResult:
    """Run every check; `result.ok` is True only if all pass.

    The client round-trip reads every level anonymously, as a browser would; `private=True` is
    for stores that are not published (it reads with the environment's credentials instead).
    An Icechunk repo's levels are checked on main; `select`/`latest` restrict the check to
    those positions (as `build` does). `runner` runs the checks (or the one `cluster`/
    `executor`/`progress` make: `toolkit.engine.Runner`); `options` reach the store
    (`toolkit.storage.Options`).
    """
    runner = runner_of(runner, cluster=cluster, executor=executor, progress=progress)
    if sample < 1:
        raise PlanError(f"--sample must be >= 1 (stripes sampled per level), got {sample}")
    home = open_home(source, options, select=select, latest=latest)
    then = home.recorded()
    if then is None:
        return VerifyResult((home.unbuilt(),))
    src = home.level0(list(then.variables))
    try:
        # the build accepted each variable's operator; the check re-plans with it
        p: PyramidPlan = plan_source(
            src, None, then.band_dim, then.levels, then.max_shard, recorded=then.accepted()
        )
    except PlanError as err:
        return VerifyResult((Failure("-", "-", "plan", str(err)),))
    doc = home.expected(p)
    if grew := grown_along(doc, p):  # an append since the build: one line, not every check
        why = f"{growth_note(grew)} since the build: run `toolkit pyramid build {home.url}`"
        return VerifyResult((Failure("-", ".pyramid/plan", "plan", why),))
    failures = _against_record(home, p, doc)
    samples = _samples(p, sample, home.striped)
    report = runner.run(
        Plan(
            f"pyramid-verify-{p.method}",
            _stages(home, src, p, doc, samples, private),
            holds_gil=home.decodes_grib,  # a repo's level 0 decodes GRIB (holds the GIL)
            # each sample reads at most two level-0 tiles of REFERENCE_PIXELS a side
            work_bytes=len(samples) * 2 * REFERENCE_PIXELS**2 * _pixel_bytes(src),
        )
    )
    for s in report.stages:
        failures.extend(s.result or [])
    checked = {s.name: s.tasks for s in report.stages}
    return VerifyResult(tuple(failures), report, checked)


def _against_record(home: Home, p: PyramidPlan, doc: RecordedPlan) -> list[Failure]:
    """The plan of level 0 now against the record: its listing, objects changed in place since
    the build, each level's planned shards."""
    out: list[Failure] = []
    if p.digest != doc.digest:
        why = "level 0 no longer matches the recorded plan (listing changed)"
        out.append(Failure("-", ".pyramid/plan", "plan", why))
    edited = home.edited(p) if p.digest == doc.digest else None
    if edited and any(edited.values()):
        n = sum(len(v) for v in edited.values())
        why = (
            f"level 0 changed in place since the build ({n} object(s)); run pyramid build "
            "to rebuild the shards that depend on them"
        )
        out.append(Failure("-", ".pyramid/plan", "plan", why))
    for lp in doc.levels:
        if list(lp.keys) != p.level(lp.group).tasks.keys:
            out.append(Failure(lp.group, "-", "plan", "planned shards differ from the record"))
    return out


def _samples(p: PyramidPlan, sample: int, striped: bool) -> list[Sample]:
    """The shards compared with the reference: `sample` per level and variable, spread, and
    (`striped`: the build's workers took contiguous stripes) the edges of `sample` stripes."""
    samples = []
    for lvl in p.levels:
        picked = []
        for var in p.variables:
            picked += spread_samples([t for t in lvl.tasks if t.var == var], sample)
        if striped:
            picked += stripe_samples(lvl.tasks, sample)
        samples += [Sample(t) for t in dict.fromkeys(picked)]
    return samples


def _stages(
    home: Home,
    src: Source,
    p: PyramidPlan,
    doc: RecordedPlan,
    samples: list[Sample],
    private: bool,
) -> tuple[Stage, ...]:
    """The checks, cheapest first: counts, metadata, coverage, range, samples, client."""
    store = home.store
    targets = {lvl.group: lvl.targets for lvl in p.levels}
    prefixes = {
        lvl.group: tuple(
            f"{lvl.group}/{n}/"
            for v in lvl.vars
            for n in (v.var, v.count_name, *((v.classes_name,) if v.classes else ()))
        )
        for lvl in p.levels
    }
    coords = {d: np.asarray(src.coords[d]) for d in p.spatial_dims}
    meta_attrs = {n: src.attrs.get(n, {}) for n in (*p.variables, *src.crs)}
    sources = {lvl.group: var_sources(src, p, k) for k, lvl in enumerate(p.levels)}
    windows = {kind: [Window(kind, s.task) for s in samples] for kind in ("coverage", "range")}
    level0 = {
        n: Level0(n, a.dims.index(p.band_dim) if p.band_dim else None)
        for n, a in src.arrays.items()
    }
    groups = [lvl.group for lvl in p.levels]
    shapes = {".": p.base_shape, **{lvl.group: lvl.shape for lvl in p.levels}}
    crs = {
        v: src.attrs[gm]
        for v in p.variables
        if (gm := src.attrs.get(v, {}).get("grid_mapping")) in src.attrs
    }
    meta = MetaCheck(home, doc, coords, meta_attrs, src.crs, src.node_keys, carried_coords(src, p))
    windowed = WindowCheck(store, p.method, sources, level0)
    return (
        _stage("verify-counts", [Check("counts", g) for g in groups],
               CountCheck(store, targets, prefixes)),
        _stage("verify-metadata", [Check("meta", g) for g in [".", *groups]], meta),
        _stage("verify-coverage", windows["coverage"], windowed),
        _stage("verify-range", windows["range"], windowed),
        _stage("verify-samples", samples, SampleCheck(store, p.method, sources, level0)),
        _stage("verify-client", [Check("client", g) for g in [".", *groups]],
               ClientCheck(home, shapes, p.variables, private, crs, coords)),
    )  # fmt: skip
