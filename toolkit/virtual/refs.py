"""Source files, virtual refs and chunk keys, in coordinate-label space (pure: no I/O).

A dataset speaks in labels (an init time, a lead time, a variable); Icechunk speaks in chunk
indices and zarr keys. `chunk_key` is the one translation, shared by the filter (which probes the
manifest) and the emitter (which sets refs), so the two cannot disagree. Geometry (dim order,
chunk sizes) comes from the dataset's template, key text from zarr's own chunk-key encoding.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from zarr.core.chunk_key_encodings import parse_chunk_key_encoding

__all__ = [
    "ArrayGeometry",
    "ChunkKey",
    "Geometry",
    "SourceFileCoord",
    "VirtualRef",
    "canon",
    "canon_all",
    "chunk_cell",
    "chunk_index",
    "chunk_key",
]

DEFAULT_ENCODING: Mapping[str, Any] = {"name": "default", "configuration": {"separator": "/"}}


def canon(label: Any) -> Hashable:
    """A hashable, type-stable form of a coordinate label.

    numpy datetimes/timedeltas, Python datetimes and pandas timestamps compare by nanoseconds;
    numpy scalars become Python scalars (1000 == 1000.0, as a source index spells levels).
    """
    if isinstance(label, (np.datetime64, _dt.datetime)) or type(label).__name__ == "Timestamp":
        return ("M", int(np.datetime64(label, "ns").astype("int64")))
    if isinstance(label, (np.timedelta64, _dt.timedelta)) or type(label).__name__ == "Timedelta":
        return ("m", int(np.timedelta64(label, "ns").astype("int64")))
    if isinstance(label, np.generic):
        return label.item()
    return label


def canon_all(values: Sequence[Any]) -> list[Hashable]:
    """`[canon(v) for v in values]`, vectorised for numpy arrays: a coordinate of 10^5 init
    times is canonicalised at every geometry build, and element by element that took seconds."""
    if isinstance(values, np.ndarray) and values.ndim == 1:
        if values.dtype.kind in "Mm":
            tag = "M" if values.dtype.kind == "M" else "m"
            unit = "datetime64[ns]" if tag == "M" else "timedelta64[ns]"
            return [(tag, i) for i in values.astype(unit).astype("int64").tolist()]
        if values.dtype.kind in "biuf":
            return values.tolist()
    return [canon(v) for v in values]


# ----------------------------------------------------------------------------- source files


@dataclass(frozen=True, slots=True)
class SourceFileCoord:
    """One source file. Subclasses add fields; by default every field except those named in
    `not_dims` is a dimension the file pins to one label.
    """

    not_dims: ClassVar[frozenset[str]] = frozenset({"data_vars"})

    def get_url(self) -> str:
        """The canonical data-file URL refs point at (inside a virtual chunk container)."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_url()")

    def get_index_url(self) -> str:
        """The sidecar byte-range index URL, for sources that have one."""
        raise NotImplementedError(f"{type(self).__name__} has no sidecar index")

    def out_loc(self) -> dict[str, Any]:
        """{dim: label} for each dim the file pins; dims it spans wholly are omitted."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in self.not_dims
        }

    @property
    def key(self) -> str:
        """Stable task key: the file's URL (one file, one key)."""
        return self.get_url()


@dataclass(frozen=True, slots=True)
class VirtualRef:
    """One pointer: bytes [offset, offset+length) of `location` are chunk `out_loc` of `variable`.

    `out_loc` holds a label for every dim the ref pins (dims it spans wholly are omitted).
    `last_modified` (the source object's own, whole seconds) lets Icechunk refuse a ref whose
    object was re-uploaded.
    """

    variable: str
    out_loc: tuple[tuple[str, Any], ...]
    location: str
    offset: int
    length: int
    last_modified: _dt.datetime | None = field(default=None, compare=False)

    @classmethod
    def make(
        cls,
        variable: str,
        out_loc: Mapping[str, Any] | tuple[tuple[str, Any], ...],
        location: str,
        offset: int,
        length: int | None,
        last_modified: _dt.datetime | None = None,
    ) -> VirtualRef:
        """`out_loc` as a mapping, or as the (dim, label) pairs sorted by dim that a ref keeps
        (a file's refs share theirs: the reader sorts them once per file)."""
        if length is None or offset < 0 or length <= 0:
            raise ValueError(
                f"ref for {variable} at {dict(out_loc)} -> {location}: bad byte range "
                f"offset={offset} length={length}"
            )
        return cls(
            variable,
            out_loc if type(out_loc) is tuple else tuple(sorted(out_loc.items())),  # type: ignore[union-attr]
            location,
            int(offset),
            int(length),
            last_modified,
        )

    @property
    def loc(self) -> dict[str, Any]:
        return dict(self.out_loc)


