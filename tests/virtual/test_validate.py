"""Validation: completeness names each (position, variable) gap; decode health decodes a
sample, one graph node per sample, through xarray and gribberish's codec."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.virtual.test_backfill import START
from toolkit import storage
from toolkit.cli import app
from toolkit.virtual.backfill import backfill
from toolkit.virtual.validate import Cell, completeness, pick_samples, validate
from toolkit.virtual.write import ensure_repo


def test_complete_archive_validates_and_each_sample_is_a_node(world):
    _, archive, files, ds = world
    archive.publish(files)
    backfill(ds, start=START, workers=2, executor="sync")
    report = validate(ds, start=START, sample=14)
    assert report.ok, report.failures
    comp = report.completeness
    assert len(comp.positions) == 4 and not comp.missing
    # 4 cycles x 3 leads x (4 instant + 3 temperature levels) + precipitation at leads 3, 6
    assert comp.expected_files == 12 and len(comp.files[comp.positions[0]]) == 3
    assert len(comp.present) == 4 * 3 * 7 + 4 * 2
    # the newest cycle only (its 6 variables, leads 0, 3 and 6, then spread to the 14 asked)
    assert len(report.samples) == 14
    assert all("init_time=2025-08-01T18:00:00" in s.cell for s in report.samples)
    gribbed = {n for n, v in ds.template.variables.items() if v.dims}  # not spatial_ref
    assert {s.variable for s in report.samples} == gribbed
    assert report.decode_report.stage("decode").tasks == 14
    assert report.decode_report.stage("decode").written == 14  # one node per sample
    assert all(s.ok and s.finite == 1.0 for s in report.samples)
    wider = validate(ds, start=START, sample=40, positions=2)
    assert len(wider.samples) == 40 and {s.cell.split(",")[0] for s in wider.samples} == {
        f"{v}@init_time=2025-08-01T{h}:00:00" for v in gribbed for h in ("12", "18")
    }
    swept = validate(ds, start=START, sample=0, positions="all", max_positions=3)
    assert {s.cell.split(",")[0].split("=")[1] for s in swept.samples} == {
        "2025-08-01T00:00:00",
        "2025-08-01T06:00:00",
        "2025-08-01T18:00:00",
    }  # spread over the four: the newest, the oldest and one between


def test_a_variable_decoding_entirely_to_nan_fails_unless_the_dataset_allows_it(world):
    import dataclasses

    _, archive, files, ds = world
    archive.publish(files, all_nan=["wind_v_10m"])
    backfill(ds, start=START, workers=2, executor="sync")
    report = validate(ds, start=START, sample=0)
    assert report.completeness.ok and all(s.ok for s in report.samples)  # every chunk decodes
    (line,) = report.failures
    assert line.startswith("decode wind_v_10m: all 1 sampled chunk(s) decode entirely to NaN")
    assert "allow_all_nan_vars" in line

    allowed = dataclasses.replace(
        ds, dataset=dataclasses.replace(ds.dataset, allow_all_nan_vars=("wind_v_10m",))
    )
    assert validate(allowed, start=START, sample=0).ok
    with pytest.raises(ValueError, match=r"allow_all_nan_vars names \['wind_v_100m'\]"):
        dataclasses.replace(ds.dataset, allow_all_nan_vars=("wind_v_100m",))


def test_gaps_are_named_by_file_and_the_newest_position_may_be_partial(world):
    _, archive, files, ds = world
    archive.publish(files[:11])  # the newest cycle lacks its last lead
    archive.truncate(files[4])  # an interior file the backfill will skip
    backfill(ds, start=START, workers=2, executor="sync")
    comp = completeness(ds, start=START)
    assert not comp.ok and comp.expected_files == 12
    assert comp.missing_files == [archive.data_url(files[4]), archive.data_url(files[11])]
    gaps = "\n".join(comp.failures)
    assert "init_time=2025-08-01T06:00:00: 2/3 files have refs (need 100%)" in gaps
    assert f"missing {archive.data_url(files[4])} (8 cell(s): " in gaps
    assert "init_time=2025-08-01T18:00:00: 2/3 files have refs" in gaps
    assert "2025-08-01T00" not in gaps and "2025-08-01T12" not in gaps
    loose = completeness(ds, start=START, min_present_fraction=(0.5, 1.0))
    assert [line.split(":")[0] for line in loose.failures] == ["init_time=2025-08-01T06"]
    archive.publish(files[4])
    backfill(ds, start=START, workers=2, executor="sync")
    assert completeness(ds, start=START, min_present_fraction=(0.5, 1.0)).ok
    with pytest.raises(ValueError, match=r"must end with 1\.0"):
        completeness(ds, start=START, min_present_fraction=(1.0, 0.5))


def test_the_window_defaults_to_the_fire_and_must_hold_every_tier(world):
    """With no window, a fire's update window is checked (3 cycles back from it), not the
    whole archive; a window with fewer positions than tiers fails rather than passing."""
    _, archive, files, ds = world
    archive.publish(files[:9])  # 00, 06, 12; the 18z cycle is not published
    backfill(ds, start=START, workers=2, executor="sync")
    fire = np.datetime64("2025-08-01T18:30", "ns")
    comp = completeness(ds, fire_time=fire)
    assert [str(p)[:13] for p in comp.positions] == ["2025-08-01T06", "2025-08-01T12"]
    assert [str(p)[:13] for p in comp.skipped_positions] == ["2025-08-01T18"]  # past the extent
    assert comp.ok
    three = completeness(ds, fire_time=fire, min_present_fraction=(0.0, 0.5, 1.0))
    (line,) = three.failures
    assert "holds 2 init_time position(s) with files to check, fewer than the 3" in line
    assert "widen the window" in line


def test_include_and_exclude_must_not_split_a_source_file(world):
    _, archive, files, ds = world
    archive.publish(files)
    backfill(ds, start=START, workers=2, executor="sync")
    every = completeness(ds, start=START, include_vars=list(ds.template.variables))
    assert every.ok and every.expected_files == 12
    none = completeness(ds, start=START, exclude_vars=list(ds.template.variables))
    assert none.expected_files == 0 and "nothing to validate" in none.failures[0]
    with pytest.raises(ValueError, match=r"split source file .*f000: it carries temperature_2m"):
        completeness(ds, start=START, include_vars=["temperature_2m"])
    with pytest.raises(ValueError, match=r"has no variable nope"):
        completeness(ds, start=START, exclude_vars=["nope"])


def test_a_corrupted_source_fails_decode_health_and_the_cli_exits_1(world):
    tmp_path, archive, files, ds = world
    archive.publish(files)
    backfill(ds, start=START, workers=2, executor="sync")
    key = archive.data_key(files[-1])  # the newest file: every variable's last sample
    size = storage.head(archive.store, key).size
    storage.put(archive.store, key, np.random.default_rng(0).bytes(size))
    report = validate(ds, start=START, sample=12)
    assert report.completeness.ok  # the refs are all there ...
    newest = "init_time=2025-08-01T18:00:00,lead_time=6h"
    bad = [s for s in report.samples if not s.ok]
    assert bad == [s for s in report.samples if newest in s.cell]  # ... but do not decode
    assert len(bad) == 4  # the newest position's last lead, sampled over 4 of its variables
    res = CliRunner().invoke(
        app,
        [
            "virtual",
            "validate",
            "sim-gfs",
            "--repo",
            str(tmp_path / "repo"),
            "--source",
            str(tmp_path / "src"),
            "--sample",
            "12",
            "--start",
            "2025-08-01T00",
        ],
    )
    assert res.exit_code == 1, res.output
    failed = [ln for ln in res.output.splitlines() if ln.startswith("FAIL decode ")]
    assert len(failed) == 4 and all(f"@{newest}" in ln for ln in failed), res.output
    # what the bytes are is named (or Icechunk's refusal of a re-uploaded object, when the put
    # landed in a later second than the original)
    changed = "the checksum of the object owning the virtual chunk has changed"
    assert all("no GRIB message starts at offset 0" in ln or changed in ln for ln in failed)

    assert "decode health: 12 sample(s), 4 failed" in res.output
    cli = ["virtual", "validate", "sim-gfs", "--repo", str(tmp_path / "repo")]
    cli += ["--source", str(tmp_path / "src"), "--start", "2025-08-01T00"]
    older = CliRunner().invoke(app, [*cli, "--positions", "all", "--max-positions", "2"])
    assert older.exit_code == 1 and "failed" in older.output  # the newest is always in a sweep
    for bad, why in (
        (["--positions", "0"], "'--positions': want a count of positions from 1 to"),
        (["--positions", "newest"], "or all; got 'newest'"),
        (["--positions", "all", "--max-positions", "0"], "'--max-positions': want a whole"),
    ):
        res = CliRunner().invoke(app, [*cli, *bad])
        assert res.exit_code == 2 and why in res.output, res.output
        assert "Traceback" not in res.output


def test_a_source_object_changed_since_its_refs_is_one_line_naming_it(world):
    """Icechunk refuses a ref whose object changed after it was written; the finding is one
    line naming the object, without Icechunk's multi-line context or Rust frames."""
    import os

    _, archive, files, ds = world
    archive.publish(files)
    backfill(ds, start=START, workers=2, executor="sync")
    path = archive.store.local_path / archive.data_key(files[-1])
    st = os.stat(path)
    os.utime(path, (st.st_atime + 10, st.st_mtime + 10))  # a later upload of the same bytes
    bad = [s for s in validate(ds, start=START, sample=12).samples if not s.ok]
    assert bad and all("\n" not in s.reason and "at icechunk" not in s.reason for s in bad)
    assert all(s.reason.startswith("StorageError: the checksum of the object") for s in bad)
    assert all(archive.data_url(files[-1]) in s.reason for s in bad)


