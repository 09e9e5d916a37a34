"""Where a pyramid lives, decided once: `open_home(source, options)`.

A pyramid lives in a Zarr v3 store, its levels beside level 0 (`toolkit.pyramid.zarr_home`);
in an Icechunk repo, its levels landing on main with level 0 (`toolkit.pyramid.repo`); or, for
`pyramid build --output`, in a repo of its own over a source that is only read
(`toolkit.pyramid.output`). `open_home` opens each URL once and answers which; the `Home` it
returns carries every operation that differs between them (build, verify, read, serve), so no
other module asks "repo or store?". What differs:

- what the build recorded: a Zarr store its plan (`.pyramid/plan`), a repo its settings (its
  plan is what main's level 0 asks now); both as typed values (`Settings`, `RecordedPlan`);
- level 0: a Zarr store's own arrays; a repo's as main holds them, at the chosen positions;
- level-0 fingerprints: a Zarr store records them (an edit in place is found); a repo's history
  is its record;
- the root: a Zarr store keeps a backup of the metadata the build changed and consolidates the
  levels; a repo's history is the backup, and nothing consolidates;
- a read: a Zarr store opens as zarr, a repo through a read-only session of a branch or
  snapshot; its version is the digest of the root metadata, or the snapshot of the branch.

The checks of `verify` read every key through `Home.store` (a `toolkit.storage.Store`, or
main's head as a `toolkit.icechunk.BranchView`: the storage backend protocol serves both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from toolkit import storage
from toolkit.engine import Runner
from toolkit.plan import Report
from toolkit.pyramid.failure import Failure
from toolkit.pyramid.geometry import PyramidPlan, RecordedPlan
from toolkit.pyramid.levels import no_positions
from toolkit.pyramid.settings import Settings, Wanted
from toolkit.pyramid.source import Source, open_source

__all__ = ["Failure", "Home", "open_home"]


class Home(Protocol):
    """Where a pyramid lives, and every operation that differs with it."""

    @property
    def url(self) -> str: ...

    # ------------------------------------------------------------------ build

    def plan(self, wanted: Wanted) -> PyramidPlan:
        """The plan a build of `wanted` would run (metadata and listings read, nothing written)."""
        ...

    def build(self, wanted: Wanted, runner: Runner) -> Report:
        """Build (or extend, or resume) the levels `wanted` asks for."""
        ...

    # ------------------------------------------------------------------ verify

    @property
    def store(self) -> Any:
        """What the checks read every key through (a `toolkit.storage` store or view)."""
        ...

    @property
    def options(self) -> dict[str, Any]:
        """The store options a client's read starts from."""
        ...

    @property
    def decodes_grib(self) -> bool:
        """Whether reading level 0 decodes GRIB (holds the GIL)."""
        ...

    @property
    def striped(self) -> bool:
        """Whether the build's workers took contiguous stripes (sampled at their edges)."""
        ...

    def recorded(self) -> Settings | None:
        """What the levels were built with (None: no pyramid here)."""
        ...

    def unbuilt(self) -> Failure:
        """The failure when nothing is recorded (or bad usage, for a store that is not zarr v3)."""
        ...

    def level0(self, variables: list[str]) -> Source: ...

    def expected(self, p: PyramidPlan) -> RecordedPlan:
        """The plan the levels must match, given the plan of level 0 now."""
        ...

    def edited(self, p: PyramidPlan) -> dict[str, Any] | None:
        """Level-0 objects changed in place since the build, per array (None: not known)."""
        ...

    def root_failures(self, plan: RecordedPlan) -> list[Failure]:
        """The root node's check."""
        ...

    def client_zarr(self, options: dict[str, Any], private: bool) -> Any:
        """A zarr store over the pyramid as a client opens it, with `options`."""
        ...

    # ------------------------------------------------------------------ read and serve

    def exists(self) -> bool:
        """Whether there is anything to read (a repo, or a store with a root zarr.json)."""
        ...

    def version(self, branch: str = "main") -> tuple[str, str]:
        """("pyramid", digest of the root zarr.json) or ("repo", snapshot id of `branch`)."""
        ...

    def open_level(
        self, level: str | None, branch: str = "main", version: str | None = None, **kwargs: Any
    ) -> Any:
        """One level as an xarray Dataset (None: level 0), at `version` (what `version()`
        said: a repo's snapshot; a Zarr store is read as it is); `kwargs` go to
        `xr.open_zarr`."""
        ...

    def open_tree(self, branch: str = "main", version: str | None = None, **kwargs: Any) -> Any:
        """Every level as a child of an xarray DataTree (`1x` for level 0), read from one
        version."""
        ...

    def stac(self, output_dir: str | Path) -> Any:
        """Write the pyramid's STAC entry (`toolkit.pyramid.catalog`)."""
        ...


def open_home(
    source: str | storage.Store,
    options: storage.Options | None = None,
    *,
    select: Mapping[str, Sequence[str]] | None = None,
    latest: bool = False,
    output: str | storage.Store | None = None,
) -> Home:
    """The home of the pyramid of `source`, its URL opened once with `options` (its
    `credentials`: how a repo's GRIB sources are read): with `output`, the repo there over
    `source`, which is only read; else the Icechunk repo at `source`, else the Zarr store there.
    `select`/`latest` choose a repo's positions; given for a Zarr store, bad usage."""
    from toolkit.pyramid.output import OutputHome
    from toolkit.pyramid.repo import RepoHome, repo_at
    from toolkit.pyramid.zarr_home import ZarrHome

    given = options if options is not None else storage.Options()
    store = open_source(source, given)
    if output is not None:
        return OutputHome.open(store, output, given)
    ref = repo_at(store, given.credentials)
    if ref is not None:
        return RepoHome(ref, select, latest)
    no_positions(source, select, latest)
    return ZarrHome(store)
