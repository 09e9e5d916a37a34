"""From a level-0 source to a plan and each level's inputs: shared by the Zarr-store build
(`toolkit.pyramid.store_build`), the repo build (`toolkit.pyramid.repo`) and the verifier."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from toolkit.pyramid.geometry import (
    MAX_SHARD,
    PlanError,
    PyramidPlan,
    choose_methods,
    declared_classes,
    plan_pyramid,
)
from toolkit.pyramid.shards import VarSource
from toolkit.pyramid.source import Source

__all__ = ["level0_bytes", "no_positions", "plan_source", "var_sources"]


def no_positions(source: Any, select: Any, latest: bool) -> None:
    if select or latest:
        flag = "--select" if select else "--latest"
        raise PlanError(
            f"{flag}: {getattr(source, 'url', source)} is a Zarr store; positions are chosen "
            "only in an Icechunk repo source (a Zarr store is built whole)"
        )


def plan_source(
    src: Source,
    method: str | Mapping[str, str] | None,
    band_dim: str | None,
    levels: int | None,
    max_shard: int = MAX_SHARD,
    force_method: bool = False,
    recorded: Mapping[str, tuple[str, str]] | None = None,
) -> PyramidPlan:
    """The plan of `src`, each variable with its operator (`choose_methods`): `method` for
    every variable, or for those a mapping names; `recorded` (variable -> (operator, why)) as
    a build accepted them."""
    if max_shard < 1:
        raise PlanError(f"--max-shard must be >= 1, got {max_shard}")
    chosen = choose_methods(src.arrays, src.attrs, method, force=force_method, recorded=recorded)
    kernel = {n: "mean" if m == "circular_mean" else m for n, (m, _) in chosen.items()}
    if band_dim is None and src.arrays and all(BAND in a.dims[:-2] for a in src.arrays.values()):
        band_dim = BAND  # rioxarray's name for the bands of one pixel: their mask is joint
    p = plan_pyramid(
        src.arrays,
        src.listings,
        method=kernel,
        band_dim=band_dim,
        levels=levels,
        max_shard=max_shard,
        method_from="; ".join(sorted({w for _, w in chosen.values() if w})) or "given",
        classes=declared_classes(src.arrays, src.attrs),
        prints=src.prints,
        circular=tuple(n for n, (m, _) in chosen.items() if m == "circular_mean"),
        operators_from={n: w for n, (_, w) in chosen.items()},
    )
    reading = tuple(
        f"{n}: {a.cf.describe()}" for n, a in sorted(src.arrays.items()) if a.cf is not None
    )
    return replace(p, notes=band_notes(src, p, band_dim), reading=reading)


BAND = "band"
APPEND_DIMS = ("time", "init_time", "lead_time", "valid_time", "step", "forecast_period")


def band_notes(src: Source, p: PyramidPlan, band_dim: str | None) -> tuple[str, ...]:
    """One line per leading dim a mean pools plane by plane that may be one vector: not the
    band dim, not an append dim (time-like by name or by its coordinate's dtype)."""
    means = {v.var for v in p.levels[0].vars if v.method == "mean"}
    dims: dict[str, list[str]] = {}
    for name, a in sorted(src.arrays.items()):
        if name not in means:
            continue
        for d in a.dims[:-2]:
            coord = src.coords.get(d)
            timelike = coord is not None and np.asarray(coord).dtype.kind in "mM"
            if d != band_dim and d not in APPEND_DIMS and not timelike:
                dims.setdefault(d, []).append(name)
    return tuple(
        f"dim {d!r} of {', '.join(map(repr, names))} is averaged plane by plane; if its "
        f"planes are one vector (bands, or parts that sum to 1), rerun with --band-dim {d} "
        "for a joint nodata mask"
        for d, names in dims.items()
    )


def var_sources(src: Source, p: PyramidPlan, k: int) -> tuple[VarSource, ...]:
    lvl = p.levels[k]
    out = []
    for v in lvl.vars:
        a = src.arrays[v.var]
        band_axis = a.dims.index(p.band_dim) if p.band_dim else None
        if k > 0 and v.classes:  # mode: the parent's class counts, summed 2x2
            pv = p.levels[k - 1].var(v.var)
            path = f"{p.levels[k - 1].group}/{pv.classes_name}"
            out.append(VarSource(v, path, None, 0, pv.shape, 2, None, from_classes=True))
        elif k == 0 or v.method == "mode" or v.circle is not None:
            out.append(
                VarSource(
                    v,
                    v.var,
                    None,
                    a.fill_value,
                    a.shape,
                    lvl.factor,
                    band_axis,
                    cf=a.cf,
                )
            )
        else:
            parent = p.levels[k - 1]
            pv = parent.var(v.var)
            out.append(
                VarSource(
                    v,
                    f"{parent.group}/{v.var}",
                    f"{parent.group}/{pv.count_name}",
                    pv.fill_value,
                    pv.shape,
                    2,
                    band_axis,
                )
            )
    return tuple(out)


def level0_bytes(src: Source) -> int:
    """The bytes of the level-0 objects that exist (decoded), from the listing."""
    total = 0
    for name, a in src.arrays.items():
        per = int(np.prod(a.grid)) * np.dtype(a.dtype).itemsize
        total += per * len(src.listings.get(name, ()))
    return total
