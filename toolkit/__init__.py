"""toolkit: virtual GRIB datasets, exact pyramids and archive partitioning for Zarr v3 and
Icechunk, on Dask. Installed as the distribution `zarr-toolkit` (`toolkit` on the package index
is an unrelated project); imported and run as `toolkit`."""

from typing import Any

DISTRIBUTION = "zarr-toolkit"  # what importlib.metadata and pip know it by


def serve(source: str, **options: Any) -> None:
    """`toolkit serve` from Python: a web map of a pyramid or a virtual repo, served until
    interrupted (`toolkit.webmap.serve` has the options; docs/serve.md). Loaded by name when
    called, as the CLI loads it: every layer imports this package (for DISTRIBUTION), so it
    depends on nothing above them, and `import toolkit` loads no web server."""
    from importlib import import_module

    import_module("toolkit.webmap").serve(source, **options)
