"""`toolkit virtual backfill|update|inspect|validate|stac`.

Datasets come from `toolkit.virtual.builtin.DATASETS`; a real one reads its own NOAA bucket
anonymously unless `--source` names a mirror or a local copy.

Exit codes: 0 success, 1 a failed gate or check (finalize refusing a moved main; another
update holding the repo's lease -- "another update is running" -- or taking it over mid-run; a
validation failure), 2 bad usage or an unreachable store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from toolkit import options
from toolkit.console import (
    STORAGE,
    WAIT_FOR_WORKERS,
    AsJson,
    PerformanceReport,
    RepoStorage,
    Ship,
    StorageOptions,
    Typer,
    WaitForWorkers,
    emit_json,
    json_asked,
)
from toolkit.virtual.clock import VALIDATION_FLOOR

app = Typer(help="Icechunk virtual datasets over GRIB sources.", no_args_is_help=True)

Dataset = Annotated[
    str,
    typer.Argument(
        help="Dataset name (see `toolkit virtual datasets`), or your own as module:NAME "
        "(an importable module or a path/to/file.py, and the Dataset it defines)."
    ),
]
RepoUrl = Annotated[str, typer.Option("--repo", help="Icechunk repo location (path, s3://...).")]
RepoArg = Annotated[str, typer.Argument(help="Icechunk repo location (path, s3://...).")]
SourceUrl = Annotated[
    str | None,
    typer.Option(
        "--source",
        help="Source archive location (bucket URL, path). Default: the dataset's own NOAA "
        "bucket, read anonymously; sim-gfs has none and needs it.",
    ),
]
Replicas = Annotated[
    list[str] | None,
    typer.Option(
        "--replica",
        help="Another repo written with the same refs, committed before the primary "
        "(repeatable). The primary (--repo) defines what is committed.",
    ),
]
Anonymous = Annotated[
    bool, typer.Option("--anonymous", help="Read an s3:// --source without credentials.")
]
Sample = Annotated[
    int,
    options.Option(
        check=options.count(0),
        help="Cells to decode (each a graph node), at least every variable's first, "
        "interior and last lead and every member at each sampled position (0: none).",
    ),
]
MinPresent = Annotated[
    str | None,
    typer.Option(
        help="Completeness tiers: comma-separated fractions of expected files, newest "
        "position first; the last must be 1.0. Default: the dataset's."
    ),
]
IncludeVars = Annotated[
    list[str] | None,
    typer.Option(
        "--include-var",
        help="Check only the source files carrying these variables (repeatable; the choice "
        "must not split a file).",
    ),
]
ExcludeVars = Annotated[
    list[str] | None,
    typer.Option("--exclude-var", help="Leave out the files carrying these (repeatable)."),
]


def _open(
    url: str, stores: StorageOptions, anonymous: bool = False, must_exist: bool = False
) -> Any:
    """A store of the virtual jobs: an --endpoint is addressed as us-east-1; `anonymous` is
    for the --source only."""
    from dataclasses import replace

    from toolkit import storage

    region = "us-east-1" if stores.endpoint else None
    options = replace(stores, region=region, anonymous=anonymous).for_url(url)
    return storage.open_store(url, must_exist=must_exist, **options)


def _dataset(
    name: str,
    repo: str,
    source: str | None,
    stores: StorageOptions,
    anonymous: bool = False,
    replicas: list[str] | None = None,
) -> Any:
    """The job writing dataset `name` (known, or `module:NAME`) into `repo` (and its
    `replicas`); `source` (a mirror, a local copy) replaces its bucket."""
    from toolkit import icechunk as R
    from toolkit.virtual.builtin import build
    from toolkit.virtual.write import Job

    store = None if source is None else _open(source, stores, anonymous)
    dataset = build(name, store)  # a bad name fails here, before any repo path is made
    if store is not None and store.is_local and not store.local_path.is_dir():
        raise ValueError(
            f"--source {store.local_path}: no such directory; pass the mirror's root, or leave "
            "--source out to read the dataset's own bucket"
        )
    urls = list(replicas or ())
    if repo in urls or len(set(urls)) != len(urls):
        raise ValueError(
            f"--replica {', '.join(urls)}: each replica must be another repo than --repo "
            f"{repo} and than every other replica"
        )
    refs = tuple(R.RepoRef(_open(u, stores)) for u in urls)
    primary = R.RepoRef(_open(repo, stores))
    for ref in (primary, *refs):
        R.refuse_foreign(ref.store)  # before any work: a usage error about the location
    return Job(dataset, primary, replicas=refs)


def _existing_repo(url: str, stores: StorageOptions) -> Any:
    """Open a repo that must already exist, creating nothing where it is not."""
    from toolkit import icechunk as R
    from toolkit import storage

    try:
        store = _open(url, stores, must_exist=True)
    except storage.NotFound:
        raise R.NotARepo(f"no Icechunk repo at {url}: the path does not exist; check it") from None
    return R.open_repo(store, fresh=True)


@contextmanager
def _errors(repo: str | None = None) -> Iterator[None]:
    """One line and the documented exit code; an object of `repo` that does not parse is
    named (Icechunk's own error names neither the repo nor, often, the object)."""
    from toolkit import icechunk as R
    from toolkit import storage
    from toolkit.console import exit_codes
    from toolkit.icechunk import BranchMoved, OutsideContainers
    from toolkit.virtual.backfill import BranchGone, RegionOverlap
    from toolkit.virtual.layout import MetadataDrift
    from toolkit.virtual.lease import LeaseHeld, LeaseLost
    from toolkit.virtual.update import BackfillInFlight, FarBehind
    from toolkit.virtual.validate import ValidationFailed

    with exit_codes(
        usage_errors=(ValueError, KeyError),
        check_errors=(
            BranchMoved,
            BranchGone,
            RegionOverlap,
            LeaseHeld,
            LeaseLost,
            BackfillInFlight,
            FarBehind,
            MetadataDrift,
            OutsideContainers,
            ValidationFailed,
        ),
    ):
        if repo is None:
            yield
            return
        with R.corruption_named(storage.Store(repo)):
            yield


def _var_choice(
    include: list[str] | None, exclude: list[str] | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """--include-var / --exclude-var; a variable named in both is bad usage."""
    both = sorted(set(include or ()) & set(exclude or ()))
    if both:
        raise ValueError(
            f"--include-var and --exclude-var both name {', '.join(both)}: drop one of them"
        )
    return tuple(include or ()), tuple(exclude or ())


def _positions(text: str) -> int | str:
    if text.strip().lower() == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--positions must be a count >= 1 or 'all', not {text!r}") from None


def _label(text: str | None, option: str = "--start") -> Any:
    """An append-dim label from the command line; a bad one names its option."""
    import numpy as np

    if text is None:
        return None
    try:
        return np.datetime64(text, "ns")
    except ValueError:
        raise ValueError(
            f"{option} {text!r}: not a UTC date and time; write it as ISO 8601, e.g. "
            "2025-08-01T00 or 2025-08-01T06:00"
        ) from None


def _about(build: Callable[..., Any]) -> str:
    """What a dataset is, in one line: the first paragraph of its docstring, whitespace
    collapsed (a JSON field or a table cell holds no line break or indentation)."""
    import inspect

    return " ".join(inspect.cleandoc(build.__doc__ or "").split("\n\n")[0].split())


@app.command("datasets")
def datasets(as_json: AsJson = False) -> None:
    """List the datasets this build knows: name, what it is, where it reads from."""
    from rich.text import Text

    from toolkit.console import Table, print_plain
    from toolkit.virtual.builtin import DATASETS, HOMES

    if as_json:
        emit_json(
            {
                "datasets": [
                    {"name": n, "source": HOMES[n], "about": _about(b)}
                    for n, b in sorted(DATASETS.items())
                ]
            }
        )
        return
    table = Table(box=None, show_header=False, pad_edge=False)  # a row per dataset, wrapped
    table.add_column("name", no_wrap=True)
    table.add_column("source")
    table.add_column("about")
    for name, build in sorted(DATASETS.items()):
        source = HOMES[name] or "(no bucket: pass --source)"
        table.add_row(*map(Text, (name, source, _about(build))))  # Text: no markup read
    yours = "your own: module:NAME (a Dataset in an importable module or a .py file; see "
    print_plain(table, yours + "docs/how-to/own-dataset.md)")


@app.command()
def backfill(
    ctx: typer.Context,
    dataset: Dataset,
    repo: RepoUrl,
    start: Annotated[
        str,
        options.Option(check=options.time(), help="First append-dim label (e.g. 2025-08-01T00)."),
    ],
    source: SourceUrl = None,
    end: Annotated[
        str | None,
        options.Option(check=options.time(), help="Exclusive end; default: last published."),
    ] = None,
    workers: Annotated[
        int | None,
        options.Option(
            check=options.count(1),
            help="Stripe nodes (contiguous blocks). Default: the cluster's thread count.",
        ),
    ] = None,
    cluster: Annotated[str | None, typer.Option(help="Dask scheduler address.")] = None,
    wait_for_workers: WaitForWorkers = WAIT_FOR_WORKERS,
    executor: Annotated[Literal["dask", "sync"], typer.Option(help="dask or sync")] = "dask",
    strict: Annotated[bool, typer.Option(help="Any skipped file fails the gate.")] = False,
    overwrite_chunks: Annotated[bool, typer.Option(help="Re-emit refs, no filter.")] = False,
    allow_empty_positions: Annotated[
        bool, typer.Option(help="Allow --end past the last published position.")
    ] = False,
    rebase: Annotated[
        bool,
        typer.Option(
            help="This region's backfill was refused at finalize (main moved): restart it from "
            "main's new head, unless main's new commits wrote into the region."
        ),
    ] = False,
    round_files: Annotated[
        int | None,
        options.Option(
            check=options.count(1),
            help="Files committed to the branch per round; a rerun after any loss resumes "
            "after the last committed round. Default: about ten minutes of the cluster's work "
            "(the run's notes say the size).",
        ),
    ] = None,
    stores: RepoStorage = STORAGE,
    anonymous: Anonymous = False,
    replica: Replicas = None,
    performance_report: PerformanceReport = None,
    ship: Ship = False,
    as_json: AsJson = False,
) -> None:
    """Backfill [start, end) on a temp branch with parallel workers, committed in rounds;
    main moves at finalize."""
    from toolkit.console import emit_json, err_console, print_report, report_json, runner
    from toolkit.engine import AUTO
    from toolkit.virtual.backfill import backfill as run_backfill

    with (
        _errors(repo),
        runner(ctx, cluster, performance_report, ship, executor, wait_for_workers) as run,
    ):
        ds = _dataset(dataset, repo, source, stores, anonymous, replica)
        report = run_backfill(
            ds,
            start=_label(start),
            end=_label(end, "--end"),
            workers=workers or AUTO,
            runner=run,
            strict=strict,
            overwrite_chunks=overwrite_chunks,
            allow_empty_positions=allow_empty_positions,
            rebase=rebase,
            round_files=round_files,
        )
    if not as_json:
        print_report(report)
    ingest = report.stage("commit")  # what is on the branch, and why the rest is not
    out = ingest.result
    if as_json:
        doc = report_json(report) | {"rounds": ingest.tasks}
        if out is not None:
            doc |= {"on_branch": ingest.gate_have, "committed": out.ingested,
                    "refs": out.refs, "rebases": out.rebases, "absent": dict(ingest.excused),
                    "empty_positions": list(out.empty_positions)}  # fmt: skip
        emit_json(doc)
    if out is not None:
        absent = dict(ingest.excused)

        def count(why: str) -> int:
            return sum(1 for reason in absent.values() if reason.startswith(why))

        err_console.print(
            f"files: {ingest.gate_have} on the branch ({out.ingested} committed by this "
            f"run), {count('not published')} not published, "
            f"{count('published without its index')} published without its index, "
            f"{count('withheld')} withheld, {count('skipped')} skipped; "
            f"refs written: {out.refs}; {ingest.tasks} round(s), {len(out.commits)} "
            f"commit(s), {out.rebases} rebase(s)"
        )
        for key, why in absent.items():
            err_console.print(f"  {key}: {why}", highlight=False)
        if out.empty_positions:
            err_console.print(
                f"{len(out.empty_positions)} position(s) past the last published one: readers "
                f"see them empty until refs land: {', '.join(out.empty_positions)}"
            )


# `toolkit virtual update`'s own flags
FireTime = Annotated[
    str | None,
    options.Option(
        check=options.time(now=True),
        help="Scheduled fire (UTC, e.g. 2025-08-01T18:00): the window ends here. Default: now.",
    ),
]
ScheduledAt = Annotated[
    str | None,
    options.Option(
        check=options.time(now=True),
        help="Wall-clock UTC time the fire was scheduled ('now': when this process "
        "started, for a simulated clock); the fire ends by it + --deadline, so a "
        "replacement process stops when the one it replaced would have. Default: "
        "--fire-time.",
    ),
]
Deadline = Annotated[
    float,
    options.Option(
        check=options.seconds(1),
        help="Active deadline, seconds after --scheduled-at: polling, commits and "
        "validation all end inside it (set a CronJob's activeDeadlineSeconds to it).",
    ),
]
LeaseWait = Annotated[
    float,
    options.Option(
        check=options.seconds(0),
        help="Seconds to wait for another running update to release the repo's lease "
        "(0: exit 1 at once); refused when the deadline leaves less. A holder that is "
        "gone (a dead process on this host, a heartbeat silent for two beats) is taken "
        "over at once.",
    ),
]
GiveUpAfter = Annotated[
    int,
    options.Option(
        check=options.count(0),
        help="Fires in a row a published file may be skipped as unreadable before it is "
        "given up as missing for good (retried when its object changes; 0: never).",
    ),
]
Check = Annotated[
    bool,
    typer.Option(
        "--validate/--no-validate",
        help="After the commits, validate the fire's window (completeness, data currency, "
        "replicas, decode health); exit 1 naming every failure.",
    ),
]
ValidationSeconds = Annotated[
    float,
    options.Option(
        check=options.seconds(0),
        help="Validation's own time bound, from when it starts, capped by what --deadline "
        f"leaves (at least {VALIDATION_FLOOR:g} s, kept back from polling); checks it "
        "stops are named, and fail.",
    ),
]
SampleCluster = Annotated[
    str | None, typer.Option(help="Dask scheduler address for the decode samples.")
]
AUTO_HELP = (
    "auto: the cluster --cluster / TOOLKIT_CLUSTER names, else this process for small work "
    "(under 1 GiB to decode, nothing to start); dask: always a cluster; sync: always this process."
)
AutoExecutor = Annotated[Literal["auto", "dask", "sync"], typer.Option(help=AUTO_HELP)]
SampleExecutor = Annotated[
    Literal["auto", "dask", "sync"], typer.Option(help=f"The decode samples' executor. {AUTO_HELP}")
]
FireJson = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the fire's summary (commits, pending, skipped, given up, lag from "
        "publish to main, validation) as one JSON object on stdout; the rest goes to stderr.",
        callback=json_asked,
    ),
]
ExpireOlderThan = Annotated[
    str | None,
    options.Option(
        check=options.DURATION,
        help="After the commits, inside the fire's lease: expire snapshots older than this "
        "(0s, 12h, 30d) and collect garbage, as `toolkit virtual expire`.",
    ),
]
PyramidVars = Annotated[
    list[str] | None,
    typer.Option(
        "--pyramid",
        help="Variable (repeatable) whose map levels are built in the fire, right after "
        "each commit, and landed on main with it; validation then checks every level.",
    ),
]
StacOut = Annotated[
    Path | None,
    typer.Option(
        "--stac",
        help="After the commits: rewrite the dataset's STAC entry in this folder with "
        "main's new extents, as `toolkit virtual stac` (a failure there is a warning).",
    ),
]


