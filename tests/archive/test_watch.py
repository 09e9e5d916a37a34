"""`toolkit archive watch`: events drive partitioning. A writer appends to stores while real
watcher processes follow its notifications; at the end every key resolves, every manifest
validates, and the tier counts hold each event exactly once, with one watcher or two."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import unquote_plus

import pytest
from typer.testing import CliRunner

from tests.archive import zarrgen
from toolkit import storage
from toolkit.archive.manifests import ManifestStore
from toolkit.archive.resolve import Trie
from toolkit.archive.schema import validate_document
from toolkit.archive.tierstore import TierStore
from toolkit.archive.watch import batches
from toolkit.cli import app

POLICY = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]
EXE = str(Path(sys.executable).parent / "toolkit")


def s3_line(key: str, seq: int, bucket: str = "bkt", name: str = "ObjectCreated:Put") -> str:
    """One S3 notification, as a bucket sends it, on one line."""
    obj = {"key": key, "size": 1000, "sequencer": f"{seq:016x}"}
    rec = {"eventName": name, "s3": {"bucket": {"name": bucket}, "object": obj}}
    return json.dumps({"Records": [rec]}) + "\n"


class Notifier:
    """Writes objects and, after each, an S3 notification line, as a bucket would."""

    def __init__(self, data: storage.Store, path: Path) -> None:
        self.data, self.path, self.n, self.lines = data, path, 0, 0
        path.touch()

    def announce(self, keys: list[str], name: str = "ObjectCreated:Put") -> None:
        with self.path.open("a") as f:
            for k in keys:
                self.n += 1
                f.write(s3_line(k, self.n, name=name))
                self.lines += 1

    def new_keys(self, before: set[str]) -> list[str]:
        return sorted(set(storage.list_keys(self.data)) - before)


def _watch(data: Path, manifests: Path, events: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [EXE, "archive", "watch", "--data", str(data), "--manifests", str(manifests),
         "--events", str(events), "--executor", "sync", "--debounce", "0.2", "--json",
         *POLICY, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _await_line(proc: subprocess.Popen[str], line: int) -> list[dict]:
    """Batch reports until one covers `line` of the events file (blocks on the pipe)."""
    seen = []
    assert proc.stdout is not None
    while True:
        out = proc.stdout.readline()
        assert out, (
            f"watcher ended early: {proc.wait()} {proc.stderr.read() if proc.stderr else ''}"
        )
        seen.append(json.loads(out))
        if seen[-1]["lines"][1] >= line:
            return seen


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""


def _check_end_state(
    data: storage.Store, manifests: storage.Store, events: Path | list[str], strip: str = ""
) -> None:
    """Every key resolves to a blob or hot; every manifest validates; the tier write counts are
    the chunk writes announced, each once (`strip`: the bucket prefix of the data root)."""
    ms = ManifestStore(manifests)
    loaded = ms.load_all()
    for m in loaded:
        assert validate_document(json.loads(m.dumps())) == []
    trie = Trie(loaded)
    answers = {k: trie.lookup(k) for k in storage.list_keys(data)}
    assert {r.kind for r in answers.values()} <= {"blob", "hot"}, [
        (k, r) for k, r in answers.items() if r.kind not in ("blob", "hot")
    ][:3]
    lines = events.read_text().splitlines() if isinstance(events, Path) else events
    records = [json.loads(line)["Records"][0] for line in lines]
    want: dict[str, Counter] = {"write": Counter(), "read": Counter()}
    for rec in records:
        key = unquote_plus(rec["s3"]["object"]["key"])
        if not key.startswith(strip):
            continue
        r = answers[key.removeprefix(strip)]
        if r.blob:
            want["write" if "Created" in rec["eventName"] else "read"][(r.scope, r.blob)] += 1
    tiers = TierStore(manifests)
    have: dict[str, Counter] = {"write": Counter(), "read": Counter()}
    for m in loaded:
        state, _ = tiers.read(m.scope)
        for blob, t in state.blobs.items():
            have["write"][(m.scope, blob)] += t.usage.writes
            have["read"][(m.scope, blob)] += t.usage.reads
    assert {k: +c for k, c in have.items()} == want


def _grow(data: storage.Store, note: Notifier) -> None:
    """Phase 2 of the writer: append to tas, add an array, start a second store."""
    before = set(storage.list_keys(data))
    zarrgen.v3_array(data, "cordex/a.zarr/tas", (80, 4, 4), (1, 2, 2), shards=(2, 4, 4),
                     dims=("time", "lat", "lon"), object_bytes=1000)  # fmt: skip
    note.announce(note.new_keys(before))
    before = set(storage.list_keys(data))
    zarrgen.v3_array(data, "cordex/a.zarr/tasmax", (40, 4), (4, 4), object_bytes=900)
    note.announce(note.new_keys(before))
    before = set(storage.list_keys(data))
    zarrgen.cordex_v3(data, "cordex/b.zarr")
    note.announce(note.new_keys(before))


@pytest.mark.slow
@pytest.mark.parametrize("watchers", [1, 2])
def test_watchers_follow_a_writer_appending(tmp_path: Path, watchers: int) -> None:
    data_dir, m_dir, events = tmp_path / "data", tmp_path / "m", tmp_path / "events.jsonl"
    data = storage.open_store(str(data_dir))
    note = Notifier(data, events)
    zarrgen.cordex_v3(data)
    note.announce(sorted(storage.list_keys(data)))
    procs = [_watch(data_dir, m_dir, events) for _ in range(watchers)]
    try:
        for p in procs:
            _await_line(p, note.lines)  # phase 1 partitioned by whoever won
        _grow(data, note)  # phase 2 while they run
        reports = [_await_line(p, note.lines) for p in procs]
    finally:
        for p in procs:
            _stop(p)
    manifests = storage.open_store(str(m_dir))
    _check_end_state(data, manifests, events)
    ms = ManifestStore(manifests)
    assert ms.scopes() == ["cordex/a.zarr", "cordex/b.zarr"]
    epoch = ms.read("cordex/a.zarr").manifest.epoch
    assert epoch >= 2  # tasmax arrived after the first cut and was claimed by a new epoch
    written = [w for rs in reports for r in rs for w in r["written"]]
    assert all(w["epoch"] <= epoch for w in written)


def test_replayed_events_change_nothing(tmp_path: Path) -> None:
    data_dir, m_dir, events = tmp_path / "data", tmp_path / "m", tmp_path / "events.jsonl"
    data = storage.open_store(str(data_dir))
    note = Notifier(data, events)
    zarrgen.cordex_v3(data)
    note.announce(sorted(storage.list_keys(data)))
    note.announce(sorted(storage.list_keys(data))[:5], "s3:ObjectAccessed:Get")
    args = ["archive", "watch", "--data", str(data_dir), "--manifests", str(m_dir),
            "--events", str(events), "--once", "--executor", "sync", "--json", *POLICY]  # fmt: skip
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout.splitlines()[-1])
    assert doc["partitioned"] == ["cordex/a.zarr"] and doc["written"][0]["epoch"] == 1
    assert doc["writes"] > 0 and doc["reads"] > 0
    snapshot = {p: p.read_bytes() for p in m_dir.rglob("*.json")}
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout.splitlines()[-1])
    assert (doc["written"], doc["reads"], doc["writes"]) == ([], 0, 0)
    assert {p: p.read_bytes() for p in m_dir.rglob("*.json")} == snapshot
    _check_end_state(data, storage.open_store(str(m_dir)), events)


def test_a_scope_keeps_the_policy_in_its_manifest(tmp_path: Path) -> None:
    """A scope partitioned before is re-cut with its own policy, whatever the flags say."""
    data_dir, m_dir, events = tmp_path / "data", tmp_path / "m", tmp_path / "events.jsonl"
    data = storage.open_store(str(data_dir))
    zarrgen.cordex_v3(data)
    res = CliRunner().invoke(app, ["archive", "partition", "--data", str(data_dir),
                                   "--manifests", str(m_dir), *POLICY])  # fmt: skip
    assert res.exit_code == 0, res.output
    note = Notifier(data, events)
    before = set(storage.list_keys(data))
    zarrgen.v3_array(data, "cordex/a.zarr/tasmax", (40, 4), (4, 4), object_bytes=900)
    note.announce(note.new_keys(before))
    res = CliRunner().invoke(app, ["archive", "watch", "--data", str(data_dir), "--manifests",
                                   str(m_dir), "--events", str(events), "--once", "--executor",
                                   "sync", "--t-max", "1TiB", "--t-hot", "1TiB",
                                   "--t-min", "1GiB"])  # fmt: skip
    assert res.exit_code == 0, res.output
    man = ManifestStore(storage.open_store(str(m_dir))).read("cordex/a.zarr").manifest
    assert man.epoch == 2 and man.policy.t_max == 5000
    assert any("cordex/a.zarr/tasmax" in b.prefixes for b in man.blobs)  # not hot by 1 TiB


def test_a_burst_is_one_batch_and_quiet_closes_it() -> None:
    r, w = os.pipe()
    stream = batches(r, follow=True, debounce=0.3, max_wait=30)
    try:
        os.write(w, b"".join(b'{"n": %d}\n' % i for i in range(50)))
        first = next(stream)
        assert [n for n, _ in first] == list(range(1, 51))
        os.write(w, b'{"n": 50}\n\n{"n": 51}')  # a blank line, then a line with no newline yet
        os.close(w)
        assert [n for n, _ in next(stream)] == [51, 53]
        assert next(stream, None) is None  # the pipe closed
    finally:
        os.close(r)


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        ("not json\n", "line 1: not JSON"),
        ('{"Records": [{"s3": {}}]}\n', "line 1: S3 record 0: missing field 'eventName'"),
        ('{"foo": 1}\n', "line 1: record 0: not an S3, MinIO or GCS Pub/Sub notification"),
    ],
)
def test_a_bad_line_is_named_and_nothing_is_written(tmp_path: Path, lines: str, words: str) -> None:
    data_dir, m_dir, events = tmp_path / "data", tmp_path / "m", tmp_path / "events.jsonl"
    zarrgen.cordex_v3(storage.open_store(str(data_dir)))
    events.write_text(lines)
    res = CliRunner().invoke(app, ["archive", "watch", "--data", str(data_dir), "--manifests",
                                   str(m_dir), "--events", str(events), "--once",
                                   "--executor", "sync"])  # fmt: skip
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [f"error: {words}"] or words in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not m_dir.exists() or not list(m_dir.rglob("*.json"))


def test_a_missing_events_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    res = CliRunner().invoke(app, ["archive", "watch", "--data", str(tmp_path / "data"),
                                   "--events", str(tmp_path / "nope.jsonl"), "--once"])  # fmt: skip
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        f"error: --events {tmp_path / 'nope.jsonl'}: no such file (pass a file of "
        "notifications, or -)"
    )


def test_watch_reads_stdin_and_keys_outside_every_store_are_named(tmp_path: Path) -> None:
    data_dir, m_dir = tmp_path / "data", tmp_path / "m"
    data = storage.open_store(str(data_dir))
    zarrgen.cordex_v3(data)
    storage.put(data, "loose/file.bin", b"x")
    keys = [*sorted(storage.list_keys(data, "cordex")), "loose/file.bin"]
    lines = "".join(s3_line(k, i) for i, k in enumerate(keys))
    res = subprocess.run(
        [EXE, "archive", "watch", "--data", str(data_dir), "--manifests", str(m_dir),
         "--executor", "sync", *POLICY],
        input=lines, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "1 written (cordex/a.zarr epoch 1)" in res.stdout
    assert "1 key(s) under no Zarr store (e.g. loose/file.bin)" in res.stdout


@pytest.mark.slow
def test_watch_on_s3_and_a_running_cluster(s3_endpoint: str, cluster_address: str) -> None:
    """Bucket keys under the data root's prefix are taken relative to it; keys of another
    prefix are not this root's. The batch runs as a graph on the external cluster."""
    from tests.conftest import make_bucket

    bucket = make_bucket(s3_endpoint)
    opts = ["--endpoint", s3_endpoint, "--region", "us-east-1", "--allow-http", "--path-style"]
    data = storage.open_store(f"s3://{bucket}/root", endpoint=s3_endpoint, region="us-east-1",
                              allow_http=True, path_style=True)  # fmt: skip
    zarrgen.cordex_v3(data)
    keys = [f"root/{k}" for k in sorted(storage.list_keys(data))] + ["other/x.zarr/zarr.json"]
    lines = "".join(s3_line(k, i, bucket) for i, k in enumerate(keys))
    res = subprocess.run(
        [EXE, "archive", "watch", "--data", f"s3://{bucket}/root", "--manifests",
         f"s3://{bucket}/manifests", "--cluster", cluster_address, "--once", "--json", *POLICY,
         *opts],
        input=lines, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout.splitlines()[-1])
    assert doc["written"] == [{"scope": "cordex/a.zarr", "epoch": 1}] and doc["outside"] == 0
    manifests = storage.open_store(f"s3://{bucket}/manifests", endpoint=s3_endpoint,
                                   region="us-east-1", allow_http=True, path_style=True)  # fmt: skip
    assert ManifestStore(manifests).scopes() == ["cordex/a.zarr"]
    state, _ = TierStore(manifests).read("cordex/a.zarr")
    assert sum(t.usage.writes for t in state.blobs.values()) == doc["writes"] > 0


