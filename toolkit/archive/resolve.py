"""Key to blob (pure): a trie over path segments with one node per cut, never per object.

A bucketed array is a single node however many blobs it spans: the bucket is computed from the
next key segment. A miss is normal and safe ("unmanaged" stays hot). A resolution always carries
the scope, because blob ids repeat across stores.

Keys are relative to the data root. `Trie.resolve` also takes what users paste (an s3:// URL, a
file:// URL or an absolute path): with the data root known it is stripped; without it, the key is
cut where it enters a loaded scope, which must be unambiguous. What users paste is checked
(`keys.check_pasted`); `lookup` and `lookup_many` take keys as a listing or an event gives them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from toolkit.archive.ids import bucket_id
from toolkit.archive.keys import check_pasted
from toolkit.archive.model import DEFAULT_HOT_ALWAYS, Bucket, Manifest

__all__ = ["AmbiguousKey", "Resolution", "Trie", "relative_to"]

Kind = Literal["blob", "hot", "unmanaged"]


@dataclass(frozen=True, slots=True)
class Resolution:
    kind: Kind
    scope: str | None = None
    blob: str | None = None
    reason: str = ""
    epoch: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "scope": self.scope,
            "blob": self.blob,
            "reason": self.reason,
            "epoch": self.epoch,
        }


UNMANAGED = Resolution("unmanaged", reason="no manifest covers this key")
_DEFAULT_NAMES = frozenset(DEFAULT_HOT_ALWAYS)


class AmbiguousKey(ValueError):
    """A pasted URL or path enters more than one loaded scope; the data root decides."""


def _canonical(text: str) -> str | None:
    """`scheme://rest` for a URL or an absolute path (as file://); None for a relative key."""
    if "://" in text:
        scheme, rest = text.split("://", 1)
        scheme = scheme.lower()
        return f"file:///{rest.lstrip('/')}" if scheme == "file" else f"{scheme}://{rest}"
    return f"file://{text}" if text.startswith("/") else None


def relative_to(key: str, root: str) -> str | None:
    """`key` relative to the data root `root` (a store URL); None when it lies outside.

    A key that is neither a URL nor an absolute path is taken as already relative.
    """
    full = _canonical(key)
    if full is None:
        return key
    base = (_canonical(root) or root).rstrip("/")
    return full[len(base) + 1 :] if full.startswith(base + "/") else None


class _Node:
    __slots__ = ("bucket", "children", "cut", "pin", "scope")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.cut: Resolution | None = None  # blob (base id when bucketed) or hot
        self.bucket: Bucket | None = None
        self.pin: Resolution | None = None
        self.scope: tuple[Manifest, frozenset[str]] | None = None


class Trie:
    """Resolver over any number of manifests (one per scope)."""

    def __init__(self, manifests: Iterable[Manifest] = ()) -> None:
        self._root = _Node()
        self._manifests: dict[str, Manifest] = {}
        self._cuts = 0
        self._nodes = 1
        self.add_all(manifests)

    def __len__(self) -> int:
        """Number of cuts (blob prefixes, hot prefixes, pins): independent of object count."""
        return self._cuts

    @property
    def nodes(self) -> int:
        """All nodes, including the path segments leading to cuts."""
        return self._nodes

    @property
    def manifests(self) -> dict[str, Manifest]:
        return dict(self._manifests)

    def _node(self, prefix: str) -> _Node:
        node = self._root
        for seg in prefix.split("/"):
            child = node.children.get(seg)
            if child is None:
                child = node.children[seg] = _Node()
                self._nodes += 1
            node = child
        return node

    def add(self, manifest: Manifest) -> None:
        scope = manifest.scope
        node: _Node | None = self._root
        for seg in scope.split("/"):
            node = node.children.get(seg) if node is not None else None
            if node is not None and node.scope is not None:
                raise ValueError(f"scope {scope!r} overlaps loaded scope {node.scope[0].scope!r}")
        inner = _scope_below(node) if node is not None else None
        if inner is not None:
            raise ValueError(f"scope {scope!r} contains loaded scope {inner!r}")
        self._node(scope).scope = (manifest, frozenset(manifest.hot_always))
        self._manifests[scope] = manifest
        epoch = manifest.epoch
        for blob in manifest.blobs:
            for prefix in blob.prefixes:
                n = self._node(prefix)
                n.cut = Resolution("blob", scope, blob.id, "blob", epoch)
                n.bucket = blob.bucket
                self._cuts += 1
        for prefix in manifest.hot:
            self._node(prefix).cut = Resolution("hot", scope, None, "hot prefix", epoch)
            self._cuts += 1
        for pin in manifest.pins:
            self._node(pin.prefix).pin = Resolution(
                "hot", scope, None, f"pinned by {pin.who}", epoch
            )
            self._cuts += 1

    def add_all(self, manifests: Iterable[Manifest]) -> None:
        for m in manifests:
            self.add(m)

    def replace(self, manifest: Manifest) -> None:
        """Swap one scope's manifest (a reload) by rebuilding: reloads are rare, lookups are not."""
        current = dict(self._manifests)
        current[manifest.scope] = manifest
        fresh = Trie(current.values())
        self._root, self._manifests = fresh._root, fresh._manifests
        self._cuts, self._nodes = fresh._cuts, fresh._nodes

    def resolve(self, key: str, root: str | None = None) -> Resolution:
        """`lookup` for what users paste: URLs and absolute paths as well as relative keys.

        A `.`, `..` or empty segment, or an empty key, is refused (`BadKey`): the walk is
        literal, so such a key would be answered against the scope it is written under.
        """
        check_pasted(key)
        if root is not None:
            rel = relative_to(key, root)
            if rel is None:
                return Resolution("unmanaged", reason=f"outside the data root {root}")
            return self.lookup(rel)
        full = _canonical(key)
        if full is None:
            return self.lookup(key)
        parts = [p for p in full.split("://", 1)[1].split("/") if p]
        starts = [(s, i) for i in range(len(parts)) if (s := self._scope_at(parts, i))]
        if len(starts) > 1:
            where = ", ".join(f"{s!r} at segment {i}" for s, i in starts)
            raise AmbiguousKey(f"{key}: enters {where}; pass the data root (--data)")
        if not starts:
            return Resolution("unmanaged", reason="no loaded scope in this URL or path")
        return self.lookup("/".join(parts[starts[0][1] :]))

    def _scope_at(self, parts: list[str], start: int) -> str | None:
        node: _Node | None = self._root
        for seg in parts[start:]:
            node = node.children.get(seg) if node is not None else None
            if node is None:
                return None
            if node.scope is not None:
                return node.scope[0].scope
        return None

    def lookup_many(self, keys: Iterable[str]) -> list[Resolution]:
        """`lookup` of every key, answers unchanged, for batches (event streams, listings).

        The trie is walked once per prefix (the key up to its chunk part: its array, mostly)
        and what it found kept for every key below it; a key then costs a split, a dict hit
        and, in a bucketed array, its index arithmetic. A prefix whose trie node has children
        (a cut could lie deeper) is never memoised: those keys take `lookup`.
        """
        memo: dict[str, tuple[Any, ...]] = {}
        out: list[Resolution] = []
        append = out.append
        lookup = self.lookup
        outside = _unpacked(_OUTSIDE)
        for key in keys:
            i = key.find("/c/")
            chunked = i > 0
            if not chunked:
                i = _split(key)
                if i <= 0:
                    append(lookup(key))
                    continue
            head = key[:i]
            known = memo.get(head)
            if known is None:
                if head.partition("/")[0] in self._root.children:
                    known = memo[head] = _unpacked(self._array(head))
                else:  # outside every loaded prefix from its first segment
                    known = memo[head] = outside
            entry, fixed, names, hot, digit_names, plain, width, shared = known
            if entry is None:
                append(lookup(key))
            elif (digit_names or key[-1] not in _DIGITS) and key[key.rfind("/") + 1 :] in names:
                append(hot)
            elif fixed is not None:
                append(fixed)
            elif plain and chunked:  # "<head>/c/<n>[/...]"
                j = key.find("/", i + 3)
                digits = key[i + 3 : j] if j > 0 else key[i + 3 :]
                # isdigit, then int: what Bucket.first_index does, so the answers stay the same
                answer = shared.get(int(digits) // width) if digits.isdigit() else None
                append(answer if answer is not None else self._bucketed(entry, key[i + 1 :]))
            else:
                append(self._bucketed(entry, key[i + 1 :]))
        return out

    def _array(self, head: str) -> _Array | None:
        """The walk of `lookup` over `head`'s segments, kept; None when deeper segments could
        still meet a trie node."""
        parts = head.split("/")
        node, best, depth, scope, pin = self._walk(parts)
        if node is not None and node.children:
            return None
        if scope is None and pin is None and best is None:
            return _OUTSIDE  # outside every scope: one shared answer
        entry = _Array()
        if scope is not None:
            entry.names = scope[1]
            entry.hot = Resolution("hot", scope[0].scope, None, "hot_always", scope[0].epoch)
        if pin is not None:
            entry.fixed = pin
        elif best is None:
            entry.fixed = (
                UNMANAGED
                if scope is None
                else Resolution(
                    "unmanaged", scope[0].scope, None, "not partitioned yet", scope[0].epoch
                )
            )
        elif best.bucket is None:
            entry.fixed = best.cut
        else:
            cut = best.cut
            assert cut is not None
            entry.bucket = (best.bucket, cut.blob or "", best.bucket.width, cut.scope, cut.epoch)
            between = parts[depth + 1 :]
            entry.pre = "/".join(between) + "/" if between else ""
            entry.width = best.bucket.width
            entry.plain = (
                not between and best.bucket.encoding == "default" and (best.bucket.separator == "/")
            )
        return entry

    @staticmethod
    def _bucketed(entry: _Array, rest: str) -> Resolution:
        assert entry.bucket is not None
        bucket, base, width, scope, epoch = entry.bucket
        index = bucket.first_index(entry.pre + rest)
        if index is None:
            return Resolution(
                "unmanaged", scope, None, "not a chunk key of a bucketed array", epoch
            )
        n = index // width
        answer = entry.shared.get(n)
        if answer is None:
            answer = entry.shared[n] = Resolution(
                "blob", scope, bucket_id(base, index, width), "bucket", epoch
            )
        return answer

    def _walk(self, parts: list[str]) -> tuple[Any, ...]:
        """Down the trie along `parts`: (the node reached, None if the walk fell off; the
        deepest cut, its segment index; the scope; the deepest pin)."""
        node: _Node | None = self._root
        best: _Node | None = None
        depth = 0
        scope: tuple[Manifest, frozenset[str]] | None = None
        pin: Resolution | None = None
        for i, seg in enumerate(parts):
            node = node.children.get(seg) if node is not None else None
            if node is None:
                break
            if node.scope is not None:
                scope = node.scope
            if node.pin is not None:
                pin = node.pin
            if node.cut is not None:
                best, depth = node, i
        return node, best, depth, scope, pin

    def lookup(self, key: str) -> Resolution:
        parts = key.split("/")
        _, best, depth, scope, pin = self._walk(parts)
        names = scope[1] if scope is not None else _DEFAULT_NAMES
        if parts[-1] in names:
            where = scope[0] if scope is not None else None
            return Resolution(
                "hot", where and where.scope, None, "hot_always", where and where.epoch
            )
        if pin is not None:
            return pin
        if best is None:
            if scope is None:
                return UNMANAGED
            return Resolution(
                "unmanaged", scope[0].scope, None, "not partitioned yet", scope[0].epoch
            )
        cut = best.cut
        assert cut is not None
        if best.bucket is None:
            return cut
        index = best.bucket.first_index("/".join(parts[depth + 1 :]))
        if index is None:
            return Resolution(
                "unmanaged", cut.scope, None, "not a chunk key of a bucketed array", cut.epoch
            )
        return Resolution(
            "blob",
            cut.scope,
            bucket_id(cut.blob or "", index, best.bucket.width),
            "bucket",
            cut.epoch,
        )


class _Array:
    """What `lookup_many` knows of one prefix (an array path, usually): everything a key below
    it resolves to, but for its basename (hot names) and, in a bucketed array, its index."""

    __slots__ = ("bucket", "fixed", "hot", "names", "plain", "pre", "shared", "width")

    def __init__(self) -> None:
        self.names: frozenset[str] = _DEFAULT_NAMES
        self.hot: Resolution = Resolution("hot", None, None, "hot_always", None)
        self.fixed: Resolution | None = None
        self.bucket: tuple[Bucket, str, int, str | None, int | None] | None = None
        self.pre = ""  # the segments between the bucketed cut and the prefix's end, with "/"
        self.shared: dict[int, Resolution] = {}  # bucket number -> its (shared) answer
        self.plain = False  # bucketed, default encoding, "/": the index is the segment after c
        self.width = 1


_DIGITS = frozenset("0123456789")


def _unpacked(entry: _Array | None) -> tuple[Any, ...]:
    """An entry as the tuple `lookup_many` unpacks per key (fields cost more than a tuple)."""
    if entry is None:
        return (None,) * 8
    digit_names = any(n[-1:] in _DIGITS for n in entry.names)  # else a key ending in a digit
    return (  # cannot be a hot name, and its basename need not be cut out
        entry,
        entry.fixed,
        entry.names,
        entry.hot,
        digit_names,
        entry.plain,
        entry.width,
        entry.shared,
    )


_OUTSIDE = _Array()
_OUTSIDE.fixed = UNMANAGED


def _split(key: str) -> int:
    """Where a key's chunk part starts ("/c/" or "/c." of the default encoding), else its
    last "/": the prefix before it is what `lookup_many` memoises."""
    i = key.find("/c/")
    if i < 0:
        i = key.find("/c.")
    return i if i >= 0 else key.rfind("/")


def _scope_below(node: _Node) -> str | None:
    stack = list(node.children.values())
    while stack:
        n = stack.pop()
        if n.scope is not None:
            return n.scope[0].scope
        stack.extend(n.children.values())
    return None
