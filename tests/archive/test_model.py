"""Every malformed manifest is refused with a message naming the field."""

import copy
import json

import pytest

from toolkit.archive.model import (
    DEFAULT_HOT_ALWAYS,
    ArrayInfo,
    Blob,
    Bucket,
    Manifest,
    ManifestError,
    Pin,
    Policy,
)

POLICY = Policy(t_max=1000, t_hot=10, t_min=100)


def good_doc() -> dict:
    return {
        "format": "toolkit-archive-manifest/1",
        "scope": "cordex/a.zarr",
        "epoch": 2,
        "policy": {"t_max": 1000, "t_hot": 10, "t_min": 100},
        "hot_always": [*DEFAULT_HOT_ALWAYS, "README"],
        "hot": ["cordex/a.zarr/time"],
        "pins": [
            {"prefix": "cordex/a.zarr/pr", "who": "ana", "why": "paper", "until": "2027-01-31"}
        ],
        "blobs": [
            {
                "id": "b_tas",
                "cut": 1,
                "prefixes": ["cordex/a.zarr/tas"],
                "bucket": {"width": 4, "encoding": "default", "separator": "/", "count": 3},
                "bytes": 5000,
                "objects": 50,
            },
            {
                "id": "g_pr",
                "cut": 1,
                "prefixes": ["cordex/a.zarr/pr", "cordex/a.zarr/ps"],
                "bucket": None,
                "bytes": 300,
                "objects": 3,
            },
        ],
        "cuts": [{"cut": 1, "epoch": 1, "policy": {"t_max": 1000, "t_hot": 10, "t_min": 100}}],
        "retired": [
            {
                "id": "w_pr",
                "cut": 1,
                "prefixes": ["cordex/a.zarr/pr"],
                "bucket": None,
                "bytes": 100,
                "objects": 1,
                "retired_at": 2,
                "states": {"w_pr": "archived"},
            }
        ],
    }


def mutate(path: str, value: object) -> dict:
    doc = copy.deepcopy(good_doc())
    *head, last = path.split(".")
    target: object = doc
    for part in head:
        target = target[int(part)] if isinstance(target, list) else target[part]  # type: ignore[index]
    if value is DELETE:
        del target[last]  # type: ignore[arg-type]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value  # type: ignore[index]
    return doc


class _Delete:
    """The mutation that removes a field; one spelling in test ids, whatever the process."""

    def __repr__(self) -> str:
        return "<delete>"


DELETE = _Delete()

# (mutation, field the error must name); shared with test_schema.
MALFORMED = [
    (("epoch", 0), "epoch"),
    (("epoch", "3"), "epoch"),
    (("epoch", True), "epoch"),
    (("format", "other/9"), "format"),
    (("scope", ""), "scope"),
    (("scope", "/abs"), "scope"),
    (("policy.t_max", -1), "policy.t_max"),
    (("policy.t_min", DELETE), "policy.t_min"),
    (("blobs", DELETE), "blobs"),
    (("blobs.0.id", "B-TAS"), "blobs[0].id"),
    (("blobs.0.id", "tås"), "blobs[0].id"),
    (("blobs.0.prefixes", []), "blobs[0].prefixes"),
    (("blobs.0.bucket.count", None), "blobs[0].bucket.count"),  # absent or an integer, not null
    (("blobs.0.prefixes", ["cordex/a.zarr/tas", "cordex/a.zarr/x"]), "blobs[0].bucket"),
    (("blobs.0.prefixes.0", ""), "blobs[0].prefixes[0]"),
    (("blobs.0.prefixes.0", "cordex/a.zarr/tas/"), "blobs[0].prefixes[0]"),
    (("blobs.0.prefixes.0", "cordex/a.zarr/../b.zarr/tas"), "blobs[0].prefixes[0]"),
    (("pins.0.prefix", "cordex/a.zarr/./pr"), "pins[0].prefix"),
    (("hot.0", "cordex/a.zarr/.."), "hot[0]"),
    (("scope", "../a.zarr"), "scope"),
    (("blobs.0.bucket", {"width": 0}), "blobs[0].bucket.width"),
    (("blobs.0.bucket", {"width": 2, "encoding": "v9"}), "blobs[0].bucket.encoding"),
    (("blobs.0.bytes", -5), "blobs[0].bytes"),
    (("blobs.0.colour", "red"), "blobs[0].colour"),
    (("hot_always", ["zarr.json"]), "hot_always"),
    (("hot_always.0", "a/b"), "hot_always[0]"),
    (("pins.0.who", ""), "pins[0].who"),
    (("pins.0.until", "next week"), "pins[0].until"),
    (("extra", 1), "extra"),
    (("root_array", "yes"), "root_array"),
    (("blobs.0.cut", 0), "blobs[0].cut"),
    (("blobs.0.bucket.count", -1), "blobs[0].bucket.count"),
    (("cuts.0.cut", 0), "cuts[0].cut"),
    (("cuts.0.policy", DELETE), "cuts[0].policy"),
    (("retired.0.retired_at", DELETE), "retired[0].retired_at"),
    (("retired.0.states", {"w_pr": 3}), "retired[0].states"),
]

