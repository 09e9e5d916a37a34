"""toolkit: virtual GRIB datasets, exact pyramids and archive partitioning for Zarr v3 and
Icechunk, on Dask. Installed as the distribution `zarr-toolkit` (`toolkit` on the package index
is an unrelated project); imported and run as `toolkit`."""

from typing import Any

DISTRIBUTION = "zarr-toolkit"  # what importlib.metadata and pip know it by


def __getattr__(name: str) -> Any:
    """`toolkit.serve` is `toolkit.webmap.serve` (docs/serve.md), found when first asked for.
    By name, not by an import: the engine imports this package (for DISTRIBUTION), so an import
    of the web map here would be an arrow from the engine's floor up to the face's, and
    `import toolkit` would load the web server."""
    if name == "serve":
        from importlib import import_module

        return import_module("toolkit.webmap").serve
    raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
