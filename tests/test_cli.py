"""The `toolkit` command: version, help, demo, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolkit.cli import app

runner = CliRunner()


def test_version_and_help() -> None:
    import importlib.metadata as md
    import tomllib

    import toolkit

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("toolkit ")
    name = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert name["name"] == toolkit.DISTRIBUTION != "toolkit"  # the index's `toolkit` is another's
    assert f"{md.version(toolkit.DISTRIBUTION)} ({toolkit.DISTRIBUTION})" in result.output
    assert name["scripts"] == {"toolkit": "toolkit.launch:main"}  # which then runs toolkit.cli
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("demo", "pyramid", "virtual", "grib", "archive", "--cluster"):
        assert command in result.output


def test_bad_usage_exits_2() -> None:
    assert runner.invoke(app, ["no-such-command"]).exit_code == 2
    assert runner.invoke(app, ["demo", "--no-such-flag"]).exit_code == 2


def test_demo_in_process(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "demo",
            "--workdir",
            str(tmp_path),
            "--executor",
            "sync",
            "--json",
            str(tmp_path / "r.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    reports = json.loads((tmp_path / "r.json").read_text())
    foundation = reports[0]
    assert [s["gate_have"] for s in foundation["stages"]] == [
        s["tasks"] for s in foundation["stages"]
    ]
    assert f"report {tmp_path / 'report.html'}" in " ".join(result.output.split())
    page = _read_page(tmp_path / "report.html")
    _assert_page_shows(page, reports, tmp_path)
    assert "none (run with --executor sync)" in page.text


class _Page(HTMLParser):
    """What a reader of report.html sees: stage rows per plan, images, text."""

    def __init__(self) -> None:
        super().__init__()
        self.plans: dict[str, list[str]] = {}
        self.images: list[dict[str, str | None]] = []
        self.text = ""
        self._plan: str | None = None
        self._row: list[str] | None = None
        self._cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._plan = a.get("data-plan")
            if self._plan is not None:
                self.plans[self._plan] = []
        elif tag == "tr":
            self._row = []
        elif tag == "td":
            self._cell = True
        elif tag == "img":
            self.images.append(a)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._plan = None
        elif tag == "td":
            self._cell = False
        elif tag == "tr" and self._row and self._plan is not None:
            self.plans[self._plan].append(self._row[0])

    def handle_data(self, data: str) -> None:
        self.text += data
        if self._cell and self._row is not None:
            self._row.append(data)


def _read_page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


def _assert_page_shows(page: _Page, reports: list[dict], workdir: Path) -> None:
    """Every stage of every plan is a row of its plan's table; one picture per pyramid level,
    each a real PNG; the before/after maps and the blob chart are there."""
    import base64

    import zarr

    assert {r["plan"]: [s["stage"] for s in r["stages"]] for r in reports} == page.plans
    layout = zarr.open_group(str(workdir / "pyramid-demo.zarr"), mode="r").attrs["multiscales"]
    levels = ["level 0" if e["asset"] == "." else e["asset"] for e in layout["layout"]]
    assert len(levels) >= 3
    assert [i["data-level"] for i in page.images if i.get("data-level")] == levels
    assert page.text.count("(before the update)") == 1  # the maps' captions
    assert page.text.count("(after the update)") == 1
    assert page.text.count("archive blobs by size") == 1
    assert all(i["alt"] for i in page.images)
    for image in page.images:
        src = image["src"] or ""
        assert src.startswith("data:image/png;base64,"), src[:40]
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "b_field" in page.text  # the archive blob table names the demo's blobs


@pytest.mark.slow
def test_demo_console_script_on_the_embedded_cluster(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "toolkit"
    proc = subprocess.run(
        [str(exe), "demo", "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "demo finished" in proc.stdout
    page = _read_page(tmp_path / "report.html")
    assert "Dask dashboard: http" in " ".join(page.text.split())
    assert len([i for i in page.images if i.get("data-level")]) >= 3


def test_unreachable_cluster_exits_2(tmp_path: Path) -> None:
    """A demo pointed at a scheduler that isn't there fails cleanly (no traceback soup)."""
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "toolkit"),
            "--cluster",
            "tcp://127.0.0.1:9",
            "demo",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr[-1500:])
    assert "127.0.0.1:9" in proc.stderr


