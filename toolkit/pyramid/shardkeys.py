"""Shard keys as columns (pure): listing pages decoded, keys spelled, sorted and hashed with numpy.

A store at mission scale lists 10^7 level-0 objects. Held as a set of index tuples and a task
object per output shard, planning costs ~0.3-0.8 KB per object on the client; held as one
raveled grid index (int64) per shard it costs 8 bytes. Keys are still what the planner orders
and hashes by (`toolkit.tasks.stable` sorts by key string, so "10" < "2"): a key here is a head
(`2x/t2m/c/`) and the shard's indices in decimal joined by the separator, and because both
separators zarr allows ("/" and ".") sort below every digit, key strings of one head sort as
their indices' decimal strings do, dim by dim. That order and the keys' bytes are computed in
numpy, block by block, never as one Python string per key (unless an encoding or a head needs
it: a custom chunk key encoding, or heads one of which starts another).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import batched, pairwise

import numpy as np
from zarr.core.chunk_key_encodings import (
    ChunkKeyEncoding,
    DefaultChunkKeyEncoding,
    V2ChunkKeyEncoding,
)

__all__ = ["PAGE", "Spelling", "decode_page", "digest_rows", "present", "sort_rows"]

PAGE = 1 << 14  # listed keys decoded at a time
BLOCK = 1 << 16  # keys spelled at a time
DIGITS = 18  # longer decimal indices are left to Python's int (int64 holds 18 digits)


@dataclass(frozen=True)
class Spelling:
    """How one array's keys are spelled: `head`, then the indices in decimal joined by `sep`;
    or, for a custom chunk key encoding, `head` and what `encoding` makes of the indices."""

    head: str
    sep: str = "/"
    encoding: ChunkKeyEncoding | None = None

    @classmethod
    def of(cls, head: str, encoding: ChunkKeyEncoding) -> Spelling:
        form = _form(encoding)
        if form is None:
            return cls(head, "/", encoding)
        prefix, sep = form
        return cls(head + prefix, sep)

    def keys(self, coords: np.ndarray) -> list[str]:
        """The keys of the shards at `coords` (rows of indices), in row order."""
        if self.encoding is not None:
            enc = self.encoding
            return [self.head + enc.encode_chunk_key(tuple(c)) for c in coords.tolist()]
        return self.spell(coords).decode().split("\0")[:-1]

    def spell(self, coords: np.ndarray) -> bytes:
        """Every key of `coords` followed by a NUL, as `toolkit.tasks.stable` hashes them."""
        if self.encoding is not None:
            return "".join(k + "\0" for k in self.keys(coords)).encode()
        return _spell(self.head.encode(), self.sep.encode(), coords)


def _form(encoding: ChunkKeyEncoding) -> tuple[str, str] | None:
    """(what precedes the indices, the separator) of the encodings zarr ships; None: another."""
    if type(encoding) is DefaultChunkKeyEncoding:
        return "c" + encoding.separator, encoding.separator
    if type(encoding) is V2ChunkKeyEncoding:
        return "", encoding.separator
    return None


def _spell(head: bytes, sep: bytes, coords: np.ndarray) -> bytes:
    """head + sep.join(decimal indices) + NUL per row, as bytes: a byte matrix with the leading
    zeros of each index masked out, read row by row."""
    n, nd = coords.shape
    if n == 0:
        return b""
    widths = [len(str(int(coords[:, d].max()))) for d in range(nd)]
    width = len(head) + sum(widths) + len(sep) * (nd - 1) + 1
    out = np.zeros((n, width), np.uint8)
    keep = np.zeros((n, width), bool)
    out[:, : len(head)] = np.frombuffer(head, np.uint8)
    keep[:, : len(head)] = True
    j = len(head)
    for d in range(nd):
        if d:
            out[:, j : j + len(sep)] = np.frombuffer(sep, np.uint8)
            keep[:, j : j + len(sep)] = True
            j += len(sep)
        c = coords[:, d]
        for p in range(widths[d] - 1, -1, -1):
            out[:, j] = 48 + (c // 10**p) % 10
            keep[:, j] = (c >= 10**p) if p else True
            j += 1
    keep[:, j] = True  # the NUL after each key
    return out[keep].tobytes()


# ----------------------------------------------------------------------------- decoding


def decode_page(encoding: ChunkKeyEncoding, keys: Sequence[str], ndim: int) -> np.ndarray:
    """(rows, ndim) int64: the shard indices of one page of listed keys, as `decode_chunk_key`
    reads them, keys it refuses (and zarr.json, strays, other ranks) skipped. Keys of plain
    decimal indices are read with numpy; the rest one by one, by the encoding itself."""
    form = _form(encoding)
    if form is None or not keys:
        return _decode_each(encoding, keys, ndim)
    prefix, sep = form
    n = len(keys)
    a = np.array(keys, dtype=str)
    size = np.fromiter(map(len, keys), np.int64, n) - len(prefix)
    body = np.strings.slice(a, len(prefix), None)
    codes = body.view(np.uint32).reshape(n, -1) if body.itemsize else np.zeros((n, 0), np.uint32)
    inside = np.arange(codes.shape[1]) < size[:, None]
    digit = (codes >= 48) & (codes <= 57)
    is_sep = (codes == ord(sep)) & inside
    ok = np.strings.startswith(a, prefix) & (size > 0)
    ok &= np.strings.str_len(a) == size + len(prefix)  # no NUL numpy would drop
    ok &= ~(inside & ~digit & ~is_sep).any(axis=1)
    ok &= is_sep.sum(axis=1) == ndim - 1
    if codes.shape[1]:  # no empty index: no separator first, last or twice in a row
        last = np.take_along_axis(is_sep, np.maximum(size - 1, 0)[:, None], axis=1)[:, 0]
        ok &= ~is_sep[:, 0] & ~last & ~(is_sep[:, 1:] & is_sep[:, :-1]).any(axis=1)
    comp = np.cumsum(is_sep, axis=1)  # which index each character belongs to
    for d in range(ndim):  # an index of more digits than int64 holds is Python's to read
        ok &= ((comp == d) & digit & inside).sum(axis=1) <= DIGITS
    value = codes[ok].astype(np.int64) - 48
    place, comp = digit[ok] & inside[ok], comp[ok]
    out = np.zeros((len(value), ndim), np.int64)
    for j in range(codes.shape[1]):  # Horner's rule, a character column at a time
        at = np.flatnonzero(place[:, j])
        c = comp[at, j]
        out[at, c] = out[at, c] * 10 + value[at, j]
    if ok.all():
        return out
    others = _decode_each(encoding, [keys[i] for i in np.flatnonzero(~ok)], ndim)
    return np.concatenate([out, others])


def _decode_each(encoding: ChunkKeyEncoding, keys: Iterable[str], ndim: int) -> np.ndarray:
    found = []
    for key in keys:
        if key.endswith("zarr.json"):
            continue
        try:
            idx = encoding.decode_chunk_key(key)
        except (ValueError, TypeError):
            continue
        if len(idx) == ndim and all(-(2**62) < i < 2**62 for i in idx):  # else off any grid
            found.append(idx)
    return np.array(found, dtype=np.int64).reshape(len(found), ndim)


def present(encoding: ChunkKeyEncoding, keys: Iterable[str], grid: tuple[int, ...]) -> np.ndarray:
    """The raveled grid indices (sorted, unique) of the listed keys inside `grid`, the listing
    read a page at a time: a generator of keys is never held whole."""
    found: list[np.ndarray] = [np.empty(0, np.int64)]
    for page in batched(keys, PAGE):
        c = decode_page(encoding, page, len(grid))
        inside = (c >= 0).all(axis=1) & (c < np.array(grid, np.int64)).all(axis=1)
        found.append(np.ravel_multi_index(tuple(c[inside].T), grid))
    return unique(np.concatenate(found))


def unique(x: np.ndarray) -> np.ndarray:
    """`x` sorted, duplicates dropped (by sorting: numpy's hashing `unique` is ~10x slower on
    millions of int64)."""
    x = np.sort(x)
    return x[np.concatenate(([True], x[1:] != x[:-1]))] if len(x) else x


# ----------------------------------------------------------------------------- order and digest


def unravel(lin: np.ndarray, grid: tuple[int, ...]) -> np.ndarray:
    """(rows, ndim) int64 indices of raveled grid indices."""
    if not len(grid):
        return np.zeros((len(lin), 0), np.int64)
    return np.stack(np.unravel_index(lin, grid), axis=1).astype(np.int64, copy=False)


def _decimal_order(lin: np.ndarray, grid: tuple[int, ...]) -> np.ndarray:
    """The permutation that sorts shards (same head) as their keys sort: dim by dim, by the
    decimal string of the index (each dim's indices ranked as strings, then one int64 key)."""
    rank = np.zeros(len(lin), np.int64)
    stride = 1
    strides = []
    for g in reversed(grid):
        strides.append(stride)
        stride *= g
    for g, s in zip(grid, reversed(strides), strict=True):
        c = (lin // s) % g
        values = unique(c)
        at = np.searchsorted(values, c)
        as_text = np.argsort(values.astype("S"), kind="stable")
        order = np.empty(len(values), np.int64)
        order[as_text] = np.arange(len(values))
        rank = rank * g + order[at]
    return np.argsort(rank, kind="stable")


def _vectorised(spellings: Sequence[Spelling]) -> bool:
    """Whether the numpy order holds: every spelling decimal, and no head starts another (keys
    of different heads then compare within their heads)."""
    if any(s.encoding is not None for s in spellings):
        return False
    heads = sorted(s.head for s in spellings)
    return not any(b.startswith(a) for a, b in pairwise(heads))


def sort_rows(
    spellings: Sequence[Spelling], grids: Sequence[tuple[int, ...]], lins: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(which array, raveled index) of every shard of every array, ordered as their key strings
    sort; array i's shards are `lins[i]`, its keys spelled by `spellings[i]` over `grids[i]`."""
    if _vectorised(spellings):
        heads = sorted(range(len(spellings)), key=lambda i: spellings[i].head)
        which = [np.full(len(lins[i]), i, np.uint16) for i in heads]
        ordered = [lins[i][_decimal_order(lins[i], grids[i])] for i in heads]
    else:  # keys as Python strings: only for custom encodings or heads that overlap
        which = [np.full(len(lin), i, np.uint16) for i, lin in enumerate(lins)]
        ordered = list(lins)
    w = np.concatenate(which) if which else np.empty(0, np.uint16)
    lin = np.concatenate(ordered) if ordered else np.empty(0, np.int64)
    if not _vectorised(spellings):
        keys = [
            k for s, g, x in zip(spellings, grids, lins, strict=True) for k in s.keys(unravel(x, g))
        ]
        perm = np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)
        w, lin = w[perm], lin[perm]
    return w, lin


def runs(which: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(array, start, stop) of each run of rows of one array."""
    if not len(which):
        return
    edges = [0, *(np.flatnonzero(np.diff(which)) + 1).tolist(), len(which)]
    for a, b in pairwise(edges):
        for s in range(a, b, BLOCK):
            yield int(which[a]), s, min(b, s + BLOCK)


def digest_rows(
    spellings: Sequence[Spelling],
    grids: Sequence[tuple[int, ...]],
    which: np.ndarray,
    lin: np.ndarray,
) -> str:
    """The sha256 of the rows' keys in row order, each followed by a NUL: the digest
    `toolkit.tasks.stable` gives the same keys."""
    h = hashlib.sha256()
    for i, a, b in runs(which):
        h.update(spellings[i].spell(unravel(lin[a:b], grids[i])))
    return h.hexdigest()
