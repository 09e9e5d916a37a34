"""Where `toolkit.pyramid.verify` reads a pyramid from: a Zarr store, or an Icechunk repo's main.

`open_origin` decides once which it is; the checks then ask the `Origin` for what differs and
read every key through its `store` (a `toolkit.storage.Store`, or main's head as a
`toolkit.icechunk.BranchView`: the storage backend protocol serves both), so none of them asks
which kind it has. What differs:

- what the build recorded: a Zarr store its plan (`.pyramid/plan`, read once when opened), a
  repo its settings (its plan is what main's level 0 asks now); both as typed values
  (`toolkit.pyramid.settings.Settings`, `toolkit.pyramid.plan.RecordedPlan`);
- level 0: a Zarr store's own arrays; a repo's as main holds them, at the chosen positions;
- level-0 fingerprints: a Zarr store records them (an edit in place is found); a repo's history
  is its record;
- the root: a Zarr store keeps a backup of the metadata the build changed and consolidates the
  levels; a repo's history is the backup, and nothing consolidates;
- a client's read: a Zarr store opens as zarr, a repo through a read-only session of main.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from toolkit import storage
from toolkit.pyramid import metadata, records
from toolkit.pyramid.build import recorded_prints
from toolkit.pyramid.levels import no_positions
from toolkit.pyramid.plan import PyramidPlan, RecordedPlan, edited_in_place
from toolkit.pyramid.settings import Settings
from toolkit.pyramid.source import Source, open_source, read_source

__all__ = ["Failure", "Origin", "RepoOrigin", "ZarrOrigin", "open_origin"]


@dataclass(frozen=True)
class Failure:
    level: str
    shard: str
    check: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.check}] level {self.level} {self.shard}: {self.detail}"


class Origin(Protocol):
    """A pyramid's home as `verify` sees it."""

    @property
    def store(self) -> Any:
        """What the checks read every key through (a `toolkit.storage` store or view)."""
        ...

    @property
    def url(self) -> str: ...

    @property
    def options(self) -> dict[str, Any]:
        """The store options a client's read starts from."""
        ...

    @property
    def decodes_grib(self) -> bool:
        """Whether reading level 0 decodes GRIB (holds the GIL)."""
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


def open_origin(
    source: str | storage.Store,
    select: Mapping[str, Sequence[str]] | None = None,
    latest: bool = False,
    **options: Any,
) -> Origin:
    """The repo at `source`, else the Zarr store there (`select`/`latest`: a repo's positions;
    given for a Zarr store, bad usage)."""
    from toolkit.pyramid.repo import open_repo_source

    ref = open_repo_source(source, **options)
    if ref is not None:
        return RepoOrigin(ref, select, latest)
    no_positions(source, select, latest)
    store = open_source(source, **options)
    return ZarrOrigin(store, records.read_plan(store))


