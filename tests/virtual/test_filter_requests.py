"""The filter never reads a source byte: every request the source bucket receives is counted
by the S3 emulator's own request recorder while the filter runs over ingested and missing
files alike."""

from __future__ import annotations

import json
from urllib.parse import urlparse

import pytest
import requests

from tests.conftest import s3_options
from tests.virtual.test_backfill import sim
from tests.virtual.test_repo import public_bucket
from toolkit import storage
from toolkit.virtual.source_io import discover, file_refs
from toolkit.virtual.write import ensure_repo, filter_already_present, run


@pytest.fixture
def recorder(s3_endpoint, tmp_path):
    """Start/stop moto's request recorder; yields a function returning the recorded requests."""
    from moto.moto_api import recorder as rec

    old = rec._location
    rec._location = str(tmp_path / "moto-recording")  # keep the log out of the checkout
    api = f"{s3_endpoint}/moto-api/recorder"

    class Recording:
        def start(self) -> None:
            requests.post(f"{api}/reset-recording", timeout=10).raise_for_status()
            requests.post(f"{api}/start-recording", timeout=10).raise_for_status()

        def stop(self) -> list[dict]:
            requests.post(f"{api}/stop-recording", timeout=10).raise_for_status()
            text = requests.get(f"{api}/download-recording", timeout=10).text
            return [json.loads(line) for line in text.splitlines() if line.strip()]

    try:
        yield Recording()
    finally:
        requests.post(f"{api}/stop-recording", timeout=10)
        rec._location = old


def to_bucket(entries: list[dict], bucket: str) -> list[str]:
    out = []
    for e in entries:
        u = urlparse(e["url"])
        if u.path.lstrip("/").split("/", 1)[0] == bucket or u.netloc.startswith(f"{bucket}."):
            out.append(f"{e['method']} {u.path}")
    return out


def test_filter_sends_no_request_to_the_source(s3_endpoint, recorder, tmp_path):
    bucket = public_bucket(s3_endpoint)
    src = storage.open_store(f"s3://{bucket}/src", **s3_options(s3_endpoint))
    _, _, ds = sim(src, storage.open_store(str(tmp_path / "repo")), publish=6)
    ensure_repo(ds)
    assert len(run(ds).ingested) == 6
    coords = ds.files()

    recorder.start()
    todo = filter_already_present(ds, coords)  # 6 present (probe hits), 6 absent (misses)
    seen = recorder.stop()
    assert [c.key for c in todo] == [c.key for c in coords[6:]]
    assert to_bucket(seen, bucket) == []

    # The counter does see this bucket: discovery and one file's refs hit it.
    recorder.start()
    found = discover(ds.dataset.source, coords[:6])
    file_refs(ds.dataset.source, *found[0][:2])
    hits = to_bucket(recorder.stop(), bucket)
    assert any(h.startswith("GET") for h in hits) and len(hits) >= 3, hits


def test_discovery_lists_directories_at_once_each_once(tmp_path, monkeypatch):
    """Files of four init times sit in four directories: their listings overlap (a round
    trip each, not one after another) and each directory is listed once; what is found is
    what one listing at a time finds, data object and index both required."""
    import threading
    import time

    archive, files, ds = sim(
        storage.open_store(str(tmp_path / "src")), storage.open_store(str(tmp_path / "repo"))
    )
    storage.delete(archive.store, archive.index_key(files[1]))  # listed without its index
    coords = ds.files()
    serial = discover(ds.dataset.source, coords, concurrency=1)
    plain = storage.list_objects
    calls: list[str] = []
    flying = [0, 0]  # now, most
    lock = threading.Lock()

    def slow_listing(store, prefix=""):
        with lock:
            calls.append(prefix)
            flying[0] += 1
            flying[1] = max(flying)
        time.sleep(0.05)
        with lock:
            flying[0] -= 1
        return plain(store, prefix)

    monkeypatch.setattr(storage, "list_objects", slow_listing)
    found = discover(ds.dataset.source, coords, concurrency=8)
    dirs = {c.get_url().rsplit("/", 1)[0] for c in coords}
    assert len(dirs) == 4 and len(calls) == len(set(calls)) == 4
    assert flying[1] == 4  # all four at once
    assert found == serial and len(found) == len(coords) - 1
    assert archive.data_url(files[1]) not in {c.get_url() for c, *_ in found}