@app.command()
def update(
    ctx: typer.Context,
    dataset: Dataset,
    repo: RepoUrl,
    source: SourceUrl = None,
    fire_time: FireTime = None,
    scheduled_at: ScheduledAt = None,
    deadline: Deadline = 600.0,
    lease_wait: LeaseWait = 0.0,
    stores: RepoStorage = STORAGE,
    anonymous: Anonymous = False,
    replica: Replicas = None,
    give_up_after: GiveUpAfter = 3,
    check: Check = True,
    validation_seconds: ValidationSeconds = 60.0,
    sample: Sample = 16,
    min_present: MinPresent = None,
    cluster: SampleCluster = None,
    wait_for_workers: WaitForWorkers = WAIT_FOR_WORKERS,
    executor: SampleExecutor = "auto",
    performance_report: PerformanceReport = None,
    as_json: FireJson = False,
    expire_older_than: ExpireOlderThan = None,
    pyramid: PyramidVars = None,
    stac: StacOut = None,
) -> None:
    """One operational fire: refresh metadata, commit whole files to main as they publish,
    then validate what the window holds. Exit 0 only when every check passes."""
    from functools import partial

    from toolkit.console import runner
    from toolkit.virtual.unattended import Checks, Schedule
    from toolkit.virtual.unattended import fire as run_fire

    keep = _duration(expire_older_than, "--expire-older-than")
    with _errors(repo):
        at = _label(fire_time or "now", "--fire-time")
        anchor = _epoch(scheduled_at or str(at))
        when = Schedule(at, anchor, deadline, lease_wait, give_up_after, keep, scheduled_at)
        checks = Checks(check, validation_seconds, sample, _tiers(min_present))
        ds = _dataset(dataset, repo, source, stores, anonymous, replica)
        levels = _pyramid_hooks(ds, pyramid)
        _stac_dir(stac)
        _here_by_design(ctx, cluster, executor, check, bool(pyramid))
        with runner(
            ctx,
            cluster,
            performance_report,
            executor=executor,
            wait_for_workers=wait_for_workers,
            at_once=False,
        ) as run:  # the samples' cluster is reached after the commits, when validation runs
            outcome = run_fire(
                ds,
                when,
                checks,
                run,
                levels=levels,
                stac=stac,
                say=_say,
                shown=partial(_show_fire, as_json=as_json),
            )
        _show_verdict(outcome, as_json)


