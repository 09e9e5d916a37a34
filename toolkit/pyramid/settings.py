"""What a pyramid's levels were built with, as one value (pure).

A build records it twice: a Zarr store's `.pyramid/plan` opens with `core()` (which the plan's
digest also hashes), an Icechunk repo's root carries `record()` as `pyramid:settings`. Both
are read back with `Settings.from_record`, so a later build, `verify` and an update fire agree
with the levels through this value, never through the record's dict. The shapes are those of
earlier toolkits, byte for byte (a changed digest would rebuild every pyramid), and a record
from before operators were per variable (one `method`, an optional `circular`, no
`operators`) still reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

__all__ = ["MAX_SHARD", "MIXED", "Asked", "Settings", "Wanted", "kernel"]

MAX_SHARD = 4096
MIXED = "mixed"  # a plan's `method` when its variables have different reducers
CIRCULAR = "circular_mean"
GEOMETRY = ("band_dim", "levels", "max_shard", "spatial_dims")  # what every variable shares


def kernel(operator: str) -> str:
    """The reducer an operator pools with (a direction's circular mean is a mean kernel's)."""
    return "mean" if operator == CIRCULAR else operator


@dataclass(frozen=True)
class Settings:
    """Each variable's operator as the user names it (`circular_mean` for directions), by
    variable in the plan's order, and the geometry they share."""

    operators: Mapping[str, str]
    band_dim: str | None
    levels: int
    max_shard: int = MAX_SHARD
    spatial_dims: tuple[str, ...] = ()
    classes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # mode's declared ones
    # why each operator (`plan.choose_methods`): recorded in a plan, not in a repo's settings;
    # a later build keeps the reason with the operator it accepts
    why: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(self.operators)

    @property
    def method(self) -> str:
        """The reducer every variable shares, or MIXED."""
        kernels = {kernel(op) for op in self.operators.values()}
        return kernels.pop() if len(kernels) == 1 else MIXED

    @property
    def circular(self) -> tuple[str, ...]:
        return tuple(sorted(n for n, op in self.operators.items() if op == CIRCULAR))

    def accepted(self) -> dict[str, tuple[str, str]]:
        """{variable: (operator, why)} as a build accepted them (never refused again)."""
        return {n: (op, self.why.get(n, "given")) for n, op in self.operators.items()}

    def core(self) -> dict[str, Any]:
        """What the plan's digest hashes and its record opens with."""
        out: dict[str, Any] = {
            "method": self.method,
            "band_dim": self.band_dim,
            "variables": list(self.variables),
            "levels": self.levels,
            "max_shard": self.max_shard,
        }
        if self.circular:  # only when there are any: records made before stay equal
            out["circular"] = list(self.circular)
        if self.method == MIXED:  # likewise: one operator for all is what `method` says
            out["operators"] = dict(self.operators)
        return out

    def record(self) -> dict[str, Any]:
        """A repo's `pyramid:settings`: what a later build or verify must agree with (the
        listing is not part: it grows)."""
        return {
            **self.core(),
            "spatial_dims": list(self.spatial_dims),
            "classes": {n: list(c) for n, c in self.classes.items() if c},
        }

    @classmethod
    def from_record(
        cls, doc: Mapping[str, Any], classes: Mapping[str, Any] | None = None
    ) -> Settings:
        """The settings of a repo's `pyramid:settings` or of a plan record (`classes`: the
        plan's, which it keeps with its levels). Raises KeyError/TypeError/ValueError on a
        record that is not one."""
        why = str(doc.get("method_from") or "given")
        froms = doc.get("operators_from") or {}
        ops = doc.get("operators") if isinstance(doc.get("operators"), Mapping) else {}
        circ = set(doc.get("circular") or ())  # an older record's directions, beside `method`

        def operator(n: str) -> str:
            return str(ops.get(n) or (CIRCULAR if n in circ else doc["method"]))

        operators = {str(n): operator(n) for n in doc["variables"]}
        kept = doc.get("classes") if classes is None else classes
        return cls(
            operators=operators,
            band_dim=None if doc.get("band_dim") is None else str(doc["band_dim"]),
            levels=int(doc["levels"]),
            max_shard=int(doc.get("max_shard") or MAX_SHARD),
            spatial_dims=tuple(str(d) for d in doc.get("spatial_dims") or ()),
            classes={str(n): tuple(int(c) for c in v) for n, v in (kept or {}).items() if v},
            why={n: str(froms.get(n, why)) for n in operators},
        )

    def differences(self, now: Settings) -> dict[str, tuple[Any, Any]]:
        """{what: (then, now)} where `now` differs from these settings of built levels, as
        JSON shows them: the shared geometry, and each recorded variable's operator and
        classes (a variable may be added)."""
        then_rec, now_rec = self.record(), now.record()
        out = {k: (then_rec[k], now_rec[k]) for k in GEOMETRY if then_rec[k] != now_rec[k]}
        for n, op in sorted(self.operators.items()):
            if now.operators.get(n) != op:
                out[f"{n}'s operator"] = (op, now.operators.get(n))
        for n, c in sorted(self.classes.items()):
            if now.classes.get(n) != c:
                was = now.classes.get(n)
                out[f"{n}'s classes"] = (list(c), None if was is None else list(was))
        return out


class Asked(TypedDict, total=False):
    """The keywords of `build` beyond its documented ones, gathered into its `Wanted`."""

    rebuild_from: str | int | None
    max_shard: int
    force_method: bool
    select: Mapping[str, Sequence[str]] | None
    latest: bool


@dataclass(frozen=True)
class Wanted:
    """What a plan or build asks for, as one value from the entry point to the home that
    builds it. None: as the levels already built were (their recorded `Settings`), else as the
    data says (`plan.choose_methods`, a level count down to one tile)."""

    variables: Sequence[str] | None = None
    method: str | Mapping[str, str] | None = None
    band_dim: str | None = None
    levels: int | None = None
    max_shard: int = MAX_SHARD
    force_method: bool = False
    select: Mapping[str, Sequence[str]] | None = None  # a repo's positions: {dim: [labels]}
    latest: bool = False  # a repo's newest position only
    rebuild_from: str | int | None = None  # a Zarr store's level to delete and rebuild from

    @property
    def names(self) -> list[str] | None:
        """The variables asked for (None: none named)."""
        return list(self.variables) if self.variables else None

    @property
    def positions(self) -> bool:
        """Whether positions are chosen (`select` or `latest`): only a repo has them."""
        return bool(self.select) or self.latest
