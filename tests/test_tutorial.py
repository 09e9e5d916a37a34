"""docs/tutorial.md and docs/how-to/recall.md, run as a reader runs them: in one empty folder,
in order, every shell block through the installed `toolkit` command and every Python block in
a fresh interpreter; a titled block is saved as its file. Then the results are checked
against independent readers (xarray's zarr engine, numpy, the GRIB files' own count).

The pages whose examples name a user's store (`t2m.zarr`, `s3://my/gfs`, ...) run in the
folder the tutorial left, their placeholders pointed at its pyramid and its repo; the README's
first lines run in an empty folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from tests.docsite import Block, blocks

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def run(block: Block, cwd: Path) -> str:
    env = os.environ | {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "100"}
    if block.lang == "python":
        if block.title:
            (cwd / block.title).write_text(block.code)
            return ""
        argv = [sys.executable, "-c", block.code]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", block.code]
    res = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, (
        f"{block.page} block failed:\n{block.code}\n{res.stdout}\n{res.stderr}"
    )
    return res.stdout


def run_page(page: str, cwd: Path) -> list[str]:
    outs = []
    for b in blocks(page):
        if b.code.startswith("pip install"):
            continue  # tests/test_install.py runs the install line
        outs.append(run(b, cwd))
    return outs


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The folder the tutorial leaves, and what each of its blocks printed."""
    where = tmp_path_factory.mktemp("tutorial")
    return where, run_page("tutorial.md", where)


def test_the_tutorial_runs_as_written(tutorial: tuple[Path, list[str]]) -> None:
    tmp_path, out = tutorial
    assert len(out) == 8  # every block of the page ran (a block removed or added: update here)

    # 1. the pyramid: the 4x level equals numpy's 4x4 means of level 0, as xarray reads it
    level0 = xr.open_zarr(tmp_path / "air.zarr").t2m.values.astype("float64")
    want = level0.reshape(4, 180, 4, 360, 4).mean(axis=(2, 4))
    got = xr.open_zarr(tmp_path / "air.zarr", group="4x").t2m.values
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert "(4, 180, 360)" in out[2]

    # 2. the virtual dataset: every file of the folder is in it, each value decoded
    gribs = sorted((tmp_path / "gribs").rglob("*.grib2"))
    assert len(gribs) == 12
    ds = xr.open_dataset(tmp_path / "my-repo", engine="toolkit")
    assert ds.temperature_2m.notnull().all(("latitude", "longitude")).sum() == 12
    assert "temperature_2m" in out[6]

    # 3. the archive: a manifest for the store, and the resolver's answers
    assert (tmp_path / "manifests").is_dir()
    resolved = out[7].splitlines()[-2:]
    key, scope, blob, why = resolved[0].split("\t")
    assert (key, scope, why) == ("air.zarr/t2m/c/0/0/0", "air.zarr", "bucket")
    assert blob.startswith("b_t2m_") and blob in out[7]  # the report names the same blob
    assert resolved[1].endswith("hot_always")


def test_the_recall_guide_runs_after_the_tutorial(tutorial: tuple[Path, list[str]]) -> None:
    out = run_page("how-to/recall.md", tutorial[0])
    assert len(out) == 4
    assert "archived" in out[0]  # the report shows the state the tape system marked
    on_tape, _ = out[1].split("{", 1)
    assert "1 blob(s) to recall" in on_tape and "b_t2m_0" in out[1]
    assert "b_t2m_0" in out[2]  # the Python plan names the same blob
    assert "0 blob(s) to recall" in out[3]  # recalled: nothing to wait for


# page -> its placeholders, pointed at what the tutorial left
PLACEHOLDERS = {
    "virtual.md": {"s3://my/gfs": "my-repo"},
    "xarray.md": {
        "t2m.zarr": "air.zarr",
        "gfs-repo": "my-repo",
        "s3://bucket/gfs": "my-repo",
        "storage(REPO)": 'storage("my-repo")',
    },
    "stac.md": {
        "path/to/store.zarr": "air.zarr",
        "s3://bucket/gfs-repo": "my-repo",
        "update gfs --repo": "update mymodel.py:DATASET --fire-time 2025-08-01T18 --repo",
    },
}
SHELL_RUNS = {"stac.md"}  # the others' command lines name remote archives: parsed, not run


@pytest.mark.parametrize("page", sorted(PLACEHOLDERS))
def test_the_pages_examples_run_on_the_tutorials_data(
    page: str, tutorial: tuple[Path, list[str]]
) -> None:
    ran, session = 0, ""  # a page's Python blocks are one reader's session: each sees the last
    for b in blocks(page):
        if b.lang not in ("python", "sh", "bash") or (
            b.lang != "python" and page not in SHELL_RUNS
        ):
            continue
        code = b.code
        for placeholder, here in PLACEHOLDERS[page].items():
            code = code.replace(placeholder, here)
        if b.lang == "python":
            code = session = session + code
        run(Block(b.page, b.lang, b.title, code), tutorial[0])
        ran += 1
    assert ran


def test_the_readmes_first_lines_run(tmp_path: Path) -> None:
    (code,) = [b for b in blocks("README.md", "python")]
    out = run(code, tmp_path)
    assert out.strip() == "(256, 512)"
    level = xr.open_zarr(tmp_path / "t2m.zarr", group="4x").t2m.values
    level0 = xr.open_zarr(tmp_path / "t2m.zarr").t2m.values.astype("float64")
    np.testing.assert_allclose(level, level0.reshape(256, 4, 512, 4).mean(axis=(1, 3)), rtol=1e-6)
