"""The Icechunk edge on real repos: local disk and the moto S3 emulator."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import make_bucket, s3_options
from toolkit import icechunk as R
from toolkit import storage

VALUES = np.arange(32, dtype="<f4")


def make_array(session, n: int = 4) -> None:
    g = zarr.group(session.store)
    g.create_array(
        "v",
        shape=(n, 8),
        chunks=(1, 8),
        dtype="<f4",
        fill_value=np.nan,
        dimension_names=("t", "x"),
        compressors=None,
    )


def public_bucket(endpoint: str, name: str | None = None) -> str:
    """A bucket anyone may read (like NOAA's open-data buckets): readers go anonymous."""
    import json

    import boto3

    bucket = make_bucket(endpoint, name)
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": ["s3:GetObject"],
                "Resource": [f"arn:aws:s3:::{bucket}/*"],
            }
        ],
    }
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").put_bucket_policy(
        Bucket=bucket, Policy=json.dumps(policy)
    )
    return bucket


def refs_for(url: str, rows) -> list:
    return [((i, 0), url, 32 * i, 32, None) for i in rows]


def read(repo_store: storage.Store, branch: str = "main") -> np.ndarray:
    session = R.readonly(R.open_repo(repo_store, fresh=True), branch)
    return zarr.open_array(session.store, path="v", mode="r")[:]


