"""`toolkit pyramid plan|build|verify|stac`.

Exit codes: 0 success, 1 a failed gate or check, 2 bad usage or an unreachable store. The
shared plumbing comes from `toolkit.console`; the global `--cluster` is read from the root
context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.markup import escape

from toolkit import options
from toolkit.console import (
    STORAGE,
    WAIT_FOR_WORKERS,
    AsJson,
    PerformanceReport,
    Ship,
    Storage,
    StorageOptions,
    Table,
    Typer,
    WaitForWorkers,
    WriteStorage,
    emit_json,
    exit_codes,
    fail,
    hint,
    json_asked,
    out,
    print_report,
    report_json,
    runner,
)
from toolkit.console import err_console as console

app = Typer(help="Exact multiscale pyramids of Zarr v3 stores.", no_args_is_help=True)

Source = Annotated[
    str,
    typer.Argument(
        help="Zarr v3 store, or an Icechunk repo (a virtual dataset's): a path, file://, "
        "memory://, s3://..."
    ),
]
Select = Annotated[
    list[str] | None,
    typer.Option(
        "--select",
        help="DIM=VALUE (repeatable): an Icechunk repo source's positions to build, e.g. "
        "init_time=2025-08-01T06 or lead_time=3h; every position by default.",
    ),
]
Latest = Annotated[
    bool,
    typer.Option("--latest", help="Only the newest position of an Icechunk repo's append dim."),
]
Variables = Annotated[
    list[str] | None, typer.Option("--variable", "-v", help="Variable to pyramid (repeatable).")
]
Method = Annotated[
    str | None,
    typer.Option(
        help="mean|mode|min|max|sum|circular_mean. Default: from the data's meaning: mode for "
        "arrays with CF flag_values/flag_meanings (classes), circular_mean for a CF "
        "standard_name ending in _direction, mean for floats and packed integers "
        "(scale_factor/add_offset), each variable its own; other integers must say. Given, it "
        "is for the --variable(s) named (every array when none); a built variable keeps its "
        "operator."
    ),
]
ForceMethod = Annotated[
    bool,
    typer.Option(
        "--force-method", help="Apply --method to CF-flagged (class) arrays all the same."
    ),
]
BandDim = Annotated[str | None, typer.Option("--band-dim", help="Joint-mask (band) dimension.")]
Levels = Annotated[
    int | None,
    options.Option(
        check=options.count(1, what="a count of levels"),
        help="Levels (default: down to one 512 px tile).",
    ),
]
MaxShard = Annotated[
    int,
    options.Option(
        "--max-shard",
        check=options.count(1, 2**16, "pixels"),
        help="Largest output shard side (px); levels grow to it.",
    ),
]
Cluster = Annotated[str | None, typer.Option("--cluster", help="Dask scheduler address.")]
Executor = Annotated[
    Literal["auto", "dask", "sync"],
    typer.Option(
        help="auto: this process for small work (under 1 GiB to read, nothing to start), "
        "else a cluster (--cluster, or an embedded one with its dashboard); dask: always a "
        "cluster; sync: always this process."
    ),
]


def _options(source: str, stores: StorageOptions) -> StorageOptions:
    """The storage flags, checked against SOURCE: S3 options on a URL they do not concern, or
    a plain-http endpoint without --allow-http, are bad usage."""
    from toolkit.pyramid.geometry import PlanError

    if not stores.checked(source) and stores.given:
        raise PlanError(f"{source}: S3 options only apply to s3://, gs:// or az:// URLs")
    return stores


def _selection(items: list[str] | None, latest: bool = False) -> dict[str, list[str]]:
    """`--select DIM=VALUE` options as {dim: [values]}; a malformed one, or one given with
    --latest (which chooses positions too), is bad usage."""
    from toolkit.pyramid.geometry import PlanError

    if items and latest:
        raise PlanError(
            "--latest and --select both choose the positions to build: give one of them"
        )
    out: dict[str, list[str]] = {}
    for item in items or ():
        dim, sep, value = item.partition("=")
        if not sep or not dim.strip() or not value.strip():
            raise PlanError(f"--select {item!r}: want DIM=VALUE, e.g. init_time=2025-08-01T06")
        out.setdefault(dim.strip(), []).append(value.strip())
    return out


def _exit_codes() -> Any:
    from toolkit.pyramid.geometry import PlanError

    # OSError: a local path the OS refuses (not a directory, no permission)
    return exit_codes(usage_errors=(PlanError, OSError))


@app.command("plan")
def plan_cmd(
    source: Source,
    variable: Variables = None,
    method: Method = None,
    band_dim: BandDim = None,
    levels: Levels = None,
    max_shard: MaxShard = 4096,
    force_method: ForceMethod = False,
    select: Select = None,
    latest: Latest = False,
    stores: Storage = STORAGE,
    as_json: AsJson = False,
) -> None:
    """Tasks per level after pruning, and the gate targets (reads metadata and listings only)."""
    from toolkit.pyramid import plan

    with _exit_codes():
        opts = _options(source, stores)
        p = plan(
            source,
            variable or None,
            method,
            band_dim,
            levels,
            max_shard,
            force_method,
            select=_selection(select, latest),
            latest=latest,
            options=opts,
        )
    why = dict(p.operators_from)
    if as_json:
        emit_json(
            {
                "digest": p.digest,
                "method": p.method,
                "method_from": p.method_from,
                "variables": list(p.variables),
                "operators": [
                    {"variable": n, "operator": op, "from": why.get(n, "")}
                    for n, op in p.operators.items()
                ],
                "levels": [
                    {
                        "group": lvl.group,
                        "shape": list(lvl.shape),
                        "shard": list(lvl.vars[0].shards[-2:]),
                        "naive": naive,
                        "tasks": len(lvl.tasks),
                        "pruned": naive - len(lvl.tasks),
                        "targets": len(lvl.targets),
                    }
                    for lvl, naive in zip(p.levels, p.naive, strict=True)
                ],
                "reading": list(p.reading),
                "notes": list(p.notes),
            }
        )
        return
    table = Table(
        title=f"pyramid plan {p.digest} ({p.method}: {p.method_from}; {', '.join(p.variables)})"
    )
    for col in ("level", "shape", "shard", "naive", "tasks", "pruned", "target objects"):
        table.add_column(col, justify="right")
    for lvl, naive in zip(p.levels, p.naive, strict=True):
        v = lvl.vars[0]
        table.add_row(
            lvl.group,
            "x".join(map(str, lvl.shape)),
            "x".join(map(str, v.shards[-2:])),
            str(naive),
            str(len(lvl.tasks)),
            str(naive - len(lvl.tasks)),
            str(len(lvl.targets)),
        )
    out.print(table)
    for n, op in p.operators.items():  # each variable's operator, and why
        because = f" ({escape(why[n])})" if why.get(n) else ""
        out.print(f"{escape(n)}: {op}{because}", soft_wrap=True, highlight=False)
    for line in p.reading:  # how CF said to read level 0
        out.print(f"level 0 {escape(line)}", soft_wrap=True)
    for note in p.notes:
        out.print(f"note: {escape(note)}", soft_wrap=True)


@app.command("build")
def build_cmd(
    ctx: typer.Context,
    source: Source,
    variable: Variables = None,
    method: Method = None,
    band_dim: BandDim = None,
    levels: Levels = None,
    cluster: Cluster = None,
    wait_for_workers: WaitForWorkers = WAIT_FOR_WORKERS,
    rebuild_from: Annotated[
        str | None,
        typer.Option(
            "--rebuild-from",
            help="Delete this level (e.g. 4x) and every coarser one, then rebuild.",
        ),
    ] = None,
    executor: Executor = "auto",
    max_shard: MaxShard = 4096,
    force_method: ForceMethod = False,
    select: Select = None,
    latest: Latest = False,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            help="An Icechunk repo (path, file://, s3://) to build into; SOURCE is then only "
            "read: level 0 is referenced (virtual refs to its chunk objects), the levels native.",
        ),
    ] = None,
    stores: WriteStorage = STORAGE,
    performance_report: PerformanceReport = None,
    ship: Ship = False,
    as_json: AsJson = False,
) -> None:
    """Build every level (resuming what exists), gate by gate, then add the root metadata.
    With --output, into a new Icechunk repo, the source only read (Zarr v2 or v3)."""
    from toolkit.pyramid import build

    with (
        _exit_codes(),
        runner(ctx, cluster, performance_report, ship, executor, wait_for_workers) as run,
    ):
        opts = _options(source, stores)
        report = build(
            source,
            variable or None,
            method,
            band_dim,
            levels,
            runner=run,
            rebuild_from=rebuild_from,
            max_shard=max_shard,
            force_method=force_method,
            select=_selection(select, latest),
            latest=latest,
            output=output,
            options=opts,
        )
    if as_json:
        emit_json(report_json(report))
        return
    print_report(report)
    if executor == "auto" and report.executor == "sync":
        hint(
            "small build: ran in this process; --executor dask runs it on a cluster with its dashboard"
        )


@app.command("verify")
def verify_cmd(
    ctx: typer.Context,
    source: Source,
    sample: Annotated[
        int,
        options.Option(
            check=options.count(1),
            help="Shards per level and variable compared with the numpy reference, spread "
            "evenly (the first and the last among them).",
        ),
    ] = 4,
    cluster: Cluster = None,
    wait_for_workers: WaitForWorkers = WAIT_FOR_WORKERS,
    executor: Executor = "auto",
    private: Annotated[
        bool,
        typer.Option(
            "--private",
            help="The store is not published: the client round-trip reads with credentials "
            "instead of anonymously.",
        ),
    ] = False,
    select: Select = None,
    latest: Latest = False,
    stores: Storage = STORAGE,
    performance_report: PerformanceReport = None,
    ship: Ship = False,
    as_json: AsJson = False,
) -> None:
    """Check the pyramid; exit 0 only if every check passes, 1 otherwise."""
    from toolkit.pyramid import verify

    with (
        _exit_codes(),
        runner(ctx, cluster, performance_report, ship, executor, wait_for_workers, False) as run,
    ):
        opts = _options(source, stores)
        result = verify(
            source,
            sample,
            runner=run,
            private=private,
            select=_selection(select, latest),
            latest=latest,
            options=opts,
        )
    if as_json:
        failures = [dataclasses.asdict(f) for f in result.failures]
        where = result.report.executor if result.report else None  # None: no check ran
        emit_json(
            {"ok": result.ok, "checked": result.checked, "failures": failures, "executor": where}
        )
    elif not result.checked and len(result.failures) == 1:  # refused before any check ran
        raise fail(1, f"{source}: {result.failures[0].detail}")
    else:
        _print_verified(result.checked, result.failures)
    if not result.ok:
        raise typer.Exit(1)


def _print_verified(checked: dict[str, int], failures: Sequence[Any]) -> None:
    """The checks run (graph tasks each) on stdout as a table, then every failure as one line
    on stderr (`FAIL [check] level L shard: detail`, whole for a log search), and the verdict."""
    table = Table(title="pyramid verify")
    for col in ("checks", "tasks"):
        table.add_column(col, justify="left" if col == "checks" else "right")
    for stage, tasks in checked.items():
        table.add_row(stage.removeprefix("verify-"), str(tasks))
    out.print(table)
    if failures:
        for f in failures:
            console.print(f"[red]FAIL[/red] {escape(str(f))}", soft_wrap=True)
        console.print(f"[red]{len(failures)} check(s) failed[/red]")
        return
    out.print("[green]pyramid verified[/green]: every check passed")


@app.command("stac")
def stac_cmd(
    source: Source,
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="Folder for collection.json and its item (rewritten)."),
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="One JSON object on stdout: the paths and extents.", callback=json_asked
        ),
    ] = False,
    stores: Storage = STORAGE,
) -> None:
    """Write the built pyramid's STAC Collection + Item (datacube and xarray-assets
    extensions; one asset per level) to --output, self-contained. See docs/stac.md."""

    from toolkit.pyramid import stac

    with _exit_codes():
        entry = stac(source, output, _options(source, stores))
    if as_json:
        emit_json(entry.as_dict())
        return
    out.print(f"wrote {escape(str(entry.collection))}", highlight=False, soft_wrap=True)
    out.print(f"bbox {entry.bbox}, interval {entry.interval}", highlight=False, soft_wrap=True)
