"""Store discovery, event parsing (S3, MinIO, GCS Pub/Sub) and the live resolver."""

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.archive import zarrgen
from toolkit import storage
from toolkit.archive.discover import (
    Event,
    EventError,
    LiveResolver,
    dedupe,
    find_stores,
    parse_events,
    read_events,
)
from toolkit.archive.manifests import ManifestStore
from toolkit.archive.model import Blob, Manifest, ManifestError, Policy

P = Policy(1000, 10, 100)


def s3_record(
    key: str, name: str = "ObjectCreated:Put", seq: str = "0A1", who: str = "AWS:AID"
) -> dict:
    return {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "eventName": name,
        "eventTime": "2026-11-30T00:00:00.000Z",
        "userIdentity": {"principalId": who},
        "s3": {"bucket": {"name": "data"}, "object": {"key": key, "size": 5, "sequencer": seq}},
    }


def test_s3_notification_keys_are_url_decoded() -> None:
    doc = {
        "Records": [
            s3_record("cordex/a+b.zarr/t%C3%A4s/c/0"),
            s3_record("x/y", "ObjectRemoved:Delete", "0A2"),
        ]
    }
    events = parse_events(doc)
    assert events == [
        Event("cordex/a b.zarr/täs/c/0", "write", "AWS:AID", "data"),
        Event("x/y", "delete", "AWS:AID", "data"),
    ]


def test_minio_webhook() -> None:
    doc = {
        "EventName": "s3:ObjectAccessed:Get",
        "Key": "data/a.zarr/t/c/1",
        "Records": [
            {
                **s3_record("a.zarr/t/c/1", "s3:ObjectAccessed:Get", "17A"),
                "userIdentity": {"principalId": "minioadmin"},
            }
        ],
    }
    (e,) = parse_events(doc)
    assert (e.key, e.event, e.principal) == ("a.zarr/t/c/1", "read", "minioadmin")


def test_gcs_pubsub_push_and_pull() -> None:
    body = base64.b64encode(
        json.dumps({"name": "a.zarr/t/c/2", "owner": {"entity": "user-bo"}}).encode()
    ).decode()
    attrs = {
        "eventType": "OBJECT_FINALIZE",
        "bucketId": "b",
        "objectId": "a.zarr/t/c/2",
        "objectGeneration": "7",
    }
    push = {"message": {"attributes": attrs, "data": body, "messageId": "m1"}, "subscription": "s"}
    (e,) = parse_events(push)
    assert (e.key, e.event, e.principal, e.bucket) == ("a.zarr/t/c/2", "write", "user-bo", "b")
    (d,) = parse_events({"attributes": {**attrs, "eventType": "OBJECT_DELETE"}})
    assert (d.event, d.principal) == ("delete", None)


def test_redelivered_events_are_deduplicated_from_jsonl() -> None:
    rec = json.dumps({"Records": [s3_record("a/b")]})
    other = json.dumps({"Records": [s3_record("a/b", seq="0B9")]})
    events = list(dedupe(read_events("\n".join([rec, rec, other, ""]))))
    assert len(events) == 2


def test_sns_envelope_and_s3_test_event() -> None:
    inner = {"Records": [s3_record("a.zarr/t/c/3", "ObjectCreated:CompleteMultipartUpload")]}
    sns = {"Type": "Notification", "MessageId": "x", "Message": json.dumps(inner)}
    (e,) = parse_events(sns)
    assert (e.key, e.event) == ("a.zarr/t/c/3", "write")
    test_event = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "data"}
    assert read_events("\n".join([json.dumps(test_event), json.dumps(sns)])) == [e]
    with pytest.raises(EventError, match="SNS 'Message' is not JSON"):
        parse_events({"Type": "Notification", "Message": "{oops"})


def test_bad_event_records_name_the_problem() -> None:
    with pytest.raises(EventError, match="missing field"):
        parse_events({"Records": [{"eventName": "ObjectCreated:Put"}]})
    with pytest.raises(EventError, match="not an S3, MinIO or GCS"):
        parse_events({"hello": 1})
    with pytest.raises(EventError, match="line 2"):
        read_events('{"Records": []}\n{oops')


@given(st.text(min_size=1, max_size=30))
def test_any_key_survives_url_encoding(key: str) -> None:
    from urllib.parse import quote_plus

    (e,) = parse_events({"Records": [s3_record(quote_plus(key, safe="/"))]})
    assert e.key == key


def test_find_stores(any_store: storage.Store) -> None:
    zarrgen.cordex_v3(any_store, "cordex/a.zarr")
    zarrgen.v2_group(any_store, "old.zarr")
    zarrgen.v2_array(any_store, "old.zarr/t", (2,), (1,))
    zarrgen.v3_array(any_store, "bare/arr", (2,), (1,))  # a store whose root is an array
    storage.put(any_store, "misc/file.bin", b"x")
    assert find_stores(any_store) == ["bare/arr", "cordex/a.zarr", "old.zarr"]
    assert find_stores(any_store, exclude=["cordex"]) == ["bare/arr", "old.zarr"]
    solo = any_store.child("solo")
    storage.put(solo, ".zgroup", b'{"zarr_format": 2}')
    with pytest.raises(ValueError, match="itself a Zarr store"):
        find_stores(solo)


def test_live_resolver_follows_epochs(any_store: storage.Store) -> None:
    ms = ManifestStore(any_store)
    m1 = Manifest("a.zarr", 1, P, blobs=(Blob("w_t", ("a.zarr/t",)),))
    ms.write(m1, None)
    live = LiveResolver(ms)
    assert live.lookup("a.zarr/u/c/0").kind == "unmanaged"
    m2 = m1.bumped(blobs=(*m1.blobs, Blob("w_u", ("a.zarr/u",))))
    ms.write(m2, ms.read("a.zarr"))
    assert live.refresh() == ["a.zarr"]
    assert live.lookup("a.zarr/u/c/0").blob == "w_u" and live.epoch("a.zarr") == 2
    assert live.refresh() == []
    assert live.on_event(Event("a.zarr/manifest.json", "write", None)) is False  # same epoch
    storage.put(any_store, "a.zarr/manifest.json", m1.dumps())  # someone rolls it back
    with pytest.raises(ManifestError, match="backwards"):
        live.refresh()
    assert live.lookup("a.zarr/u/c/0").blob == "w_u"


def test_live_resolver_takes_bucket_keys_of_a_prefixed_manifest_store(s3_endpoint: str) -> None:
    from tests.conftest import make_bucket, s3_options

    bucket = make_bucket(s3_endpoint)
    ms = ManifestStore(
        storage.open_store(f"s3://{bucket}/ops/manifests", **s3_options(s3_endpoint))
    )
    m1 = Manifest("a.zarr", 1, P, blobs=(Blob("w_t", ("a.zarr/t",)),))
    ms.write(m1, None)
    live = LiveResolver(ms)
    ms.write(m1.bumped(blobs=(*m1.blobs, Blob("w_u", ("a.zarr/u",)))), ms.read("a.zarr"))
    key = "ops/manifests/a.zarr/manifest.json"  # what the notification carries
    assert live.on_event(Event(key, "write", None, "elsewhere")) is False
    assert live.on_event(Event("other/a.zarr/manifest.json", "write", None, bucket)) is False
    assert live.on_event(Event(key, "write", None, bucket)) is True
    assert live.lookup("a.zarr/u/c/0").blob == "w_u"
