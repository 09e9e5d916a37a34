"""Shared fixtures: real stores (memory, local, S3 on a loopback emulator) and a LocalCluster."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.seaweed import ROTATING  # noqa: F401 - tests import it from here
from toolkit import storage

DATA = Path(__file__).resolve().parent / "data"  # real GRIB2 files and NOAA inventories

# Any credentials satisfy moto; set before any worker process is spawned so they inherit them.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(autouse=True)
def _cli_flags_per_test() -> Iterator[None]:
    """`toolkit -q/-v/--debug` set process-wide flags for the one command (`console.flags`);
    a test that ran the CLI in-process (CliRunner) must not hand them to the next test, which
    would then print nothing (`-q`) or tracebacks (`--debug`)."""
    yield
    from toolkit.console import configure_logging, flags

    flags.debug = False
    configure_logging(False, 0)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (enforces If-None-Match / If-Match)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _prove_conditional_writes(endpoint: str) -> str | None:
    """Why the server cannot be trusted with toolkit's guarantees, or None: eight writers race
    a create-only PUT and then an if-match PUT on one version; exactly one must win each."""
    import threading

    bucket = make_bucket(endpoint)
    store = storage.open_store(f"s3://{bucket}/proof", **s3_options(endpoint))
    wins: list[str] = []

    def race(mode: object, tag: str) -> None:
        try:
            storage.put(store, "k", tag.encode(), mode=mode)  # type: ignore[arg-type]
            wins.append(tag)
        except (storage.AlreadyExists, storage.PreconditionFailed):
            pass

    for phase in ("create", "if-match"):
        wins.clear()
        mode: object = "create" if phase == "create" else storage.get(store, "k").version
        threads = [threading.Thread(target=race, args=(mode, f"{phase}{i}")) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if len(wins) != 1:
            return f"{len(wins)} of 8 concurrent {phase} PUTs won (want exactly 1)"
        if storage.get(store, "k").data != wins[0].encode():
            return f"the {phase} winner's bytes are not what is stored"
    return None


@pytest.fixture(scope="session")
def seaweed_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real S3 server: SeaweedFS on 127.0.0.1 (tests/seaweed.py), credentials from the
    environment (an identity with those keys; others are refused), data in a temp dir. It must
    first prove it enforces conditional writes under concurrent writers, or the suite stops:
    toolkit's guarantees stand on them."""
    from tests.seaweed import Weed

    weed = Weed(tmp_path_factory.mktemp("seaweed"))
    try:
        weed.start()
    except RuntimeError as err:
        pytest.fail(str(err))
    why = _prove_conditional_writes(weed.endpoint)
    if why is not None:
        weed.kill()
        pytest.exit(f"the S3 server at {weed.endpoint} does not enforce conditional writes: {why}")
    yield weed.endpoint
    weed.stop()


def make_bucket(endpoint: str, name: str | None = None) -> str:
    import boto3

    name = name or f"tk-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def s3_options(endpoint: str) -> dict[str, object]:
    return {"endpoint": endpoint, "region": "us-east-1", "allow_http": True, "path_style": True}


@pytest.fixture(params=["memory", "local", "s3", "seaweed"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> storage.Store:
    """The same test against MemoryStore, LocalStore, an S3 emulator (moto) and a real S3
    server (SeaweedFS), each on loopback."""
    kind = request.param
    if kind == "memory":
        return storage.open_store(f"memory://{uuid.uuid4().hex}")
    if kind == "local":
        return storage.open_store(str(tmp_path / "store"))
    endpoint = request.getfixturevalue("s3_endpoint" if kind == "s3" else "seaweed_endpoint")
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
