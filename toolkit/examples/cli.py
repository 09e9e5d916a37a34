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
        Path | None, typer.Option(help="Where to write the demo stores (default: a temp dir).")
    ] = None,
    executor: Annotated[Literal["dask", "sync"], typer.Option(help="dask or sync")] = "dask",
    report_json: Annotated[
        Path | None, typer.Option("--json", help="Write the report as JSON.")
    ] = None,
    performance_report: PerformanceReport = None,
    ship: Ship = False,
    open_report: Annotated[
        bool, typer.Option("--open", help="Open the demo's report.html in a browser.")
    ] = False,
) -> None:
    """Run the demo jobs on the embedded default (LocalCluster + local store); write
    report.html (stage tables, pyramid levels, maps, archive blobs) into the workdir."""
    from toolkit.examples.demo import run_demo

    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise fail(
            2,
            f"toolkit demo needs {' and '.join(missing)} (the examples extra): "
            "pip install 'toolkit[examples]'",
        )
    with exit_codes(), runner(ctx, None, performance_report, ship, executor) as run:
        result = run_demo(workdir, run, say=console.print)
    reports = result.reports
    for report in reports:
        print_report(report)
    if report_json is not None:
        report_json.write_text(json.dumps([r.as_dict() for r in reports], indent=2))
    out.print(f"[green]demo finished[/green]: report {result.html}")
    if open_report:
        import webbrowser

        webbrowser.open(result.html.as_uri())


command = typer.main.get_command(app)  # the click command `toolkit.cli` adds as `demo`
