"""Manifest types (pure). Validated on construction: an invalid manifest cannot exist in memory.

A manifest describes one scope (one Zarr store, named by its path under the data root): the
cuts made in it (each with the policy it was cut with), the blobs (archive units) and the cut
each belongs to, the blobs retired by a re-cut (ids are join keys against tier state and tape
addresses, so an id is never reused and never changes what it names), the prefixes pinned hot
by the partitioner, the pins people placed, and which object basenames are never archived. Every prefix is a full key
prefix relative to the data root, never empty and never the scope itself (unless the store's root is
an array, `root_array`), so no blob can swallow future arrays.

Errors are `ManifestError` naming the offending field (`blobs[2].id`, `epoch`, ...).
To test a malformed document, build the dict, not the dataclass.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from toolkit.archive.ids import ID_PATTERN, bucket_id, is_id
from toolkit.archive.keys import key_problem

__all__ = [
    "DEFAULT_HOT_ALWAYS",
    "FORMAT",
    "Blob",
    "Bucket",
    "Cut",
    "Manifest",
    "ManifestError",
    "Pin",
    "PinOverlaps",
    "PinRefused",
    "Policy",
    "Retired",
    "is_under",
]

FORMAT = "toolkit-archive-manifest/1"
DEFAULT_HOT_ALWAYS: tuple[str, ...] = (".zarray", ".zattrs", ".zgroup", ".zmetadata", "zarr.json")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
Encoding = Literal["default", "v2"]


class ManifestError(ValueError):
    """A manifest is malformed; `field` names where."""

    def __init__(self, field_name: str, problem: str, scope: str | None = None) -> None:
        self.field = field_name
        self.problem = problem
        where = f"manifest{f' for scope {scope!r}' if scope else ''}"
        super().__init__(f"{where}: field {field_name!r}: {problem}")


class PinRefused(ValueError):
    """A pin whose `until` is already past: the input must change (or `force`)."""


class PinOverlaps(RuntimeError):
    """A pin inside or around a pinned prefix: the stored pin refuses it (or `force`)."""


def is_under(key: str, prefix: str) -> bool:
    """`key` equals `prefix` or lies below it, by whole path segments."""
    return key == prefix or key.startswith(prefix + "/")


def _int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(name, f"must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ManifestError(name, f"must be >= {minimum}, got {value}")
    return value


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ManifestError(name, "must be a non-empty string")
    return value


def _prefix(value: Any, name: str) -> str:
    text = _text(value, name)
    if text.startswith("/") or text.endswith("/") or "//" in text:
        raise ManifestError(
            name, f"{text!r} must be a key prefix without leading, trailing or double '/'"
        )
    why = key_problem(text)  # '.' and '..' segments: the one rule every entry shares
    if why is not None:
        raise ManifestError(name, f"{text!r} {why}")
    return text


@dataclass(frozen=True)
class Policy:
    """Thresholds in bytes: hot below `t_hot`, blobs up to `t_max`, coalesce until `t_min`."""

    t_max: int
    t_hot: int
    t_min: int

    def __post_init__(self) -> None:
        for name in ("t_max", "t_hot", "t_min"):
            _int(getattr(self, name), f"policy.{name}", 0 if name == "t_hot" else 1)
        if self.t_min > self.t_max:
            raise ManifestError("policy.t_min", f"{self.t_min} exceeds t_max {self.t_max}")

    def to_dict(self) -> dict[str, int]:
        return {"t_max": self.t_max, "t_hot": self.t_hot, "t_min": self.t_min}


@dataclass(frozen=True)
class Bucket:
    """How a bucketed blob reads the first chunk index from a key below its prefix."""

    width: int
    encoding: Encoding = "default"
    separator: Literal["/", "."] = "/"
    count: int | None = None  # buckets the array filled when cut (appends add more; informative)

    def __post_init__(self) -> None:
        _int(self.width, "bucket.width", 1)
        if self.count is not None:
            _int(self.count, "bucket.count", 0)
        if self.encoding not in ("default", "v2"):
            raise ManifestError(
                "bucket.encoding", f"must be 'default' or 'v2', not {self.encoding!r}"
            )
        if self.separator not in ("/", "."):
            raise ManifestError("bucket.separator", f"must be '/' or '.', not {self.separator!r}")

    def first_index(self, rest: str) -> int | None:
        """The first chunk index of a chunk key below the array (`rest` excludes the prefix)."""
        parts = rest.split(self.separator)
        if self.encoding == "default":
            if parts[0] != "c":
                return None
            if len(parts) == 1:
                return 0  # 0-d array: the key is just "c"
            parts = parts[1:]
        head = parts[0]
        if not head.isdigit() or (self.separator == "." and "/" in rest):
            return None
        return int(head)

    def same_cut(self, other: Bucket | None) -> bool:
        """The same bucket arithmetic (the recorded count is a figure, not part of the cut)."""
        return other is not None and replace(self, count=None) == replace(other, count=None)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "width": self.width,
            "encoding": self.encoding,
            "separator": self.separator,
        }
        if self.count is not None:
            doc["count"] = self.count
        return doc


@dataclass(frozen=True)
class Blob:
    """One archive unit. A bucketed blob has one prefix and resolves to `<id>_<n // width>`."""

    id: str
    prefixes: tuple[str, ...]
    bucket: Bucket | None = None
    bytes: int = 0
    objects: int = 0
    cut: int = 1  # the cut that made it (Manifest.cuts)

    def __post_init__(self) -> None:
        if not is_id(self.id):
            raise ManifestError("id", f"{self.id!r} does not match {ID_PATTERN}")
        if isinstance(self.prefixes, str) or not isinstance(self.prefixes, tuple | list):
            raise ManifestError("prefixes", "must be a list of key prefixes")
        object.__setattr__(self, "prefixes", tuple(self.prefixes))
        if not self.prefixes:
            raise ManifestError("prefixes", f"blob {self.id!r} owns no prefix")
        for i, p in enumerate(self.prefixes):
            _prefix(p, f"prefixes[{i}]")
        if self.bucket is not None and len(self.prefixes) != 1:
            raise ManifestError("bucket", f"bucketed blob {self.id!r} must own exactly one prefix")
        _int(self.bytes, "bytes", 0)
        _int(self.objects, "objects", 0)
        _int(self.cut, "cut", 1)

    def same_cut(self, other: Blob) -> bool:
        """Names the same keys: same prefixes and bucket arithmetic (figures aside)."""
        if self.bucket is None or other.bucket is None:
            return self.prefixes == other.prefixes and self.bucket is other.bucket is None
        return self.prefixes == other.prefixes and self.bucket.same_cut(other.bucket)

    def ids(self) -> str:
        """How the ids it answers read: `b_tas_<n>` for a bucketed blob, else its id."""
        return self.id + ("_<n>" if self.bucket else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "cut": self.cut,
            "prefixes": list(self.prefixes),
            "bucket": None if self.bucket is None else self.bucket.to_dict(),
            "bytes": self.bytes,
            "objects": self.objects,
        }


@dataclass(frozen=True)
class Cut:
    """One partitioning of (part of) a scope: the policy its blobs were cut with."""

    number: int
    policy: Policy
    epoch: int = 1  # the manifest epoch that made it

    def __post_init__(self) -> None:
        _int(self.number, "cut", 1)
        _int(self.epoch, "epoch", 1)
        if not isinstance(self.policy, Policy):
            raise ManifestError("policy", "must be a Policy")

    def to_dict(self) -> dict[str, Any]:
        return {"cut": self.number, "epoch": self.epoch, "policy": self.policy.to_dict()}


@dataclass(frozen=True)
class Retired:
    """A blob a re-cut replaced. Its id stays taken and keeps naming the same keys, so tier
    state and tape addresses joined on it stay true; `states` keeps the tier state its ids had
    when it was retired (hot ones left out: nothing of theirs is on tape)."""

    blob: Blob
    epoch: int  # the manifest epoch that retired it
    states: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.blob, Blob):
            raise ManifestError("blob", "must be a Blob")
        _int(self.epoch, "epoch", 1)
        if not isinstance(self.states, Mapping):
            raise ManifestError("states", "must be an object of blob id -> tier state")
        for k, v in self.states.items():
            if not is_id(k) or not isinstance(v, str) or not v:
                raise ManifestError("states", f"{k!r}: {v!r} is not a blob id and a state")
        object.__setattr__(self, "states", dict(sorted(self.states.items())))

    def to_dict(self) -> dict[str, Any]:
        return {**self.blob.to_dict(), "retired_at": self.epoch, "states": dict(self.states)}


@dataclass(frozen=True)
class Pin:
    """A person's decision to keep a prefix hot; survives every repartition."""

    prefix: str
    who: str
    why: str
    until: str | None = None  # ISO date; informative, never expires a pin by itself

    def __post_init__(self) -> None:
        _prefix(self.prefix, "prefix")
        _text(self.who, "who")
        _text(self.why, "why")
        if self.until is not None:
            try:
                if not _DATE.fullmatch(_text(self.until, "until")):
                    raise ValueError(self.until)
                dt.date.fromisoformat(self.until)
            except ValueError:
                raise ManifestError(
                    "until", f"{self.until!r} is not an ISO date (YYYY-MM-DD)"
                ) from None

    def to_dict(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "who": self.who, "why": self.why, "until": self.until}


