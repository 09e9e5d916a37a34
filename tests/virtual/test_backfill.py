"""Backfill as a gated graph: in-process, on a LocalCluster, on the S3 emulator; resume and guards."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest
import xarray as xr

from tests.virtual.test_job import assert_exact
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.datasets import sim_gfs
from toolkit.examples.simulate import make_archive
from toolkit.plan import IncompleteStageError
from toolkit.tasks import Named
from toolkit.virtual.backfill import backfill, backfill_plan, temp_branch
from toolkit.virtual.write import Job, ensure_repo, run

INITS = [datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)]
START = np.datetime64("2025-08-01T00", "ns")


def sim(src: storage.Store, repo_store: storage.Store, publish: int | None = None):
    archive = make_archive(src, kind="gfs", inits=INITS, leads=[0, 3, 6], publish=False)
    files = archive.files()
    archive.publish(files if publish is None else files[:publish])
    return archive, files, Job(sim_gfs(src), R.RepoRef(repo_store))


def main_ds(ds) -> xr.Dataset:
    return xr.open_zarr(R.readonly(ds.repo.open(fresh=True)).store, consolidated=False)


def test_backfill_sync_skips_resumes_and_finalizes(tmp_path):
    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=9,
    )
    archive.truncate(files[4])
    report = backfill(ds, start=START, workers=3, executor="sync")
    out = report.stage("commit").result
    assert len(out.ingested) == 8 and [s.url for s in out.skipped] == [archive.data_url(files[4])]
    assert len(out.commits) == 1  # three forks merged, one commit
    repo = ds.repo.open(fresh=True)
    assert R.branches(repo) == ["main"]  # temp branch removed after finalize
    x = main_ds(ds)
    assert x.sizes["init_time"] == 3  # end defaults to the last published position
    assert_exact(x, files[:9], skip=[files[4]])
    # Fix the file and rerun: the filter resumes; only the repaired file is written.
    archive.publish(files[4])
    again = backfill(ds, start=START, workers=3, executor="sync")
    assert again.stage("ingest").written == 1 and again.stage("ingest").skipped == 8
    assert_exact(main_ds(ds), files[:9])


def test_strict_turns_a_skip_into_a_failed_gate(tmp_path):
    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    archive.reupload(files[2])
    with pytest.raises(IncompleteStageError, match=r"commit.*skipped:.*f006"):
        backfill(ds, start=START, workers=2, executor="sync", strict=True)
    assert temp_branch(
        ds.region(START, np.datetime64("2025-08-01T06", "ns") + np.timedelta64(1, "ns"))
    ) in R.branches(ds.repo.open(fresh=True))  # kept for inspection; main untouched
    assert "temperature_2m" not in main_ds(ds) or main_ds(ds).sizes["init_time"] == 0


def test_end_past_published_needs_explicit_permission(tmp_path):
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    end = np.datetime64("2025-08-02T00", "ns")
    with pytest.raises(ValueError, match=r"2 empty position\(s\).*2025-08-01T12"):
        backfill(ds, start=START, end=end, executor="sync")
    report = backfill(ds, start=START, end=end, executor="sync", allow_empty_positions=True)
    assert main_ds(ds).sizes["init_time"] == 4
    # the report names the positions readers will see empty
    assert report.stage("commit").result.empty_positions == (
        "2025-08-01T12:00:00.000000000",
        "2025-08-01T18:00:00.000000000",
    )
    again = backfill(ds, start=START, executor="sync")
    assert again.stage("ingest").written == 0  # all done
    assert again.stage("commit").result is None  # nothing to commit, nothing empty named


def test_finalize_refuses_when_main_moved(tmp_path):
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    region = ds.region(START, np.datetime64("2025-08-01T06", "ns") + np.timedelta64(1, "ns"))
    backfill_plan(region).stages[0].service(Named("setup"))
    run(ds.region(START, None))  # a write loop on main, as an operational fire would
    with pytest.raises(R.BranchMoved, match="moved since setup"):
        backfill(ds, start=START, executor="sync")
    assert temp_branch(region) in R.branches(ds.repo.open(fresh=True))


@pytest.mark.parametrize("server", ["s3_endpoint", "seaweed_endpoint"])
def test_on_an_object_store_forks_commit_in_parallel_and_the_gate_probes_them(
    server, request, local_cluster
):
    """Four blocks, forks merged two at a time: two commit nodes, run at once on two worker
    processes, their commits racing on the server (Icechunk arbitrates concurrent commits on an
    object store; SeaweedFS is a real S3 server), and a gate that probes all 12 files."""
    from tests.conftest import make_bucket, s3_options
    from tests.virtual.test_repo import public_bucket

    endpoint = request.getfixturevalue(server)
    opts = s3_options(endpoint)
    _, files, ds = sim(
        storage.open_store(f"s3://{public_bucket(endpoint)}/src", **opts),
        storage.open_store(f"s3://{make_bucket(endpoint)}/repo", **opts),
    )
    report = backfill(ds, start=START, workers=4, cluster=local_cluster, fan_in=2)
    out = report.stage("commit").result
    assert len(out.commits) == 2 and len(out.ingested) == 12
    assert report.stage("commit").nodes == 2
    assert report.stage("commit").gate_have == report.stage("commit").gate_want == 12
    assert_exact(main_ds(ds), files)


def test_a_local_repo_gets_one_commit_node(tmp_path):
    """Icechunk's local-filesystem storage cannot arbitrate concurrent commits to one branch."""
    from toolkit.transaction import Forked
    from toolkit.virtual.backfill import backfill_plan

    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    commit = backfill_plan(ds.region(START, None), workers=8, fan_in=2).stages[2]
    assert commit.name == "commit" and commit.tasks_from is not None
    groups = commit.tasks_from(tuple(Forked(done=(f"f{i}",)) for i in range(8)))
    assert len(groups) == 1 and len(groups[0].outs) == 8


