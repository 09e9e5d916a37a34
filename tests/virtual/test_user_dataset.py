"""A user's own archive, defined in one short module (the example in docs/how-to/own-dataset.md), used
from the CLI as `path/to/module.py:NAME`: backfill, update, validate, and xarray reads back
exactly the simulator's values. The archive is the simulator's GRIB2, laid out by the
module's own key format."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples.simulate import SimArchive, expected_values
from toolkit.virtual import open_dataset
from toolkit.virtual.builtin import build

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "own-dataset.md"
INITS = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)]
runner = CliRunner()


def example() -> str:
    """The Python block of the doc's "Your own archive" section, as written there."""
    section = DOC.read_text().split("## Your own archive", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def user(tmp_path):
    module = tmp_path / "mymodel.py"
    module.write_text(example())
    src = storage.open_store(str(tmp_path / "src"))
    ds = build(f"{module}:DATASET", src)
    archive = SimArchive(src, ds.source.catalog, "grib2", tuple(INITS), (0, 3, 6))
    return module, archive, ds


def test_the_doc_example_backfills_updates_and_validates_from_the_cli(user, tmp_path):
    module, archive, ds = user
    files = archive.files()
    assert archive.data_key(files[4]) == "20250801/06/mymodel.t06z.f003.grib2"  # its own layout
    archive.publish(files[:6])
    repo = str(tmp_path / "repo")
    common = [f"{module}:DATASET", "--repo", repo, "--source", str(tmp_path / "src")]

    res = runner.invoke(app, ["virtual", "backfill", *common, "--start", "2025-08-01T00",
                              "--executor", "sync"])  # fmt: skip
    assert res.exit_code == 0, res.output
    x = open_dataset(repo)
    assert x.sizes["init_time"] == 2 and set(x.data_vars) == {
        v.name for v in ds.source.catalog.variables
    }
    assert "spatial_ref" in x.coords  # the example names its CRS, a coordinate as rioxarray wants
    for f in files[:6]:
        sel = {"init_time": np.datetime64(f.init, "ns"),
               "lead_time": np.timedelta64(f.lead, "h").astype("timedelta64[ns]")}  # fmt: skip
        np.testing.assert_array_equal(
            x["temperature_2m"].sel(sel).values, expected_values("temperature_2m", f.init, f.lead)
        )
        np.testing.assert_array_equal(
            x["temperature"].sel(sel).sel(level=500.0).values,
            expected_values("temperature", f.init, f.lead, level=500.0),
        )

    archive.publish(files[6:])
    res = runner.invoke(app, ["virtual", "update", *common, "--fire-time", "2025-08-01T18",
                              "--deadline", "60"])  # fmt: skip
    assert res.exit_code == 0, res.output
    x = open_dataset(repo)
    assert x.sizes["init_time"] == 4
    last = files[-1]
    sel = {"init_time": np.datetime64(last.init, "ns"),
           "lead_time": np.timedelta64(last.lead, "h").astype("timedelta64[ns]")}  # fmt: skip
    np.testing.assert_array_equal(
        x["precipitation_surface"].sel(sel).values,
        expected_values("precipitation_surface", last.init, last.lead),
    )

    res = runner.invoke(app, ["virtual", "validate", *common, "--start", "2025-08-01T00"])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("no_such_module_here:DATASET", "is not importable"),
        ("{module}:NOPE", "defines no 'NOPE'"),
        ("{module}:datetime", "is a type, not a Dataset"),
        ("{missing}:DATASET", "no such file"),
        ("nonsense", "unknown dataset 'nonsense'"),
        ("{json}:DATASET", "its name 'json' is already the module"),
    ],
)
def test_a_bad_dataset_name_is_one_line_exit_2_and_creates_nothing(user, tmp_path, name, says):
    module, _, _ = user
    (tmp_path / "json.py").write_text(example())  # would shadow the standard library's json
    name = name.format(module=module, missing=tmp_path / "missing.py", json=tmp_path / "json.py")
    repo = tmp_path / "repo"
    res = runner.invoke(app, ["virtual", "backfill", name, "--repo", str(repo),
                              "--source", str(tmp_path / "src"), "--start", "2025-08-01T00"])  # fmt: skip
    assert res.exit_code == 2, res.output
    assert says in res.output and "Traceback" not in res.output
    assert not repo.exists()


def test_open_dataset_is_one_import_away_and_the_pure_modules_stay_light():
    import subprocess
    import sys

    code = (
        "import sys, toolkit.virtual.filetable, toolkit.virtual.dataset\n"
        "heavy = [m for m in ('xarray', 'icechunk', 'dask') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "from toolkit.virtual import open_dataset\n"
        "assert open_dataset.__module__ == 'toolkit.virtual.reader'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