def _here_by_design(
    ctx: typer.Context, cluster: str | None, executor: str, check: bool, pyramid: bool
) -> None:
    """With a cluster given, say once what of the fire runs in this process anyway: its
    commits (one writer, holding the repo's lease) and --pyramid's levels; only the decode
    samples of its validation go to the cluster."""
    from toolkit.console import hint, root_cluster

    if root_cluster(ctx, cluster) is None or executor == "sync":  # sync: `runner` says so
        return
    mine = "commits and --pyramid levels" if pyramid else "commits"
    where = "its validation's decode samples run on the cluster"
    if not check:
        where = "with --no-validate nothing runs on the cluster"
    hint(f"note: the fire's {mine} run in this process (one writer, holding the lease); {where}")


def _say(line: str) -> None:
    """A line of the fire's (warnings, the STAC entry) on stderr, as written."""
    from toolkit.console import err_console

    err_console.print(line, highlight=False, markup=False)


def _show_fire(fire: Any, as_json: bool) -> None:
    """What the fire did, on stderr (its table on stdout without --json), printed as soon as
    its commits are done: before validation starts."""
    from toolkit.console import err_console, print_report

    if fire.took_over:
        err_console.print(f"warning: {fire.took_over}", highlight=False, markup=False)
    if as_json:
        err_console.print(
            f"update: {len(fire.ingested)} file(s) committed in {len(fire.commits)} "
            f"commit(s), {len(fire.pending)} pending, {len(fire.skipped)} skipped",
            highlight=False,
        )
    else:
        print_report(fire.as_report())
    for url, done in fire.expired:
        err_console.print(
            f"expired {url}: {done.snapshots} snapshot(s), {done.objects} object(s) "
            f"({done.bytes:,} bytes)",
            highlight=False,
        )
    for levels in fire.after:
        shards = sum(s.written for s in levels.stages if s.name.endswith("x"))
        err_console.print(f"levels: {shards} shard(s) landed on main ({levels.seconds:.2f} s)")
    for s in fire.skipped:
        err_console.print(f"skipped {s.url}: {s.reason}", highlight=False, markup=False)
    if fire.pending:
        err_console.print(f"{len(fire.pending)} file(s) not yet published roll to the next fire")


