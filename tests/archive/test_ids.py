"""Blob ids are join keys against tape addresses: their derivation is frozen here."""

import json

from hypothesis import given
from hypothesis import strategies as st

from toolkit.archive import ids
from toolkit.archive.schema import schema

GOLDEN = {
    "tas": "tas",
    "Tas": "tas_017703ba",
    "tas_017703ba": "tas_017703ba_3a076f44",
    "grp/tas": "grp_tas_4bb6c3b1",
    "température": "temperature_ff73f7cc",
    "降水": "x_27a066a6",
    "a b": "a_b_c8687a08",
}


def test_golden_slugs() -> None:
    assert {name: ids.slug(name) for name in GOLDEN} == GOLDEN


def test_golden_blob_and_bucket_ids() -> None:
    assert ids.blob_id("b", "tas") == "b_tas"
    assert ids.blob_id("g", "grp/tas") == "g_grp_tas_4bb6c3b1"
    assert ids.blob_id("w", "root") == "w_root"
    assert ids.bucket_id("b_tas", 5_000_000, 2048) == "b_tas_2441"
    assert ids.bucket_id("b_tas", 2047, 2048) == "b_tas_0"
    # later cuts: the cut's number after the kind, which no first-cut id can spell
    assert ids.blob_id("w", "tas", 1) == "w_tas"
    assert ids.blob_id("b", "tas", 2) == "b2_tas"
    assert ids.blob_id("g", "grp/tas", 12) == "g12_grp_tas_4bb6c3b1"


names = st.text(min_size=1, max_size=12)


@given(
    st.tuples(st.sampled_from("wgb"), names, st.integers(1, 30)),
    st.tuples(st.sampled_from("wgb"), names, st.integers(1, 30)),
)
def test_ids_of_different_cuts_never_meet(a: tuple, b: tuple) -> None:
    """(kind, first array, cut) -> id is injective, so a re-cut never gives an id again."""
    if a != b:
        assert ids.blob_id(*a) != ids.blob_id(*b)


def test_one_rule_shared_with_the_schema() -> None:
    blob_schema = schema()["$defs"]["blob"]["properties"]["id"]
    assert blob_schema["pattern"] == ids.ID_PATTERN
    assert json.dumps(schema())  # the shipped file parses


@given(st.text(max_size=20))
def test_every_slug_is_a_valid_id_and_stable(name: str) -> None:
    out = ids.slug(name)
    assert ids.is_id(out)
    assert ids.slug(name) == out


@given(st.text(max_size=12), st.text(max_size=12))
def test_slug_is_injective(a: str, b: str) -> None:
    if a != b:
        assert ids.slug(a) != ids.slug(b)
