"""toolkit: virtual GRIB datasets, exact pyramids and archive partitioning for Zarr v3 and
Icechunk, on Dask. Installed as the distribution `zarr-toolkit` (`toolkit` on the package index
is an unrelated project); imported and run as `toolkit`."""

from typing import Any

DISTRIBUTION = "zarr-toolkit"  # what importlib.metadata and pip know it by


def __getattr__(name: str) -> Any:
    """`toolkit.serve` is `toolkit.webmap.serve` (docs/serve.md), imported when first asked
    for: `import toolkit` loads no web server."""
    if name == "serve":
        from toolkit.webmap import serve

        return serve
    raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
