"""Manifest splitting and a virtual dataset's Icechunk settings, as real Icechunk objects
validated on construction."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import icechunk as ic

from toolkit.icechunk.containers import Container


def manifest_append_dim_split(
    append_dim: str, split: int | Mapping[str | None, int]
) -> ic.ManifestSplittingConfig:
    """Split every array's manifest along `append_dim` every `split` positions.

    `split` may be `{path_regex: size, None: default}` to size array groups differently; the
    first matching regex wins, `None` catches the rest.
    """
    dim = ic.ManifestSplitDimCondition.DimensionName(append_dim)
    sizes = {None: split} if isinstance(split, int) else dict(split)
    for k, v in sizes.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(
                f"manifest split size for {k or 'all arrays'!r} must be an int >= 1, got {v!r}"
            )
        if k is not None:
            re.compile(k)
    rules: dict[Any, Any] = {}
    for k, v in sizes.items():
        if k is not None:
            rules[ic.ManifestSplitCondition.path_matches(k)] = {dim: v}
    if None in sizes:
        rules[ic.ManifestSplitCondition.AnyArray()] = {dim: sizes[None]}
    return ic.ManifestSplittingConfig.from_dict(rules)


@dataclass
class VirtualConfig:
    """A virtual dataset's Icechunk settings, as real Icechunk objects (validated on construction).

    Not picklable (Icechunk's objects are not): datasets build it where they run.
    """

    containers: Sequence[Container]
    splitting: Any = None  # ic.ManifestSplittingConfig
    manifest_fetch_concurrency: int = 32
    chunk_ref_cache: int = 2_000_000

    def __post_init__(self) -> None:
        if not self.containers:
            raise ValueError("a virtual dataset needs at least one virtual chunk container")
        seen: set[str] = set()
        for c in self.containers:
            if not isinstance(c, ic.VirtualChunkContainer):
                raise TypeError(
                    f"container {c!r} is not an icechunk VirtualChunkContainer: build "
                    "it with local_container / s3_container / gcs_container"
                )
            if c.url_prefix in seen:
                raise ValueError(f"container prefix {c.url_prefix!r} registered twice")
            seen.add(c.url_prefix)
        if self.splitting is not None and not isinstance(
            self.splitting, ic.ManifestSplittingConfig
        ):
            raise TypeError("splitting must come from manifest_append_dim_split")
        if self.manifest_fetch_concurrency < 1 or self.chunk_ref_cache < 1:
            raise ValueError("manifest_fetch_concurrency and chunk_ref_cache must be >= 1")

    @property
    def prefixes(self) -> list[str]:
        return [c.url_prefix for c in self.containers]

    def repository_config(self) -> ic.RepositoryConfig:
        cfg = ic.RepositoryConfig.default()
        for c in self.containers:
            cfg.set_virtual_chunk_container(c)
        cfg.manifest = ic.ManifestConfig(
            splitting=self.splitting,
            max_concurrent_manifest_fetches_during_commit=self.manifest_fetch_concurrency,
        )
        cfg.caching = ic.CachingConfig(num_chunk_refs=self.chunk_ref_cache)
        return cfg
