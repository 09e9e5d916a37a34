"""The `toolkit` command line.

Exit codes: 0 success, 1 a failed gate or check, 2 bad usage or an unreachable store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import version as _dist_version
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from toolkit import storage
from toolkit.archive.cli import app as archive_app
from toolkit.engine import ClusterUnreachable
from toolkit.plan import IncompleteStageError, Report
from toolkit.pyramid.cli import app as pyramid_app
from toolkit.virtual.cli import app as virtual_app
from toolkit.virtual.grib.cli import app as grib_app

console = Console(stderr=True)
out = Console()

app = typer.Typer(
    help="Dask-distributed array processing for Zarr v3 and Icechunk on object storage.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(pyramid_app, name="pyramid")
app.add_typer(virtual_app, name="virtual")
app.add_typer(grib_app, name="grib")
app.add_typer(archive_app, name="archive")


class State:
    cluster: str | None = None


state = State()


def _version(value: bool) -> None:
    if value:
        out.print(f"toolkit {_dist_version('toolkit')}")
        raise typer.Exit(0)


@app.callback()
def _main(
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            envvar="TOOLKIT_CLUSTER",
            help="Dask scheduler address; default: an embedded LocalCluster.",
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    state.cluster = cluster


# ----------------------------------------------------------------------------- shared helpers


@contextmanager
def progress_bars() -> Iterator[Callable[[str, int, int], None]]:
    """A rich progress bar per stage, driven by the engine's progress callback."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bars:
        ids: dict[str, Any] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in ids:
                ids[stage] = bars.add_task(stage, total=total)
            bars.update(ids[stage], completed=done)

        yield update


def print_report(report: Report, json_path: Path | None = None) -> None:
    table = Table(
        title=f"{report.plan} ({report.digest}, {report.executor}, {report.seconds:.2f} s)"
    )
    for col in ("stage", "tasks", "skipped", "written", "seconds", "gate have/want"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for s in report.stages:
        gate = "-" if s.gate_want is None else f"{s.gate_have}/{s.gate_want}"
        table.add_row(
            s.name, str(s.tasks), str(s.skipped), str(s.written), f"{s.seconds:.2f}", gate
        )
    out.print(table)
    if json_path is not None:
        json_path.write_text(json.dumps(report.as_dict(), indent=2))


@contextmanager
def exit_codes() -> Iterator[None]:
    """Map failures to the documented exit codes with a one-line reason."""
    try:
        yield
    except IncompleteStageError as err:
        console.print(f"[red]gate failed:[/red] {err}")
        raise typer.Exit(1) from None
    except (storage.Unreachable, storage.AccessDenied) as err:
        console.print(f"[red]store error:[/red] {err}")
        raise typer.Exit(2) from None
    except ClusterUnreachable as err:
        console.print(f"[red]cluster error:[/red] {err}")
        raise typer.Exit(2) from None
    except storage.StorageError as err:
        console.print(f"[red]store error:[/red] {err}")
        raise typer.Exit(1) from None


@app.command()
def demo(
    workdir: Annotated[
        Path | None, typer.Option(help="Where to write the demo stores (default: a temp dir).")
    ] = None,
    executor: Annotated[str, typer.Option(help="dask or sync")] = "dask",
    report_json: Annotated[
        Path | None, typer.Option("--json", help="Write the report as JSON.")
    ] = None,
) -> None:
    """Run the demo jobs on the embedded default (LocalCluster + local store)."""
    from toolkit.demo import run_demo

    with exit_codes(), progress_bars() as bars:
        reports = run_demo(
            workdir, cluster=state.cluster, executor=executor, progress=bars, say=console.print
        )
    for report in reports:
        print_report(report)
    if report_json is not None:
        report_json.write_text(json.dumps([r.as_dict() for r in reports], indent=2))
    out.print("[green]demo finished[/green]")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
