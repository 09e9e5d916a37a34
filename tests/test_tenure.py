"""The one lease (`toolkit.tenure`): a term runs exactly until its expiry, a record that does not
say its own term holds `ttl` from its object's age and never longer, a takeover is allowed for
a reason only, and a local lock's bytes read back as the term written. The local lock
(`toolkit.storage`) and the virtual job's lease (`toolkit.virtual.lease`) both decide by it."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from toolkit import storage, tenure
from toolkit.virtual.lease import gone_because, term_of

# whole seconds, exact in a float: `now + d < now + ttl` holds exactly when `d < ttl`
EPOCH = st.integers(0, 2**40).map(float)
SPAN = st.integers(1, 10**6).map(float)
OWNER = st.text(max_size=40)


@given(OWNER, EPOCH, SPAN, st.integers(-(10**6), 2 * 10**6).map(float))
def test_a_term_runs_until_its_expiry_and_not_a_second_longer(
    owner: str, now: float, ttl: float, later: float
) -> None:
    term = tenure.granted(owner, now, ttl)
    at = now + later
    assert term.left(at) == ttl - later
    assert (term.lapsed(at) is None) == (later < ttl)
    assert tenure.takeover(term, at) == term.lapsed(at)
    if later >= ttl:  # a holder that renews (a heartbeat) is named by its silence
        assert term.lapsed(at) == f"its heartbeat stopped for {later:.0f} s"
        bare = tenure.Term(owner, term.expires)
        assert bare.lapsed(at) == f"expired {later - ttl:.0f} s ago"


@given(OWNER, EPOCH, SPAN, st.integers(-(10**6), 10**6).map(float))
def test_a_record_without_its_own_term_holds_ttl_from_its_age_and_never_longer(
    owner: str, now: float, ttl: float, ago: float
) -> None:
    """`ago` < 0: the object is dated in the future (another host's clock)."""
    term = tenure.aged(owner, now - ago, now, ttl)
    assert term.left(now) == ttl - max(0.0, ago) <= ttl
    assert (term.lapsed(now) is None) == (ago < ttl)


@given(OWNER, EPOCH, st.booleans(), st.one_of(st.none(), st.text(min_size=1)))
def test_a_takeover_has_a_reason_or_does_not_happen(
    owner: str, now: float, released: bool, force: str | None
) -> None:
    live = tenure.Term(owner, now + 60, released=released)
    why = tenure.takeover(live, now, force)
    if released:
        assert why == "it released it"
    else:
        assert why == force  # a live holder is taken over only for the caller's reason


def test_an_expiry_that_is_not_a_number_has_run_out() -> None:
    assert tenure.Term("x", math.nan).lapsed(0.0) == "its expiry is not a number"


@given(OWNER, st.floats(allow_nan=False, allow_infinity=False), EPOCH)
def test_a_lock_reads_back_as_written(owner: str, expires: float, now: float) -> None:
    term = tenure.Term(owner, expires)
    assert tenure.read_lock(tenure.lock_body(term), 0.0, now, 30.0) == term


@given(st.binary(max_size=64), EPOCH, st.integers(-100, 100).map(float))
def test_any_bytes_read_as_a_lock_without_an_error(data: bytes, now: float, ago: float) -> None:
    """A lock's bytes, whatever they are, give a term: never an exception in the writer."""
    term = tenure.read_lock(data, now - ago, now, 30.0)
    assert isinstance(term, tenure.Term) and isinstance(term.owner, str)


def test_a_lock_from_before_owners_is_named_by_its_pid_and_aged() -> None:
    term = tenure.read_lock(b"12345", written=1000.0, now=1010.0, ttl=30.0)
    assert term == tenure.Term("pid 12345", 1030.0)


HELD = st.fixed_dictionaries(
    {
        "holder": st.text(min_size=1, max_size=8),
        "fire_time": EPOCH,
        "expires": EPOCH,
    },
    optional={
        "host": st.just("another-host"),  # not this one: no process to look up
        "pid": st.integers(1, 10**6),
        "started": st.integers(0, 2**32).map(float),
        "heartbeat": EPOCH,
        "released": EPOCH,
    },
)


@given(HELD, EPOCH)
def test_the_virtual_lease_decides_by_the_one_term(held: dict, now: float) -> None:
    gone = gone_because(held, now)
    assert gone == tenure.takeover(term_of(held), now)
    assert (gone is None) == ("released" not in held and held["expires"] > now)


def test_a_local_lock_whose_expiry_is_not_a_number_is_taken_over(tmp_path: Path) -> None:
    """Such a lock never ran out before (`left <= 0` is false for NaN): every writer waited
    and was refused, for ever. Now it has run out, and the writer takes it over."""
    store = storage.open_store(str(tmp_path))
    version = storage.put(store, "doc.json", b"{}", mode="create")
    (tmp_path / "doc.json.toolkit-lock").write_text(json.dumps({"owner": "h:1", "expires": "nan"}))
    started = time.monotonic()
    storage.put(store, "doc.json", b'{"a": 1}', mode=version)
    assert time.monotonic() - started < storage.LOCK_WAIT_S  # taken over, not waited out
    assert storage.get(store, "doc.json").data == b'{"a": 1}'
    assert not (tmp_path / "doc.json.toolkit-lock").exists()
