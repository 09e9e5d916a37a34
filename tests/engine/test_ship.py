"""Code on workers: every process is compared by the toolkit code it actually imports (a digest
of its sources) and by its dependencies' versions. A cluster that differs is refused in one line
naming the process, the package and the fix; `--ship` sends the checkout for one run and leaves
nothing behind; a worker that joins a run with other code is kept out of that run (never
retired), and nothing a run registers outlives it, even when its client is killed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.external import ROOT, isolated_python, start
from toolkit import storage
from toolkit.cli import app
from toolkit.engine import VersionMismatch, check_versions
from toolkit.engine.ship import PLUGIN, RESOURCE, guard, payload, run_resources
from toolkit.engine.versions import _identity, _probe, local_versions, mismatches, refusal
from toolkit.examples import synthetic

runner = CliRunner()
MINE = local_versions()["toolkit"]  # this checkout's code digest


def test_mismatches_name_the_process_the_package_and_both_digests_or_versions() -> None:
    client = {"toolkit": "c0de", "zarr": "3.4.2"}
    workers = {f"worker tcp://w{i}": {"toolkit": None, "zarr": "3.4.2"} for i in range(3)}
    found = mismatches(client, {"toolkit": "c0de", "zarr": "3.1.0"}, workers)
    assert found == [  # dependencies first: shipping cannot fix them
        "zarr 3.4.2 on the client, 3.1.0 on the scheduler",
        "toolkit code c0de on the client, not installed on worker tcp://w0 and 2 more",
    ]
    assert mismatches(client, client, {"worker a": client}) == []


def test_the_fix_ships_toolkit_and_rebuilds_for_a_dependency() -> None:
    client = {"toolkit": "c0de", "zarr": "3.4.2"}
    code = refusal(client, client, {"worker tcp://w": {"toolkit": "beef", "zarr": "3.4.2"}})
    assert code == (
        "mismatch: toolkit code c0de on the client, beef on worker tcp://w; ship this checkout "
        "with --ship (toolkit.engine.ship(client) from Python), or install the same toolkit on "
        "the scheduler and workers"
    )
    both = refusal(client, client, {"worker tcp://w": {"toolkit": "beef", "zarr": "3.4.1"}})
    assert both is not None and both.startswith(
        "mismatch: zarr 3.4.2 on the client, 3.4.1 on worker tcp://w (and 1 more); "
        "rebuild the worker image / environment with zarr==3.4.2"
    )
    assert "ship" not in both  # --ship cannot fix a dependency
    gone = refusal(client, {"toolkit": "c0de", "zarr": None}, {})
    assert gone is not None and "ship" not in gone and "zarr 3.4.2 on the client, not" in gone
    assert refusal(client, client, {"worker a": client}) is None


def modified_checkout(where: Path) -> Path:
    """A copy of this checkout's toolkit in which every pooled value is one more: the same
    version string, other code, other bytes. Returns the folder to put on PYTHONPATH."""
    root = where / "modified"
    shutil.copytree(
        ROOT / "toolkit", root / "toolkit", ignore=shutil.ignore_patterns("__pycache__")
    )
    with open(root / "toolkit" / "kernels.py", "a") as f:
        f.write(
            "\n\ndef _plus_one(fn):\n"
            "    def pooled(*args, **kwargs):\n"
            "        data, count = fn(*args, **kwargs)\n"
            "        return data + 1, count\n\n"
            "    return pooled\n\n\n"
            "pool, pool_level0 = _plus_one(pool), _plus_one(pool_level0)\n"
        )
    return root


def test_the_shipped_zip_carries_the_distribution_under_its_own_name(tmp_path: Path) -> None:
    """A worker that imports the shipped code finds its version under the name pip knows,
    `zarr-toolkit` (`toolkit` on the index is someone else's)."""
    import importlib.metadata as md
    import io
    import zipfile

    import toolkit

    zipfile.ZipFile(io.BytesIO(payload()[0])).extractall(tmp_path)
    (found,) = md.distributions(path=[str(tmp_path)])
    assert found.metadata["Name"] == toolkit.DISTRIBUTION == "zarr-toolkit"
    assert found.version == md.version(toolkit.DISTRIBUTION)
    assert (tmp_path / "toolkit" / "engine" / "ship.py").is_file()


def test_the_digest_is_of_the_sources_a_process_finds(tmp_path: Path) -> None:
    digest = _identity()[1]
    assert payload()[1] == MINE == digest(str(ROOT / "toolkit"))  # one algorithm for both
    copy = modified_checkout(tmp_path) / "toolkit"
    assert digest(str(copy)) != MINE
    env = {**os.environ, "PYTHONPATH": str(copy.parent)}
    code = "from toolkit.engine.versions import local_versions as v; print(v()['toolkit'])"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert out.stdout.strip() == digest(str(copy))  # same version string, other digest


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


def same_objects(a: Path, b: Path) -> bool:
    store_a, store_b = storage.open_store(str(a)), storage.open_store(str(b))
    keys = storage.list_keys(store_a, "")
    if keys != storage.list_keys(store_b, ""):
        return False
    fingerprints = ".pyramid/prints/"  # level 0's fingerprints hash each store's own ETags
    return all(
        storage.get(store_a, k).data == storage.get(store_b, k).data
        for k in keys
        if not k.startswith(fingerprints)
    )


def shipped_paths(client) -> list[str]:
    def where() -> list[str]:
        import sys

        return [p for p in sys.path if "toolkit-shipped-" in p]

    return [*client.run_on_scheduler(where), *(p for ps in client.run(where).values() for p in ps)]


@pytest.mark.cluster
@pytest.mark.slow
def test_a_worker_without_toolkit_is_refused_shipped_to_for_one_run(bare, tmp_path: Path) -> None:
    from distributed import Client

    assert not imports_toolkit(bare.python, bare.env)  # else the test proves nothing
    with Client(bare.address) as client, pytest.raises(VersionMismatch) as caught:
        check_versions(client)
    assert f"toolkit code {MINE} on the client, not installed on" in str(caught.value)

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
    assert same_objects(on, twin)

    with Client(bare.address) as client:  # the shipped code left with its run
        assert shipped_paths(client) == []
        plugins = client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.worker_plugins)
        )
        assert not [p for p in plugins if p.startswith(PLUGIN)]
        with pytest.raises(VersionMismatch, match="not installed on the scheduler and 1 more"):
            check_versions(client)
    assert not imports_toolkit(bare.python, bare.env)  # the shared environment is untouched


