"""Code on workers: a cluster whose interpreter cannot import toolkit (it sees every dependency,
not the project) is refused in one line naming the package, then runs once the checkout is
shipped with `--ship` -- into the worker's own directory, never into the shared environment."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.external import isolated_python, start
from toolkit import storage
from toolkit.cli import app
from toolkit.engine import VersionMismatch, check_versions
from toolkit.engine.versions import local_versions, mismatches
from toolkit.pyramid import synthetic

runner = CliRunner()


def test_mismatches_name_the_package_the_versions_and_where() -> None:
    client = {"toolkit": "0.1.0", "zarr": "3.4.2"}
    workers = {f"worker tcp://w{i}": {"toolkit": None, "zarr": "3.4.2"} for i in range(3)}
    found = mismatches(client, {"toolkit": "0.1.0", "zarr": "3.1.0"}, workers)
    assert found == [
        "toolkit 0.1.0 on the client, not installed on worker tcp://w0 and 2 more",
        "zarr 3.4.2 on the client, 3.1.0 on the scheduler",
    ]
    assert mismatches(client, client, {"worker a": client}) == []


@pytest.fixture
def bare(tmp_path_factory: pytest.TempPathFactory):
    """A scheduler and one worker in an interpreter that cannot import toolkit."""
    where = tmp_path_factory.mktemp("bare")
    python = isolated_python(where / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TOOLKIT_DEBUG")}
    cluster = start(where / "cluster", workers=1, python=python, env=env)
    yield cluster
    cluster.stop()


def imports_toolkit(python: str, env: dict[str, str]) -> bool:
    return (
        subprocess.run(
            [python, "-c", "import toolkit"], env=env, cwd="/", capture_output=True
        ).returncode
        == 0
    )


@pytest.mark.cluster
@pytest.mark.slow
def test_a_worker_without_toolkit_is_refused_then_shipped_to(bare, tmp_path: Path) -> None:
    from distributed import Client

    assert not imports_toolkit(bare.python, bare.env)  # else the test proves nothing
    with Client(bare.address) as client, pytest.raises(VersionMismatch) as caught:
        check_versions(client)
    assert f"toolkit {local_versions()['toolkit']} on the client, not installed on" in str(
        caught.value
    )

    on, twin = tmp_path / "on.zarr", tmp_path / "twin.zarr"
    for p in (on, twin):
        synthetic.write_store(storage.open_store(str(p)), shape=(96, 128), shards=(32, 32))
    build = ["pyramid", "build", str(on), "--levels", "2"]
    res = runner.invoke(app, ["--cluster", bare.address, *build])
    assert res.exit_code == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert (
        len(lines) == 1 and "on the client, not installed on the scheduler and 1 more" in lines[0]
    )
    assert "--ship" in lines[0]
    assert not storage.list_keys(storage.open_store(str(on)), "2x/field/c/")  # no shard written

    res = runner.invoke(app, ["--cluster", bare.address, *build, "--ship"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["pyramid", "build", str(twin), "--levels", "2", "--executor", "sync"])
    assert res.exit_code == 0, res.output
    store_on, store_twin = storage.open_store(str(on)), storage.open_store(str(twin))
    keys = storage.list_keys(store_on, "")
    assert keys == storage.list_keys(store_twin, "")
    fingerprints = ".pyramid/prints/"  # level 0's fingerprints hash each store's own ETags
    assert all(
        storage.get(store_on, k).data == storage.get(store_twin, k).data
        for k in keys
        if not k.startswith(fingerprints)
    )

    with Client(bare.address) as client:
        check_versions(client)  # shipped: versions agree now
        where = client.run(lambda: __import__("toolkit").__file__)
    assert all("toolkit-shipped-" in path and str(bare.workdir) in path for path in where.values())
    assert not imports_toolkit(bare.python, bare.env)  # the shared environment is untouched
