"""A pyramid in a Zarr v3 store, its levels beside level 0: the `Home` of `toolkit.pyramid.home`.

The build is `toolkit.pyramid.store_build`'s (`build_store`); what the build recorded is the store's
own `.pyramid` records (`toolkit.pyramid.records`): the plan, the level-0 fingerprints, a backup
of the root metadata the build changed. Reads open the store with zarr
(`toolkit.pyramid.read`); its version is the digest of its root metadata.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit import storage
from toolkit.engine import Runner
from toolkit.plan import Report
from toolkit.pyramid import metadata, read, records
from toolkit.pyramid.failure import Failure
from toolkit.pyramid.geometry import PlanError, PyramidPlan, RecordedPlan, edited_in_place
from toolkit.pyramid.settings import Settings, Wanted
from toolkit.pyramid.source import Source, growth_note, level0_growth, read_source
from toolkit.pyramid.store_build import build_store, plan_store, recorded_prints

__all__ = ["ZarrHome"]


@dataclass(frozen=True)
class ZarrHome:
    """A pyramid written into a Zarr v3 store, beside its level 0."""

    store: storage.Store
    decodes_grib = False
    striped = False  # one node per shard: no worker stripes

    @property
    def url(self) -> str:
        return self.store.url

    @property
    def name(self) -> str:
        """The store as its user types it (a local store's path)."""
        return storage.location(self.store.url)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.store.options)

    # ------------------------------------------------------------------ build

    def plan(self, wanted: Wanted) -> PyramidPlan:
        return plan_store(self.store, wanted)

    def build(self, wanted: Wanted, runner: Runner) -> Report:
        return build_store(self.store, wanted, runner)

    # ------------------------------------------------------------------ verify

    @functools.cached_property
    def _plan(self) -> RecordedPlan | None:
        """The plan the build recorded (None: none), read once."""
        return records.read_plan(self.store)

    def recorded(self) -> Settings | None:
        return self._plan.settings if self._plan is not None else None

    def unbuilt(self) -> Failure:
        read_source(self.store)  # a store that is not zarr v3 at all is bad usage, not a check
        return Failure(
            "-", ".pyramid/plan", "plan", "no recorded pyramid plan: build the pyramid first"
        )

    def level0(self, variables: list[str]) -> Source:
        return read_source(self.store, variables)

    def expected(self, p: PyramidPlan) -> RecordedPlan:
        return self._plan if self._plan is not None else RecordedPlan.of(p)

    def edited(self, p: PyramidPlan) -> dict[str, Any] | None:
        return edited_in_place(recorded_prints(self.store), p)

    def root_failures(self, plan: RecordedPlan) -> list[Failure]:
        """The root against the backup the build took: level 0's node metadata unchanged, the
        root changed only by the multiscales attributes, every level consolidated."""
        try:
            saved = metadata.read_backup(self.store)
        except storage.NotFound:
            return [Failure(".", "zarr.json", "root-diff", "no backup of the root metadata")]
        out = self._level0_nodes(saved)
        root_now = storage.get_json(self.store, "zarr.json")
        a = metadata.strip_added(root_now)
        b = metadata.strip_added(json.loads(saved["zarr.json"]))
        if a != b:
            keys = sorted(set(a.get("attributes", {})) ^ set(b.get("attributes", {})))
            why = f"root changed beyond the multiscales attributes {keys or ''}"
            out.append(Failure(".", "zarr.json", "root-diff", why))
        if "multiscales" not in root_now.get("attributes", {}):
            out.append(Failure(".", "zarr.json", "root-diff", "multiscales attribute missing"))
        meta = (root_now.get("consolidated_metadata") or {}).get("metadata", {})
        unseen = (
            "level missing from the consolidated metadata (a reader opening the store in one "
            "request does not see it)"
        )
        out += [
            Failure(g, "zarr.json", "consolidated", unseen) for g in plan.groups if g not in meta
        ]
        return out

    def _level0_nodes(self, saved: dict[str, bytes]) -> list[Failure]:
        """Level 0's node metadata (every document of the backup but the root's) unchanged."""
        out = []
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
        return out

    def client_zarr(self, options: dict[str, Any], private: bool) -> Any:
        return storage.open_store(self.url, **options).zarr(read_only=True)

    # ------------------------------------------------------------------ read and serve

    def exists(self) -> bool:
        return storage.exists(self.store, "zarr.json")

    def version(self, branch: str = "main") -> tuple[str, str]:
        root = storage.get(self.store, "zarr.json").data
        return "pyramid", hashlib.sha256(root).hexdigest()[:16]

    def open_level(
        self, level: str | None, branch: str = "main", version: str | None = None, **kwargs: Any
    ) -> Any:
        return read.open_level(self.store, level or ".", **kwargs)

    def open_tree(self, branch: str = "main", version: str | None = None, **kwargs: Any) -> Any:
        """`toolkit.pyramid.read.open_datatree`; when the levels do not open because an xarray
        append replaced the root's layout, one line saying so."""
        try:
            return read.open_datatree(self.store, **kwargs)
        except PlanError:
            if not (grew := level0_growth(self.store)):
                raise
            raise PlanError(
                f"{self.name}: {growth_note(grew)} since the build: run `toolkit pyramid build "
                f"{self.name}`"
            ) from None

    def stac(self, output_dir: str | Path) -> Any:
        from toolkit.pyramid.catalog import store_entry

        return store_entry(self.store, output_dir)
