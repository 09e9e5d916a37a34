"""Shared set-up for the virtual tests."""

from __future__ import annotations

import pytest

from tests.virtual.test_backfill import sim
from toolkit import storage


@pytest.fixture
def world(tmp_path):
    """A simulated four-cycle GFS archive (nothing published yet) and the job writing its repo:
    (tmp_path, archive, files, job). A module may define its own `world` instead."""
    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=0,
    )
    return tmp_path, archive, files, ds
