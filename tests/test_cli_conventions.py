"""The CLI's conventions, checked over the real `toolkit` command tree so a new command or flag
that breaks one fails here: one meaning per short flag, --quiet / --verbose before or after the
command, help and tables that fit 80 columns without cutting a word, --json fields on one line.
"""

from __future__ import annotations

import json
import logging
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.console import first_sentence

runner = CliRunner()
WAVE = Path(__file__).parent / "data" / "grib" / "gfswave.t18z.atlocn.0p16.f001.grib2"


def _tree(command: Any, words: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command under `command` (the lazily loaded `demo` and `serve` too), with the
    words that reach it."""
    found = [(words, command)]
    if hasattr(command, "list_commands"):
        ctx = type(command).context_class(command)
        for name in command.list_commands(ctx):
            found += _tree(command.get_command(ctx, name), (*words, name))
    return found


def _commands() -> list[tuple[tuple[str, ...], Any]]:
    return _tree(typer.main.get_command(app))


def _options(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option"]


def test_each_short_flag_means_one_thing_everywhere() -> None:
    """Walks every command: a short flag names the same long option wherever it appears, so
    `-v` is --variable (pyramid build, archive plan-read, serve) and never --verbose."""
    longs: dict[str, dict[tuple[str, ...], set[str]]] = defaultdict(dict)
    for words, command in _commands():
        for p in _options(command):
            names = [*p.opts, *p.secondary_opts]
            for short in (n for n in names if not n.startswith("--")):
                longs[short][words] = {n for n in names if n.startswith("--")}
    for short, by_command in longs.items():
        shared = set.intersection(*by_command.values())
        assert shared, f"{short} names different options: {by_command}"
    assert set.intersection(*longs["-v"].values()) == {"--variable"}
    assert {("pyramid", "build"), ("archive", "plan-read"), ("serve",)} <= set(longs["-v"])
    assert () not in longs["-v"]  # the root's verbosity is --verbose only


def test_every_command_takes_quiet_and_verbose() -> None:
    """The flags are added by class (`console.conventions`) to every command, so they work
    before or after any command."""
    for words, command in _commands():
        flags = {n for p in _options(command) for n in p.opts}
        assert {"--quiet", "-q", "--verbose"} <= flags, words
        assert "-v" not in flags or ("--variable" in flags or "--var" in flags), words


LEVEL = logging.getLogger("toolkit")


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["virtual", "datasets"], logging.WARNING),
        (["--verbose", "virtual", "datasets"], logging.INFO),
        (["virtual", "datasets", "--verbose"], logging.INFO),
        (["virtual", "--verbose", "datasets"], logging.INFO),
        (["--verbose", "--verbose", "virtual", "datasets"], logging.DEBUG),
        (["virtual", "datasets", "--verbose", "--verbose"], logging.DEBUG),
        (["--verbose", "virtual", "datasets", "--verbose"], logging.DEBUG),
        (["--quiet", "virtual", "datasets"], logging.ERROR),
        (["virtual", "datasets", "--quiet"], logging.ERROR),
        (["virtual", "datasets", "-q"], logging.ERROR),
        (["-q", "virtual", "datasets", "-q"], logging.ERROR),
    ],
)
def test_quiet_and_verbose_before_or_after_the_command(argv: list[str], level: int) -> None:
    LEVEL.setLevel(logging.CRITICAL)  # whatever ran before: the command sets it afresh
    res = runner.invoke(app, argv)
    assert res.exit_code == 0, res.output
    assert LEVEL.level == level


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["-q", "virtual", "datasets", "--verbose"], "contradict"),
        (["virtual", "datasets", "--quiet", "--verbose"], "contradict"),
        (["--verbose", "pyramid", "plan", "nowhere", "-q"], "contradict"),
        (["-v", "virtual", "datasets"], "No such option: -v"),
    ],
)
def test_quiet_with_verbose_or_a_root_v_is_bad_usage(argv: list[str], said: str) -> None:
    res = runner.invoke(app, argv)
    assert res.exit_code == 2 and said in res.stderr, res.output
    assert res.stdout == "" and len(res.stderr.splitlines()) == 1


def _flat(text: str) -> str:
    """Whitespace collapsed, and a word wrapped at its hyphen joined again."""
    return re.sub(r"(?<=\w-) (?=\w)", "", " ".join(text.split()))


def test_every_help_fits_80_columns_and_says_every_word() -> None:
    """Each command's --help at 80 columns: no line longer, no "…", its whole description,
    every option's whole help, and each subcommand's whole first sentence in the listing
    (click's own listing cut it at 45 characters with "...")."""
    commands = _commands()
    assert len(commands) > 30
    for words, command in commands:
        res = runner.invoke(app, [*words, "--help"], terminal_width=80)
        assert res.exit_code == 0, (words, res.output)
        text = res.output
        assert not [line for line in text.splitlines() if len(line) > 80], (words, text)
        assert "…" not in text, (words, text)
        flat = _flat(text)
        for paragraph in (command.help or "").split("\f")[0].split("\n\n"):
            assert _flat(paragraph.replace("\b", "")) in flat, (words, paragraph)
        for p in command.params:
            if getattr(p, "help", None) and not p.hidden:
                assert _flat(p.help) in flat, (words, p.name)
        for name, sub in getattr(command, "commands", {}).items():
            if not sub.hidden:
                assert f"{name} {_flat(first_sentence(sub.help))}" in flat, (words, name)


def test_first_sentence_ends_at_a_full_stop_before_a_capital() -> None:
    assert first_sentence("One thing. Two things.") == "One thing."
    assert first_sentence("Keys; s3://b/p/store.zarr/... URLs work.\n\nMore.") == (
        "Keys; s3://b/p/store.zarr/... URLs work."
    )
    assert first_sentence("  Spread\n    over lines, e.g. this one.") == (
        "Spread over lines, e.g. this one."
    )


def _fits(text: str, plain: bool = True) -> None:
    """No line over 80 columns, nothing cut with "…"; a plain listing has no trailing padding."""
    lines = text.splitlines()
    assert lines and all(len(line) <= 80 for line in lines) and "…" not in text, text
    assert not plain or all(line == line.rstrip() for line in lines), text


def test_virtual_datasets_wraps_to_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """At COLUMNS=80 every line fits, and every word of every dataset's description is there
    (GEFS's was cut mid-sentence at its docstring's first line)."""
    from toolkit.virtual.builtin import DATASETS

    monkeypatch.setenv("COLUMNS", "80")
    res = runner.invoke(app, ["virtual", "datasets"])
    assert res.exit_code == 0, res.output
    _fits(res.stdout)
    shown = res.stdout.split()
    for name, build in DATASETS.items():
        about = " ".join((build.__doc__ or "").split("\n\n")[0].split())
        assert name in shown and set(about.split()) <= set(shown), name
    assert "following the file types." in " ".join(shown)  # GEFS's last words


def test_report_tables_wrap_to_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The archive report (once 156 columns) and the pyramid tables fit 80 columns."""
    from tests.archive import zarrgen
    from toolkit import storage
    from toolkit.examples import synthetic

    monkeypatch.setenv("COLUMNS", "80")
    data, manifests = str(tmp_path / "data"), str(tmp_path / "m")
    zarrgen.cordex_v3(storage.open_store(data))
    base = ["--data", data, "--manifests", manifests]
    policy = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]
    assert runner.invoke(app, ["archive", "partition", *base, *policy]).exit_code == 0
    report = runner.invoke(app, ["archive", "report", *base])
    assert report.exit_code == 0, report.output
    _fits(report.stdout)
    assert "g_sub_ps_813d8de1" in report.stdout.split()  # a long blob id whole
    store = tmp_path / "s.zarr"
    synthetic.write_store(storage.open_store(str(store)), shape=(64, 96), shards=(32, 32))
    for argv in (["plan", str(store)], ["build", str(store), "--executor", "sync", "-q"]):
        res = runner.invoke(app, ["pyramid", *argv])
        assert res.exit_code == 0, res.output
        _fits(res.stdout, plain=False)


def _strings(doc: Any) -> list[str]:
    """Every string in a JSON document, keys included."""
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for k, v in doc.items() for s in (k, *_strings(v))]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    return []


def _json(argv: list[str]) -> Any:
    res = runner.invoke(app, argv)
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


def test_json_fields_hold_no_raw_newlines(tmp_path: Path) -> None:
    """The list and inspect-style --json outputs: no string holds a line break (the datasets'
    "about" held its docstring's second paragraph and indentation)."""
    from tests.archive import zarrgen
    from toolkit import storage
    from toolkit.examples import synthetic

    about = {d["name"]: d["about"] for d in _json(["virtual", "datasets", "--json"])["datasets"]}
    assert about["gefs"].endswith("the grid following the file types.")
    docs = [about]
    store = str(tmp_path / "s.zarr")
    synthetic.write_store(storage.open_store(store), shape=(64, 96), shards=(32, 32))
    docs += [_json(["pyramid", "plan", store, "--json"])]
    docs += [_json(["pyramid", "build", store, "--executor", "sync", "--json"])]
    docs += [_json(["pyramid", "verify", store, "--executor", "sync", "--json"])]
    docs += [_json(["grib", "scan", str(WAVE), "--json"])]
    data, manifests = str(tmp_path / "data"), str(tmp_path / "m")
    zarrgen.cordex_v3(storage.open_store(data))
    base = ["--data", data, "--manifests", manifests]
    policy = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]
    docs += [_json(["archive", "partition", *base, *policy, "--json"])]
    docs += [_json(["archive", "show", "cordex/a.zarr", "--manifests", manifests, "--json"])]
    docs += [_json(["archive", "report", *base, "--json"])]
    docs += [_json(["archive", "plan-read", "cordex/a.zarr", *base, "-v", "pr", "--json"])]
    docs += [_json(["archive", "diff", "cordex/a.zarr", *base, "--json"])]
    strings = [s for doc in docs for s in _strings(doc)]
    assert len(strings) > 100
    assert not [s for s in strings if "\n" in s or "\r" in s]