def _show_verdict(outcome: Any, as_json: bool) -> None:
    """The fire's record (with --json, the one line of stdout), then validation's report;
    exit 1 naming every failure."""
    import sys

    from toolkit.console import err_console
    from toolkit.virtual.validate import ValidationFailed

    if outcome.validation is None:
        for line in outcome.failures:
            err_console.print(f"FAIL {line}", highlight=False, markup=False)
    if as_json:
        emit_json(outcome.record)
        sys.stdout.flush()
    if outcome.validation is not None:
        _report_validation(outcome.validation, err_console if as_json else None)
    elif outcome.failures:
        raise ValidationFailed(f"{len(outcome.failures)} file(s) missing for good")


# `--pyramid`'s (after_commit, check) for (repo, variables): the pyramid job's, which this job
# does not import; set by the command that composes both (`toolkit.cli`), None without it
pyramid_levels: Callable[[Any, list[str]], tuple[Any, Any]] | None = None


def _pyramid_hooks(ds: Any, variables: list[str] | None) -> tuple[Any, Any]:
    """(after_commit, check) for `--pyramid`, from `pyramid_levels`."""
    if not variables:
        return None, None
    have = ds.template.variables  # checked before the fire: its commits and record are made
    for v in variables:  # before the first level is built
        if v not in have:
            raise ValueError(
                f"--pyramid {v!r}: dataset {ds.dataset.name} has no such variable (it has "
                f"{', '.join(sorted(have))}); name one of them"
            )
    if pyramid_levels is None:
        raise typer.BadParameter("--pyramid needs the toolkit command line (toolkit virtual ...)")
    return pyramid_levels(ds.repo, list(variables))