@pytest.fixture
def local(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.bin").write_bytes(VALUES.tobytes())
    store = storage.open_store(str(tmp_path / "repo"))
    cfg = R.VirtualConfig([R.local_container(str(src))], R.manifest_append_dim_split("t", 2))
    return store, src, R.create_repo(store, cfg)


def test_reader_needs_only_the_location(local):
    store, src, repo = local
    s = R.writable(repo)
    make_array(s)
    assert R.set_virtual_refs(s, "v", refs_for(f"{src.as_uri()}/f.bin", range(4))) == 4
    R.commit(s, "refs", {"files": 1})
    # A fresh process-level open: containers come from the persisted config.
    np.testing.assert_array_equal(read(store), VALUES.reshape(4, 8))
    assert R.container_prefixes(R.open_repo(store, fresh=True)) == [f"{src.as_uri()}/"]


def test_chunks_present_agrees_with_store_exists(local):
    """The fast manifest lookup the filter and completeness use answers exactly as
    `store.exists` does: set refs, unset cells, out-of-range cells; a missing array raises."""
    _, src, repo = local
    s = R.writable(repo)
    make_array(s, n=6)
    R.set_virtual_refs(s, "v", refs_for(f"{src.as_uri()}/f.bin", [0, 2, 3]))
    R.commit(s, "refs")
    ro = R.readonly(R.open_repo(local[0], fresh=True))
    cells = [("v", (i, 0)) for i in range(8)]  # rows 6 and 7 lie past the array's shape
    got = R.chunks_present(ro, cells)
    assert got == R.exists_many(ro, [f"v/c/{i}/0" for i in range(8)])
    assert got == [True, False, True, True, False, False, False, False]
    with pytest.raises(KeyError, match="array 'w' is not in the store"):
        R.chunks_present(ro, [("w", (0, 0))])


@settings(max_examples=20, deadline=None)
@given(
    st.sets(st.integers(0, 11)),
    st.lists(st.integers(0, 13), min_size=1, max_size=30),
    st.sampled_from([(1, 8), (3, 4)]),
)
def test_chunks_present_lists_or_probes_with_one_answer(tmp_path_factory, written, asked, chunks):
    """A large share of an array's grid is answered from one listing of its chunk
    coordinates, a small one by probes: both say what was written (the oracle: the cells set
    here), sharded or not, for cells inside and past the array's shape."""
    root = tmp_path_factory.mktemp("present")
    (root / "f.bin").write_bytes(VALUES.tobytes())
    repo = R.create_repo(
        storage.open_store(str(root / "repo")), R.VirtualConfig([R.local_container(str(root))])
    )
    s = R.writable(repo)
    zarr.group(s.store).create_array(
        "v", shape=(12, 8), chunks=chunks, dtype="<f4", fill_value=np.nan, compressors=None
    )
    rows = sorted(written) if chunks == (1, 8) else []
    if rows:
        R.set_virtual_refs(s, "v", refs_for(f"{root.as_uri()}/f.bin", rows))
    else:  # native chunks of a (3, 4) grid: row i of the asked cells is chunk (i // 2, i % 2)
        a = zarr.open_array(s.store, path="v")
        for i in written:
            if i < 8:
                a[3 * (i // 2) : 3 * (i // 2) + 3, 4 * (i % 2) : 4 * (i % 2) + 4] = 1.0
    R.commit(s, "w")
    ro = R.readonly(R.open_repo(storage.open_store(str(root / "repo")), fresh=True))
    if chunks == (1, 8):
        cells = [("v", (i, 0)) for i in asked]
        truth = [i in written for i in asked]
    else:
        cells = [("v", (i // 2, i % 2)) for i in asked]
        truth = [i in written and i < 8 for i in asked]
    assert R.chunks_present(ro, cells, list_ratio=0) == truth  # probed cell by cell
    assert R.chunks_present(ro, cells, list_ratio=10**6) == truth  # answered from the listing


def test_refs_outside_every_container_raise(local, tmp_path):
    _, _, repo = local
    s = R.writable(repo)
    make_array(s)
    with pytest.raises(R.OutsideContainers, match=r"1 refs for array 'v' .*file:///elsewhere"):
        R.set_virtual_refs(s, "v", [((0, 0), "file:///elsewhere/f.bin", 0, 32, None)])


def test_repoint_container_serves_mirror_without_rewrite(s3_endpoint):
    """Same bucket/key on a second S3 endpoint (the mirror): swap the container, same bytes."""
    mirror_server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )  # its own process: moto servers in one process share one backend
    try:
        mirror_endpoint = None
        for line in mirror_server.stderr:  # type: ignore[union-attr]
            found = re.search(r"Running on (http://127\.0\.0\.1:\d+)", line)
            if found:
                mirror_endpoint = found.group(1)
                break
        assert mirror_endpoint, "mirror S3 emulator did not start"
        bucket = public_bucket(s3_endpoint)
        public_bucket(mirror_endpoint, bucket)
        src = storage.open_store(f"s3://{bucket}/src", **s3_options(s3_endpoint))
        mirror = storage.open_store(f"s3://{bucket}/src", **s3_options(mirror_endpoint))
        storage.put(src, "f.bin", VALUES.tobytes())
        storage.put(mirror, "f.bin", VALUES.tobytes())
        repo_store = storage.open_store(f"s3://{bucket}/repo", **s3_options(s3_endpoint))
        repo = R.create_repo(repo_store, R.VirtualConfig([R.container_for(src)]))
        s = R.writable(repo)
        make_array(s)
        R.set_virtual_refs(s, "v", refs_for(f"s3://{bucket}/src/f.bin", range(4)))
        R.commit(s, "refs")
        before = R.manifest_report(repo)
        storage.delete(src, "f.bin")  # the primary copy is gone; only the mirror serves it
        R.repoint_container(repo_store, R.container_for(mirror))
        np.testing.assert_array_equal(read(repo_store), VALUES.reshape(4, 8))
        after = R.open_repo(repo_store, fresh=True)
        assert R.manifest_report(after) == before  # no manifest rewritten
        assert R.history(after)[0].message == "refs"  # and no commit
    finally:
        mirror_server.kill()
        mirror_server.wait()


def test_manifest_split_and_report(local):
    _, src, repo = local
    s = R.writable(repo)
    make_array(s, n=6)
    R.set_virtual_refs(s, "v", refs_for(f"{src.as_uri()}/f.bin", range(4)))
    R.commit(s, "refs")
    report = R.manifest_report(repo)
    assert report.per_array["v"]["manifests"] == 2  # rows 0-1 and 2-3; split every 2 along t
    assert report.per_array["v"]["refs"] == 4 == report.refs
    assert report.bytes_per_ref > 0


def test_handles_open_without_manifest_preload_and_keep_the_persisted_splitting(local):
    """Every session of a toolkit handle starts without Icechunk's manifest preload (on a repo
    split along init_time it fetched every split of the coordinate arrays first: 18 s per
    update tick at 10^8 refs), while the repo's own splitting still applies to commits and the
    runtime setting is never saved into the repo's config."""
    store, src, created = local
    opened = R.open_repo(store, fresh=True)
    for repo in (created, opened):
        assert repo.config.manifest.preload.max_total_refs == 0
        assert repo.config.manifest.splitting is not None
    s = R.writable(opened)
    make_array(s, n=6)
    R.set_virtual_refs(s, "v", refs_for(f"{src.as_uri()}/f.bin", range(4)))
    R.commit(s, "refs")
    assert R.manifest_report(opened).per_array["v"]["manifests"] == 2  # still split every 2
    import icechunk

    persisted = icechunk.Repository.fetch_config(
        icechunk.local_filesystem_storage(str(store.local_path))
    )
    assert persisted.manifest.preload is None  # the repo's readers keep Icechunk's default


def test_split_config_validation():
    with pytest.raises(ValueError, match=r"'all arrays'.*>= 1"):
        R.manifest_append_dim_split("t", 0)
    with pytest.raises(ValueError, match="at least one virtual chunk container"):
        R.VirtualConfig([])
    with pytest.raises(TypeError, match="not an icechunk VirtualChunkContainer"):
        R.VirtualConfig(["s3://bucket/"])  # type: ignore[list-item]
    c = R.s3_container("s3://b/p")
    with pytest.raises(ValueError, match="registered twice"):
        R.VirtualConfig([c, R.s3_container("s3://b/p/")])
    R.manifest_append_dim_split("t", {"^/pressure/": 10, None: 100})  # per-group policy builds


def test_commit_records_rebase_attempts_and_refuses_empty(local):
    _, src, repo = local
    s = R.writable(repo)
    make_array(s)
    R.commit(s, "setup")
    a, b = R.writable(repo), R.writable(repo)
    R.set_virtual_refs(a, "v", refs_for(f"{src.as_uri()}/f.bin", [0]))
    R.set_virtual_refs(b, "v", refs_for(f"{src.as_uri()}/f.bin", [1]))
    R.commit(a, "a")
    R.commit(b, "b")  # lost the race once, rebased
    hist = R.history(repo)
    assert [(c.message, c.rebase_attempts) for c in hist[:2]] == [("b", 1), ("a", 0)]
    with pytest.raises(ValueError, match="empty commit"):
        R.commit(R.writable(repo), "nothing")


def test_guarded_reset_and_fork_merge(local):
    store, src, repo = local
    s = R.writable(repo)
    make_array(s)
    setup = R.commit(s, "setup")
    R.create_branch(repo, "tmp", setup)
    forks = []
    for rows in ([0, 1], [2, 3]):
        f = R.fork(R.writable(repo, "tmp"))
        R.set_virtual_refs(f, "v", refs_for(f"{src.as_uri()}/f.bin", rows))
        forks.append(pickle.loads(pickle.dumps(f)))  # forks travel between processes
    c = R.writable(repo, "tmp")
    R.merge(c, forks)
    head = R.commit(c, "merged")
    R.reset_branch(repo, "main", head, expected=setup)
    np.testing.assert_array_equal(read(store), VALUES.reshape(4, 8))
    # main moved (now at head) -> a reset expecting setup refuses, loudly
    with pytest.raises(R.BranchMoved, match="moved since setup"):
        R.reset_branch(repo, "main", setup, expected=setup)
    assert R.snapshot_of(repo) == head


def test_s3_emulator_round_trip(s3_endpoint):
    bucket = public_bucket(s3_endpoint)
    src = storage.open_store(f"s3://{bucket}/src", **s3_options(s3_endpoint))
    storage.put(src, "f.bin", VALUES.tobytes())
    repo_store = storage.open_store(f"s3://{bucket}/repo", **s3_options(s3_endpoint))
    repo = R.create_repo(repo_store, R.VirtualConfig([R.container_for(src)]))
    s = R.writable(repo)
    make_array(s)
    R.set_virtual_refs(s, "v", refs_for(f"s3://{bucket}/src/f.bin", range(4)))
    R.commit(s, "refs")
    np.testing.assert_array_equal(read(repo_store), VALUES.reshape(4, 8))
    assert R.container_prefixes(R.open_repo(repo_store, fresh=True)) == [f"s3://{bucket}/src/"]


def test_a_repo_recreated_at_the_same_url_is_never_served_by_an_old_handle(tmp_path):
    """A warm process opened the first repo; the same path is removed and created again (same
    config, then another container): every open sees the repo that is there now."""
    import shutil

    path = tmp_path / "repo"
    store = storage.open_store(str(path))
    config = R.VirtualConfig([R.local_container(str(tmp_path / "src"))])

    def create(n: int) -> None:
        s = R.writable(R.create_repo(store, config))
        make_array(s, n)
        R.commit(s, f"array of {n}")

    create(4)
    first = R.open_repo(store)
    assert R.open_repo(store) is first  # shared within the process while it is the same repo
    shutil.rmtree(path)
    create(6)
    again = R.open_repo(store)
    assert zarr.open_group(R.readonly(again).store, mode="r")["v"].shape == (6, 8)
    assert R.history(again, limit=1)[0].message == "array of 6"
    shutil.rmtree(path)
    config = R.VirtualConfig([R.local_container(str(tmp_path / "elsewhere"))])
    create(2)
    last = R.open_repo(store)
    assert last is not first and last is not again
    assert R.container_prefixes(last) == [f"{(tmp_path / 'elsewhere').as_uri()}/"]
