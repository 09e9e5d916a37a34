"""Backfill as a gated graph: in-process, on a LocalCluster, on the S3 emulator; resume and guards."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.virtual.test_job import assert_exact
from toolkit import icechunk as R
from toolkit import storage
from toolkit.examples.datasets import sim_gfs
from toolkit.examples.simulate import make_archive
from toolkit.plan import IncompleteStageError
from toolkit.tasks import Named
from toolkit.virtual.backfill import backfill, backfill_plan, temp_branch
from toolkit.virtual.inflight import RegionOverlap
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
    assert out.ingested == 8 and [s.url for s in out.skipped] == [archive.data_url(files[4])]
    assert len(out.commits) == 1  # three forks merged, one commit: one round
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
    with pytest.raises(IncompleteStageError, match=r"ingest-0001.*skipped:.*f006"):
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
    nothing = again.stage("commit").result  # nothing to commit, nothing empty named
    assert not nothing.commits and not nothing.empty_positions and nothing.ingested == 0


def test_finalize_refuses_when_main_moved(tmp_path):
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=6,
    )
    region = ds.region(START, np.datetime64("2025-08-01T06", "ns") + np.timedelta64(1, "ns"))
    backfill_plan(region).stages[0].service(Named("setup"))
    run(ds.region(START, None))  # a write loop on main into the region
    with pytest.raises(RegionOverlap, match="main's commits since its setup wrote into"):
        backfill(ds, start=START, executor="sync")
    assert temp_branch(region) in R.branches(ds.repo.open(fresh=True))


@pytest.mark.parametrize("server", ["s3_endpoint", "seaweed_endpoint"])
def test_on_an_object_store_each_round_commits_next_to_the_workers(server, request, local_cluster):
    """Three rounds of four files: each round's forks are merged and committed by a settle
    node on the cluster (the client reads counts), one commit a round, one after another;
    each round's gate probes its own files on the branch (SeaweedFS is a real S3 server)."""
    from distributed import Client, get_task_stream

    from tests.conftest import make_bucket, s3_options
    from tests.virtual.test_repo import public_bucket

    endpoint = request.getfixturevalue(server)
    opts = s3_options(endpoint)
    _, files, ds = sim(
        storage.open_store(f"s3://{public_bucket(endpoint)}/src", **opts),
        storage.open_store(f"s3://{make_bucket(endpoint)}/repo", **opts),
    )
    with Client(local_cluster) as client, get_task_stream(client) as stream:
        report = backfill(ds, start=START, workers=4, cluster=local_cluster, round_files=4)
    keys = [str(t["key"]) for t in stream.data]  # this run's tasks only
    out = report.stage("commit").result
    assert len(out.commits) == 3 and out.ingested == 12 and out.rebases == 0
    assert report.stage("commit").tasks == 3 and report.stage("ingest").tasks == 12
    assert report.stage("commit").gate_have == report.stage("commit").gate_want == 12
    assert [s.name for s in report.stages] == ["setup", "ingest", "commit", "finalize"]
    settles = sorted({k.split("-settle-")[0] for k in keys if "-settle-" in k})
    assert settles == ["('ingest-0001", "('ingest-0002", "('ingest-0003"]
    repo = ds.repo.open(fresh=True)
    rounds = [c.message for c in R.history(repo) if c.message.startswith("backfill:")]
    assert len(rounds) == 3 and all(m.startswith("backfill: 4 file(s)") for m in rounds)
    assert_exact(main_ds(ds), files)


def test_rounds_are_contiguous_stages_that_commit_themselves(tmp_path):
    """The plan: setup, one settled stage per round of `round_files` files in append order
    (the last one short), finalize; no separate commit stage, no fork handed to the client."""
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    plan = backfill_plan(ds.region(START, None), workers=8, round_files=5)
    names = [s.name for s in plan.stages]
    assert names == ["setup", "ingest-0001", "ingest-0002", "ingest-0003", "finalize"]
    rounds = plan.stages[1:4]
    assert [len(s.tasks) for s in rounds] == [5, 5, 2]
    assert [k for s in rounds for k in s.tasks.keys] == [
        c.key for c in ds.region(START, None).files()
    ]
    assert all(s.settle is not None and s.tasks_from is None for s in rounds)
    assert [len(s.gate.want) for s in rounds] == [5, 5, 2]


def test_ingest_gate_counts_what_exists_and_reports_only_explain():
    from toolkit.plan import Gate
    from toolkit.virtual.backfill import Absences, BackfillOut, Skipped

    out = BackfillOut(ingested=2, unpublished=("c",), skipped=(Skipped("d", "truncated"),))
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


def test_a_retried_round_commit_does_not_commit_again(tmp_path):
    """A round's settle is retried by the engine: one that committed and then failed (or lost
    its worker) finds its commit on the branch by the round's token and does not commit again."""
    _, _, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    setup, ingest, _ = backfill_plan(ds.region(START, None), workers=2).stages
    setup.service(Named("setup"))
    outs = tuple(ingest.service(list(ingest.tasks)[i::2]) for i in range(2))
    first = ingest.settle(outs)
    again = ingest.settle(outs)  # the retry
    assert first.commits == again.commits and len(first.commits) == 1
    assert first.ingested == again.ingested == 12
    repo = ds.repo.open(fresh=True)
    branch = temp_branch(ds.region(START, None))
    tokens = [c.metadata.get("group") for c in R.history(repo, branch)]
    assert len([t for t in tokens if t]) == 1


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


@settings(deadline=None)
@given(st.integers(0, 10**5), st.integers(1, 10**6))
def test_rounds_cover_the_region_in_order_each_at_most_the_size(n: int, size: int) -> None:
    from toolkit.virtual.backfill import rounds_of

    bounds = rounds_of(n, size)
    assert [a for a, _ in bounds] == list(range(0, n, size))
    assert all(0 < b - a <= size for a, b in bounds)
    assert (bounds[-1][1] if bounds else 0) == n
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(bounds))


@given(
    st.integers(1, 512),
    st.floats(1, 5000),
    st.one_of(st.none(), st.integers(1 << 28, 1 << 38)),
)
def test_the_default_round_is_bounded_by_time_and_by_the_memory_of_its_commit(
    threads: int, refs: float, memory: int | None
) -> None:
    from toolkit.virtual.backfill import (
        FILES_PER_THREAD_SECOND,
        IN_PROCESS_ROUND_BYTES,
        ROUND_REF_BYTES,
        ROUND_SECONDS,
        round_files_for,
    )

    sized = round_files_for(threads, refs, memory)
    budget = IN_PROCESS_ROUND_BYTES if memory is None else memory // 4
    assert sized.budget == budget
    assert 1 <= sized.files <= threads * FILES_PER_THREAD_SECOND * ROUND_SECONDS
    assert sized.files == 1 or sized.files * refs * ROUND_REF_BYTES <= budget
    # the tighter bound decides: one more file would break it
    assert (sized.files + 1) * refs * ROUND_REF_BYTES > budget or (
        sized.files == threads * FILES_PER_THREAD_SECOND * ROUND_SECONDS
    )
    assert sized.by_memory == (sized.files < threads * FILES_PER_THREAD_SECOND * ROUND_SECONDS)