def _epoch(text: str) -> float:
    """A UTC wall-clock time ('now' or ISO) as epoch seconds."""
    import time

    import numpy as np

    if text == "now":  # when the toolkit process started: the deadline counts its start-up
        from toolkit.console import flags

        return flags.started if flags.started is not None else time.time()
    return float(np.datetime64(text, "ms").astype("int64")) / 1000.0


@app.command()
def inspect(
    repo: RepoArg,
    commits: Annotated[
        int, options.Option(check=options.count(1), help="How many recent commits to show.")
    ] = 10,
    stores: RepoStorage = STORAGE,
    as_json: AsJson = False,
) -> None:
    """Branches, recent commits with rebase attempts, and the manifest report."""
    from datetime import UTC, datetime

    from toolkit import icechunk as R
    from toolkit.console import Table, out
    from toolkit.virtual.inflight import in_flight

    with _errors(repo):
        r = _existing_repo(repo, stores)
        if as_json:
            _inspect_json(r, _open(repo, stores), commits)
            return
        out.print(f"branches: {', '.join(R.branches(r))}")
        flying = in_flight(r, _open(repo, stores))
        out.print(f"backfills in flight: {len(flying) or 'none'}")
        for f in flying:
            out.print(f"  {f.line(datetime.now(UTC))}", highlight=False, soft_wrap=True)
        out.print(f"containers: {', '.join(R.container_prefixes(r))}")
        table = Table(title="main: recent commits")
        for col in ("snapshot", "written", "message", "rebases"):  # rebase attempts
            table.add_column(col, no_wrap=col != "message")  # ids and times stay whole
        for c in R.history(r, "main", limit=commits):
            table.add_row(
                c.id,
                c.written_at.isoformat(timespec="seconds"),
                c.message,
                "-" if c.rebase_attempts is None else str(c.rebase_attempts),
            )
        out.print(table)
        rep = R.manifest_report(r)
        mt = Table(
            title=f"manifests: {rep.manifests}, refs {rep.refs}, bytes {rep.bytes}, "
            f"{rep.bytes_per_ref:.1f} B/ref"
        )
        for col in ("array", "manifests", "refs", "bytes", "B/ref"):
            mt.add_column(col)
        for name, row in sorted(rep.per_array.items()):
            mt.add_row(
                name,
                str(row["manifests"]),
                str(row["refs"]),
                str(row["bytes"]),
                str(row["bytes_per_ref"]),
            )
        out.print(mt)


def _inspect_json(r: Any, store: Any, commits: int) -> None:
    """`inspect --json`: what the tables show, as one object."""
    from datetime import UTC, datetime

    from toolkit import icechunk as R
    from toolkit.console import emit_json
    from toolkit.virtual.inflight import in_flight

    now = datetime.now(UTC)
    rep = R.manifest_report(r)
    emit_json(
        {
            "branches": list(R.branches(r)),
            "in_flight": [f.line(now) for f in in_flight(r, store)],
            "containers": list(R.container_prefixes(r)),
            "commits": [
                {
                    "snapshot": c.id,
                    "written": c.written_at.isoformat(timespec="seconds"),
                    "message": c.message,
                    "rebase_attempts": c.rebase_attempts,
                }
                for c in R.history(r, "main", limit=commits)
            ],
            "manifests": rep.as_dict(),
        }
    )