# ----------------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class ArrayGeometry:
    """One array's dims, shape, chunk shape and chunk-key encoding (from the template)."""

    name: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    chunk_key_encoding: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_ENCODING))

    def __post_init__(self) -> None:
        if not (len(self.dims) == len(self.shape) == len(self.chunks)):
            raise ValueError(
                f"array {self.name!r}: dims {self.dims}, shape {self.shape} and chunks "
                f"{self.chunks} differ in length"
            )
        if any(c < 1 for c in self.chunks):
            raise ValueError(f"array {self.name!r}: chunk sizes must be >= 1, got {self.chunks}")

    @functools.cached_property
    def _encoding(self) -> Any:
        """zarr's encoder, parsed once per geometry: parsed per call, it was close to half the
        time of keying a ref (`chunk_key`), in the write loop and in the benchmark's floor."""
        return parse_chunk_key_encoding(dict(self.chunk_key_encoding))  # type: ignore[arg-type]

    def encode(self, index: Sequence[int]) -> str:
        """The zarr key of chunk `index`, text from zarr's own encoding."""
        return f"{self.name}/{self._encoding.encode_chunk_key(tuple(int(i) for i in index))}"


@dataclass(frozen=True)
class Geometry:
    """A dataset's arrays and the labels along each dimension coordinate.

    `labels[dim]` maps canonical label -> position. For the filter pass the store's committed
    coordinates (a label not there yet means "not ingested"); for the emitter the template's.
    """

    append_dim: str
    arrays: Mapping[str, ArrayGeometry]
    labels: Mapping[str, Mapping[Hashable, int]]

    @classmethod
    def build(
        cls,
        append_dim: str,
        arrays: Iterable[ArrayGeometry],
        coords: Mapping[str, Sequence[Any]],
    ) -> Geometry:
        labels: dict[str, dict[Hashable, int]] = {}
        for dim, values in coords.items():
            keys = canon_all(values)
            positions = {c: i for i, c in enumerate(keys)}
            if len(positions) != len(keys):
                seen: set[Hashable] = set()
                for v, c in zip(values, keys, strict=True):
                    if c in seen:
                        raise ValueError(f"coordinate {dim!r} repeats label {v!r}")
                    seen.add(c)
            labels[dim] = positions
        return cls(append_dim, {a.name: a for a in arrays}, labels)

    @classmethod
    def from_dataset(cls, ds: Any, append_dim: str) -> Geometry:
        """Geometry of an xarray Dataset template: each data var's encoding chunks, every index."""
        arrays = []
        for name, var in ds.data_vars.items():
            chunks = var.encoding.get("chunks") or var.shape
            enc = var.encoding.get("chunk_key_encoding", DEFAULT_ENCODING)
            arrays.append(
                ArrayGeometry(
                    str(name),
                    tuple(map(str, var.dims)),
                    tuple(var.shape),
                    tuple(int(c) for c in chunks),
                    enc,
                )
            )
        coords = {str(d): ds[d].values for d in ds.dims if d in ds.coords}
        return cls.build(append_dim, arrays, coords)

    def with_coords(self, coords: Mapping[str, Sequence[Any]]) -> Geometry:
        """The same arrays with some dims' labels replaced (e.g. the store's committed extent)."""
        fresh = Geometry.build(self.append_dim, (), coords)
        labels = {**self.labels, **fresh.labels}
        arrays = {}
        for name, a in self.arrays.items():
            shape = tuple(
                len(labels[d]) if d in fresh.labels else s
                for d, s in zip(a.dims, a.shape, strict=True)
            )
            arrays[name] = dataclasses.replace(a, shape=shape)
        return Geometry(self.append_dim, arrays, labels)

    def size(self, dim: str) -> int:
        return len(self.labels[dim])


