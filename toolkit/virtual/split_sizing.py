"""Manifest split sizing (pure): how many append-dim positions one manifest should hold.

A reader fetches every manifest its selection touches. Small manifests mean many fetches (and a
commit that rewrites many); big ones mean megabytes fetched for one field. The budgets: a
manifest a typical reader fetches stays within `TARGET_BYTES`, and holds at least `FLOOR_REFS`
refs, below which the per-manifest overhead dominates. A ref costs ~16 bytes in a manifest
(`inspect` and `split advise` measure it per array).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["FLOOR_REFS", "TARGET_BYTES", "Advice", "advise"]

TARGET_BYTES = 4 << 20  # a few MiB per manifest a reader fetches
FLOOR_REFS = 1_000  # fewer refs per manifest and the per-manifest overhead dominates


@dataclass(frozen=True)
class Advice:
    """One array's manifests now, and the split that meets the budgets."""

    array: str
    manifests: int
    refs: int
    bytes: int
    positions: int  # the append dim's committed extent
    split: int  # proposed positions per manifest

    @property
    def refs_per_manifest(self) -> float:
        return self.refs / self.manifests if self.manifests else 0.0

    @property
    def bytes_per_manifest(self) -> float:
        return self.bytes / self.manifests if self.manifests else 0.0

    def line(self) -> str:
        per = self.refs / self.positions if self.positions else 0.0
        return (
            f"{self.array}: {self.manifests} manifest(s), {self.refs_per_manifest:,.0f} refs and "
            f"{self.bytes_per_manifest / 1024:,.1f} KiB each ({per:,.0f} refs per position); "
            f"proposed split: {self.split} position(s) per manifest"
        )


def advise(array: str, manifests: int, refs: int, nbytes: int, positions: int) -> Advice:
    """The split for one array: as many positions per manifest as keep it within
    `TARGET_BYTES`, and at least as many as reach `FLOOR_REFS` refs when that stays within
    twice the target; at most the extent."""
    if refs <= 0 or positions <= 0:
        return Advice(array, manifests, refs, nbytes, positions, max(1, positions))
    per_position = refs / positions
    bytes_per_ref = nbytes / refs if nbytes else 16.0
    by_bytes = math.floor(TARGET_BYTES / (bytes_per_ref * per_position))
    by_floor = math.ceil(FLOOR_REFS / per_position)
    split = max(1, by_bytes)
    if by_floor > split and by_floor * per_position * bytes_per_ref <= 2 * TARGET_BYTES:
        split = by_floor
    return Advice(array, manifests, refs, nbytes, positions, min(split, positions))