@app.command()
def abort(
    repo: RepoArg,
    branch: Annotated[
        str | None,
        typer.Option(help="The backfill branch (backfill-<hex>); default: the only one."),
    ] = None,
    stores: RepoStorage = STORAGE,
    as_json: AsJson = False,
) -> None:
    """Drop an in-flight backfill: delete its temp branch and marker. Main is untouched."""
    from toolkit import icechunk as R
    from toolkit.console import emit_json, out
    from toolkit.virtual.inflight import abort as drop

    with _errors(repo):
        r = _existing_repo(repo, stores)
        dropped = list(drop(r, branch, _open(repo, stores)))
        main = R.snapshot_of(r, "main")
        if as_json:
            emit_json({"deleted": dropped, "main": main})
            return
        for name in dropped:
            out.print(f"deleted branch {name}", highlight=False)
        out.print(f"main unchanged at {main}", highlight=False)


@app.command()
def status(
    repo: RepoArg,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="One JSON object on stdout, for a monitor.", callback=json_asked
        ),
    ] = False,
    stores: RepoStorage = STORAGE,
) -> None:
    """The repo's operational state: newest position on main, the last fire (commits, pending,
    skipped, given up, publish-to-main lag, validation), skipped files, backfills in flight
    with their age and how their finalize will go beside main's updates, manifest bytes per
    ref. Exit 0; 1 when the last fire's validation failed or a backfill in flight is blocked
    (main's new commits wrote into its region)."""

    from toolkit import icechunk as R
    from toolkit.console import out
    from toolkit.virtual.status import status as repo_status

    with _errors(repo):
        _existing_repo(repo, stores)
        found = repo_status(R.RepoRef(_open(repo, stores, must_exist=True)))
        fire = found["last_fire"] or {}
        failed = (fire.get("validation") or {}).get("passed") is False
        blocked = [f["branch"] for f in found["in_flight"] if f["blocked"]]
        if as_json:
            emit_json(found)
        else:
            latest = ", ".join(f"{k} {v}" for k, v in found["latest"].items()) or "empty"
            out.print(f"main: {found['main']} (latest: {latest})", highlight=False, soft_wrap=True)
            if fire:
                check = fire.get("validation") or {}
                verdict = (
                    "not validated"
                    if not check
                    else ("validation passed" if check.get("passed") else "validation FAILED")
                )
                out.print(
                    f"last fire {fire.get('fire')}: {fire.get('committed')} file(s) committed, "
                    f"{fire.get('pending')} pending, {len(fire.get('skipped', []))} skipped, "
                    f"{len(fire.get('given_up', []))} given up, lag {fire.get('lag_seconds')} s, "
                    f"{verdict} (finished {fire.get('finished')})",
                    highlight=False,
                    soft_wrap=True,
                )
            else:
                out.print("last fire: none recorded", highlight=False, soft_wrap=True)
            out.print(
                f"files skipped by recent fires: {found['skipped']}",
                highlight=False,
                soft_wrap=True,
            )
            out.print(
                f"backfills in flight: {len(found['in_flight']) or 'none'}",
                highlight=False,
                soft_wrap=True,
            )
            for f in found["in_flight"]:
                out.print(f"  {f['branch']}: region {f['region']}, {f['age_seconds']} s old, "
                          f"{f['files']} file(s), running in {f['running_in'] or 'no process'}"
                          + f"; finalize {f['finalize']}",
                          highlight=False, soft_wrap=True)  # fmt: skip
            m = found["manifests"]
            out.print(
                f"manifests: {m['count']}, {m['refs']:,} refs, {m['bytes_per_ref']} bytes/ref",
                highlight=False,
                soft_wrap=True,
            )
        if failed or blocked:
            raise typer.Exit(1)


split_app = Typer(
    help="Manifest splits: advice against reader budgets, and a rewrite under a new split.",
    no_args_is_help=True,
)
app.add_typer(split_app, name="split")


@split_app.command("advise")
def split_advise(
    repo: RepoArg,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object on stdout.", callback=json_asked)
    ] = False,
    stores: RepoStorage = STORAGE,
) -> None:
    """Per array: manifests, refs and bytes per manifest, against the reader budgets (a few MiB
    per manifest, at least ~1,000 refs), and the split that meets them."""

    from toolkit import icechunk as R
    from toolkit.console import out
    from toolkit.virtual.resplit import advise_repo
    from toolkit.virtual.split_sizing import FLOOR_REFS, TARGET_BYTES

    with _errors(repo):
        _existing_repo(repo, stores)
        ref = R.RepoRef(_open(repo, stores, must_exist=True))
        dim, found = advise_repo(ref)
        proposal = min((a.split for a in found), default=None)
        if as_json:
            body = {"append_dim": dim, "split": proposal, "current": R.manifest_split(ref.store),
                    "arrays": [{**a.__dict__, "refs_per_manifest": a.refs_per_manifest,
                                "bytes_per_manifest": a.bytes_per_manifest} for a in found]}  # fmt: skip
            emit_json(body)
            return
        out.print(
            f"budgets: at most {TARGET_BYTES >> 20} MiB and at least {FLOOR_REFS:,} refs per "
            f"manifest; append dim {dim}",
            highlight=False,
            soft_wrap=True,
        )
        for a in found:
            out.print(f"  {a.line()}", highlight=False, soft_wrap=True)
        if proposal is not None:
            out.print(
                f"proposed: toolkit virtual split apply {repo} --split {proposal}",
                highlight=False,
                soft_wrap=True,
            )


