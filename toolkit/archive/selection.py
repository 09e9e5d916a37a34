"""A reader's selection -> chunk keys (pure): xarray's isel / sel on the arrays' metadata.

`isel` is positional and half-open (`time=0:10`, or `time=3`; negative as Python); `sel` is by
label and, like xarray's `.sel(time=slice(a, b))`, includes b. Either ends as one half-open
position range per dimension; with the array's object shape (the shard of a sharded v3 array:
the object a recall brings back) that gives chunk index ranges, and those give keys. Nothing is
read here: label lookups take the coordinate's values as an argument.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "Label",
    "Spec",
    "chunk_index",
    "chunk_key",
    "chunk_keys",
    "chunk_ranges",
    "label_positions",
    "parse_isel",
    "parse_label",
    "parse_sel",
    "positions",
    "size",
    "spans",
]

Spec = int | tuple[int | None, int | None]  # isel: one index, or a half-open (start, stop)
Label = Any  # sel: one label, or a (start, stop) tuple, both ends included

_INT = r"-?[0-9]+"
_ISEL = re.compile(rf"({_INT})|({_INT})?:({_INT})?")


def _split(flag: str, text: str) -> tuple[str, str]:
    dim, eq, value = text.partition("=")
    if not eq or not dim.strip() or not value.strip():
        want = "DIM=START:STOP or DIM=INDEX" if flag == "--isel" else "DIM=VALUE or DIM=START:STOP"
        raise ValueError(f"{flag} {text!r}: want {want}")
    return dim.strip(), value.strip()


def parse_isel(text: str) -> tuple[str, Spec]:
    """`DIM=I` or `DIM=START:STOP` (either end may be left out) as typed on the command line."""
    dim, value = _split("--isel", text)
    m = _ISEL.fullmatch(value)
    if m is None:
        raise ValueError(
            f"--isel {text!r}: want DIM=START:STOP or DIM=INDEX with integers (no step)"
        )
    if m.group(1) is not None:
        return dim, int(m.group(1))
    return dim, tuple(None if g is None else int(g) for g in m.group(2, 3))  # type: ignore[return-value]


_TIME_COLON = re.compile(r"[T ][0-9]{2}(:[0-9]{2})?$")  # before a colon that is a time's own
_TIME_PART = re.compile(r"[0-9]{2}(?![0-9-])")  # minutes or seconds, not a year


def parse_sel(text: str) -> tuple[str, Label]:
    """`DIM=VALUE` or `DIM=START:STOP` (labels, kept as text until the coordinate's dtype is
    known; either end may be left out). A time's own colons (`2020-01-03T06:00`) are not the
    range's: a colon after `T`HH (or `T`HH:MM) and before two digits belongs to the time."""
    dim, value = _split("--sel", text)
    cuts = [
        i
        for i, c in enumerate(value)
        if c == ":" and not (_TIME_COLON.search(value[:i]) and _TIME_PART.match(value[i + 1 :]))
    ]
    if not cuts:
        return dim, value
    if len(cuts) > 1:
        raise ValueError(f"--sel {text!r}: more than one ':'; want DIM=START:STOP")
    a, b = value[: cuts[0]].strip(), value[cuts[0] + 1 :].strip()
    return dim, (a or None, b or None)


def positions(dim: str, spec: Spec, n: int) -> range:
    """The half-open position range `spec` selects along a dimension of length `n`."""
    if isinstance(spec, tuple):
        start, stop, _ = slice(*spec).indices(n)
        return range(start, max(start, stop))
    if not -n <= spec < n:
        raise ValueError(
            f"--isel {dim}={spec}: out of range; {dim} has {n} positions (0..{n - 1}, or -{n}..-1)"
        )
    i = spec % n
    return range(i, i + 1)


def parse_label(dim: str, value: Any, dtype: np.dtype) -> Any:
    """A label in the coordinate's dtype: text is read as a number, a date/time or a string
    according to `dtype`; other values are taken as they are."""
    if not isinstance(value, str):
        return np.datetime64(value) if dtype.kind == "M" else value
    try:
        if dtype.kind in "iu":
            return int(value) if re.fullmatch(_INT, value) else float(value)
        if dtype.kind == "f":
            return float(value)
        if dtype.kind == "M":
            return np.datetime64(value)
    except ValueError:
        what = (
            "a date/time like 2020-01-03 or 2020-01-03T06:00" if dtype.kind == "M" else "a number"
        )
        raise ValueError(f"--sel {dim}={value}: {dim} holds {dtype}, want {what}") from None
    if dtype.kind in "US":
        return value.encode() if dtype.kind == "S" else value
    if dtype.kind == "O":
        return value
    raise ValueError(f"--sel {dim}: labels of dtype {dtype} cannot be looked up; use --isel")