# Cross-field rules JSON Schema cannot express; the model refuses them.
SEMANTIC = [
    (("blobs.1.id", "b_tas"), "blobs[1].id"),  # duplicate id
    (("blobs.1.prefixes", ["cordex/a.zarr/tas/c/0"]), "blobs[1].prefixes[0]"),  # overlapping
    (("blobs.1.prefixes", ["cordex/a.zarr"]), "blobs[1].prefixes[0]"),  # swallows the scope
    (("blobs", [{"id": "w_all", "prefixes": ["cordex/a.zarr"]}]), "blobs[0].prefixes[0]"),  # alone
    (("hot", ["cordex/a.zarr"]), "hot[0]"),  # a hot prefix may not swallow the scope either
    (("hot.0", "cordex/a.zarr/tas"), "hot[0]"),  # hot and blob claim the same prefix
    (("blobs.1.prefixes", ["other/b.zarr/x"]), "blobs[1].prefixes[0]"),  # outside the scope
    (("policy.t_min", 5000), "policy.t_min"),  # t_min above t_max
    (("pins", [{"prefix": "cordex/a.zarr/x", "who": "a", "why": "b"}] * 2), "pins[1].prefix"),
    (("blobs.1.cut", 2), "blobs[1].cut"),  # a cut the manifest does not record
    (("retired.0.id", "b_tas"), "retired[0].blob.id"),  # a retired id is never given again
    (("cuts.0.policy.t_max", 2000), "policy"),  # the policy is the newest cut's
]


def test_good_document_round_trips() -> None:
    m = Manifest.from_dict(good_doc())
    assert m.to_dict() == good_doc()
    assert Manifest.loads(m.dumps()) == m


@pytest.mark.parametrize(("mutation", "field"), MALFORMED + SEMANTIC, ids=lambda v: str(v))
def test_malformed_is_refused_naming_the_field(mutation: tuple, field: str) -> None:
    with pytest.raises(ManifestError) as err:
        Manifest.from_dict(mutate(*mutation))
    assert err.value.field == field
    assert repr(field) in str(err.value)


def test_only_a_root_array_store_may_claim_its_scope() -> None:
    doc = {
        **good_doc(),
        "scope": "bare/arr",
        "hot": [],
        "pins": [],
        "root_array": True,
        "retired": [],
        "blobs": [
            {
                "id": "w_root",
                "cut": 1,
                "prefixes": ["bare/arr"],
                "bucket": None,
                "bytes": 1,
                "objects": 1,
            }
        ],
    }
    m = Manifest.from_dict(doc)
    assert m.root_array and m.to_dict() == doc and Manifest.loads(m.dumps()) == m
    with pytest.raises(ManifestError, match="swallow every future array") as err:
        Manifest.from_dict({**doc, "root_array": False})
    assert err.value.field == "blobs[0].prefixes[0]"
    assert "root_array" not in Manifest.from_dict(good_doc()).to_dict()  # group stores unchanged


def test_bad_json_is_refused() -> None:
    with pytest.raises(ManifestError, match="not valid JSON") as err:
        Manifest.loads(b"{not json", source="s3://m/a.json")
    assert "s3://m/a.json" in str(err.value)
    with pytest.raises(ManifestError, match="JSON object"):
        Manifest.loads(json.dumps([1, 2]))


def test_epoch_going_backwards_is_refused() -> None:
    m = Manifest.from_dict(good_doc())
    older = Manifest.from_dict(mutate("epoch", 1))
    same = Manifest.from_dict(good_doc())
    with pytest.raises(ManifestError) as err:
        older.check_successor(m)
    assert err.value.field == "epoch" and "does not increase" in str(err.value)
    with pytest.raises(ManifestError):
        same.check_successor(m)
    m.bumped().check_successor(m)


def test_dataclass_construction_validates() -> None:
    with pytest.raises(ManifestError, match="owns no prefix"):
        Blob("b_x", ())
    with pytest.raises(ManifestError, match="does not match"):
        Blob("X", ("a/x",))
    with pytest.raises(ManifestError):
        Manifest("s", 1, POLICY, blobs=(Blob("a", ("s/x",)), Blob("a", ("s/y",))))
    with pytest.raises(ManifestError):
        Pin("s/x", "who", " ")


def test_pins_add_and_remove_bump_the_epoch() -> None:
    m = Manifest.from_dict(good_doc())
    pinned = m.with_pin(Pin("cordex/a.zarr/tas", "bo", "campaign"))
    assert pinned.epoch == m.epoch + 1 and len(pinned.pins) == 2
    unpinned = pinned.without_pin("cordex/a.zarr/tas")
    assert unpinned.epoch == m.epoch + 2 and unpinned.pins == m.pins
    with pytest.raises(ManifestError, match="no pin"):
        unpinned.without_pin("cordex/a.zarr/tas")


@pytest.mark.parametrize(
    ("bucket", "rest", "index"),
    [
        (Bucket(2, "default", "/"), "c/5/0", 5),
        (Bucket(2, "default", "."), "c.7.1", 7),
        (Bucket(2, "v2", "."), "9.0", 9),
        (Bucket(2, "v2", "/"), "11/0", 11),
        (Bucket(2, "default", "/"), "c", 0),
        (Bucket(2, "default", "/"), "zarr.json", None),
        (Bucket(2, "v2", "."), "x.0", None),
        (Bucket(2, "default", "."), "c.1/2", None),
    ],
)
def test_first_chunk_index(bucket: Bucket, rest: str, index: int | None) -> None:
    assert bucket.first_index(rest) == index


def test_array_info_geometry() -> None:
    a = ArrayInfo("s/t", (10, 7, 3), (4, 2, 3), dimension_names=("time", "y", "x"))
    assert a.grid == (3, 4, 1) and a.slab_objects == 4 and not a.is_coordinate
    assert ArrayInfo("s/time", (10,), (5,), dimension_names=("time",)).is_coordinate
    assert ArrayInfo("s/scalar", (), ()).grid == ()
    with pytest.raises(ValueError, match="rank"):
        ArrayInfo("s/t", (10,), (1, 1))