@split_app.command("apply")
def split_apply(
    repo: RepoArg,
    split: Annotated[
        int,
        options.Option(
            "--split",
            check=options.count(1),
            help="Append-dim positions per manifest, for every array.",
        ),
    ],
    lease_wait: Annotated[
        float,
        options.Option(
            check=options.seconds(0), help="Seconds to wait for a running update to finish."
        ),
    ] = 0.0,
    stores: RepoStorage = STORAGE,
    as_json: AsJson = False,
) -> None:
    """Record the split in the repo's config (later commits follow it) and rewrite main's
    manifests under it in one commit, holding the repo's update lease."""
    from toolkit import icechunk as R
    from toolkit.console import emit_json, out
    from toolkit.virtual.resplit import apply_split

    with _errors(repo):
        _existing_repo(repo, stores)
        done = apply_split(R.RepoRef(_open(repo, stores, must_exist=True)), split,
                           lease_wait=lease_wait)  # fmt: skip
        if as_json:
            emit_json({"split": split, **done})
            return
        b, a = done["before"], done["after"]
        out.print(
            f"{repo}: manifests split every {split} {done['append_dim']} in commit "
            f"{done['snapshot']}: {b['manifests']} -> {a['manifests']} manifest(s), "
            f"{a['refs']:,} refs",
            highlight=False,
            soft_wrap=True,
        )


def _duration(text: str | None, option: str) -> Any:
    from toolkit.virtual.clock import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint=option) from None


@app.command()
def expire(
    repo: RepoArg,
    older_than: Annotated[
        str,
        options.Option(
            "--older-than",
            check=options.DURATION,
            help="Expire snapshots written longer ago than this (0s, 12h, 30d, 2w) and delete "
            "the objects only they referred to. Main's head, tags and in-flight branches are "
            "kept.",
        ),
    ],
    replica: Replicas = None,
    lease_wait: Annotated[
        float,
        options.Option(
            check=options.seconds(0), help="Seconds to wait for a running update to finish."
        ),
    ] = 0.0,
    stores: RepoStorage = STORAGE,
    as_json: AsJson = False,
) -> None:
    """Expire old snapshots and collect garbage with Icechunk's own expiry, holding the repo's
    update lease (no fire commits meanwhile); replicas first."""
    from toolkit import icechunk as R
    from toolkit.console import emit_json, out
    from toolkit.virtual.update import expire as run_expire

    keep = _duration(older_than, "--older-than")
    with _errors(repo):
        _existing_repo(repo, stores)
        urls = [*(replica or []), repo]
        refs = [R.RepoRef(_open(u, stores, must_exist=True)) for u in urls]
        expired = list(run_expire(refs, keep, lease_wait=lease_wait))
        if as_json:
            emit_json({"expired": [{"repo": url, "snapshots": d.snapshots, "objects": d.objects,
                                    "bytes": d.bytes} for url, d in expired]})  # fmt: skip
            return
        for url, done in expired:
            out.print(
                f"{url}: {done.snapshots} snapshot(s) expired, {done.objects} object(s) "
                f"deleted ({done.bytes:,} bytes)",
                highlight=False,
                soft_wrap=True,
            )


