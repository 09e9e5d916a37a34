"""Shared fixtures: real stores (memory, local, S3 on a loopback emulator) and a LocalCluster."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit import storage

DATA = Path(__file__).resolve().parent / "data"  # real GRIB2 files and NOAA inventories

# Any credentials satisfy moto; set before any worker process is spawned so they inherit them.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (enforces If-None-Match / If-Match)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def make_bucket(endpoint: str, name: str | None = None) -> str:
    import boto3

    name = name or f"tk-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def s3_options(endpoint: str) -> dict[str, object]:
    return {"endpoint": endpoint, "region": "us-east-1", "allow_http": True, "path_style": True}


@pytest.fixture(params=["memory", "local", "s3"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> storage.Store:
    """The same test against MemoryStore, LocalStore and S3 (moto on loopback)."""
    kind = request.param
    if kind == "memory":
        return storage.open_store(f"memory://{uuid.uuid4().hex}")
    if kind == "local":
        return storage.open_store(str(tmp_path / "store"))
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = make_bucket(endpoint)
    return storage.open_store(f"s3://{bucket}/root", **s3_options(endpoint))


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[object]:
    """One LocalCluster with spawned process workers for the whole session."""
    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def external(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A `dask scheduler` and two `dask worker` processes on 127.0.0.1 for the whole session;
    workers stay warm across tests, as on a user's long-lived cluster."""
    from tests.external import start

    cluster = start(tmp_path_factory.mktemp("external"))
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster_address(external) -> str:
    """The external cluster's address, with both workers up (a test may have killed one)."""
    external.wait_for_workers(2)
    return external.address