@pytest.mark.slow
def test_the_s3_servers_own_notifications_drive_the_watch(s3_endpoint: str) -> None:
    """The S3 server queues its own ObjectCreated notifications (bucket -> SQS); a pump drains
    the queue into the watcher's stdin while a writer builds and grows stores. The manifests
    live in the same bucket, so the watcher also hears its own writes, and ignores them."""
    import boto3

    from tests.conftest import make_bucket

    bucket = make_bucket(s3_endpoint)
    sqs = boto3.client("sqs", endpoint_url=s3_endpoint, region_name="us-east-1")
    queue = sqs.create_queue(QueueName=bucket)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={"QueueConfigurations": [
            {"QueueArn": arn["Attributes"]["QueueArn"], "Events": ["s3:ObjectCreated:*"]}]},
    )  # fmt: skip
    where = {"endpoint": s3_endpoint, "region": "us-east-1", "allow_http": True, "path_style": True}
    data = storage.open_store(f"s3://{bucket}/root", **where)
    opts = ["--endpoint", s3_endpoint, "--region", "us-east-1", "--allow-http", "--path-style"]
    proc = subprocess.Popen(
        [EXE, "archive", "watch", "--data", f"s3://{bucket}/root", "--manifests",
         f"s3://{bucket}/manifests", "--executor", "sync", "--debounce", "0.2", "--json",
         *POLICY, *opts],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    pumped: list[str] = []

    def pump() -> None:
        """Move what the queue holds into the watcher (the server queued it synchronously)."""
        assert proc.stdin is not None
        while msgs := sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages"):
            for msg in msgs:
                pumped.append(msg["Body"])
                proc.stdin.write(msg["Body"] + "\n")
                sqs.delete_message(QueueUrl=queue, ReceiptHandle=msg["ReceiptHandle"])
        proc.stdin.flush()

    try:
        zarrgen.cordex_v3(data)
        pump()
        _await_line(proc, len(pumped))
        note = Notifier(data, Path(os.devnull))
        note.announce = lambda keys, name="": None  # type: ignore[method-assign]  # the server announces
        _grow(data, note)
        pump()  # the growth, and the manifests' own notifications
        _await_line(proc, len(pumped))
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the stream ends: the watcher exits after its last batch
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    manifests = storage.open_store(f"s3://{bucket}/manifests", **where)
    assert ManifestStore(manifests).scopes() == ["cordex/a.zarr", "cordex/b.zarr"]
    records = [json.loads(b) for b in pumped]
    assert records[0].get("Event") == "s3:TestEvent"  # sent when notifications are configured
    heard = {unquote_plus(r["Records"][0]["s3"]["object"]["key"]) for r in records[1:]}
    assert "manifests/cordex/a.zarr/manifest.json" in heard  # it heard its own writes
    _check_end_state(data, manifests, pumped[1:], strip="root/")


def test_watch_options_after_the_policy_are_named_never_placed() -> None:
    """`WatchOptions` once held `executor` fourth: a caller still placing it there must be
    refused, not have "dask" read as `break_lock` (a truthy flag that breaks live locks)."""
    from toolkit.archive.model import Policy
    from toolkit.archive.watch import WatchOptions

    policy = Policy(t_max=50 << 30, t_hot=64 << 20, t_min=10 << 30)
    with pytest.raises(TypeError):
        WatchOptions(policy, (), (), "dask")  # type: ignore[misc]
    assert WatchOptions(policy, break_lock=True).break_lock is True
    assert WatchOptions(policy).break_lock is False
