"""toolkit.storage against MemoryStore, LocalStore and S3 (moto on loopback)."""

from __future__ import annotations

import pickle
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import s3_options
from toolkit import storage


def test_listing_is_sorted_and_segment_aware(any_store: storage.Store) -> None:
    for key in ["b/2", "a/10", "a/9", "a/1", "ab/0", "c"]:
        storage.put(any_store, key, key.encode())
    assert storage.list_keys(any_store, "a") == ["a/1", "a/10", "a/9"]
    assert storage.list_keys(any_store) == ["a/1", "a/10", "a/9", "ab/0", "b/2", "c"]
    assert [i.size for i in storage.list_objects(any_store, "b")] == [3]


def test_range_read(any_store: storage.Store) -> None:
    storage.put(any_store, "data.bin", bytes(range(256)))
    assert storage.get_range(any_store, "data.bin", 10, 5) == bytes([10, 11, 12, 13, 14])
    assert storage.head(any_store, "data.bin").size == 256


def test_create_conflicts_and_keeps_the_first(any_store: storage.Store) -> None:
    storage.put(any_store, "m.json", b"first", mode="create")
    with pytest.raises(storage.AlreadyExists) as err:
        storage.put(any_store, "m.json", b"second", mode="create")
    assert "m.json" in str(err.value) and storage.location(any_store.url) in str(err.value)
    assert storage.get(any_store, "m.json").data == b"first"


def test_conditional_update_refuses_a_stale_etag(any_store: storage.Store) -> None:
    storage.put(any_store, "m.json", b"v1")
    read = storage.get(any_store, "m.json")
    storage.put(any_store, "m.json", b"v2", mode=read.version)
    with pytest.raises(storage.PreconditionFailed) as err:
        storage.put(any_store, "m.json", b"v3", mode=read.version)
    assert "m.json" in str(err.value)
    assert storage.get(any_store, "m.json").data == b"v2"


def test_missing_key_names_store_and_key(any_store: storage.Store) -> None:
    with pytest.raises(storage.NotFound) as err:
        storage.get(any_store, "nope/missing.bin")
    assert "nope/missing.bin" in str(err.value)
    assert not storage.exists(any_store, "nope/missing.bin")
    with pytest.raises(storage.NotFound):
        storage.get_range(any_store, "nope/missing.bin", 0, 4)


def test_delete_prefix(any_store: storage.Store) -> None:
    for i in range(5):
        storage.put(any_store, f"lvl/{i}", b"x")
    storage.put(any_store, "keep", b"x")
    assert storage.delete_prefix(any_store, "lvl") == 5
    assert storage.list_keys(any_store) == ["keep"]


def test_concurrent_conditional_updates_lose_no_write(any_store: storage.Store) -> None:
    """Read-modify-write counters through if-match: every increment lands exactly once."""
    storage.put(any_store, "counter", b"0")

    def bump(times: int) -> None:
        done = 0
        while done < times:
            blob = storage.get(any_store, "counter")
            try:
                storage.put(
                    any_store, "counter", str(int(blob.data) + 1).encode(), mode=blob.version
                )
                done += 1
            except storage.PreconditionFailed:
                continue

    threads = [threading.Thread(target=bump, args=(5,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert storage.get(any_store, "counter").data == b"15"


def test_unreachable_endpoint_is_named() -> None:
    store = storage.open_store(
        "s3://nobucket/x",
        endpoint="http://127.0.0.1:9",
        region="us-east-1",
        allow_http=True,
        path_style=True,
        timeout="1s",
        connect_timeout="1s",
        retry_seconds=1.5,
    )
    started = time.monotonic()
    with pytest.raises(storage.Unreachable) as err:
        storage.get(store, "k")
    took = time.monotonic() - started
    assert "s3://nobucket/x/k" in str(err.value)
    assert "http://127.0.0.1:9 did not answer within the 1.5 s retry budget" in str(err.value)
    assert 1.5 <= took < 6, f"retries should end at the budget, took {took:.1f} s"


def test_missing_bucket_is_an_error_naming_it(s3_endpoint: str) -> None:
    store = storage.open_store("s3://no-such-bucket-tk/p", **s3_options(s3_endpoint))
    with pytest.raises(storage.StorageError) as err:
        storage.put(store, "k", b"x")
    assert "no-such-bucket-tk" in str(err.value)


def test_stores_pickle_without_secrets(tmp_path) -> None:
    local = storage.open_store(str(tmp_path))
    clone = pickle.loads(pickle.dumps(local))
    storage.put(local, "k", b"v")
    assert storage.get(clone, "k").data == b"v"
    secret = storage.Store("s3://b/p", {"access_key_id": "AKIA", "secret_access_key": "s"})
    with pytest.raises(TypeError, match="secrets"):
        pickle.dumps(secret)
    with pytest.raises(TypeError, match="one process"):
        pickle.dumps(storage.open_store("memory://x"))


def test_memory_stores_are_shared_by_name() -> None:
    a = storage.open_store("memory://shared-by-name")
    b = storage.open_store("memory://shared-by-name")
    storage.put(a, "k", b"v")
    assert storage.get(b, "k").data == b"v"


def test_bad_urls_are_refused() -> None:
    with pytest.raises(storage.StorageError, match="ftp://"):
        storage.open_store("ftp://host/x")


def test_plain_paths_become_file_urls(tmp_path) -> None:
    store = storage.open_store(str(tmp_path / "a" / ".." / "b"))
    assert store.url == (tmp_path / "b").as_uri()
    assert store.local_path == tmp_path / "b"


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.text(alphabet="abc/0123", min_size=1, max_size=8).filter(
            lambda k: not k.startswith("/") and not k.endswith("/") and "//" not in k
        ),
        max_size=12,
        unique=True,
    )
)
def test_listing_matches_written_keys(keys: list[str]) -> None:
    store = storage.open_store(f"memory://prop-{abs(hash(tuple(keys)))}")
    storage.delete_prefix(store, "")
    written = []
    for k in keys:
        # a key cannot also be a "directory" of another key in real stores; skip such clashes
        if any(o.startswith(k + "/") or k.startswith(o + "/") for o in written):
            continue
        storage.put(store, k, b"x")
        written.append(k)
    assert storage.list_keys(store) == sorted(written)


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        # the digits of a duration once read as HTTP 403 (seen in CI)
        (
            "Error performing GET http://h/k in 1.821543403s, after 10 retries - HTTP error: "
            "error sending request",
            storage.Unreachable,
        ),
        ("Server returned non-2xx status code: 403 Forbidden", storage.AccessDenied),
        ("took 1.821543403s and failed oddly", storage.StorageError),
    ],
)
def test_error_classification_reads_status_codes_not_digits(message: str, kind: type) -> None:
    err = storage._translate(RuntimeError(message), storage.open_store("memory://cls"), "k")
    assert type(err) is kind and "memory://cls/k" in str(err)