def test_one_nan_chunk_among_finite_ones_is_not_a_failure(world):
    _, archive, files, ds = world
    archive.publish(files[:-1])
    archive.publish(files[-1:], all_nan=["wind_v_10m"])  # the newest cycle's last lead
    backfill(ds, start=START, workers=2, executor="sync")
    report = validate(ds, start=START, sample=40)  # the newest cycle's every cell: 3 of wind_v_10m
    nan = [s for s in report.samples if s.variable == "wind_v_10m" and s.finite == 0.0]
    assert len(nan) == 1 and report.ok, report.failures


@pytest.mark.timeout(60)
def test_a_zeroed_message_body_is_named_without_reaching_the_decoder(world):
    """gribberish 1.9 never returns on a message whose sections are zeros; validation walks
    the sections of each sampled chunk's bytes first and names the file instead."""
    import os

    from toolkit.virtual.grib.message import scan_messages

    _, archive, files, ds = world
    archive.publish(files)
    backfill(ds, start=START, workers=2, executor="sync")
    key = archive.data_key(files[-1])
    data = bytearray(storage.get(archive.store, key).data)
    for span in scan_messages(bytes(data)):  # keep each indicator, zero the sections
        data[span.offset + 16 : span.offset + span.length - 4] = bytes(span.length - 20)
    path = archive.store.local_path / key
    was = os.stat(path)
    storage.put(archive.store, key, bytes(data))
    os.utime(path, ns=(was.st_atime_ns, was.st_mtime_ns))  # as if corrupted where it sits
    report = validate(ds, start=START, sample=12)
    bad = [s for s in report.samples if not s.ok]
    assert bad and all("lead_time=6h" in s.cell for s in bad)
    assert all("bad section 0 of length 0 at byte 16" in s.reason for s in bad)
    assert "(its source byte range)" in bad[0].reason


