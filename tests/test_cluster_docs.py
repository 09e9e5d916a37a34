"""Every code block of docs/clusters.md runs: its Python blocks as written, its `toolkit`
command lines through the CLI, against the real clusters the suite starts (the session's
external `dask scheduler` + workers, a dask-gateway server on loopback) and a stand-in for
Coiled (a module whose `Cluster` is a LocalCluster: Coiled itself needs an account).

Only the placeholders are replaced: the scheduler address, the gateway address (and its test
authenticator), and the store, which is a small local one made for each block."""

from __future__ import annotations

import re
import shlex
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.engine.test_gateway import gateway  # noqa: F401 - the fixture
from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DOC = Path(__file__).resolve().parents[1] / "docs" / "clusters.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def _store(where: Path) -> str:
    synthetic.write_store(storage.open_store(str(where)), shape=(64, 96), shards=(16, 16))
    return str(where)


@pytest.fixture
def coiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import coiled` gives a module whose Cluster(...) is a LocalCluster (same interface the
    engine uses: `.get_client()`), whatever the arguments."""
    from distributed import LocalCluster

    module = types.ModuleType("coiled")
    module.Cluster = lambda **_: LocalCluster(  # type: ignore[attr-defined]
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
    )
    monkeypatch.setitem(sys.modules, "coiled", module)


def test_the_python_blocks_run(
    cluster_address: str, gateway: str, coiled: None, tmp_path: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    blocks = _blocks("python")
    assert len(blocks) == 4
    monkeypatch.chdir(tmp_path)  # performance_report("run.html") lands here
    for i, code in enumerate(blocks):
        code = code.replace("tcp://HOST:8786", cluster_address)
        code = code.replace(
            'Gateway("https://gateway.example.org")', f'Gateway("{gateway}", auth="basic")'
        )
        code = code.replace("s3://bucket/data.zarr", _store(tmp_path / f"block{i}.zarr"))
        scope: dict[str, object] = {}
        exec(compile(code, f"{DOC.name} python block {i + 1}", "exec"), scope)
        report = scope["report"]
        assert report.stages and all(s.gate_have == s.gate_want for s in report.stages)
        for made in ("client", "gateway"):  # what the block opened, closed as a user would
            if made in scope:
                scope[made].close()  # type: ignore[attr-defined]
    assert (tmp_path / "run.html").stat().st_size > 0


def test_the_toolkit_command_lines_run(cluster_address: str, tmp_path: Path) -> None:
    lines = [
        line.split("#")[0].strip()
        for block in _blocks("bash")
        for line in block.splitlines()
        if line.startswith("toolkit ")
    ]
    assert len(lines) == 3
    for i, line in enumerate(lines):
        line = line.replace("tcp://HOST:8786", cluster_address)
        store = _store(tmp_path / f"line{i}.zarr")
        line = line.replace("s3://bucket/data.zarr", store).replace("data.zarr", store)
        res = CliRunner().invoke(app, shlex.split(line)[1:])
        assert res.exit_code == 0, (line, res.output)