def test_a_reader_open_of_a_missing_local_path_creates_nothing(tmp_path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(storage.NotFound, match="missing"):
        storage.open_store(str(missing), must_exist=True)
    assert not missing.exists()
    writer = storage.open_store(str(missing))  # the first use makes the directory, not the open
    assert not missing.exists()
    storage.put(writer, "k", b"x")
    assert missing.is_dir()
    assert storage.open_store(str(missing), must_exist=True).is_local


def test_reading_a_missing_local_root_creates_nothing(tmp_path) -> None:
    """A typo'd path read by list/get/head/exists answers "nothing there" and leaves no folder
    behind; the first write makes it."""
    root = tmp_path / "typo" / "store"
    s = storage.open_store(str(root))
    assert storage.list_keys(s) == [] and list(storage.iter_keys(s)) == []
    assert not storage.exists(s, "a/zarr.json")
    for read in (lambda: storage.get(s, "k"), lambda: storage.get_range(s, "k", 0, 1)):
        with pytest.raises(storage.NotFound, match="typo/store/k"):
            read()
    assert not (tmp_path / "typo").exists()
    storage.put(s, "a/k", b"x")
    assert storage.list_keys(s) == ["a/k"] and storage.get(s, "a/k").data == b"x"


def test_a_zarr_view_serves_the_storage_functions(tmp_path) -> None:
    """An Icechunk session seen through `toolkit.storage`: zarr keys read, written, listed and
    deleted; a key Icechunk cannot hold is one StorageError naming the view and the key."""
    import icechunk as ic
    import zarr

    from toolkit import icechunk as R

    repo = ic.Repository.create(ic.local_filesystem_storage(str(tmp_path / "repo")))
    repo.save_config()
    s = repo.writable_session("main")
    zarr.create_group(s.store).create_array("a", shape=(4, 4), chunks=(2, 2), dtype="f4")[:] = 1
    view = R.SessionView("repo@main", s)
    assert storage.list_keys(view, "a/") == [
        "a/c/0/0", "a/c/0/1", "a/c/1/0", "a/c/1/1", "a/zarr.json",
    ]  # fmt: skip
    assert storage.exists(view, "a/c/1/1") and not storage.exists(view, "a/c/2/2")
    body = storage.get(view, "a/c/0/0").data
    storage.put(view, "a/c/1/1", body)
    with pytest.raises(storage.AlreadyExists):
        storage.put(view, "a/c/1/1", body, mode="create")
    with pytest.raises(storage.NotFound, match="repo@main"):
        storage.get(view, "a/c/3/3")
    with pytest.raises(storage.StorageError, match=r"\.pyramid/plan\.json"):
        storage.put(view, ".pyramid/plan.json", b"{}")
    assert storage.delete_prefix(view, "a/c/0") == 2
    assert storage.list_keys(view, "a/") == ["a/c/1/0", "a/c/1/1", "a/zarr.json"]
    s.commit("views")
    head = R.BranchView(R.RepoRef(storage.open_store(str(tmp_path / "repo"))), "main")
    assert storage.list_keys(head, "a/") == ["a/c/1/0", "a/c/1/1", "a/zarr.json"]
    assert pickle.loads(pickle.dumps(head)) == head  # a gate observes it on any worker
    with pytest.raises(ValueError, match="read-only"):
        head.zarr(read_only=False)


@pytest.mark.parametrize("root", ["plain", "with space", "ünï#%"])
def test_a_local_object_url_is_what_pathlib_makes_of_it(tmp_path, root) -> None:
    """Local object URLs are made without pathlib for plain keys (a backfill makes one per file,
    20,000 of them); every key, plain or not, gets the URL `Path.as_uri` gives."""
    from pathlib import Path

    store = storage.open_store(str(tmp_path / root))
    keys = ["gfs.20250801/00/atmos/gfs.t00z.pgrb2.0p25.f000", "a", "a.idx", "a/b/c", "~x-y_z",
            "a//b", "a/./b", "./a", "a/../b", "..", ".", "a/", "a b", "a%20b", "a#b", "a?b",
            "é", "a:b", "/lead"]  # fmt: skip
    for key in keys:
        want = (Path(storage.file_path(store.url)) / key.lstrip("/")).as_uri()
        assert store.object_url(key) == want, key
