"""Virtual GRIB2 datasets: Icechunk repos of byte-range references, decoded at read time.

`toolkit.virtual.open_dataset(repo)` opens one with xarray in one line, and
`toolkit.virtual.stac(repo, output_dir)` writes its STAC catalogue entry. Both are imported on
first use, so the pure modules stay light to import.

Modules renamed so that no two share a name keep their old import paths (`_MOVED`):
`from toolkit.virtual.source import GribSource` still works, with a DeprecationWarning
naming the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

__all__ = ["open_dataset", "stac"]

_MOVED = {  # old module name -> its name now (issue 51)
    "source": "gribsource",
    "cf": "grib_params",
    "splits": "split_sizing",
    "datasets": "builtin",
    "read": "source_io",
    "catalog": "stac_entry",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`toolkit.virtual.OLD[.sub]` is the module `toolkit.virtual.NEW[.sub]`, itself."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        first = fullname.removeprefix(f"{__name__}.").partition(".")[0]
        if not fullname.startswith(f"{__name__}.") or first not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        first, _, rest = spec.name.removeprefix(f"{__name__}.").partition(".")
        now = ".".join([__name__, _MOVED[first], *([rest] if rest else [])])
        warnings.warn(f"{spec.name} is {now} now", DeprecationWarning, stacklevel=2)
        return importlib.import_module(now)

    def exec_module(self, module: Any) -> None:
        """The module ran when it was imported under its name now."""


if not any(isinstance(f, _Moved) for f in sys.meta_path):
    sys.meta_path.insert(0, _Moved())  # before the path finder: a moved package has a __path__


def __getattr__(name: str) -> Any:
    if name == "open_dataset":
        from toolkit.virtual.reader import open_dataset

        return open_dataset
    if name == "stac":
        from toolkit.virtual.stac_entry import stac

        return stac
    raise AttributeError(f"module 'toolkit.virtual' has no attribute {name!r}")
