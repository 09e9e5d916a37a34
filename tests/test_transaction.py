"""The branch transaction (`toolkit.transaction`), once for every caller: a toy job of two
rounds over a replica and a primary lands whole or not at all, converges after a crash at
every step, commits a retried group once, and refuses to move a main that moved."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import zarr

from tests import transaction_job as toy
from toolkit import icechunk as R
from toolkit import transaction as T
from toolkit.plan import IncompleteStageError
from toolkit.tasks import Named

ROOT = Path(__file__).resolve().parents[1]
WANT = {name: [toy.value(name, i) for i in range(toy.N)] for name in toy.ARRAYS}


def test_every_round_lands_on_main_in_one_move(tmp_path: Path) -> None:
    report = toy.build(tmp_path)
    for ref in toy.refs(tmp_path):
        assert toy.main_values(ref) == WANT
        assert R.branches(ref.open(fresh=True)) == ["main"]  # branch and marker dropped
    primary = toy.refs(tmp_path)[-1].open(fresh=True)
    commits = [c.metadata for c in R.history(primary)]
    # 2 rounds x 2 groups of 2 work outputs, each its own commit, each naming its group
    assert sum(1 for m in commits if "group" in m) == 4
    assert sum(m.get("cells", 0) for m in commits) == 2 * toy.N
    assert report.stage("v-commit").nodes == 2


def test_a_retried_commit_node_commits_once(tmp_path: Path) -> None:
    setup, work, commit, *_ = toy.plan(tmp_path).stages
    setup.service(Named("setup"))
    outs = T.gather([work.service([Named(f"v/{i}") for i in range(toy.N)], tick=lambda n: None)])
    (group,) = commit.tasks_from(outs)  # type: ignore[misc]
    first = commit.service(group)
    again = commit.service(group)  # the engine retries a node whose worker was lost
    assert first.snapshot is not None and again.snapshot == first.snapshot
    # what a commit node hands on names what it committed, without the spent forks (they
    # would travel back to the client for nothing)
    assert [o.done for o in first.outs] == [o.done for o in group.outs]
    assert all(o.forks for o in group.outs) and not any(o.forks for o in first.outs)
    for ref in toy.refs(tmp_path):
        history = R.history(ref.open(fresh=True), "toy-1")
        assert [c.metadata.get("group") for c in history].count(group.token) == 1


def test_forks_travel_packed_and_commit_as_they_would_have_in_place(tmp_path: Path) -> None:
    """A work node's output crosses processes with its forks packed (pickled, zstd): the copy
    holds `Packed` forks, smaller than the pickled forks, and the commit node merges them into
    the same values as the forks that never left the process."""
    import pickle

    setup, work, commit, *_ = toy.plan(tmp_path).stages
    setup.service(Named("setup"))
    outs = T.gather([work.service([Named(f"v/{i}") for i in range(toy.N)], tick=lambda n: None)])
    travelled = pickle.loads(pickle.dumps(outs))
    forks = [f for o in travelled for _, f in o.forks]
    assert forks and all(isinstance(f, T.Packed) for f in forks)
    raw = sum(len(pickle.dumps(f)) for o in outs for _, f in o.forks)
    assert sum(len(f.data) for f in forks) < raw
    assert pickle.loads(pickle.dumps(travelled)) == travelled  # packed once, kept packed
    (group,) = commit.tasks_from(travelled)  # type: ignore[misc]
    assert commit.service(group).snapshot is not None
    for ref in toy.refs(tmp_path):
        session = R.readonly(ref.open(fresh=True), "toy-1")
        got = zarr.open_array(session.store, path="v", mode="r")[:].tolist()
        assert got == [toy.value("v", i) for i in range(toy.N)]


@pytest.mark.parametrize(
    "point", ["worker_forked", "after_replica_commit", "finalize_after_replica"]
)
def test_a_crash_at_each_step_then_the_rerun_converges(tmp_path: Path, point: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.transaction_job", str(tmp_path), point],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == toy.CRASH_EXIT, proc.stderr[-2000:]
    replica, primary = toy.refs(tmp_path)
    # the primary's main never moved; only finalize moves a replica before it
    assert toy.main_values(primary) == {}
    assert toy.main_values(replica) == (WANT if point == "finalize_after_replica" else {})
    assert "toy-1" in R.branches(primary.open(fresh=True))

    toy.build(tmp_path)  # the rerun
    for ref in (replica, primary):
        assert toy.main_values(ref) == WANT
        assert R.branches(ref.open(fresh=True)) == ["main"]
    groups = [c.metadata.get("group") for c in R.history(primary.open(fresh=True))]
    tokens = [g for g in groups if g]
    assert len(tokens) == len(set(tokens))  # no group committed twice


def test_a_commit_gate_names_what_a_work_node_wrote_but_the_branch_lacks(tmp_path: Path) -> None:
    with pytest.raises(IncompleteStageError) as caught:
        toy.build(tmp_path, lose="v/5")
    err = caught.value
    assert err.stage == "v-commit" and list(err.missing) == ["v/5"]
    assert "v/5: written into a fork committed as " in str(err)
    assert "yet not on the branch" in str(err)
    assert toy.main_values(toy.refs(tmp_path)[-1]) == {}  # nothing reached main


def _elsewhere(ref: R.RepoRef, session: object) -> None:
    toy.MakeArrays()(ref, session, "")  # another writer's commit to main


def test_finalize_refuses_a_main_that_moved_and_abort_drops_the_branch(tmp_path: Path) -> None:
    setup, *_ = toy.plan(tmp_path).stages
    setup.service(Named("setup"))
    replica, primary = toy.refs(tmp_path)
    moved_to = T.commit_on([primary], "main", _elsewhere, "another writer")
    with pytest.raises(R.BranchMoved, match="main moved under the toy transaction"):
        toy.build(tmp_path)
    # replicas finalize first: the replica's main (which did not move) has the data; the
    # primary's main is where the other writer left it, and its branch is kept
    assert toy.main_values(replica) == WANT
    assert R.snapshot_of(primary.open(fresh=True), "main") == moved_to
    assert "toy-1" in R.branches(primary.open(fresh=True))
    assert T.abort(primary.open(fresh=True), "toy-1") == ["toy-1", T.marker("toy-1")]
    assert R.branches(primary.open(fresh=True)) == ["main"]
    assert R.snapshot_of(primary.open(fresh=True), "main") == moved_to  # main untouched


def test_setup_restarts_from_a_moved_main_and_replaces_older_branches(tmp_path: Path) -> None:
    toy.plan(tmp_path, branch="toy-old").stages[0].service(Named("setup"))
    toy.plan(tmp_path).stages[0].service(Named("setup"))
    replica, primary = toy.refs(tmp_path)
    for ref in (replica, primary):  # the newer transaction replaced the older one
        assert R.branches(ref.open(fresh=True)) == ["main", "toy-1", T.marker("toy-1")]
    assert T.commit_on([primary], "main", _elsewhere, "another writer") is not None
    restart = T.Setup(T.Txn((primary,), "toy-1"), toy.MakeArrays(), "toy setup", {}, restart=True)
    restart(Named("setup"))
    repo = primary.open(fresh=True)
    assert R.snapshot_of(repo, T.marker("toy-1")) == R.snapshot_of(repo, "main")


def test_the_single_commit_goes_replicas_first_and_skips_no_change(tmp_path: Path) -> None:
    replica, primary = toy.refs(tmp_path)
    heard: list[str] = []

    def hook(event: str, args: tuple) -> None:
        if event == T.AUDIT_EVENT and args[0] == "after_replica_commit":
            heard.append(R.snapshot_of(primary.open(fresh=True), "main"))

    before = R.snapshot_of(primary.open(fresh=True), "main")
    sys.addaudithook(hook)
    snap = T.commit_on([replica, primary], "main", _elsewhere, "both")
    assert heard == [before]  # the replica committed while the primary had not yet
    assert snap == R.snapshot_of(primary.open(fresh=True), "main") != before
    assert T.commit_on([replica, primary], "main", _elsewhere, "again") is None  # no change