def test_the_console_script_keeps_exit_codes_and_output_when_it_skips_teardown(
    tmp_path: Path,
) -> None:
    """`toolkit.cli.main` ends the process without module teardown: the exit code of each
    kind of ending and every line written must survive that."""
    from toolkit import storage
    from toolkit.examples import synthetic

    exe = str(Path(sys.executable).parent / "toolkit")
    path = tmp_path / "s.zarr"
    synthetic.write_store(storage.open_store(str(path)), shape=(40, 60), shards=(16, 16))

    def toolkit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300)

    built = toolkit("pyramid", "build", str(path), "--levels", "2")
    assert built.returncode == 0, built.stderr
    assert "pyramid-mean" in built.stdout and built.stdout.rstrip().endswith("┘")  # whole table
    assert "small build: ran in this process" in built.stderr
    zarr_json = path / "field" / "zarr.json"
    zarr_json.write_text(zarr_json.read_text().replace('"units"', '"unit"'))  # level 0 edited
    failed = toolkit("pyramid", "verify", str(path))
    assert failed.returncode == 1 and "check(s) failed" in failed.stderr
    usage = toolkit("pyramid", "build", str(tmp_path / "nope.zarr"))
    assert usage.returncode == 2 and usage.stderr.startswith("error: ")
    assert toolkit("--version").stdout.strip().startswith("toolkit ")


def test_the_console_script_ends_with_an_idle_thread_pool_alive() -> None:
    """A library the command used may leave a thread pool behind (zarr's codec pool, dask's
    threaded scheduler): its idle workers are told to stop as at interpreter exit, not waited
    for forever."""
    code = (
        "import concurrent.futures, sys\n"
        "from toolkit.cli import main\n"
        "pool = concurrent.futures.ThreadPoolExecutor(2)\n"
        "pool.submit(print, 'pool used', flush=True).result()\n"
        "sys.argv = ['toolkit', '--version']\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("pool used\ntoolkit ")


def _commands(group: object, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    """Every command under `group` (lazily loaded ones too), with the words that reach it."""
    ctx = type(group).context_class(group)  # type: ignore[attr-defined]
    found = [(path, group)]
    if hasattr(group, "list_commands"):  # a group (typer's own click, or click's)
        for name in group.list_commands(ctx):
            found += _commands(group.get_command(ctx, name), (*path, name))
    return found


def test_every_help_reads_at_80_columns() -> None:
    """No line wider than the terminal, no flag name or word cut with "…", a plain flag shown
    without a value, and every flag named whole."""
    import typer

    commands = _commands(typer.main.get_command(app))
    assert len(commands) > 30  # the whole tree, lazily loaded groups included
    for words, command in commands:
        result = runner.invoke(app, [*words, "--help"], terminal_width=80)
        assert result.exit_code == 0, words
        text = result.output
        wide = [line for line in text.splitlines() if len(line) > 80]
        assert not wide, (words, wide)
        assert "…" not in text and "<bool>" not in text, (words, text)
        for param in command.params:  # type: ignore[attr-defined]
            for flag in [*param.opts, *param.secondary_opts]:
                if flag.startswith("-") and not getattr(param, "hidden", False):
                    assert flag in text, (words, flag)


def test_quiet_and_verbose_set_the_toolkit_loggers(tmp_path: Path) -> None:
    """--verbose shows the toolkit.* loggers' INFO lines on stderr, the default does not,
    --quiet (here after the command) drops progress bars and hints as well; both at once is
    bad usage."""
    import logging

    from toolkit import storage
    from toolkit.examples import synthetic

    split = CliRunner()
    lines = {}
    for i, (before, after) in enumerate((([], []), (["--verbose"], []), ([], ["--quiet"]))):
        path = tmp_path / f"s{i}.zarr"
        synthetic.write_store(storage.open_store(str(path)), shape=(64, 96), shards=(32, 32))
        r = split.invoke(app, [*before, "pyramid", "build", str(path), "--levels", "1", *after])
        assert r.exit_code == 0, r.output
        lines[tuple(before + after)] = r.stderr
    said = "info: zarr codec pipeline for this run: FusedCodecPipeline (toolkit.engine.codecs)"
    assert said in lines[("--verbose",)] and "(toolkit.console)" in lines[("--verbose",)]
    assert "info:" not in lines[()] and "small build" in lines[()]
    assert lines[("--quiet",)] == ""  # no bar, no hint, nothing went wrong
    assert logging.getLogger("toolkit").level == logging.ERROR
    argv = ["-q", "--verbose", "pyramid", "build", str(tmp_path / "s0.zarr")]
    both = split.invoke(app, argv)
    assert both.exit_code == 2 and "contradict" in both.stderr
