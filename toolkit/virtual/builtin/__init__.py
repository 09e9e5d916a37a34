"""The virtual datasets this build knows, by name.

`DATASETS[name](source_store=None, **overrides)` builds the `Dataset` value; `source_store`
points it at a mirror or a local copy instead of the dataset's own bucket (the simulated
`sim-gfs` has no bucket of its own and needs one). `HOMES[name]` is the bucket it reads by
default. A user's own dataset is named `module:NAME` instead (see `docs/how-to/own-dataset.md`).

The production datasets are listed here. The simulated ones (`sim-gfs`, `sim-hrrr-analysis`)
are registered by the examples, in `EXAMPLES`' own `DATASETS` and `HOMES`: that module is
imported by name only when a name is not a production dataset (or the whole registry is
listed), so the library never imports `toolkit.examples`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pathlib
import sys
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType

from toolkit import storage
from toolkit.virtual.builtin.ecmwf import ecmwf_aifs_single, ecmwf_ifs_oper
from toolkit.virtual.builtin.gefs import gefs
from toolkit.virtual.builtin.gfs import gfs
from toolkit.virtual.builtin.hrrr import hrrr, hrrr_analysis
from toolkit.virtual.dataset import Dataset, with_source
from toolkit.virtual.sources.ecmwf import BUCKET as ECMWF_BUCKET
from toolkit.virtual.sources.noaa import GEFS, GFS, HRRR

__all__ = [
    "DATASETS",
    "EXAMPLES",
    "HOMES",
    "build",
    "ecmwf_aifs_single",
    "ecmwf_ifs_oper",
    "gefs",
    "gfs",
    "hrrr",
    "hrrr_analysis",
]

EXAMPLES = "toolkit.examples.datasets"  # registers the simulated datasets; imported by name


class _Registry[V](Mapping[str, V]):
    """The production entries, then the examples' (their module's mapping `attr`), looked up
    only when a name is not a production one."""

    def __init__(self, own: dict[str, V], attr: str) -> None:
        self._own, self._attr = own, attr

    def _examples(self) -> Mapping[str, V]:
        try:
            module = importlib.import_module(EXAMPLES)
        except ModuleNotFoundError as err:  # an install without the examples: none to add
            if err.name and EXAMPLES.startswith(err.name):
                return {}
            raise
        return getattr(module, self._attr)

    def __getitem__(self, name: str) -> V:
        return self._own[name] if name in self._own else self._examples()[name]

    def __contains__(self, name: object) -> bool:
        return name in self._own or name in self._examples()

    def __iter__(self) -> Iterator[str]:
        yield from self._own
        yield from (n for n in self._examples() if n not in self._own)

    def __len__(self) -> int:
        return sum(1 for _ in self)


DATASETS: Mapping[str, Callable[..., Dataset]] = _Registry(
    {
        "hrrr": hrrr,
        "hrrr-analysis": hrrr_analysis,
        "gfs": gfs,
        "gefs": gefs,
        "ecmwf-ifs-oper": ecmwf_ifs_oper,
        "ecmwf-aifs-single": ecmwf_aifs_single,
    },
    "DATASETS",
)

HOMES: Mapping[str, str | None] = _Registry(
    {
        "hrrr": HRRR.bucket,
        "hrrr-analysis": HRRR.bucket,
        "gfs": GFS.bucket,
        "gefs": GEFS.bucket,
        "ecmwf-ifs-oper": ECMWF_BUCKET,
        "ecmwf-aifs-single": ECMWF_BUCKET,
    },
    "HOMES",
)


def build(name: str, source_store: storage.Store | None = None) -> Dataset:
    """The dataset called `name`: one this build knows, or a user's `module:NAME`.

    `module` is an importable module (the current directory is searched too) or a path to a
    `.py` file; `NAME` is a `Dataset` there, or a function taking the source store (or None)
    and returning one. `source_store` re-points the dataset at a mirror or a local copy.
    """
    if ":" not in name and name in DATASETS:  # a user's module:NAME never asks the examples
        return DATASETS[name](source_store)
    if ":" not in name:
        raise ValueError(
            f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}, "
            "or your own as module:NAME"
        )
    where, _, attr = name.rpartition(":")
    module = _import(where)
    if not hasattr(module, attr):
        raise ValueError(f"dataset {name!r}: {where} defines no {attr!r}; check the name after ':'")
    obj = getattr(module, attr)
    if isinstance(obj, Dataset):
        return obj if source_store is None else with_source(obj, source_store)
    if callable(obj) and not isinstance(obj, type):
        ds = obj(source_store)
        if isinstance(ds, Dataset):
            return ds
        raise ValueError(f"dataset {name!r}: {attr}() returned {type(ds).__name__}, not a Dataset")
    raise ValueError(f"dataset {name!r}: {attr} is a {type(obj).__name__}, not a Dataset")


def _import(where: str) -> ModuleType:
    path = pathlib.Path(where)
    if where.endswith(".py"):
        if not path.is_file():
            raise ValueError(f"dataset module {where}: no such file; check the path")
        known = sys.modules.get(path.stem)
        if known is not None and not getattr(known, "__toolkit_dataset_file__", False):
            raise ValueError(
                f"dataset module {where}: its name {path.stem!r} is already the module "
                f"{getattr(known, '__file__', None) or path.stem}; rename the file"
            )
        spec = importlib.util.spec_from_file_location(path.stem, path.resolve())
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        module.__toolkit_dataset_file__ = True  # type: ignore[attr-defined]  # ours: reloadable
        sys.modules[path.stem] = module  # so its values pickle by reference, like any module
        spec.loader.exec_module(module)
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as err:
        if err.name and where.startswith(err.name):
            raise ValueError(
                f"dataset module {where!r} is not importable from {os.getcwd()}: put it on "
                "PYTHONPATH, run from its folder, or name its file (path/to/file.py:NAME)"
            ) from None
        raise
