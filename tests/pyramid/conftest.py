"""Fixtures the pyramid tests share."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app


@pytest.fixture
def gfs_repo(tmp_path):
    """A simulated GFS archive (3 cycles x leads 0, 3, 6) backfilled into a virtual repo by
    the CLI, as users do."""
    from toolkit.examples.simulate import make_archive

    archive = make_archive(
        storage.open_store(str(tmp_path / "src")), kind="gfs", leads=[0, 3, 6], publish=False,
        inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(3)],
    )  # fmt: skip
    archive.publish(archive.files())
    argv = ["virtual", "backfill", "sim-gfs", "--repo", str(tmp_path / "repo"), "--source",
            str(tmp_path / "src"), "--start", "2025-08-01T00", "--executor", "sync"]  # fmt: skip
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    return tmp_path / "repo"
