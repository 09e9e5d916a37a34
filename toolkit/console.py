"""Terminal plumbing shared by every `toolkit` command: exit codes, progress, report tables.

Lives beside the jobs (not in the face module) so each job's CLI can use it without importing
`toolkit.cli`. Exit codes: 0 success, 1 a failed gate or check, 2 bad usage or an unreachable
store or cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from toolkit import storage
from toolkit.engine import ClusterUnreachable
from toolkit.plan import IncompleteStageError, Report

err_console = Console(stderr=True, soft_wrap=True)  # one-line errors in logs and pipes
out = Console()

ProgressFn = Callable[[str, int, int], None]


def fail(code: int, message: str) -> typer.Exit:
    """Print one red line to stderr and return the Exit to raise."""
    err_console.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


@contextmanager
def exit_codes(
    usage_errors: tuple[type[BaseException], ...] = (),
    check_errors: tuple[type[BaseException], ...] = (),
) -> Iterator[None]:
    """Turn failures into one line and the documented exit code.

    `usage_errors` exit 2 (bad input the user must fix), `check_errors` exit 1 (a failed check).
    """
    try:
        yield
    except IncompleteStageError as err:
        raise fail(1, f"gate failed: {err}") from None
    except (storage.Unreachable, storage.AccessDenied, ClusterUnreachable) as err:
        raise fail(2, str(err)) from None
    except storage.StorageError as err:
        raise fail(1, str(err)) from None
    except usage_errors as err:
        raise fail(2, str(err)) from None
    except check_errors as err:
        raise fail(1, str(err)) from None


@contextmanager
def progress_bars() -> Iterator[ProgressFn]:
    """A rich progress bar per stage, driven by the engine's progress callback."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
    ) as bars:
        ids: dict[str, Any] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in ids:
                ids[stage] = bars.add_task(stage, total=total)
            bars.update(ids[stage], completed=done)

        yield update


def print_report(report: Report, json_path: Path | None = None) -> None:
    """The per-stage table (tasks, skipped, written, seconds, gate), optionally also as JSON."""
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


# The S3 options of toolkit.storage, shared by every command that opens a store.
Endpoint = Annotated[str | None, typer.Option("--endpoint", help="S3 endpoint URL.")]
Region = Annotated[str | None, typer.Option("--region", help="S3 region.")]
Anonymous = Annotated[bool, typer.Option("--anonymous", help="Unsigned requests (public store).")]
AllowHttp = Annotated[bool, typer.Option("--allow-http", help="Allow an http:// endpoint.")]
PathStyle = Annotated[bool, typer.Option("--path-style", help="Path-style S3 addressing.")]


def root_cluster(ctx: typer.Context, explicit: str | None = None) -> str | None:
    """A command's own --cluster, else the global `toolkit --cluster`."""
    if explicit:
        return explicit
    value = ctx.find_root().params.get("cluster")
    return value if isinstance(value, str) else None


def store_options(
    url: str,
    endpoint: str | None = None,
    region: str | None = None,
    anonymous: bool = False,
    allow_http: bool = False,
    path_style: bool = False,
) -> dict[str, Any]:
    """The S3-style options of toolkit.storage, for URLs of a cloud scheme only."""
    scheme = url.split("://", 1)[0] if "://" in url else "file"
    if scheme not in ("s3", "gs", "gcs", "az", "azure", "abfs"):
        return {}
    options: dict[str, Any] = {}
    for name, value in (("endpoint", endpoint), ("region", region)):
        if value is not None:
            options[name] = value
    for name, flag in (
        ("anonymous", anonymous),
        ("allow_http", allow_http),
        ("path_style", path_style),
    ):
        if flag:
            options[name] = True
    return options