@dataclass(frozen=True)
class ZarrOrigin:
    """A pyramid written into a Zarr v3 store, beside its level 0, and the plan its build
    recorded (None: none)."""

    store: storage.Store
    plan: RecordedPlan | None = None
    decodes_grib = False

    @property
    def url(self) -> str:
        return self.store.url

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.store.options)

    def recorded(self) -> Settings | None:
        return self.plan.settings if self.plan is not None else None

    def unbuilt(self) -> Failure:
        read_source(self.store)  # a store that is not zarr v3 at all is bad usage, not a check
        return Failure(
            "-", ".pyramid/plan", "plan", "no recorded pyramid plan: build the pyramid first"
        )

    def level0(self, variables: list[str]) -> Source:
        return read_source(self.store, variables)

    def expected(self, p: PyramidPlan) -> RecordedPlan:
        return self.plan if self.plan is not None else RecordedPlan.of(p)

    def edited(self, p: PyramidPlan) -> dict[str, Any] | None:
        return edited_in_place(recorded_prints(self.store), p)

    def root_failures(self, plan: RecordedPlan) -> list[Failure]:
        """The root against the backup the build took: level 0's node metadata unchanged, the
        root changed only by the multiscales attributes, every level consolidated."""
        out: list[Failure] = []
        try:
            saved = metadata.read_backup(self.store)
        except storage.NotFound:
            return [Failure(".", "zarr.json", "root-diff", "no backup of the root metadata")]
        for key, body in sorted(saved.items()):
            if key == "zarr.json":
                continue
            try:
                now = storage.get(self.store, key).data
            except storage.NotFound:
                out.append(Failure(".", key, "level0-metadata", "node metadata is gone"))
                continue
            if now != body:
                out.append(Failure(".", key, "level0-metadata", "changed since the backup"))
        root_now = storage.get_json(self.store, "zarr.json")
        root_then = json.loads(saved["zarr.json"])
        a, b = metadata.strip_added(root_now), metadata.strip_added(root_then)
        if a != b:
            keys = sorted(set(a.get("attributes", {})) ^ set(b.get("attributes", {})))
            out.append(
                Failure(
                    ".",
                    "zarr.json",
                    "root-diff",
                    f"root changed beyond the multiscales attributes {keys or ''}",
                )
            )
        if "multiscales" not in root_now.get("attributes", {}):
            out.append(Failure(".", "zarr.json", "root-diff", "multiscales attribute missing"))
        meta = (root_now.get("consolidated_metadata") or {}).get("metadata", {})
        for group in plan.groups:
            if group not in meta:
                out.append(
                    Failure(
                        group,
                        "zarr.json",
                        "consolidated",
                        "level missing from the consolidated metadata (a reader opening the "
                        "store in one request does not see it)",
                    )
                )
        return out

    def client_zarr(self, options: dict[str, Any], private: bool) -> Any:
        return storage.open_store(self.url, **options).zarr(read_only=True)


@dataclass(frozen=True)
class RepoOrigin:
    """A pyramid inside an Icechunk repo, checked on main (at `select`/`latest` positions)."""

    ref: Any  # toolkit.icechunk.RepoRef
    select: Mapping[str, Sequence[str]] | None = None
    latest: bool = False
    decodes_grib = True  # level 0 is a virtual GRIB array

    @property
    def store(self) -> Any:
        from toolkit import icechunk as R

        return R.BranchView(self.ref, "main")

    @property
    def url(self) -> str:
        return str(self.ref.url)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.ref.store.options)

    def recorded(self) -> Settings | None:
        from toolkit.pyramid.repo import recorded_settings

        return recorded_settings(self.ref)

    def unbuilt(self) -> Failure:
        return Failure("-", "zarr.json", "plan", "no pyramid in the repo: build it first")

    def level0(self, variables: list[str]) -> Source:
        from toolkit.pyramid.repo import repo_source

        return repo_source(self.ref, variables, self.select, self.latest)[0]

    def expected(self, p: PyramidPlan) -> RecordedPlan:
        return RecordedPlan.of(p)  # a repo records settings: the plan is what level 0 asks now

    def edited(self, p: PyramidPlan) -> dict[str, Any] | None:
        return None  # the repo's history is the record of level 0's changes

    def root_failures(self, plan: RecordedPlan) -> list[Failure]:
        """Level 0's nodes are the dataset's own (their history is the repo's): the root must
        carry the layout and both conventions; the levels are checked one by one."""
        attrs = storage.get_json(self.store, "zarr.json").get("attributes", {})
        out = []
        if "multiscales" not in attrs:
            out.append(Failure(".", "zarr.json", "root-diff", "multiscales attribute missing"))
        have = {c.get("uuid") for c in attrs.get("zarr_conventions", [])}
        if not set(metadata.ADDED_UUIDS) <= have:
            out.append(Failure(".", "zarr.json", "root-diff", "conventions not registered"))
        return out

    def client_zarr(self, options: dict[str, Any], private: bool) -> Any:
        from toolkit import icechunk as R

        store = storage.open_store(self.url, **options)
        handle = R.open_repo(store, "env" if private else "anonymous", fresh=True)
        return R.readonly(handle).store
