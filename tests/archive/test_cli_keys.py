"""Keys, prefixes and scopes on the command line: a `.`, `..` or empty segment, or an empty
one, is refused in one line naming it (exit 2) and nothing is written; a leading '/' is
dropped. Pins inside or around a pin (exit 1) or until a past date (exit 2) need --force."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.archive import zarrgen
from tests.archive.test_watch import s3_line
from toolkit import storage
from toolkit.cli import app

S = "cordex/a.zarr"
POLICY = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]
PIN = ["--who", "ana", "--why", "paper"]


@pytest.fixture
def world(tmp_path: Path) -> Path:
    zarrgen.cordex_v3(storage.open_store(str(tmp_path / "data")))
    zarrgen.cordex_v3(storage.open_store(str(tmp_path / "data")), scope="cordex/b.zarr")
    res = _run(tmp_path, "partition", "--data", "data", "--manifests", "m", *POLICY)
    assert res.exit_code == 0, res.output
    return tmp_path


def _run(w: Path, *argv: str, stdin: str | None = None) -> Result:
    old = Path.cwd()
    try:
        os.chdir(w)
        return CliRunner().invoke(app, ["archive", *argv], input=stdin)
    finally:
        os.chdir(old)


def _files(w: Path) -> dict[str, str]:
    return {
        str(p.relative_to(w)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in w.rglob("*")
        if p.is_file()
    }


def _one_line(res: Result, code: int, *says: str) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == code, (res.exit_code, res.stderr, res.stdout)
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.output
    for s in says:
        assert s in lines[0], lines[0]
    return lines[0]


BAD = [
    ("resolve", "--manifests", "m", f"{S}/../b.zarr/tas/c/0/0/0"),
    ("resolve", "--manifests", "m", f"{S}/tas/c/0/0/0", ""),
    ("resolve", "--manifests", "m", f"{S}//tas/c/0/0/0"),
    ("resolve", "--manifests", "m", f"{S}/./tas/c/0/0/0"),
    ("resolve", "--manifests", "m", f"s3://bkt/{S}/../b.zarr/tas/c/0/0/0"),
    ("resolve", "--manifests", "m", f"/mnt/{S}/tas/c/0/../0/0"),
    ("pin", "add", S, f"{S}/../b.zarr/tas", *PIN, "--manifests", "m"),
    ("pin", "add", S, f"{S}/tas/", *PIN, "--manifests", "m"),
    ("pin", "add", S, "", *PIN, "--manifests", "m"),
    ("pin", "add", f"{S}/..", f"{S}/tas", *PIN, "--manifests", "m"),
    ("pin", "remove", S, f"{S}/./tas", "--manifests", "m"),
    ("show", "cordex/./a.zarr", "--manifests", "m"),
    ("show", "", "--manifests", "m"),
    ("mark", "../a.zarr", "b_tas_1", "archived", "--manifests", "m"),
    ("diff", f"{S}/..", "--data", "data", "--manifests", "m"),
    ("partition", "cordex//a.zarr", "--data", "data", "--manifests", "m"),
    ("report", "cordex/a.zarr/.", "--data", "data", "--manifests", "m"),
]


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a[:2]))
def test_a_bad_key_scope_or_prefix_is_one_line_exit_2_and_writes_nothing(
    world: Path, argv: tuple[str, ...]
) -> None:
    odd = ("/.", "//", "../", "./")
    bad = next(a for a in argv[1:] if not a or a.endswith("/") or any(o in a for o in odd))
    before = _files(world)
    line = _one_line(_run(world, *argv), 2, repr(bad))
    assert any(w in line for w in ("segment", "is empty"))
    assert _files(world) == before


def test_resolve_checks_stdin_keys_before_answering_any(world: Path) -> None:
    res = _run(world, "resolve", "--manifests", "m", stdin=f"{S}/tas/c/0/0/0\n{S}/a/../b\n")
    _one_line(res, 2, f"'{S}/a/../b'", "'..' segment")
    assert res.stdout == ""  # refused before any answer


def test_a_leading_slash_is_dropped_from_scopes_and_prefixes(world: Path) -> None:
    res = _run(world, "pin", "add", f"/{S}", f"/{S}/pr", *PIN, "--manifests", "m")
    assert res.exit_code == 0, res.output
    shown = json.loads(_run(world, "show", f"/{S}", "--manifests", "m", "--json").stdout)
    assert [p["prefix"] for p in shown["pins"]] == [f"{S}/pr"]
    res = _run(world, "pin", "remove", S, f"/{S}/pr", "--manifests", "m")
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize(
    ("first", "second", "how"),
    [(f"{S}/tas", f"{S}/tas/c/1", "lies inside"), (f"{S}/tas/c/1", f"{S}/tas", "covers")],
)
def test_a_pin_overlapping_a_pin_exits_1_unless_forced(
    world: Path, first: str, second: str, how: str
) -> None:
    assert _run(world, "pin", "add", S, first, *PIN, "--manifests", "m").exit_code == 0
    before = _files(world)
    res = _run(world, "pin", "add", S, second, "--who", "bo", "--why", "x", "--manifests", "m")
    _one_line(res, 1, f"pin on '{second}' {how} the pin on '{first}'", "--force")
    assert _files(world) == before
    forced = _run(world, "pin", "add", S, second, "--who", "bo", "--why", "x", "--force",
                  "--manifests", "m")  # fmt: skip
    assert forced.exit_code == 0, forced.output
    shown = json.loads(_run(world, "show", S, "--manifests", "m", "--json").stdout)
    assert [p["prefix"] for p in shown["pins"]] == [first, second]


def test_a_pin_until_a_past_date_exits_2_unless_forced(world: Path) -> None:
    before = _files(world)
    argv = ("pin", "add", S, f"{S}/pr", *PIN, "--until", "2001-01-01", "--manifests", "m")
    _one_line(_run(world, *argv), 2, f"'{S}/pr'", "--until 2001-01-01 is past", "later date")
    assert _files(world) == before
    assert _run(world, *argv, "--force").exit_code == 0
    shown = json.loads(_run(world, "show", S, "--manifests", "m", "--json").stdout)
    assert shown["pins"][0]["until"] == "2001-01-01"


def test_watch_counts_a_dotdot_event_key_under_no_store(world: Path) -> None:
    """An event key cannot be refused (the bucket sent it): it is scoped by no prefix of it."""
    events = world / "events.jsonl"
    events.write_text(s3_line(f"{S}/../b.zarr/tas/c/0/0/0", 1) + s3_line(f"{S}/tas/c/0/0/0", 2))
    res = _run(world, "watch", "--data", "data", "--manifests", "m", "--events", str(events),
               "--once", "--executor", "sync", "--json")  # fmt: skip
    assert res.exit_code == 0, res.output
    batch = json.loads(res.stdout.splitlines()[0])
    assert batch["outside"] == 1 and batch["writes"] == 1