def toolkit(*args: str) -> list[str]:
    """`toolkit ARGS` in a fresh interpreter (run it outside the checkout, with PYTHONPATH
    naming the toolkit it should import: `python -c` puts the working directory first)."""
    return [sys.executable, "-c", "from toolkit.cli import main; main()", *args]


def env_with(pythonpath: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(pythonpath)}


@pytest.mark.cluster
@pytest.mark.slow
def test_a_shipped_checkout_leaves_nothing_behind(
    external, cluster_address: str, tmp_path: Path
) -> None:
    """Ship a modified checkout (same version string), then build from the clean install on
    the same cluster: checked against its own code, and never the shipped code's bytes."""
    from distributed import Client

    modified = modified_checkout(tmp_path)
    shipped, clean, twin = (tmp_path / f"{n}.zarr" for n in ("shipped", "clean", "twin"))
    for p in (shipped, clean, twin):
        synthetic.write_store(storage.open_store(str(p)), shape=(128, 192), shards=(32, 32))
    build = ["pyramid", "build", "--levels", "2"]
    res = subprocess.run(
        toolkit("--cluster", cluster_address, *build, str(shipped), "--ship"),
        env=env_with(modified),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr
    res_twin = runner.invoke(app, [*build, str(twin), "--executor", "sync"])
    assert res_twin.exit_code == 0, res_twin.output
    assert not same_objects(shipped, twin)  # the modified code ran on the workers

    with Client(cluster_address) as client:  # nothing of it is left on the cluster
        assert shipped_paths(client) == []
        on_workers = client.run(_probe(), ("toolkit",)).values()
        assert list(on_workers) == [{"toolkit": MINE}] * 2
        assert client.run_on_scheduler(_probe(), ("toolkit",)) == {"toolkit": MINE}
        plugins = client.run_on_scheduler(
            lambda dask_scheduler: list(dask_scheduler.worker_plugins)
        )
        assert not [p for p in plugins if p.startswith(PLUGIN)]

    res = runner.invoke(app, ["--cluster", cluster_address, *build, str(clean)])
    if res.exit_code == 2:  # refused is acceptable; wrong bytes never are
        assert "toolkit code" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    else:
        assert res.exit_code == 0, res.output
        assert same_objects(clean, twin)
    assert res.exit_code == 0  # and with the shipped code gone, the clean install just runs


def toolkit_state(client) -> dict[str, list[str]]:
    """What toolkit runs have registered on the scheduler: worker plugins, scheduler plugins,
    resources (on the scheduler and on any worker)."""

    def mine(names) -> list[str]:
        return sorted(n for n in names if str(n).startswith(("toolkit-identity", RESOURCE)))

    def on_scheduler(dask_scheduler) -> dict[str, list[str]]:
        s = dask_scheduler
        on_workers = [r for ws in s.workers.values() for r in [*ws.resources, *ws.used_resources]]
        return {
            "worker_plugins": mine(s.worker_plugins),
            "plugins": mine(s.plugins),
            "resources": mine([*s.resources, *on_workers]),
        }

    found = client.run_on_scheduler(on_scheduler)
    on_workers = client.run(lambda dask_worker: [*dask_worker.state.total_resources])
    found["worker_resources"] = mine(r for rs in on_workers.values() for r in rs)
    return found


NOTHING = {"worker_plugins": [], "plugins": [], "resources": [], "worker_resources": []}


def join_worker(external, env: dict[str, str]) -> tuple[str, object]:
    """Start one more worker in `env`: its address and its process."""
    from distributed import Client

    with Client(external.address, set_as_default=False) as c:
        before = set(c.scheduler_info(n_workers=-1)["workers"])
    pid = external.add_worker(env=env)
    proc = next(p for p in external.procs if p.pid == pid)
    with Client(external.address, set_as_default=False) as c:
        new = set(c.scheduler_info(n_workers=-1)["workers"]) - before
    assert len(new) == 1, "the worker that joined has left the cluster again"
    return new.pop(), proc


def stop_worker(external, proc) -> None:
    proc.terminate()
    proc.wait(timeout=60)
    external.procs.remove(proc)


def serves_others(address: str, cluster_address: str) -> bool:
    """A worker still runs other clients' work (no toolkit involved)."""
    from distributed import Client

    with Client(cluster_address, set_as_default=False) as c:
        return c.submit(lambda x: x + 1, 41, workers=[address], pure=False).result(60) == 42


@pytest.mark.cluster
@pytest.mark.slow
def test_a_worker_joining_with_other_code_is_kept_out_of_the_run_and_stays_up(
    external, cluster_address: str, tmp_path: Path
) -> None:
    """A worker whose toolkit says the same version but is other code joins mid-build: it runs
    none of the run's tasks, is named once on stderr, is neither retired nor closed (it serves
    other clients afterwards), and the build equals a sync build."""
    from distributed import Client

    from tests.external import _await_line, _start

    modified = modified_checkout(tmp_path)
    on, twin = tmp_path / "on.zarr", tmp_path / "twin.zarr"
    # the build must outlast a worker's start-up: at 1536 rows it ended 1.8 s after the late
    # worker joined on a quiet machine (and once, under load, before it); at 3072, 2.9 s after
    for p in (on, twin):
        synthetic.write_store(storage.open_store(str(p)), shape=(3072, 2048), shards=(32, 32))
    build = ["pyramid", "build", "--levels", "4"]
    started = time.monotonic()
    proc, lines = _start(
        toolkit("--cluster", cluster_address, *build, str(on)), tmp_path, env_with(ROOT)
    )
    _await_line(lines, r"dashboard:", "the build")  # connected and checked: the run is on
    late, late_proc = join_worker(external, env_with(f"{modified}:{ROOT}"))
    try:
        joined = time.monotonic() - started
        assert proc.poll() is None, "the build ended before the late worker joined: make it longer"
        assert proc.wait(timeout=240) == 0
        took = time.monotonic() - started
        stderr = []
        while not lines.empty():
            stderr.append(lines.get())
        said = [line for line in stderr if "out of this run" in line]
        assert len(said) == 1, "".join(stderr)
        here = re.escape(late)
        assert re.search(
            rf"kept {here} out of this run: toolkit code \w+ on the client, \w+ on worker "
            rf"{here}; ship this checkout with --ship",
            said[0],
        ), said[0]
        assert not any("retired" in line for line in stderr), "".join(stderr)

        assert late_proc.poll() is None  # never retired nor closed
        with Client(cluster_address) as client:
            ran = client.run(lambda dask_worker: dask_worker.state.executed_count, workers=[late])
            assert ran == {late: 0}  # none of the run's tasks
            assert toolkit_state(client) == NOTHING
        assert serves_others(late, cluster_address)
        res = runner.invoke(app, [*build, str(twin), "--executor", "sync"])
        assert res.exit_code == 0, res.output
        assert same_objects(on, twin), f"joined after {joined:.1f} s of {took:.1f} s"
    finally:
        stop_worker(external, late_proc)


@pytest.mark.cluster
@pytest.mark.slow
def test_concurrent_runs_from_two_clients_keep_their_own_checks(
    external, cluster_address: str
) -> None:
    """The first run to end removes its own registrations only: the second run's check and
    resource stay, and its tasks still run."""
    from distributed import Client

    with Client(cluster_address) as a, Client(cluster_address) as b:
        first, second = guard(a), guard(b)
        first.__enter__()
        second.__enter__()
        try:
            both = toolkit_state(a)
            assert len(both["worker_plugins"]) == 2 and len(both["plugins"]) == 2
            first.__exit__(None, None, None)
            left = toolkit_state(b)
            assert len(left["worker_plugins"]) == 1 and len(left["plugins"]) == 1
            resources = run_resources(b)
            assert resources is not None and set(left["resources"]) == set(resources)
            assert run_resources(a) is None
            got = b.get({"x": (sum, [1, 2])}, "x", resources=resources)
            assert got == 3  # the second run's tasks find their checked workers
        finally:
            second.__exit__(None, None, None)
        assert toolkit_state(b) == NOTHING


@pytest.mark.cluster
@pytest.mark.slow
def test_a_killed_client_leaves_nothing_and_later_workers_stay_up(
    external, cluster_address: str, tmp_path: Path
) -> None:
    """SIGKILL a build once its run is registered: within a bounded wait the scheduler holds
    nothing of it, and a worker with other code that joins afterwards stays up and serves."""
    from distributed import Client

    from tests.external import _await_line, _start

    on = tmp_path / "on.zarr"
    synthetic.write_store(storage.open_store(str(on)), shape=(3072, 2048), shards=(32, 32))
    proc, lines = _start(
        toolkit("--cluster", cluster_address, "pyramid", "build", "--levels", "4", str(on)),
        tmp_path,
        env_with(ROOT),
    )
    _await_line(lines, r"dashboard:", "the build")
    with Client(cluster_address) as client:
        registered = toolkit_state(client)
        assert registered["worker_plugins"], "the run registered nothing: it proves nothing"
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while (left := toolkit_state(client)) != NOTHING and time.monotonic() < deadline:
            time.sleep(0.5)
        assert left == NOTHING

    late, late_proc = join_worker(external, env_with(f"{modified_checkout(tmp_path)}:{ROOT}"))
    try:
        assert serves_others(late, cluster_address)
        assert late_proc.poll() is None
    finally:
        stop_worker(external, late_proc)
