"""User text as tools write it (toolkit.textin), and boolean switches as people spell them."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from toolkit import textin
from toolkit.cli import app

# lines as a user's keys can be: any text without line breaks (str.splitlines' set) or NUL
LINE = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs",),
        blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ufeff",
    ),
    max_size=20,
)
ENDS = st.sampled_from(["\n", "\r\n", "\r"])
ENCODINGS = st.sampled_from(
    [
        ("utf-8", b""),
        ("utf-8", codecs.BOM_UTF8),
        ("utf-16-le", codecs.BOM_UTF16_LE),
        ("utf-16-be", codecs.BOM_UTF16_BE),
    ]
)


@given(st.lists(LINE, max_size=8), ENDS, ENCODINGS)
def test_lines_survive_every_mark_encoding_and_line_end(
    lines: list[str], end: str, encoding: tuple[str, bytes]
) -> None:
    name, bom = encoding
    raw = bom + "".join(line + end for line in lines).encode(name)
    assert textin.lines(raw, "keys") == lines


@given(st.binary(max_size=64))
def test_bytes_are_text_or_refused_naming_the_line(raw: bytes) -> None:
    try:
        text = textin.decode(raw, "the keys")
    except textin.NotText as err:
        assert str(err).startswith("the keys: ") and "UTF-" in str(err)
        return
    assert "\ufffd" not in text or "\ufffd".encode() in raw  # never a replacement of our own


def test_a_bad_byte_names_its_line() -> None:
    with pytest.raises(textin.NotText, match=r"^k: line 3 is not UTF-8 \(byte 0xe9\)"):
        textin.decode(b"a\nb\r\nc\xe9\n", "k")


@pytest.mark.parametrize(
    ("value", "on"),
    [
        (None, False),
        ("", False),
        ("0", False),
        ("false", False),
        ("False", False),
        ("NO", False),
        ("off", False),
        (" off ", False),
        ("1", True),
        ("true", True),
        ("yes", True),
        ("on", True),
        ("2", True),
    ],
)
def test_switches_read_the_usual_spellings(value: str | None, on: bool) -> None:
    env = {} if value is None else {"TOOLKIT_DEBUG": value}
    assert textin.switch(env, "TOOLKIT_DEBUG") is on


@pytest.mark.parametrize(("value", "traceback"), [("false", False), ("off", False), ("1", True)])
def test_toolkit_debug_false_means_one_line(
    value: str, traceback: bool, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("TOOLKIT_DEBUG", value)
    res = CliRunner().invoke(app, ["pyramid", "plan", str(tmp_path / "notes.txt")])
    assert res.exit_code == 2
    assert ("Traceback" in res.stderr) is traceback, res.stderr
    if not traceback:
        assert len(res.stderr.strip().splitlines()) == 1
