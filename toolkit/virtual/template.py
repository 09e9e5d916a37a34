"""The dataset's zarr metadata as a pure value: coordinates, variables, chunking, append dim.

A `Template` is checked in (built by a dataset's small function), never read back from a
store: the write loop, the filter and validation all ask it where a label lives. Geometry is
memoized on the instance (dropped when pickled, so a graph ships coordinates, not label maps).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from toolkit.virtual.refs import ArrayGeometry, Geometry, canon

__all__ = ["VALID_TIME", "Template", "TemplateVar"]

VALID_TIME = "valid_time"  # a forecast's init_time + lead_time, stored beside its dims

_MEMO_LOCK = threading.Lock()


@dataclass(frozen=True)
class TemplateVar:
    """One data variable: dims (append dim first), dtype, attrs (`step_type` marks instants)."""

    dims: tuple[str, ...]
    dtype: str = "float32"
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def step_type(self) -> str:
        return str(self.attrs.get("step_type", "instant"))


@dataclass(frozen=True, eq=False)
class Template:
    """Coordinates (the append dim at its full span), data variables (each decoded by
    gribberish's codec, `var` always set) and root attrs.

    Chunks: 1 along every dim a ref pins, whole along the grid dims (`grid_dims`). Geometry is
    memoized per extent: the write loop asks for it per file and per batch, and rebuilding the
    label maps of a multi-year append dim each time dominated a tick.
    """

    append_dim: str
    coords: Mapping[str, np.ndarray]
    variables: Mapping[str, TemplateVar]
    grid_dims: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    coord_attrs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def chunks(self, name: str) -> tuple[int, ...]:
        v = self.variables[name]
        return tuple(len(self.coords[d]) if d in self.grid_dims else 1 for d in v.dims)

    def shape(self, name: str, extent: int | None = None) -> tuple[int, ...]:
        v = self.variables[name]
        return tuple(
            (extent if (d == self.append_dim and extent is not None) else len(self.coords[d]))
            for d in v.dims
        )

    memo_extents: ClassVar[int] = 8  # geometries kept (an update process sees extent grow)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_memo", {})

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_memo"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _memo={})

    def _memoized(self, key: Any, build: Callable[[], Any]) -> Any:
        memo: dict[Any, Any] = self.__dict__.setdefault("_memo", {})
        got = memo.get(key)
        if got is None:
            got = build()
            with _MEMO_LOCK:  # the tick loop's threads may build concurrently: last one wins
                extents = [k for k in memo if k[0] == "geometry" and k[1] is not None]
                if key[0] == "geometry" and len(extents) >= self.memo_extents:
                    memo.pop(extents[0], None)
                memo[key] = got
        return got

    def geometry(self, extent: int | None = None) -> Geometry:
        return self._memoized(("geometry", extent), lambda: self._build_geometry(extent))

    def _build_geometry(self, extent: int | None) -> Geometry:
        if extent is not None:  # reuse the full geometry's non-append labels: only one dim shrinks
            full = self.geometry()
            return full.with_coords({self.append_dim: self.coords[self.append_dim][:extent]})
        arrays = [
            ArrayGeometry(n, v.dims, self.shape(n, extent), self.chunks(n))
            for n, v in self.variables.items()
        ]
        return Geometry.build(self.append_dim, arrays, self.coords)

    def valid_time(self, extent: int | None = None) -> np.ndarray | None:
        """A forecast's valid times as [init_time, lead_time] (the first `extent` inits), the
        CF auxiliary coordinate readers select a valid time by; None without both dims."""
        if self.append_dim != "init_time" or "lead_time" not in self.coords:
            return None
        inits = np.asarray(self.coords["init_time"][:extent], "datetime64[ns]")
        return inits[:, None] + np.asarray(self.coords["lead_time"], "timedelta64[ns]")[None, :]

    def position(self, label: Any) -> int:
        pos = self.geometry().labels[self.append_dim].get(canon(label))
        if pos is None:
            raise KeyError(f"{self.append_dim} label {label!r} is outside the template")
        return pos