def test_ingest_gate_counts_what_exists_and_reports_only_explain():
    from toolkit.plan import Gate
    from toolkit.virtual.backfill import Absences, BackfillOut, Skipped

    out = BackfillOut(ingested=("a", "b"), unpublished=("c",), skipped=(Skipped("d", "truncated"),))
    want = ("a", "b", "c", "d")
    lenient = Gate(lambda: {"a", "b"}, want=want, explain=Absences())
    result = lenient.check("ingest", out)
    assert (result.have, result.want) == (2, 2)
    assert dict(result.excused) == {
        "c": "not published (the source does not list it)",
        "d": "skipped: truncated",
    }
    # a file the workers say they ingested but the probes do not find fails the gate
    with pytest.raises(IncompleteStageError, match=r"have 1/2.*first missing: b"):
        Gate(lambda: {"a"}, want=want, explain=Absences()).check("ingest", out)
    # no result at all (no ingest node ran): nothing is excused, everything is missing
    with pytest.raises(IncompleteStageError, match=r"have 0/4"):
        Gate(lambda: set(), want=want, explain=Absences()).check("ingest", None)
    strict = Gate(lambda: {"a", "b"}, want=want, explain=Absences(), excuse=False)
    with pytest.raises(IncompleteStageError, match=r"have 2/4.*c: not published.*d: skipped"):
        strict.check("ingest", out)


def test_a_file_missing_mid_region_is_named_and_strict_refuses_it(tmp_path):
    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=0,
    )
    gone = files[4]  # the source lists the files around it, not it
    archive.publish(files[:4] + files[5:9])
    with pytest.raises(IncompleteStageError, match=r"have 8/9.*not published"):
        backfill(ds, start=START, executor="sync", strict=True)
    report = backfill(ds, start=START, executor="sync")
    s = report.stage("commit")
    assert (s.gate_have, s.gate_want) == (8, 8)
    assert [k for k, _ in s.excused] == [archive.data_url(gone)]
    assert "not published" in s.excused[0][1]
    assert_exact(main_ds(ds), files[:9], skip=[gone])


def test_progress_counts_files_as_each_block_reads_them(tmp_path):
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    heard: list[tuple[str, int, int]] = []
    report = backfill(
        ds, start=START, workers=2, executor="sync", progress=lambda *a: heard.append(a)
    )
    assert report.stage("ingest").nodes == 2
    assert [(d, t) for s, d, t in heard if s == "ingest"] == [(i, 6) for i in range(1, 7)]


