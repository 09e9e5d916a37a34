"""Manifest splits: advice against the reader budgets (pure, hypothesis) and a rewrite that
later commits follow, data unchanged (issue: run unattended, re-splitting)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.virtual.test_backfill import START, main_ds, sim
from toolkit import icechunk as R
from toolkit import storage
from toolkit.virtual.backfill import backfill
from toolkit.virtual.split_sizing import FLOOR_REFS, TARGET_BYTES, advise

TOOLKIT = str(Path(sys.executable).with_name("toolkit"))


@given(
    per_position=st.integers(1, 10**7),
    bytes_per_ref=st.floats(1, 200),
    positions=st.integers(1, 10**5),
)
def test_the_advice_meets_the_budgets_it_can(per_position, bytes_per_ref, positions):
    refs = per_position * positions
    a = advise("v", 1, refs, int(refs * bytes_per_ref), positions)
    assert 1 <= a.split <= positions
    size = a.split * per_position * (int(refs * bytes_per_ref) / refs)
    # within the byte budget, or one position is already over it, or the floor's bump
    assert size <= TARGET_BYTES or a.split == 1 or size <= 2 * TARGET_BYTES
    if a.split < positions and a.split * per_position < FLOOR_REFS:  # under the floor: only
        assert (a.split + 1) * per_position * bytes_per_ref > TARGET_BYTES  # bytes stopped it


def _toolkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TOOLKIT, *args], capture_output=True, text=True, timeout=180)


def test_apply_rewrites_main_under_the_split_and_later_commits_follow(tmp_path: Path) -> None:
    archive, files, ds = sim(storage.open_store(str(tmp_path / "src")),
                             storage.open_store(str(tmp_path / "repo")), publish=9)  # fmt: skip
    backfill(ds, start=START, executor="sync")
    repo = str(tmp_path / "repo")
    before = main_ds(ds).load()
    advised = _toolkit("virtual", "split", "advise", repo, "--json")
    assert advised.returncode == 0, advised.stderr
    body = json.loads(advised.stdout)
    assert body["append_dim"] == "init_time" and "init_time" in str(body["current"])
    arrays = {a["array"]: a for a in body["arrays"]}
    assert "temperature_2m" in arrays and arrays["temperature_2m"]["positions"] == 3
    assert all(a["manifests"] == 1 for a in arrays.values())  # one manifest each, unsplit

    applied = _toolkit("virtual", "split", "apply", repo, "--split", "1")
    assert applied.returncode == 0, applied.stderr
    assert "manifests split every 1 init_time" in applied.stdout
    per = R.manifest_report(ds.repo.open(fresh=True)).per_array
    assert per["temperature_2m"]["manifests"] == 3  # one per position
    assert main_ds(ds).load().identical(before)  # the rewrite changed no value
    assert R.manifest_split(ds.repo.store) is not None  # recorded in the config

    archive.publish(files[9:])  # a later commit follows the new split
    backfill(ds, start=START, executor="sync")
    per = R.manifest_report(ds.repo.open(fresh=True)).per_array
    assert per["temperature_2m"]["manifests"] == 4
    bad = _toolkit("virtual", "split", "apply", repo, "--split", "0")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