@dataclass(frozen=True)
class ChunkKey:
    variable: str
    index: tuple[int, ...]
    key: str


def chunk_index(positions: Sequence[int], chunks: Sequence[int]) -> tuple[int, ...]:
    """Element positions -> the index of the chunk holding them."""
    if len(positions) != len(chunks):
        raise ValueError(f"{len(positions)} positions for {len(chunks)} chunk dims")
    out = []
    for p, c in zip(positions, chunks, strict=True):
        if p < 0:
            raise ValueError(f"negative position {p}")
        out.append(p // c)
    return tuple(out)


def chunk_key(
    geometry: Geometry,
    variable: str,
    out_loc: Mapping[str, Any],
    memo: dict[Any, Any] | None = None,
) -> ChunkKey | None:
    """The one chunk a ref at `out_loc` of `variable` fills, or None when a label is not
    present: `chunk_cell`'s index with its zarr key."""
    index = chunk_cell(geometry, variable, out_loc, memo)
    if index is None:
        return None
    return ChunkKey(variable, index, geometry.arrays[variable].encode(index))


def chunk_cell(
    geometry: Geometry,
    variable: str,
    out_loc: Mapping[str, Any],
    memo: dict[Any, Any] | None = None,
) -> tuple[int, ...] | None:
    """The index of the one chunk a ref at `out_loc` of `variable` fills, or None when a label
    is not present (no key text made: a write keys 160,000 refs of 20,000 files by index).

    A ref is one whole chunk: every pinned dim must have chunk size 1, every dim it leaves open
    must be a single chunk. Anything else raises, naming the variable and dim. `memo`: a dict
    the caller keeps for one pass over many cells (they share most labels, and their variable
    and pinned dims), so each label is canonicalised once and each (variable, pinned dims)
    checked once; labels equal under `==` have the same `canon`, hence the same position.
    """
    plan = None if memo is None else memo.get((variable, tuple(out_loc), None))
    if plan is None:
        plan = _cell_plan(geometry, variable, out_loc)
        if memo is not None:
            memo[variable, tuple(out_loc), None] = plan
    index = []
    for dim, labels in plan:
        if labels is None:
            index.append(0)  # left open: the whole dim is one chunk
            continue
        label = out_loc[dim]
        if memo is None:
            pos = labels.get(canon(label))
        else:
            try:
                pos = memo[dim, label]
            except KeyError:
                pos = memo[dim, label] = labels.get(canon(label))
            except TypeError:  # an unhashable label: no memo for it
                pos = labels.get(canon(label))
        if pos is None:
            return None
        index.append(pos)  # a pinned dim's chunks are of size 1: the position is the index
    return tuple(index)


def _cell_plan(
    geometry: Geometry, variable: str, out_loc: Mapping[str, Any]
) -> tuple[tuple[str, Mapping[Hashable, int] | None], ...]:
    """Per dim of `variable`: the labels a pinned dim's position is looked up in, or None for
    a dim the ref leaves open; raises when a ref at `out_loc` is not exactly one chunk."""
    array = geometry.arrays.get(variable)
    if array is None:
        raise KeyError(
            f"variable {variable!r} is not in the template (have {sorted(geometry.arrays)})"
        )
    extra = set(out_loc) - set(array.dims)
    if extra:
        raise ValueError(
            f"{variable}: out_loc names dims {sorted(extra)} the array does not have "
            f"(dims {array.dims})"
        )
    plan: list[tuple[str, Mapping[Hashable, int] | None]] = []
    for dim, size, chunk in zip(array.dims, array.shape, array.chunks, strict=True):
        if dim in out_loc:
            if chunk != 1:
                raise ValueError(
                    f"{variable}: dim {dim!r} is pinned by a ref but chunked by {chunk}; "
                    "one ref must be exactly one chunk"
                )
            labels = geometry.labels.get(dim)
            if labels is None:
                raise ValueError(f"{variable}: no coordinate labels for dim {dim!r}")
            plan.append((dim, labels))
        else:
            if chunk < size:
                raise ValueError(
                    f"{variable}: dim {dim!r} (size {size}) is left open by the ref but "
                    f"split into chunks of {chunk}; one ref must be exactly one chunk"
                )
            plan.append((dim, None))
    return tuple(plan)