@app.command()
def validate(
    ctx: typer.Context,
    dataset: Dataset,
    repo: RepoUrl,
    source: SourceUrl = None,
    start: Annotated[
        str | None,
        options.Option(
            check=options.time(),
            help="First append-dim label to check. Default: the update window's.",
        ),
    ] = None,
    end: Annotated[
        str | None, options.Option(check=options.time(), help="Exclusive end label.")
    ] = None,
    fire_time: Annotated[
        str | None,
        options.Option(
            check=options.time(now=True),
            help="Validate the update window of this fire (UTC), with data currency. "
            "Default, when neither --start nor --end is given: now.",
        ),
    ] = None,
    sample: Sample = 16,
    positions: Annotated[
        str,
        options.Option(
            check=options.positions,
            help="Newest positions with data to sample, or 'all' (an offline sweep).",
        ),
    ] = "1",
    max_positions: Annotated[
        int | None,
        options.Option(
            check=options.count(1), help="With --positions all: at most this many, spread evenly."
        ),
    ] = None,
    min_present: MinPresent = None,
    include_var: IncludeVars = None,
    exclude_var: ExcludeVars = None,
    replica: Replicas = None,
    cluster: Annotated[str | None, typer.Option(help="Dask scheduler address.")] = None,
    wait_for_workers: WaitForWorkers = WAIT_FOR_WORKERS,
    executor: AutoExecutor = "auto",
    stores: RepoStorage = STORAGE,
    anonymous: Anonymous = False,
    performance_report: PerformanceReport = None,
    ship: Ship = False,
    as_json: AsJson = False,
) -> None:
    """Completeness per append-dim position, data currency, replicas, then decode health.

    Exit 1 naming every gap, every stale or diverging repo and every sample that fails to
    decode to plausible values.
    """
    from toolkit.console import runner
    from toolkit.virtual.validate import validate as run_validate

    with (
        _errors(repo),
        runner(ctx, cluster, performance_report, ship, executor, wait_for_workers) as run,
    ):
        include_vars, exclude_vars = _var_choice(include_var, exclude_var)
        _existing_repo(repo, stores)  # validating creates nothing
        for url in replica or ():
            _existing_repo(url, stores)
        ds = _dataset(dataset, repo, source, stores, anonymous, replica)
        found = run_validate(
            ds,
            start=_label(start),
            end=_label(end, "--end"),
            fire_time=_label(fire_time, "--fire-time"),
            sample=sample,
            positions=_positions(positions),
            max_positions=max_positions,
            min_present_fraction=_tiers(min_present),
            include_vars=include_vars,
            exclude_vars=exclude_vars,
            runner=run,
        )
        _report_validation(found, as_json=as_json)


def _tiers(text: str | None) -> tuple[float, ...] | None:
    from toolkit.virtual.dataset import check_tiers

    if text is None:
        return None
    return check_tiers([x for x in text.split(",") if x.strip()], "--min-present")


def _report_validation(found: Any, to: Any = None, as_json: bool = False) -> None:
    """Print what each check saw (on `to`, default stdout; one JSON object with `as_json`),
    then every failure; raise (exit 1) if any."""
    from toolkit.console import emit_json, err_console
    from toolkit.console import out as stdout

    out = to or stdout
    from toolkit.virtual.completeness import label_text
    from toolkit.virtual.validate import ValidationFailed

    comp = found.completeness
    bad = [s for s in found.samples if s.finished and not s.ok]
    if as_json:
        emit_json(
            {
                "ok": found.ok,
                "completeness": {
                    "positions": len(comp.positions),
                    "expected_files": comp.expected_files,
                    "missing_files": len(comp.missing_files),
                    "skipped_positions": [label_text(p) for p in comp.skipped_positions],
                },
                "samples": len(found.samples),
                "samples_failed": len(bad),
                "executor": found.decode_report.executor if found.decode_report else None,
                "failures": [str(line) for line in found.failures],
            }
        )
        if not found.ok:
            raise ValidationFailed(f"{len(found.failures)} validation failure(s)")
        return
    skipped = ", ".join(label_text(p) for p in comp.skipped_positions)
    out.print(
        f"completeness: {len(comp.positions)} position(s) checked, {comp.expected_files} "
        f"files expected, {len(comp.missing_files)} missing; "
        f"{len(comp.skipped_positions)} position(s) past the committed extent skipped"
        + (f" ({skipped})" if skipped else ""),
        highlight=False,
    )
    out.print(f"decode health: {len(found.samples)} sample(s), {len(bad)} failed", highlight=False)
    for line in found.failures:
        err_console.print(f"FAIL {line}", highlight=False, markup=False, soft_wrap=True)
    if not found.ok:
        raise ValidationFailed(f"{len(found.failures)} validation failure(s)")
    out.print("validation passed", highlight=False)


StacDir = Annotated[
    Path,
    typer.Option("--output", "-o", help="Folder for collection.json and its item (rewritten)."),
]


def _stac_dir(path: Path | None) -> None:
    """--stac / --output must be a folder (or not exist yet): checked before any work."""
    if path is not None and path.exists() and not path.is_dir():
        raise ValueError(f"{path}: is not a directory; give a folder for the STAC entry")


def _write_stac(repo: str, stores: StorageOptions, output: Path) -> Any:
    from toolkit.virtual.stac_entry import stac as write

    _existing_repo(repo, stores)  # a path that is no repo: named, and nothing made there
    return write(_open(repo, stores, must_exist=True), output)


@app.command("stac")
def stac_cmd(
    repo: RepoArg,
    output: StacDir,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="One JSON object on stdout: the paths and extents.", callback=json_asked
        ),
    ] = False,
    stores: RepoStorage = STORAGE,
) -> None:
    """Write the virtual dataset's STAC Collection + Item (datacube and xarray-assets
    extensions, main's extents) to --output, self-contained. See docs/stac.md."""

    from rich.markup import escape

    from toolkit.console import out

    with _errors(repo):
        _stac_dir(output)
        entry = _write_stac(repo, stores, output)
    if as_json:
        emit_json(entry.as_dict())
        return
    out.print(f"wrote {escape(str(entry.collection))}", highlight=False, soft_wrap=True)
    out.print(f"bbox {entry.bbox}, interval {entry.interval}", highlight=False, soft_wrap=True)
