"""toolkit: virtual GRIB datasets, exact pyramids and archive partitioning for Zarr v3 and
Icechunk, on Dask. Installed as the distribution `zarr-toolkit` (`toolkit` on the package index
is an unrelated project); imported and run as `toolkit`."""

DISTRIBUTION = "zarr-toolkit"  # what importlib.metadata and pip know it by
