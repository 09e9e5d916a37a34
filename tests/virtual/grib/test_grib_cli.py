"""`toolkit grib scan`: listing, index checks, exit codes."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples import simulate
from toolkit.virtual.grib.message import scan_messages

DATA = Path(__file__).resolve().parents[2] / "data"  # tests/data: real files, with licences
WAVE = DATA / "grib" / "gfswave.t18z.atlocn.0p16.f001.grib2"
runner = CliRunner()


def _scan(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["grib", "scan", *args, "--json"])
    return result.exit_code, json.loads(result.stdout.strip().splitlines()[-1])


def test_real_pair_checks_out() -> None:
    code, out = _scan(str(WAVE), "--index", f"{WAVE}.idx")
    assert code == 0 and out["ok"]
    spans = scan_messages(WAVE.read_bytes())
    assert [(m["offset"], m["length"]) for m in out["messages"]] == [
        (s.offset, s.length) for s in spans
    ]
    assert out["messages"][8] == {
        "number": "9",
        "offset": 325418,
        "length": 29520,
        "element": "SWELL",
        "level": "1 in sequence",
        "window": "1 hour fcst",
    }


def test_scan_without_index_lists_every_message() -> None:
    code, out = _scan(str(DATA / "grib" / "s2s-pdt9-pdt10-pdt12.grib2"))
    assert code == 0 and len(out["messages"]) == 10
    assert {m["element"] for m in out["messages"]} >= {"TMP"}
    result = runner.invoke(app, ["grib", "scan", str(WAVE)])
    # without an index, element and level come from the messages' own metadata
    assert (
        result.exit_code == 0 and "SWDIR" in result.stdout and "ordered Sequence" in result.stdout
    )
    assert "(19" in result.stdout


def test_stale_index_exits_1_naming_why(tmp_path: Path) -> None:
    reuploaded = tmp_path / WAVE.name
    reuploaded.write_bytes(WAVE.read_bytes()[:500] + WAVE.read_bytes())
    result = runner.invoke(app, ["grib", "scan", str(reuploaded), "--index", f"{WAVE}.idx"])
    assert result.exit_code == 1
    assert "stale index" in result.output and reuploaded.name in result.output


def test_interior_range_mismatch_exits_1(tmp_path: Path) -> None:
    lines = Path(f"{WAVE}.idx").read_text().splitlines()
    idx = tmp_path / "wave.idx"
    idx.write_text("\n".join(lines[:4] + lines[5:]) + "\n")  # message 5 dropped: 4 now spans two
    code, out = _scan(str(WAVE), "--index", str(idx))
    assert code == 1 and not out["ok"]
    assert (
        "record 4 at offset 142623: the index gives 70753 bytes, the message header 41923"
        in out["error"]
    )


def test_invalid_index_exits_1(tmp_path: Path) -> None:
    idx = tmp_path / "bad.idx"
    idx.write_text(
        "1:0:d=2023082318:WIND:surface:1 hour fcst:\n2:0:d=2023082318:WDIR:surface:1 hour fcst:\n"
    )
    code, out = _scan(str(WAVE), "--index", str(idx))
    assert code == 1 and "offsets not increasing" in out["error"]


def test_truncated_file_exits_1(tmp_path: Path) -> None:
    cut = tmp_path / "cut.grib2"
    cut.write_bytes(WAVE.read_bytes()[:-10])
    assert runner.invoke(app, ["grib", "scan", str(cut)]).exit_code == 1
    code, out = _scan(str(cut), "--index", f"{WAVE}.idx")
    assert code == 1 and "truncated" in out["error"]


def test_unreadable_input_exits_2(tmp_path: Path) -> None:
    code, out = _scan(str(tmp_path / "absent.grib2"))
    assert code == 2 and "no such file" in out["error"]
    code, _ = _scan(str(WAVE), "--index", str(tmp_path / "absent.idx"))
    assert code == 2
    assert not (tmp_path / "absent.grib2").exists()


@pytest.mark.slow
def test_s3_url_and_unreachable_endpoint(s3_endpoint: str) -> None:
    from tests.conftest import make_bucket, s3_options

    bucket = make_bucket(s3_endpoint)
    store = storage.open_store(f"s3://{bucket}", **s3_options(s3_endpoint))
    archive = simulate.make_archive(store, kind="gfs", inits=[datetime(2025, 8, 1)], leads=[6])
    (f,) = archive.files()
    url = archive.data_url(f)
    code, out = _scan(
        url, "--index", url + ".idx", "--endpoint", s3_endpoint, "--region", "us-east-1"
    )
    assert code == 0 and [m["element"] for m in out["messages"]][:2] == ["TMP", "UGRD"]
    archive.reupload(f)
    code, out = _scan(
        url, "--index", url + ".idx", "--endpoint", s3_endpoint, "--region", "us-east-1"
    )
    assert code == 1 and url in out["error"]
    code, out = _scan(
        url,
        "--endpoint",
        "http://127.0.0.1:9",
        "--region",
        "us-east-1",
        "--anonymous",
        "--retry-seconds",
        "1",
    )
    assert code == 2 and url in out["error"] and "unreachable" in out["error"]


def test_empty_file_exits_1_naming_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty.grib2"
    empty.write_bytes(b"")
    code, out = _scan(str(empty))
    assert code == 1 and not out["ok"]
    assert "empty.grib2: empty file" in out["error"]


def test_statistic_windows_are_spelled_like_the_index() -> None:
    code, out = _scan(str(DATA / "grib" / "s2s-pdt9-pdt10-pdt12.grib2"))
    assert code == 0
    windows = [m["window"] for m in out["messages"]]
    assert windows[:2] == ["0-24 hour min fcst", "0-24 hour max fcst"]
    assert "0-24 hour ave fcst" in windows
    code, out = _scan(str(DATA / "grib" / "hrrr.t00z.wrfprsf00-template8.grib2"))
    assert out["messages"][0]["window"] == "0-0 hour max fcst"
    code, out = _scan(str(WAVE))
    assert {m["window"] for m in out["messages"]} == {"1 hour fcst"}


def test_errors_are_one_line(tmp_path: Path) -> None:
    # obstore appends a multi-line debug dump to configuration errors
    result = runner.invoke(app, ["grib", "scan", "gs://bucket/x.grib2", "--endpoint", "http://x"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "gs://bucket" in lines[0]
    code, out = _scan("gs://bucket/x.grib2", "--endpoint", "http://x")
    assert code == 2 and "\n" not in out["error"]


def test_shifted_last_offset_exits_1(tmp_path: Path) -> None:
    lines = Path(f"{WAVE}.idx").read_text().splitlines()
    number, offset, rest = lines[-1].split(":", 2)
    idx = tmp_path / "shifted.idx"
    idx.write_text("\n".join([*lines[:-1], f"{number}:{int(offset) + 8}:{rest}"]) + "\n")
    code, out = _scan(str(WAVE), "--index", str(idx))
    assert code == 1 and out["error"].startswith("stale index: ")
    assert WAVE.name in out["error"] and f"offset {int(offset) + 8}" in out["error"]
