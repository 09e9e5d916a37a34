"""`toolkit demo`: the demo's command, loaded by name by `toolkit.cli` when it is asked for
(run, or listed by `toolkit --help`), so the production CLI does not import the examples."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from toolkit.console import (
    PLAIN_HELP,
    PerformanceReport,
    Ship,
    exit_codes,
    fail,
    out,
    print_report,
    runner,
)
from toolkit.console import err_console as console

app = typer.Typer(add_completion=False, **PLAIN_HELP)  # the root command has them

NEEDS = ("eccodes", "matplotlib")  # the `examples` extra: the simulator's GRIB2, the pictures


@app.command()
def demo(
    ctx: typer.Context,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="Where to write the demo stores, kept there (default: a temporary folder, "
            "removed at the end)."
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            help="Where to write the report page (default: report.html in the workdir; without "
            "--workdir, toolkit-demo-report.html in the current folder)."
        ),
    ] = None,
    executor: Annotated[Literal["dask", "sync"], typer.Option(help="dask or sync")] = "dask",
    report_json: Annotated[
        Path | None, typer.Option("--json", help="Write the report as JSON.")
    ] = None,
    performance_report: PerformanceReport = None,
    ship: Ship = False,
    open_report: Annotated[
        bool, typer.Option("--open", help="Open the demo's report page in a browser.")
    ] = False,
) -> None:
    """Run the demo jobs on the embedded default (LocalCluster + local store); write a
    self-contained report page (stage tables, pyramid levels, maps, archive blobs): into the
    workdir, or, without one, to the current folder, the stores removed."""
    from toolkit.examples.demo import report_path, run_demo

    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise fail(
            2,
            f"toolkit demo needs {' and '.join(missing)} (the examples extra): "
            "pip install 'toolkit[examples]'",
        )
    if report_path(workdir, report).is_dir():  # found now, not after a minute of work
        where = report or report_path(workdir)
        raise fail(2, f"report page {where} is a folder: name a file with --report FILE")
    with exit_codes(), runner(ctx, None, performance_report, ship, executor) as run:
        result = run_demo(workdir, run, say=console.print, report=report)
    reports = result.reports
    for each in reports:
        print_report(each)
    if report_json is not None:
        report_json.write_text(json.dumps([r.as_dict() for r in reports], indent=2))
    out.print(f"[green]demo finished[/green]: report {result.html}")
    if open_report:
        import webbrowser

        webbrowser.open(result.html.as_uri())


command = typer.main.get_command(app)  # the click command `toolkit.cli` adds as `demo`