def _span(values: np.ndarray) -> str:
    return f"{values.min()} .. {values.max()}" if values.size else "no values"


def label_positions(dim: str, label: Label, values: np.ndarray) -> range:
    """The position range the labels select in a 1-d coordinate, as `.sel` would: one label
    must be there; a (start, stop) range includes both ends and needs a sorted coordinate
    (ascending, or descending with start >= stop, as pandas slices)."""
    values = np.asarray(values)
    n = len(values)
    if not isinstance(label, tuple):
        v = parse_label(dim, label, values.dtype)
        hits = np.flatnonzero(values == v)
        if hits.size == 0:
            raise ValueError(f"--sel {dim}={label}: no such {dim}; {dim} runs {_span(values)}")
        if hits[-1] - hits[0] + 1 != hits.size:
            raise ValueError(
                f"--sel {dim}={label}: {dim} holds it {hits.size} times apart; use --isel"
            )
        return range(int(hits[0]), int(hits[-1]) + 1)
    a, b = (None if x is None else parse_label(dim, x, values.dtype) for x in label)
    up = n < 2 or bool(np.all(values[1:] >= values[:-1]))
    down = not up and bool(np.all(values[1:] <= values[:-1]))
    if not (up or down):
        raise ValueError(
            f"--sel {dim}={_text(label)}: {dim} is not sorted, so a label range is no one "
            "position range; use --isel"
        )
    if up:
        start = 0 if a is None else int(np.searchsorted(values, a, "left"))
        stop = n if b is None else int(np.searchsorted(values, b, "right"))
    else:
        rev = values[::-1]
        start = 0 if a is None else n - int(np.searchsorted(rev, a, "right"))
        stop = n if b is None else n - int(np.searchsorted(rev, b, "left"))
    return range(start, max(start, stop))


def _text(label: Label) -> str:
    if isinstance(label, tuple):
        return ":".join("" if x is None else str(x) for x in label)
    return str(label)


def spans(
    dims: Sequence[str | None] | None, shape: Sequence[int], chosen: Mapping[str, range]
) -> tuple[range, ...]:
    """Per axis of an array, the positions read: the chosen range of its dimension, else all."""
    names = list(dims) if dims is not None else [None] * len(shape)
    return tuple(
        chosen.get(d, range(n)) if d is not None else range(n)
        for d, n in zip(names, shape, strict=True)
    )


def chunk_ranges(chunks: Sequence[int], axes: Sequence[range]) -> tuple[range, ...]:
    """Chunk (object) index ranges that hold the positions `axes` (step 1, half-open)."""
    return tuple(
        range(r.start // c, (r.stop - 1) // c + 1) if len(r) else range(0)
        for r, c in zip(axes, chunks, strict=True)
    )


def size(ranges: Iterable[range]) -> int:
    """How many chunk indices the ranges span (1 for a 0-d array)."""
    return math.prod(len(r) for r in ranges)


def chunk_key(
    path: str, index: Sequence[int], encoding: str = "default", separator: str = "/"
) -> str:
    """The key of one chunk: v3 default `c/i/j` (or `c.i.j`), v2 `i.j` (or `i/j`), 0-d `c` / `0`."""
    if encoding == "default":
        return f"{path}/c" + "".join(f"{separator}{i}" for i in index)
    return f"{path}/" + (separator.join(map(str, index)) or "0")


def chunk_keys(
    path: str, ranges: Sequence[range], encoding: str = "default", separator: str = "/"
) -> Iterator[str]:
    """Every key in the ranges, row-major."""
    for index in itertools.product(*ranges):
        yield chunk_key(path, index, encoding, separator)


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def chunk_index(
    rest: str, ndim: int, encoding: str = "default", separator: str = "/"
) -> tuple[int, ...] | None:
    """The chunk index a key names (`rest`: the key below its array's path); None for a key
    that is not a chunk of an `ndim`-d array so encoded (metadata, a stray object)."""
    if separator == "." and "/" in rest:
        return None
    parts = rest.split(separator)
    if encoding == "default":
        if parts[0] != "c":
            return None
        parts = parts[1:]
    elif ndim == 0:
        return () if rest == "0" else None
    if len(parts) != ndim or not all(_number(p) for p in parts):
        return None
    return tuple(int(p) for p in parts)


def within(index: Sequence[int], ranges: Sequence[range]) -> bool:
    return all(i in r for i, r in zip(index, ranges, strict=True))