def test_overwrite_chunks_re_emits_refs_the_filter_would_keep(tmp_path):
    from toolkit.examples.simulate import expected_values

    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    backfill(ds, start=START, executor="sync")
    f = files[3]
    data, index = archive.encode(f, generation=1)  # republished with new values, new index
    storage.put(archive.store, archive.data_key(f), data)
    storage.put(archive.store, archive.index_key(f), index.encode())
    again = backfill(ds, start=START, executor="sync")
    assert again.stage("ingest").skipped == len(files)  # the filter keeps every present file
    redone = backfill(ds, start=START, executor="sync", overwrite_chunks=True)
    assert redone.stage("ingest").written == len(files) and redone.stage("ingest").skipped == 0
    sel = {
        "init_time": np.datetime64(f.init, "ns"),
        "lead_time": np.timedelta64(f.lead, "h").astype("timedelta64[ns]"),
    }
    got = main_ds(ds)["temperature_2m"].sel(sel).values
    np.testing.assert_array_equal(
        got, expected_values("temperature_2m", f.init, f.lead, generation=1)
    )
    assert not np.array_equal(got, expected_values("temperature_2m", f.init, f.lead))


def test_refs_that_miss_the_probed_cell_are_refused_naming_the_file(tmp_path):
    """A file whose refs do not cover its probe cell would be re-ingested forever (the filter
    never sees it): the write refuses it instead, naming the file."""
    from toolkit.virtual.dataset import probe
    from toolkit.virtual.source_io import discover, file_refs
    from toolkit.virtual.write import write_refs

    src = storage.open_store(str(tmp_path / "src"))
    archive = make_archive(src, kind="gfs", inits=INITS, leads=[0, 3, 6], publish=False)
    archive.publish(archive.files()[:1])
    ds = Job(sim_gfs(src), R.RepoRef(storage.open_store(str(tmp_path / "repo"))))
    ensure_repo(ds)
    ((coord, size, _),) = discover(ds.dataset.source, ds.files())
    var, _ = probe(ds.dataset, coord)
    refs = [r for r in file_refs(ds.dataset.source, coord, size) if r.variable != var]
    session = R.writable(ds.repo.open(fresh=True))
    with pytest.raises(AssertionError, match=r"f000: its refs do not cover the probed cell"):
        write_refs(ds, session, [(coord, refs)])
    assert write_refs(ds, session, [(coord, file_refs(ds.dataset.source, coord, size))]) > 0


def test_a_retried_commit_node_does_not_commit_again(tmp_path):
    """The commit stage's nodes are retried by the engine: a node that committed and then
    failed (or lost its worker) finds its commit on the branch and returns it."""
    from toolkit.virtual.backfill import backfill_plan

    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    setup, ingest, commit, _ = backfill_plan(ds.region(START, None), workers=2).stages
    setup.service(Named("setup"))
    outs = tuple(ingest.service(list(ingest.tasks)[i::2]) for i in range(2))
    (group,) = commit.tasks_from(outs)
    first = commit.service(group)
    again = commit.service(group)  # the retry
    assert first.snapshot == again.snapshot and first.snapshot is not None
    repo = ds.repo.open(fresh=True)
    branch = temp_branch(ds.region(START, None))
    assert [c.metadata.get("group") for c in R.history(repo, branch)].count(group.token) == 1


def test_reports_name_each_absence_and_strict_spares_the_newest_position(tmp_path):
    """A file listed without its .idx is "published without its index", not "not published";
    --strict fails on an interior gap, but not on the newest position still publishing."""
    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=11,  # the newest cycle (files 9..11) lacks its last file
    )
    storage.delete(archive.store, archive.index_key(files[10]))  # its data, no index yet
    report = backfill(ds, start=START, workers=2, executor="sync", strict=True)
    reasons = dict(report.stage("commit").excused)
    assert reasons == {
        archive.data_url(files[10]): "published without its index (.idx): unreadable until it is",
        archive.data_url(files[11]): "not published (the source does not list it)",
    }
    ingest = report.stage("ingest")
    assert ingest.written == 10 and report.stage("commit").gate_have == 10  # files, not tasks
    # an interior gap fails --strict, naming it and why
    _, files2, ds2 = sim(
        storage.open_store(str(tmp_path / "src2")),
        storage.open_store(str(tmp_path / "repo2")),
        publish=9,
    )
    storage.delete(storage.open_store(str(tmp_path / "src2")), archive.index_key(files2[4]))
    with pytest.raises(IncompleteStageError, match="published without its index"):
        backfill(ds2, start=START, workers=2, executor="sync", strict=True)
