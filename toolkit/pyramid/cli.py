"""`toolkit pyramid plan|build|verify`."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(help="Exact multiscale pyramids of Zarr v3 stores.", no_args_is_help=True)

Source = Annotated[str, typer.Argument(help="Store URL: a path, file://, memory://, s3://...")]
Variables = Annotated[
    list[str] | None, typer.Option("--variable", "-v", help="Variable to pyramid (repeatable).")
]


def _usage(err: Exception) -> typer.Exit:
    from toolkit.cli import console

    console.print(f"[red]error:[/red] {err}")
    return typer.Exit(2)


@app.command("plan")
def plan_cmd(
    source: Source,
    variable: Variables = None,
    method: Annotated[str, typer.Option(help="mean|mode|min|max|sum")] = "mean",
    band_dim: Annotated[str | None, typer.Option("--band-dim")] = None,
    levels: Annotated[int | None, typer.Option(help="Levels to plan (default: down to one tile).")] = None,
) -> None:
    """Tasks per level after pruning, and the gate targets."""
    from rich.table import Table

    from toolkit.cli import exit_codes, out
    from toolkit.pyramid import plan
    from toolkit.pyramid.plan import PlanError

    with exit_codes():
        try:
            p = plan(source, variable or None, method, band_dim, levels)
        except PlanError as err:
            raise _usage(err) from None
    table = Table(title=f"pyramid plan {p.digest} ({p.method}, variables {', '.join(p.variables)})")
    for col in ("level", "shape", "shard", "naive", "tasks", "pruned", "target objects"):
        table.add_column(col, justify="right")
    for lvl, naive in zip(p.levels, p.naive, strict=True):
        v = lvl.vars[0]
        table.add_row(lvl.group, "x".join(map(str, lvl.shape)), "x".join(map(str, v.shards[-2:])),
                      str(naive), str(len(lvl.tasks)), str(naive - len(lvl.tasks)),
                      str(len(lvl.targets)))
    out.print(table)


@app.command("build")
def build_cmd(
    source: Source,
    variable: Variables = None,
    method: Annotated[str, typer.Option(help="mean|mode|min|max|sum")] = "mean",
    band_dim: Annotated[str | None, typer.Option("--band-dim", help="Joint-mask dimension.")] = None,
    levels: Annotated[int | None, typer.Option(help="Levels to build (default: down to one tile).")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Dask scheduler address.")] = None,
    rebuild_from: Annotated[
        str | None, typer.Option("--rebuild-from", help="Delete this level (e.g. 4x) and coarser; rebuild.")
    ] = None,
    executor: Annotated[str, typer.Option(help="dask or sync")] = "dask",
) -> None:
    """Build every level (resuming what exists), gate by gate, then add the root metadata."""
    from toolkit.cli import exit_codes, print_report, progress_bars, state
    from toolkit.pyramid import build
    from toolkit.pyramid.plan import PlanError

    with exit_codes():
        try:
            with progress_bars() as bars:
                report = build(source, variable or None, method, band_dim, levels,
                               cluster=cluster or state.cluster, executor=executor,
                               progress=bars, rebuild_from=rebuild_from)
        except PlanError as err:
            raise _usage(err) from None
    print_report(report)


@app.command("verify")
def verify_cmd(
    source: Source,
    sample: Annotated[int, typer.Option(help="Stripes per level sampled (first/middle/last each).")] = 4,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Dask scheduler address.")] = None,
    executor: Annotated[str, typer.Option(help="dask or sync")] = "dask",
) -> None:
    """Check the pyramid; exit 0 only if every check passes, 1 otherwise."""
    from rich.markup import escape

    from toolkit.cli import console, exit_codes, out
    from toolkit.pyramid import verify

    with exit_codes():
        result = verify(source, sample, cluster=cluster or state_cluster(), executor=executor)
    for f in result.failures:
        console.print(f"[red]FAIL[/red] {escape(str(f))}")
    if not result.ok:
        console.print(f"[red]{len(result.failures)} check(s) failed[/red]")
        raise typer.Exit(1)
    out.print(f"[green]pyramid verified[/green] ({result.checked})")


def state_cluster() -> str | None:
    from toolkit.cli import state

    return state.cluster
