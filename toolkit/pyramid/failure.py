"""One failed check of a pyramid's verify, as every home reports it (below the homes and
`toolkit.pyramid.verify`, which both name it)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Failure"]


@dataclass(frozen=True)
class Failure:
    """One failed check of `verify`: the level, the shard (or node), the check, why."""

    level: str
    shard: str
    check: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.check}] level {self.level} {self.shard}: {self.detail}"
