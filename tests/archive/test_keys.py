"""The key rule: a `.`, `..` or empty segment, or an empty key, is refused naming the key; any
other key is accepted as written (a leading '/' dropped) and resolves within its own scope.
Pins inside or around a pin, or until a past date, are refused unless forced."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from toolkit.archive.keys import BadKey, check_key, check_pasted, key_problem
from toolkit.archive.model import (
    Blob,
    Bucket,
    Manifest,
    ManifestError,
    Pin,
    PinOverlaps,
    PinRefused,
    Policy,
)
from toolkit.archive.resolve import Trie

P = Policy(1000, 10, 100)
A = Manifest(
    "s/a.zarr", 1, P, blobs=(Blob("b_v", ("s/a.zarr/v",), Bucket(4)),), hot=("s/a.zarr/t",)
)
B = Manifest("s/b.zarr", 3, P, blobs=(Blob("w_v", ("s/b.zarr/v",)),))
BAD = (".", "..", "")

# segments a store may hold: unicode, spaces, dots that are not the whole segment
good_segments = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/"), min_size=1, max_size=8
).filter(lambda s: s not in (".", ".."))
any_segments = good_segments | st.sampled_from(BAD)


@given(st.lists(any_segments, min_size=1, max_size=6), st.booleans())
def test_a_key_is_refused_exactly_when_a_segment_is_dot_dotdot_or_empty(
    segments: list[str], slash: bool
) -> None:
    assume(slash or segments[0] != "" or len(segments) == 1)  # else that '' is the lead '/'
    key = ("/" if slash else "") + "/".join(segments)
    bad = any(s in BAD for s in segments)
    if bad:
        with pytest.raises(BadKey) as err:
            check_key(key)
        line = str(err.value)
        assert line.startswith(f"key {key!r} ") and "\n" not in line
        assert key_problem("/".join(segments)) is not None
    else:
        assert check_key(key) == "/".join(segments)  # as written, a leading '/' dropped
        assert key_problem("/".join(segments)) is None


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("", "is empty"),
        ("/", "is empty"),
        ("a/../b", "'..' segment"),
        ("./a", "'.' segment"),
        ("a/b/", "empty segment"),
        ("a//b", "empty segment"),
        ("//a", "empty segment"),
    ],
)
def test_each_refusal_names_the_key_the_cause_and_the_fix(key: str, says: str) -> None:
    with pytest.raises(BadKey, match="prefix") as err:
        check_key(key, "prefix")
    assert repr(key) in str(err.value) and says in str(err.value)
    assert ":" in str(err.value).split(says, 1)[1]  # then the fix


@given(
    st.sampled_from([A, B]),
    st.lists(good_segments, min_size=1, max_size=4),
    st.sampled_from(["", "/", "s3://bkt/pre/", "file:///mnt/d/"]),
)
def test_a_valid_key_resolves_within_its_scope(m: Manifest, rest: list[str], head: str) -> None:
    key = f"{m.scope}/{'/'.join(rest)}"
    trie = Trie([A, B])
    answer = trie.resolve(head + key)
    assert answer.scope == m.scope
    assert answer == trie.lookup(key)


@given(
    st.sampled_from([A, B]),
    st.lists(any_segments, min_size=1, max_size=4).filter(lambda r: any(s in BAD for s in r)),
    st.sampled_from(["", "/", "s3://bkt/pre/", "file:///mnt/d/"]),
)
def test_an_invalid_key_is_refused_never_resolved(m: Manifest, rest: list[str], head: str) -> None:
    pasted = f"{head}{m.scope}/{'/'.join(rest)}"
    with pytest.raises(BadKey, match="key"):
        Trie([A, B]).resolve(pasted)
    with pytest.raises(BadKey):
        check_pasted(pasted)


def test_dotdot_cannot_climb_into_the_other_scope() -> None:
    """The measured bug: `a.zarr/../b.zarr/v/...` answered against a.zarr."""
    with pytest.raises(BadKey, match=r"'\.\.' segment"):
        Trie([A, B]).resolve("s/a.zarr/../b.zarr/v/c/0")
    with pytest.raises(BadKey, match="is empty"):
        Trie([A, B]).resolve("")


@pytest.mark.parametrize("prefix", ["s/a.zarr/../b.zarr", "s/a.zarr/./v", "s/a.zarr/.."])
def test_manifests_hold_no_dot_segments(prefix: str) -> None:
    with pytest.raises(ManifestError, match="segment"):
        Pin(prefix, "ana", "paper")
    with pytest.raises(ManifestError, match="segment"):
        Manifest("s/a.zarr", 1, P, hot=(prefix,))


TODAY = dt.date(2026, 6, 1)
PINNED = A.with_pin(Pin("s/a.zarr/v", "ana", "paper", "2027-01-01"))


@pytest.mark.parametrize(
    ("prefix", "how"), [("s/a.zarr/v/c/1", "lies inside"), ("s/a.zarr", "covers")]
)
def test_a_pin_inside_or_around_a_pin_is_refused_unless_forced(prefix: str, how: str) -> None:
    new = Pin(prefix, "bo", "campaign")
    with pytest.raises(PinOverlaps) as err:
        PINNED.with_pin(new, today=TODAY)
    assert f"{prefix!r} {how} the pin on 's/a.zarr/v' (by ana: paper)" in str(err.value)
    assert "--force" in str(err.value)
    forced = PINNED.with_pin(new, today=TODAY, force=True)
    assert forced.pins == (*PINNED.pins, new) and forced.epoch == PINNED.epoch + 1


def test_a_sibling_pin_and_a_pin_again_on_the_same_prefix_are_fine() -> None:
    assert len(PINNED.with_pin(Pin("s/a.zarr/t", "bo", "x"), today=TODAY).pins) == 2
    moved = PINNED.with_pin(Pin("s/a.zarr/v", "ana", "paper", "2028-01-01"), today=TODAY)
    assert [p.until for p in moved.pins] == ["2028-01-01"]  # replaced: how `until` moves
    assert PINNED.with_pin(Pin("s/a.zarr/v2", "bo", "x")).pins[-1].prefix == "s/a.zarr/v2"


def test_a_pin_until_a_past_date_is_refused_unless_forced() -> None:
    past = Pin("s/a.zarr/t", "bo", "x", "2001-01-01")
    with pytest.raises(PinRefused, match=r"--until 2001-01-01 is past \(today is 2026-06-01\)"):
        A.with_pin(past, today=TODAY)
    assert A.with_pin(past, today=TODAY, force=True).pins == (past,)
    assert A.with_pin(Pin("s/a.zarr/t", "bo", "x", "2026-06-01"), today=TODAY).pins  # today: ok