def _nested(err: ManifestError, outer: str, scope: str) -> ManifestError:
    return ManifestError(f"{outer}.{err.field}", err.problem, scope)


@dataclass(frozen=True)
class Manifest:
    scope: str
    epoch: int
    policy: Policy
    blobs: tuple[Blob, ...] = ()
    hot: tuple[str, ...] = ()
    pins: tuple[Pin, ...] = ()
    hot_always: tuple[str, ...] = DEFAULT_HOT_ALWAYS
    format: str = field(default=FORMAT)
    root_array: bool = False  # the store's root node is an array: its prefix is the scope
    cuts: tuple[Cut, ...] = ()  # oldest first; empty: one cut, number 1, with `policy`
    retired: tuple[Retired, ...] = ()

    def __post_init__(self) -> None:
        scope = _prefix(self.scope, "scope")
        if self.format != FORMAT:
            raise ManifestError("format", f"must be {FORMAT!r}, got {self.format!r}", scope)
        _int(self.epoch, "epoch", 1)
        if not isinstance(self.root_array, bool):
            raise ManifestError("root_array", "must be true or false", scope)
        if not isinstance(self.policy, Policy):
            raise ManifestError("policy", "must be a Policy", scope)
        for name in ("blobs", "hot", "pins", "hot_always", "cuts", "retired"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.cuts:
            object.__setattr__(self, "cuts", (Cut(1, self.policy),))
        self._check_hot_always(scope)
        self._check_cuts(scope)
        self._check_ids(scope)
        self._check_prefixes(scope)

    @property
    def cut(self) -> Cut:
        """The newest cut: new arrays join it while the policy stays the same."""
        return self.cuts[-1]

    def _check_cuts(self, scope: str) -> None:
        numbers: list[int] = []
        for i, c in enumerate(self.cuts):
            if not isinstance(c, Cut):
                raise ManifestError(f"cuts[{i}]", "must be a Cut", scope)
            if numbers and c.number <= numbers[-1]:
                raise ManifestError(
                    f"cuts[{i}].cut", f"{c.number} does not increase on {numbers[-1]}", scope
                )
            numbers.append(c.number)
        if self.cut.policy != self.policy:
            raise ManifestError(
                "policy", f"{self.policy} is not the newest cut's {self.cut.policy}", scope
            )
        for i, r in enumerate(self.retired):
            if not isinstance(r, Retired):
                raise ManifestError(f"retired[{i}]", "must be a Retired", scope)
        owned = [(f"blobs[{i}]", b) for i, b in enumerate(self.blobs)]
        owned += [(f"retired[{i}]", r.blob) for i, r in enumerate(self.retired)]
        for name, b in owned:
            if isinstance(b, Blob) and b.cut not in numbers:
                raise ManifestError(f"{name}.cut", f"{b.cut} is not a cut of {numbers}", scope)

    def _check_hot_always(self, scope: str) -> None:
        for i, name in enumerate(self.hot_always):
            if not isinstance(name, str) or not name or "/" in name:
                raise ManifestError(
                    f"hot_always[{i}]", f"{name!r} must be an object basename", scope
                )
        missing = sorted(set(DEFAULT_HOT_ALWAYS) - set(self.hot_always))
        if missing:
            raise ManifestError("hot_always", f"must keep the metadata names {missing}", scope)

    def _check_ids(self, scope: str) -> None:
        seen: dict[str, str] = {}
        named = [(f"blobs[{i}]", b) for i, b in enumerate(self.blobs)]
        named += [(f"retired[{i}].blob", r.blob) for i, r in enumerate(self.retired)]
        for name, blob in named:
            if not isinstance(blob, Blob):
                raise ManifestError(name, "must be a Blob", scope)
            if blob.id in seen:
                raise ManifestError(
                    f"{name}.id", f"duplicate id {blob.id!r} (also {seen[blob.id]})", scope
                )
            seen[blob.id] = name

    def _check_prefixes(self, scope: str) -> None:
        owners: dict[str, str] = {}
        claims = [
            (f"blobs[{i}].prefixes[{j}]", p)
            for i, b in enumerate(self.blobs)
            for j, p in enumerate(b.prefixes)
        ]
        claims += [(f"hot[{i}]", _prefix_in(p, f"hot[{i}]", scope)) for i, p in enumerate(self.hot)]
        for name, p in claims:
            if not is_under(p, scope):
                raise ManifestError(name, f"{p!r} is outside scope {scope!r}", scope)
            if p == scope and not self.root_array:
                raise ManifestError(
                    name,
                    f"{p!r} is the whole scope and would swallow every future array "
                    "(claim the arrays' prefixes; only a store whose root is an array, "
                    "root_array, may claim its scope)",
                    scope,
                )
            if p in owners:
                raise ManifestError(name, f"prefix {p!r} is also claimed by {owners[p]}", scope)
            owners[p] = name
        for name, p in claims:
            parts = p.split("/")
            for k in range(1, len(parts)):
                ancestor = "/".join(parts[:k])
                if ancestor in owners:
                    raise ManifestError(
                        name, f"prefix {p!r} overlaps {ancestor!r} of {owners[ancestor]}", scope
                    )
        pinned: set[str] = set()
        for i, pin in enumerate(self.pins):
            if not isinstance(pin, Pin):
                raise ManifestError(f"pins[{i}]", "must be a Pin", scope)
            if not is_under(pin.prefix, scope):
                raise ManifestError(
                    f"pins[{i}].prefix", f"{pin.prefix!r} is outside scope {scope!r}", scope
                )
            if pin.prefix in pinned:
                raise ManifestError(f"pins[{i}].prefix", f"{pin.prefix!r} is pinned twice", scope)
            pinned.add(pin.prefix)

    # ------------------------------------------------------------------ derived manifests

    def bumped(self, **changes: Any) -> Manifest:
        """The successor: same scope, epoch + 1, with `changes` applied."""
        return replace(self, epoch=self.epoch + 1, **changes)

    def check_successor(self, previous: Manifest | None) -> None:
        """Epochs only increase, a scope keeps its name, and ids are forever: every id the
        stored manifest has (live or retired) names the same keys here, live or retired."""
        if previous is None:
            return
        if previous.scope != self.scope:
            raise ManifestError(
                "scope", f"{self.scope!r} replaces a manifest of {previous.scope!r}"
            )
        if self.epoch <= previous.epoch:
            raise ManifestError(
                "epoch",
                f"{self.epoch} does not increase on the stored epoch {previous.epoch}",
                self.scope,
            )
        mine = {b.id: b for b in self.every_blob()}
        for old in previous.every_blob():
            new = mine.get(old.id)
            if new is None:
                raise ManifestError(
                    "retired", f"id {old.id!r} of epoch {previous.epoch} is gone", self.scope
                )
            if not new.same_cut(old) or new.cut != old.cut:
                raise ManifestError(
                    "blobs",
                    f"id {old.id!r} would name other keys than at epoch {previous.epoch} "
                    f"({list(old.prefixes)} -> {list(new.prefixes)}): a new cut takes new ids",
                    self.scope,
                )

    def every_blob(self) -> tuple[Blob, ...]:
        """Live blobs, then retired ones: every id this scope has ever given."""
        return (*self.blobs, *(r.blob for r in self.retired))

    def with_pin(self, pin: Pin, *, today: dt.date | None = None, force: bool = False) -> Manifest:
        """The successor holding `pin` (replacing a pin on the same prefix: how `until` moves).

        Unless `force`: a pin inside or around another pin is refused (`PinOverlaps`), since
        two decisions on one key would shadow each other and removing one would silently keep
        or drop the other's keys; and, given `today`, a pin whose `until` is before it
        (`PinRefused`), which could only be a typo or a decision already over.
        """
        if not force:
            self._check_new_pin(pin, today)
        return self.bumped(pins=(*tuple(p for p in self.pins if p.prefix != pin.prefix), pin))

    def _check_new_pin(self, pin: Pin, today: dt.date | None) -> None:
        if today is not None and pin.until is not None and dt.date.fromisoformat(pin.until) < today:
            raise PinRefused(
                f"pin on {pin.prefix!r} in scope {self.scope!r}: --until {pin.until} is past "
                f"(today is {today.isoformat()}): give a later date, or --force to record it"
            )
        for other in self.pins:
            if other.prefix == pin.prefix:
                continue
            if is_under(pin.prefix, other.prefix):
                how = "lies inside"
            elif is_under(other.prefix, pin.prefix):
                how = "covers"
            else:
                continue
            raise PinOverlaps(
                f"pin on {pin.prefix!r} {how} the pin on {other.prefix!r} "
                f"(by {other.who}: {other.why}) in scope {self.scope!r}: remove that pin "
                "first, or --force to add it anyway"
            )

    def without_pin(self, prefix: str) -> Manifest:
        if all(p.prefix != prefix for p in self.pins):
            raise ManifestError("pins", f"no pin on {prefix!r}", self.scope)
        return self.bumped(pins=tuple(p for p in self.pins if p.prefix != prefix))

    def retired_for(self, key: str) -> tuple[tuple[str, str], ...]:
        """The retired ids that held `key` (a key relative to the data root) before a re-cut,
        each with the tier state it kept ("hot": nothing of it was on tape), oldest first."""
        if key.rsplit("/", 1)[-1] in self.hot_always:
            return ()
        out = []
        for r in self.retired:
            for p in r.blob.prefixes:
                if not is_under(key, p):
                    continue
                held = r.blob.id
                if r.blob.bucket is not None:
                    n = r.blob.bucket.first_index(key[len(p) + 1 :]) if key != p else None
                    if n is None:
                        continue
                    held = bucket_id(r.blob.id, n, r.blob.bucket.width)
                out.append((held, r.states.get(held, "hot")))
        return tuple(out)

    def blob(self, blob_id: str) -> Blob:
        for b in self.every_blob():
            if b.id == blob_id:
                return b
        raise KeyError(blob_id)

    def oversized(self) -> tuple[tuple[Blob, str], ...]:
        """Blobs (or, bucketed, their buckets) over the policy's t_max, each with why: objects
        larger than t_max, which a blob never splits. The partitioner cannot help it; it says."""
        t_max = self.policy.t_max
        out = []
        for b in self.blobs:
            if b.bucket is None and b.bytes > t_max:
                out.append((b, f"{b.bytes} B in {b.objects} object(s), over t_max {t_max} B"))
            elif b.bucket is not None and b.bucket.width == 1 and b.objects:
                mean = b.bytes // b.objects
                if mean > t_max:
                    out.append((b, f"its objects average {mean} B, over t_max {t_max} B"))
        return tuple(out)

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": self.format,
            "scope": self.scope,
            "epoch": self.epoch,
            "policy": self.policy.to_dict(),
            "hot_always": list(self.hot_always),
            "hot": list(self.hot),
            "pins": [p.to_dict() for p in self.pins],
            "blobs": [b.to_dict() for b in self.blobs],
        }
        if self.root_array:  # only then: manifests of group stores stay byte-identical
            doc["root_array"] = True
        doc["cuts"] = [c.to_dict() for c in self.cuts]
        doc["retired"] = [r.to_dict() for r in self.retired]
        return doc

    def dumps(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n").encode()

    @classmethod
    def loads(cls, data: bytes | str, source: str = "manifest") -> Manifest:
        try:
            doc = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ManifestError("(document)", f"{source} is not valid JSON: {err}") from None
        return cls.from_dict(doc)

    @classmethod
    def from_dict(cls, doc: Any) -> Manifest:
        if not isinstance(doc, Mapping):
            raise ManifestError("(document)", f"must be a JSON object, got {type(doc).__name__}")
        scope = doc.get("scope") if isinstance(doc.get("scope"), str) else None
        _only(
            doc,
            {
                "format",
                "scope",
                "epoch",
                "policy",
                "hot_always",
                "hot",
                "pins",
                "blobs",
                "root_array",
                "cuts",
                "retired",
            },
            "",
            scope,
        )
        for name in ("format", "scope", "epoch", "policy", "blobs"):
            if name not in doc:
                raise ManifestError(name, "is required", scope)
        pol = _policy(_obj(doc["policy"], "policy", scope), "policy.", scope)
        blobs = tuple(_blob(b, i, scope) for i, b in enumerate(_list(doc["blobs"], "blobs", scope)))
        if "cuts" in doc and doc["cuts"] == []:
            raise ManifestError("cuts", "must hold at least one cut (or be left out)", scope)
        cuts = tuple(
            _cut(c, i, scope) for i, c in enumerate(_list(doc.get("cuts", []), "cuts", scope))
        )
        retired = tuple(
            _retired(r, i, scope)
            for i, r in enumerate(_list(doc.get("retired", []), "retired", scope))
        )
        pins = tuple(
            _pin(p, i, scope) for i, p in enumerate(_list(doc.get("pins", []), "pins", scope))
        )
        return cls(
            scope=doc["scope"],
            epoch=doc["epoch"],
            policy=pol,
            blobs=blobs,
            hot=tuple(_list(doc.get("hot", []), "hot", scope)),
            pins=pins,
            hot_always=tuple(
                _list(doc.get("hot_always", list(DEFAULT_HOT_ALWAYS)), "hot_always", scope)
            ),
            format=doc["format"],
            root_array=doc.get("root_array", False),
            cuts=cuts,
            retired=retired,
        )


def _prefix_in(value: Any, name: str, scope: str) -> str:
    try:
        return _prefix(value, name)
    except ManifestError as err:
        raise ManifestError(err.field, err.problem, scope) from None


def _obj(value: Any, name: str, scope: str | None) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ManifestError(name, f"must be an object, got {type(value).__name__}", scope)
    return value


def _list(value: Any, name: str, scope: str | None) -> list[Any]:
    if not isinstance(value, list):
        raise ManifestError(name, f"must be a list, got {type(value).__name__}", scope)
    return value


def _only(doc: Mapping[str, Any], allowed: Iterable[str], outer: str, scope: str | None) -> None:
    extra = sorted(set(doc) - set(allowed))
    if extra:
        raise ManifestError(f"{outer}{extra[0]}", "is not a manifest field", scope)


_BLOB_FIELDS = {"id", "cut", "prefixes", "bucket", "bytes", "objects"}


def _policy(policy: Mapping[str, Any], outer: str, scope: str | None) -> Policy:
    _only(policy, {"t_max", "t_hot", "t_min"}, outer, scope)
    for name in ("t_max", "t_hot", "t_min"):
        if name not in policy:
            raise ManifestError(f"{outer}{name}", "is required", scope)
    try:
        return Policy(policy["t_max"], policy["t_hot"], policy["t_min"])
    except ManifestError as err:
        raise ManifestError(outer + err.field.removeprefix("policy."), err.problem, scope) from None


def _blob(
    value: Any, i: int, scope: str | None, where: str = "blobs", extra: Iterable[str] = ()
) -> Blob:
    name = f"{where}[{i}]"
    doc = _obj(value, name, scope)
    _only(doc, _BLOB_FIELDS | set(extra), f"{name}.", scope)
    for field_name in ("id", "prefixes"):
        if field_name not in doc:
            raise ManifestError(f"{name}.{field_name}", "is required", scope)
    try:
        bucket = None
        if doc.get("bucket") is not None:
            b = _obj(doc["bucket"], "bucket", scope)
            _only(b, {"width", "encoding", "separator", "count"}, "bucket.", scope)
            if "width" not in b:
                raise ManifestError("bucket.width", "is required", scope)
            if "count" in b:  # absent when unknown; written only as an integer
                _int(b["count"], "bucket.count", 0)
            bucket = Bucket(
                b["width"], b.get("encoding", "default"), b.get("separator", "/"), b.get("count")
            )
        return Blob(
            doc["id"],
            _list(doc["prefixes"], "prefixes", scope),
            bucket,
            doc.get("bytes", 0),
            doc.get("objects", 0),
            doc.get("cut", 1),
        )
    except ManifestError as err:
        raise _nested(err, name, scope or "") from None


def _cut(value: Any, i: int, scope: str | None) -> Cut:
    doc = _obj(value, f"cuts[{i}]", scope)
    _only(doc, {"cut", "epoch", "policy"}, f"cuts[{i}].", scope)
    for name in ("cut", "policy"):
        if name not in doc:
            raise ManifestError(f"cuts[{i}].{name}", "is required", scope)
    policy = _policy(_obj(doc["policy"], f"cuts[{i}].policy", scope), f"cuts[{i}].policy.", scope)
    try:
        return Cut(doc["cut"], policy, doc.get("epoch", 1))
    except ManifestError as err:
        raise _nested(err, f"cuts[{i}]", scope or "") from None


def _retired(value: Any, i: int, scope: str | None) -> Retired:
    doc = _obj(value, f"retired[{i}]", scope)
    blob = _blob(doc, i, scope, "retired", ("retired_at", "states"))
    if "retired_at" not in doc:
        raise ManifestError(f"retired[{i}].retired_at", "is required", scope)
    try:
        return Retired(blob, doc["retired_at"], _obj(doc.get("states", {}), "states", scope))
    except ManifestError as err:
        raise _nested(err, f"retired[{i}]", scope or "") from None


def _pin(value: Any, i: int, scope: str | None) -> Pin:
    doc = _obj(value, f"pins[{i}]", scope)
    _only(doc, {"prefix", "who", "why", "until"}, f"pins[{i}].", scope)
    try:
        for name in ("prefix", "who", "why"):
            if name not in doc:
                raise ManifestError(name, "is required", scope)
        return Pin(doc["prefix"], doc["who"], doc["why"], doc.get("until"))
    except ManifestError as err:
        raise _nested(err, f"pins[{i}]", scope or "") from None


@dataclass(frozen=True)
class ArrayInfo:
    """One array as read from metadata and a listing (never from a chunk).

    `object_shape` is what becomes one object: the shard for sharded arrays, else the chunk.
    `stored_bytes`/`objects` count the chunk (or shard) objects that exist now.
    """

    path: str
    shape: tuple[int, ...]
    object_shape: tuple[int, ...]
    zarr_format: int = 3
    encoding: Encoding = "default"
    separator: Literal["/", "."] = "/"
    dimension_names: tuple[str | None, ...] | None = None
    inner_shape: tuple[int, ...] | None = None
    stored_bytes: int = 0
    objects: int = 0
    coordinate: bool = False  # named as a coordinate by a sibling (CF `coordinates`)

    def __post_init__(self) -> None:
        _prefix(self.path, "path")
        if len(self.shape) != len(self.object_shape):
            raise ValueError(
                f"array {self.path!r}: shape {self.shape} and object shape "
                f"{self.object_shape} differ in rank"
            )
        if any(c < 1 for c in self.object_shape):
            raise ValueError(f"array {self.path!r}: chunk shape {self.object_shape} has a zero")

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def is_coordinate(self) -> bool:
        dims = self.dimension_names
        own = len(self.shape) == 1 and dims is not None and len(dims) == 1 and dims[0] == self.name
        return self.coordinate or own

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shape, self.object_shape, strict=True))

    @property
    def slab_objects(self) -> int:
        """Objects sharing one first chunk index."""
        n = 1
        for g in self.grid[1:]:
            n *= max(g, 1)
        return n
