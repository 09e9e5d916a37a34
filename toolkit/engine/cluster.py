"""Where a plan runs: `connect()` turns whatever the user has into a distributed Client."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from distributed import Client, LocalCluster

ClusterLike = None | str | Client | Any


class ClusterUnreachable(ConnectionError):
    """No Dask scheduler answered at the given address."""


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


@contextmanager
def connect(cluster: ClusterLike = None, *, n_workers: int | None = None) -> Iterator[Client]:
    """Yield a Client for `cluster` and close only what this call created.

    None: an embedded LocalCluster with spawned process workers (decoding holds the GIL, and
    Icechunk sessions do not survive fork). A string: a scheduler address. A `Client`: used as
    is. Anything with `.get_client()`: dask-gateway, Coiled, a LocalCluster you made yourself.
    """
    if cluster is None:
        local = LocalCluster(
            n_workers=n_workers or default_workers(),
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
        )
        client = Client(local)
        try:
            yield client
        finally:
            client.close()
            local.close()
    elif isinstance(cluster, str):
        try:
            client = Client(cluster)
        except OSError as err:
            raise ClusterUnreachable(
                f"no Dask scheduler reachable at {cluster} ({err}); check --cluster / TOOLKIT_CLUSTER"
            ) from err
        try:
            yield client
        finally:
            client.close()
    elif isinstance(cluster, Client):
        yield cluster
    elif hasattr(cluster, "get_client"):
        yield cluster.get_client()
    else:
        raise TypeError(
            f"cannot connect to {cluster!r}: pass None, a scheduler address, a distributed.Client, "
            "or a cluster object with .get_client() (dask-gateway, Coiled, LocalCluster)"
        )