def test_empty_store_never_passes(world):
    _, _, _, ds = world
    ensure_repo(ds)
    report = validate(ds, start=START)
    assert not report.ok and "nothing to validate" in report.failures[0]


LEAD = np.timedelta64(1, "h")


@st.composite
def grids(draw):
    """Present cells of a forecast: positions x leads x members x variables (some with
    levels), with some cells absent."""
    n_pos, n_lead = draw(st.integers(1, 5)), draw(st.integers(1, 7))
    members = draw(st.sampled_from([[None], ["0", "1"], [str(m) for m in range(7)]]))
    variables = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True))
    levels = {v: draw(st.sampled_from([[None], [10.0, 20.0, 30.0]])) for v in variables}
    cells = []
    for p in range(n_pos):
        for q in range(n_lead):
            for m in members:
                for v in variables:
                    for lv in levels[v]:
                        loc = {
                            "init_time": np.datetime64("2025-01-01", "ns") + p * 6 * LEAD,
                            "lead_time": (q * LEAD).astype("timedelta64[ns]"),
                        }
                        if m is not None:
                            loc["ensemble_member"] = m
                        if lv is not None:
                            loc["level"] = lv
                        cells.append(Cell(v, tuple(sorted(loc.items()))))
    keep = draw(st.lists(st.booleans(), min_size=len(cells), max_size=len(cells)))
    present = [c for c, k in zip(cells, keep, strict=True) if k] or cells[-1:]
    return present, draw(st.integers(1, 3)), draw(st.integers(0, 60))


@settings(max_examples=150, deadline=None)
@given(grids())
def test_samples_cover_the_newest_positions_every_variable_lead_edge_and_member(grid):
    present, positions, n = grid
    got = pick_samples(present, n, positions=positions)
    loc = lambda c, d: dict(c.loc).get(d)  # noqa: E731
    newest = sorted({loc(c, "init_time") for c in present})[-positions:]
    assert got and {loc(c, "init_time") for c in got} <= set(newest)
    assert len({c.key for c in got}) == len(got)  # no chunk decoded twice
    for pos in newest:
        here = [c for c in present if loc(c, "init_time") == pos]
        mine = [c for c in got if loc(c, "init_time") == pos]
        assert {c.variable for c in here} == {c.variable for c in mine}  # each variable
        leads = sorted({loc(c, "lead_time") for c in here})
        sampled = {loc(c, "lead_time") for c in mine}
        assert leads[0] in sampled and leads[-1] in sampled  # the first and the last lead
        assert len(leads) < 3 or any(leads[0] < x < leads[-1] for x in sampled)  # an interior
        assert {loc(c, "ensemble_member") for c in here} == {
            loc(c, "ensemble_member") for c in mine
        }  # every member
        members = len({loc(c, "ensemble_member") for c in here})
        variables = len({c.variable for c in here})
    total = sum(1 for c in present if loc(c, "init_time") in newest)
    assert len(got) >= min(n, total)  # the budget is used when there is that much
    assert len(got) <= max(n, positions * (variables + 3 + members))


def test_positions_must_be_a_count_or_all():
    cells = [Cell("a", (("init_time", np.datetime64("2025-01-01", "ns")),))]
    with pytest.raises(ValueError, match="positions must be an int >= 1 or 'all', not 0"):
        pick_samples(cells, positions=0)
    assert pick_samples([], 5) == []
