"""Keys and events as Windows tools and other code pages write them.

A byte-order mark (PowerShell, Notepad) or CRLF line ends give the same answers as plain UTF-8
lines; UTF-16 with its mark is read as such; bytes that are not UTF-8 are refused in one line
naming where (never decoded into U+FFFD inside a key, which answers `unmanaged`: a recall hook
would skip a key that is on tape)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.archive.test_cli_keys import S, _files, _one_line, _run, world  # noqa: F401
from tests.archive.test_watch import s3_line

KEYS = [f"{S}/tas/c/0/0/0", f"{S}/zarr.json", "cordex/b.zarr/tas/c/1/0/0"]

SPELLINGS = {
    "utf-8 with a mark and CRLF (PowerShell 7, Notepad)": lambda t: (
        b"\xef\xbb\xbf" + t.replace("\n", "\r\n").encode()
    ),
    "utf-16 with its mark (Windows PowerShell 5 `>`)": lambda t: t.encode("utf-16"),
    "old Mac line ends": lambda t: t.replace("\n", "\r").encode(),
}


def _answers(res) -> list[dict]:
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_stdin_keys_with_a_mark_or_crlf_resolve_as_plain_lines(world: Path, spelling: str) -> None:  # noqa: F811
    text = "".join(k + "\n" for k in KEYS)
    plain = _answers(_run(world, "resolve", "--manifests", "m", "--json", stdin=text.encode()))
    assert [a["kind"] for a in plain] == ["blob", "hot", "blob"]  # each key is managed
    odd = _answers(_run(world, "resolve", "--manifests", "m", "--json",
                        stdin=SPELLINGS[spelling](text)))  # fmt: skip
    assert odd == plain


def test_stdin_keys_that_are_not_utf8_are_refused_naming_the_line(world: Path) -> None:  # noqa: F811
    before = _files(world)
    raw = (KEYS[0] + "\n" + f"{S}/tas/c/\xe9/0/0\n").encode("latin-1")
    res = _run(world, "resolve", "--manifests", "m", stdin=raw)
    _one_line(res, 2, "the keys on stdin", "line 2 is not UTF-8", "0xe9", "save it as UTF-8")
    assert res.stdout == "" and _files(world) == before


def test_events_files_with_a_mark_count_the_same_writes(world: Path) -> None:  # noqa: F811
    lines = s3_line(f"{S}/tas/c/0/0/0", 1) + s3_line(f"{S}/tas/c/1/0/0", 2)
    runs = []
    for name, body in (
        ("plain", lines.encode()),
        ("marked", SPELLINGS[next(iter(SPELLINGS))](lines)),
    ):
        events = world / f"{name}.jsonl"
        events.write_bytes(body)
        res = _run(world, "report", "--data", "data", "--manifests", "m", "--events",
                   str(events), "--json")  # fmt: skip
        assert res.exit_code == 0, res.output
        runs.append(json.loads(res.stdout))
    assert runs[0] == runs[1]
    assert sum(r.get("writes", 0) for r in _rows(runs[0])) == 2  # the oracle saw the events


def _rows(doc) -> list[dict]:
    return doc if isinstance(doc, list) else doc.get("rows", doc.get("blobs", []))


def test_watch_reads_a_marked_events_file_and_refuses_a_latin1_line(world: Path) -> None:  # noqa: F811
    events = world / "events.jsonl"
    events.write_bytes(
        b"\xef\xbb\xbf" + (s3_line(f"{S}/tas/c/0/0/0", 1)).replace("\n", "\r\n").encode()
    )
    argv = ["watch", "--data", "data", "--manifests", "m", "--events", str(events), "--once",
            "--executor", "sync", "--json"]  # fmt: skip
    res = _run(world, *argv)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.splitlines()[0])["writes"] == 1
    events.write_bytes(s3_line(f"{S}/tas/c/0/0/0", 2).encode() + b'{"Records": [\xe9]}\n')
    _one_line(_run(world, *argv), 2, "line 2", "not UTF-8", "0xe9", "as UTF-8")
