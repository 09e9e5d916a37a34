"""`toolkit archive`: partition Zarr stores into archive blobs, resolve keys, report.

Exit codes: 0 ok, 1 a conflict, a missing or corrupt manifest or tier state, a pin overlapping
a pin or another failed check, 2 bad usage (a bad flag, a missing store or events file, no Zarr
stores or no manifests where pointed, a key, prefix or scope with a `.`, `..` or empty segment,
a pin until a past date), a malformed metadata document, or an unreachable store.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from toolkit import options
from toolkit.console import (
    STORAGE,
    WAIT_FOR_WORKERS,
    PerformanceReport,
    Ship,
    Storage,
    StorageOptions,
    Typer,
    WaitForWorkers,
    exit_codes,
    flags,
    hint,
    json_asked,
    json_text,
    root_cluster,
    runner,
)

app = Typer(
    help="Partition Zarr stores into archive blobs; resolve keys to blobs.", no_args_is_help=True
)
pin_app = Typer(
    help="Keep a prefix hot, recorded with who, why and until when.", no_args_is_help=True
)
app.add_typer(pin_app, name="pin")

Data = Annotated[str, typer.Option("--data", help="Root of the Zarr stores (path or URL).")]
Manifests = Annotated[str, typer.Option("--manifests", help="Where manifests live (path or URL).")]
Exclude = Annotated[
    list[str] | None, typer.Option("--exclude", help="Glob of scopes/arrays to skip (repeatable).")
]
TMax = Annotated[str, options.Option("--t-max", check=options.SIZE, help="Largest blob.")]
THot = Annotated[
    str,
    options.Option("--t-hot", check=options.SIZE, help="Arrays smaller than this stay hot."),
]
TMin = Annotated[
    str,
    options.Option(
        "--t-min", check=options.SIZE, help="Coalesce small arrays until a group reaches this."
    ),
]
BreakLock = Annotated[
    bool,
    typer.Option(
        "--break-lock",
        help="Take over a local manifest lock left by a writer that is gone (say so first).",
    ),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Compute and show, write nothing.")]
Force = Annotated[bool, typer.Option("--force", help="Re-cut (orphans blob ids; keeps pins).")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.", callback=json_asked)]
HotAlways = Annotated[
    list[str] | None,
    typer.Option(
        "--hot-always",
        help="Object basename never archived, added to the defaults "
        "(zarr.json, .zarray, .zattrs, .zgroup, .zmetadata) (repeatable).",
    ),
]


def _echo(text: str) -> None:
    typer.echo(text)
    if flags.json:  # the command's own JSON is out: a later failure adds no second object
        flags.json_written = True


def _fail(code: int, message: str) -> typer.Exit:
    """One `error:` line through the console's one renderer (paths as typed, no markup)."""
    from toolkit.console import fail

    return fail(code, message)


def _errors() -> Any:
    from toolkit.archive.discover import EventError
    from toolkit.archive.hierarchy import HierarchyError
    from toolkit.archive.manifests import ManifestConflict
    from toolkit.archive.model import ManifestError, PinOverlaps
    from toolkit.archive.tiers import TransitionRefused
    from toolkit.archive.tierstore import TierConflict

    return exit_codes(  # keys.BadKey and model.PinRefused are ValueErrors: usage, exit 2
        usage_errors=(ManifestError, HierarchyError, EventError, ValueError),
        check_errors=(ManifestConflict, TierConflict, TransitionRefused, PinOverlaps),
    )


def _scope(text: str) -> str:
    """A scope named on the command line, through the key rule (`keys.check_key`)."""
    from toolkit.archive.keys import check_key

    return check_key(text, "scope")


def _scopes(texts: list[str] | None) -> list[str] | None:
    return None if texts is None else [_scope(t) for t in texts]


def _progress(stage: str, done: int, total: int) -> None:
    typer.echo(f"{stage}: {done}/{total}", err=True)


def _open(url: str, options: StorageOptions) -> Any:
    from toolkit import storage

    return storage.open_store(url, options)


def _open_data(url: str, options: StorageOptions) -> Any:
    """The data root; a local one must exist (a typo would otherwise find nothing, silently)."""
    from toolkit import storage

    path = storage.local_path_of(url)
    if path is not None and not path.is_dir():  # checked first: opening creates it
        raise ValueError(f"data root {path.resolve()} does not exist or is not a directory")
    return _open(url, options)


def _stores(data: Any, exclude: list[str] | None) -> list[str]:
    from toolkit.archive.discover import find_stores

    found = find_stores(data, exclude=exclude or ())
    if not found:
        raise ValueError(f"no Zarr stores (zarr.json / .zgroup / .zarray) under {data.url}")
    return found


def _load(m: Any) -> tuple[list[Any], dict[str, str]]:
    """Every readable manifest, and the unreadable ones (each named on stderr); none at all
    means a wrong --manifests."""
    from toolkit.archive.manifests import ManifestStore

    loaded, broken = ManifestStore(m).load_each()
    if not loaded and not broken:
        raise ValueError(f"no manifests under {m.url}: partition first, or check --manifests")
    for scope, why in broken.items():
        typer.echo(
            f"error: scope {scope!r}: {why}; its keys are not resolved. Restore the manifest, "
            "or delete it and partition the scope again",
            err=True,
        )
    return loaded, broken


def _under(key: str, scope: str) -> bool:
    """Whether a key (relative, or a pasted URL / path) lies in `scope`."""
    k = "/" + key.strip("/")
    return f"/{scope}/" in k + "/"


def _unreadable(scope: str) -> dict[str, Any]:
    """The answer for a key in a scope whose manifest cannot be read (shaped as a resolution)."""
    reason = f"the manifest of scope {scope!r} is unreadable"
    return {"kind": "error", "scope": scope, "blob": None, "reason": reason, "epoch": None}


def _require_scopes(m: Any, scopes: list[str] | None) -> None:
    """One listing: some manifests exist, and every scope asked for has one."""
    from toolkit.archive.manifests import ManifestStore

    have = ManifestStore(m).scopes()
    if not have:
        raise ValueError(f"no manifests under {m.url}: partition first, or check --manifests")
    missing = sorted(set(scopes or ()) - set(have))
    if missing:
        raise ValueError(f"no manifest for scope {missing[0]!r} under {m.url}")


def _policy(t_max: str, t_hot: str, t_min: str) -> Any:
    from toolkit.archive.model import ManifestError, Policy
    from toolkit.archive.units import parse_size

    try:
        return Policy(parse_size(t_max), parse_size(t_hot), parse_size(t_min))
    except ManifestError as err:
        flag = "--" + err.field.split(".")[-1].replace("_", "-")
        raise ValueError(f"{flag}: {err.problem}") from None


def _outcome_json(outcome: Any) -> dict[str, Any]:
    """A partition outcome as --json writes it: its change one line per blob, hot prefix or
    pin (a JSON field holds no line break)."""
    lines = outcome.diff.describe().splitlines()
    return {**outcome.to_dict(), "change": [line.strip() for line in lines]}


def _print_outcomes(outcomes: list[Any], as_json: bool, dry_run: bool) -> None:
    for o in outcomes:
        if o.note:
            typer.echo(f"note: {o.note}", err=True)
        _warn_stale(o.scope, o.stale, "objects changed since it went to tape")
        for b, why in o.manifest.oversized():
            typer.echo(
                f"warning: scope {o.scope!r} blob {b.id}: {why}; a blob never splits an "
                "object, so it stays over (raise --t-max to make that the rule)",
                err=True,
            )
    if as_json:
        _echo(json_text([_outcome_json(o) for o in outcomes], indent=2))
        return
    for o in outcomes:
        _echo(o.diff.describe())
        if o.orphaned:
            _echo(f"  retired blob ids (never given again): {', '.join(o.orphaned)}")
        _echo(
            "  (dry run: nothing written)"
            if dry_run
            else ("  written" if o.written else "  no change written")
        )


def _warn_stale(scope: str, stale: Any, how: str) -> None:
    for blob, n in stale:
        typer.echo(
            f"warning: scope {scope!r} blob {blob}: {n} {how}: its tape copy is out of date "
            f"(stale); write it again: `toolkit archive mark {scope} {blob} writing`, then "
            "`archived`",
            err=True,
        )


@app.command()
def partition(
    ctx: typer.Context,
    scopes: Annotated[
        list[str] | None,
        typer.Argument(help="Store paths under --data (default: every store found)."),
    ] = None,
    data: Data = ".",
    manifests: Manifests = "manifests",
    exclude: Exclude = None,
    t_max: TMax = "50GiB",
    t_hot: THot = "64MiB",
    t_min: TMin = "10GiB",
    dry_run: DryRun = False,
    force: Force = False,
    hot_always: HotAlways = None,
    as_json: Json = False,
    stores: Storage = STORAGE,
    break_lock: BreakLock = False,
) -> None:
    """Partition stores one after another in this process (see `scan` for a Dask graph)."""
    from toolkit.archive.manifests import ManifestStore
    from toolkit.archive.service import partition_store

    with _errors():
        policy = _policy(t_max, t_hot, t_min)
        scopes = _scopes(scopes)
        d = _open_data(data, stores)
        m = _open(manifests, stores)
        todo = scopes or _stores(d, exclude)
        if root_cluster(ctx) is not None:  # by design; never silently
            hint("note: archive partition runs in this process; `archive scan` runs on the cluster")
        outcomes = [
            partition_store(
                d,
                ManifestStore(m, break_lock),
                s,
                policy,
                force=force,
                dry_run=dry_run,
                exclude=exclude or (),
                hot_always=hot_always or (),
                check_tape=not dry_run,
            )
            for s in todo
        ]
    _print_outcomes(outcomes, as_json, dry_run)


@app.command()
def scan(
    ctx: typer.Context,
    data: Data = ".",
    manifests: Manifests = "manifests",
    exclude: Exclude = None,
    t_max: TMax = "50GiB",
    t_hot: THot = "64MiB",
    t_min: TMin = "10GiB",
    dry_run: DryRun = False,
    force: Force = False,
    hot_always: HotAlways = None,
    as_json: Json = False,
    cluster: Annotated[str | None, typer.Option(help="Dask scheduler address.")] = None,
    wait_for_workers: WaitForWorkers = WAIT_FOR_WORKERS,
    executor: Annotated[Literal["dask", "sync"], typer.Option(help="dask or sync")] = "dask",
    stores: Storage = STORAGE,
    performance_report: PerformanceReport = None,
    ship: Ship = False,
    break_lock: BreakLock = False,
) -> None:
    """Find every Zarr store under --data and partition each as one node of a Dask graph."""
    from toolkit.archive.service import scan as run_scan

    with (
        _errors(),
        runner(ctx, cluster, performance_report, ship, executor, wait_for_workers, False) as run,
    ):
        policy = _policy(t_max, t_hot, t_min)
        d = _open_data(data, stores)
        m = _open(manifests, stores)
        outcomes, _ = run_scan(
            d,
            m,
            policy,
            scopes=_stores(d, exclude),
            exclude=exclude or (),
            force=force,
            dry_run=dry_run,
            hot_always=hot_always or (),
            runner=run.with_progress(_progress),
            break_lock=break_lock,
            check_tape=not dry_run,
        )
    _print_outcomes(outcomes, as_json, dry_run)


@app.command()
def diff(
    scope: Annotated[str, typer.Argument(help="Store path under --data.")],
    data: Data = ".",
    manifests: Manifests = "manifests",
    exclude: Exclude = None,
    t_max: TMax = "50GiB",
    t_hot: THot = "64MiB",
    t_min: TMin = "10GiB",
    force: Force = False,
    hot_always: HotAlways = None,
    stores: Storage = STORAGE,
    as_json: Json = False,
) -> None:
    """What partitioning SCOPE now would change against its stored manifest (writes nothing)."""
    from toolkit.archive.service import partition_store

    with _errors():
        policy = _policy(t_max, t_hot, t_min)
        scope = _scope(scope)
        d = _open_data(data, stores)
        m = _open(manifests, stores)
        out = partition_store(
            d,
            m,
            scope,
            policy,
            force=force,
            dry_run=True,
            exclude=exclude or (),
            hot_always=hot_always or (),
        )
    if as_json:  # one object: the outcome `partition --dry-run --json` lists per scope
        _echo(json_text(_outcome_json(out)))
        return
    if out.note:
        typer.echo(f"note: {out.note}", err=True)
    _echo(out.diff.describe())
    if out.orphaned:
        _echo(f"  retired blob ids (never given again): {', '.join(out.orphaned)}")


@app.command()
def resolve(
    keys: Annotated[
        list[str] | None,
        typer.Argument(
            help="Keys relative to the data root, or full URLs / absolute paths "
            "(default: one per line on stdin)."
        ),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            help="Data root, stripped from URL / path keys (needed only "
            "when a pasted URL could enter two scopes).",
        ),
    ] = None,
    manifests: Manifests = "manifests",
    as_json: Json = False,
    stores: Storage = STORAGE,
) -> None:
    """Resolve keys to scope and blob id; s3://bucket/prefix/store.zarr/... URLs work too."""
    from toolkit.archive.keys import check_pasted
    from toolkit.archive.resolve import Trie

    with _errors():
        # every key checked before any is answered: one refused key, one line, nothing else
        todo = [check_pasted(k) for k in keys] if keys else _stdin_keys()
        m = _open(manifests, stores)
        root = _open(data, stores).url if data is not None else None
        loaded, broken = _load(m)
        trie = Trie(loaded)
        plain = root is None and not any("://" in k or k.startswith("/") for k in todo)
        answers = trie.lookup_many(todo) if plain else [trie.resolve(k, root) for k in todo]
        results = []
        by_scope = {x.scope: x for x in loaded}
        for k, answer in zip(todo, answers, strict=True):
            lost = next((s for s in broken if _under(k, s)), None)
            doc = _unreadable(lost) if lost else answer.to_dict()
            results.append((k, {**doc, "recut": _recut(by_scope.get(doc["scope"]), k)}))
    if as_json:
        with _errors():
            tiers = _tiers_of(m, {r["scope"] for _, r in results if r["kind"] == "blob"})
        rows = [{"key": k, **r, "tier": _tier_name(tiers, r)} for k, r in results]
        _echo(json_text(rows, indent=2))
    else:
        for k, r in results:
            what = r["blob"] if r["kind"] == "blob" else r["kind"]
            was = "; ".join(f"{x['blob']} ({x['tier']})" for x in r["recut"])
            reason = r["reason"] + (f"; re-cut, was in {was}" if was else "")
            _echo(f"{k}\t{r['scope'] or '-'}\t{what}\t{reason}")
    if any(r["kind"] == "error" for _, r in results):
        raise typer.Exit(1)


def _recut(manifest: Any, key: str) -> list[dict[str, str]]:
    """The retired blobs that held `key` before a re-cut, with the tier state they kept."""
    if manifest is None:
        return []
    at = key.rfind(manifest.scope + "/")  # a pasted URL or path: from where the scope starts
    relative = key if at <= 0 else key[at:]
    return [{"blob": b, "tier": t} for b, t in manifest.retired_for(relative)]


def _text(path: Path) -> str:
    """A file the user names, as text (`textin.decode`: a byte-order mark, UTF-16 or CRLF from
    Windows tools read right; other bytes refused naming the file)."""
    from toolkit import textin

    return textin.decode(path.read_bytes(), str(path))


def _stdin_keys() -> list[str]:
    """Keys from stdin, one a line (blank lines skipped), each through the key rule; read as
    bytes so a byte-order mark (PowerShell, Notepad) or CRLF never becomes part of a key."""
    from toolkit import textin
    from toolkit.archive.keys import check_pasted

    text = textin.lines(sys.stdin.buffer.read(), "the keys on stdin")
    return [check_pasted(line.strip()) for line in text if line.strip()]


@app.command()
def watch(
    ctx: typer.Context,
    data: Data = ".",
    manifests: Manifests = "manifests",
    events: Annotated[
        str,
        typer.Option(
            "--events",
            help="Notifications (S3, MinIO, SNS, GCS Pub/Sub), one JSON document per line: "
            "a file, followed as it grows, or - for stdin.",
        ),
    ] = "-",
    once: Annotated[
        bool, typer.Option("--once", help="Process what the stream holds now, then exit.")
    ] = False,
    debounce: Annotated[
        float,
        options.Option(
            check=options.seconds(0),
            help="Seconds without a new event that close a batch (a burst is one batch).",
        ),
    ] = 1.0,
    max_wait: Annotated[
        float,
        options.Option(
            check=options.seconds(0), help="Seconds a batch may wait for the stream to go quiet."
        ),
    ] = 30.0,
    exclude: Exclude = None,
    t_max: TMax = "50GiB",
    t_hot: THot = "64MiB",
    t_min: TMin = "10GiB",
    hot_always: HotAlways = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per batch.", callback=json_asked)
    ] = False,
    cluster: Annotated[str | None, typer.Option(help="Dask scheduler address.")] = None,
    wait_for_workers: WaitForWorkers = WAIT_FOR_WORKERS,
    executor: Annotated[Literal["dask", "sync"], typer.Option(help="dask or sync")] = "dask",
    stores: Storage = STORAGE,
    performance_report: PerformanceReport = None,
    ship: Ship = False,
    break_lock: BreakLock = False,
) -> None:
    """Partition the scopes that object-store events touch, and count reads and writes per blob.

    Each debounced batch is one gated graph, one node per touched scope.

    A scope is cut with the policy in its manifest (--t-* only for new scopes).

    Replayed events change nothing; watchers coordinate through conditional writes only.

    One line per batch on stdout; SIGINT / SIGTERM stop after the batch in hand.
    """
    from toolkit.archive.watch import Stopper, WatchOptions, batches, parse_lines, process

    with (
        _errors(),
        runner(ctx, cluster, performance_report, ship, executor, wait_for_workers, False) as run,
    ):
        policy = _policy(t_max, t_hot, t_min)
        if debounce < 0 or max_wait <= 0:
            raise ValueError("--debounce must be >= 0 and --max-wait > 0 (seconds)")
        if executor not in ("dask", "sync"):
            raise ValueError(f"--executor {executor!r}: choose dask or sync")
        d = _open_data(data, stores)
        m = _open(manifests, stores)
        options = WatchOptions(
            policy,
            exclude=tuple(exclude or ()),
            hot_always=tuple(hot_always or ()),
            break_lock=break_lock,
        )
        stopper = Stopper()
        stopper.install()
        with _event_stream(events) as fd:
            stream = batches(
                fd, follow=not once, debounce=debounce, max_wait=max_wait, stop=stopper
            )
            for n, lines in enumerate(stream, 1):
                batch = process(d, m, parse_lines(lines), options, run.with_progress(_progress))
                for scope, blob, writes in batch.stale:
                    _warn_stale(scope, [(blob, writes)], "write(s) into it while on tape")
                if as_json:
                    doc = {"batch": n, "lines": [lines[0][0], lines[-1][0]], **batch.to_dict()}
                    _echo(json_text(doc))
                else:
                    _echo(f"batch {n} (lines {lines[0][0]}-{lines[-1][0]}): {batch.line()}")


@contextmanager
def _event_stream(events: str) -> Iterator[int]:
    """The events' file descriptor: stdin for "-", else a file that must exist."""
    if events == "-":
        yield sys.stdin.fileno()
        return
    path = Path(events).expanduser()
    if not path.is_file():
        raise ValueError(f"--events {path}: no such file (pass a file of notifications, or -)")
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)


@app.command()
def mark(
    scope: Annotated[str, typer.Argument(help="Store path (the manifest's scope).")],
    blob: Annotated[str, typer.Argument(help="Blob id, as resolve answers it (b_tas_3).")],
    state: Annotated[
        str,
        typer.Argument(
            help="The blob's new tier state: hot, writing, archived, recalling, recalled, stale."
        ),
    ],
    manifests: Manifests = "manifests",
    data: Annotated[
        str | None,
        typer.Option(
            "--data", help="Data root: record the blob's live bytes and objects (one listing)."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Record a transition the state machine refuses.")
    ] = False,
    stores: Storage = STORAGE,
    break_lock: BreakLock = False,
    as_json: Json = False,
) -> None:
    """Record that BLOB of SCOPE moved to STATE: the tape system's hook.

    hot > writing > archived > recalling > recalled > archived; writing > hot and
    recalling > archived go back. A write into a blob on tape makes it stale (watch, scan);
    stale > writing > archived writes it again.

    The same state again writes nothing, so a hook may retry. An unknown scope, blob or
    state exits 2.
    """
    import datetime as dt

    from toolkit.archive.manifests import ManifestStore
    from toolkit.archive.tiers import STATES, blob_of
    from toolkit.archive.tierstore import TierStore

    with _errors():
        scope = _scope(scope)
        m = _open(manifests, stores)
        stored = ManifestStore(m).read(scope)
        if stored is None:
            raise _fail(
                2,
                f"no manifest for scope {scope!r} under {m.url}: check the scope "
                "(`toolkit archive show`), or partition it first",
            )
        if state not in STATES:
            raise ValueError(f"state {state!r}: choose one of {', '.join(STATES)}")
        live = _live(_open_data(data, stores), stored.manifest) if data is not None else None
        owner = blob_of(stored.manifest, blob, live[0] if live else None)
        size, objects = (owner.bytes, owner.objects) if owner.id == blob else (None, None)
        if live and owner in stored.manifest.blobs:  # a retired blob keeps its figures
            size, objects = _blob_size(live[1], stored.manifest, blob)
        tiers = TierStore(m, break_lock)
        before = tiers.read(scope)[0].tier(blob).state
        now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        tiers.update(
            scope,
            lambda s: s.mark(blob, state, now, bytes=size, objects=objects, force=force),
        )
    if as_json:
        _echo(json_text({"scope": scope, "blob": blob, "before": before, "state": state,
                          "written": before != state}))  # fmt: skip
    elif before == state:
        _echo(f"{scope} {blob}: already {before}, nothing written")
    else:
        _echo(f"{scope} {blob}: {before} -> {state}")


def _live(data: Any, manifest: Any) -> tuple[dict[str, int], list[Any]]:
    """One listing of the scope: bucketed blob id -> the buckets its array fills now (from
    its metadata, no chunk read), and the listing itself."""
    from toolkit.archive.hierarchy import read_listing

    listing, arrays = read_listing(data, manifest.scope)
    by_path = {a.path: a for a in arrays}
    out = {}
    for b in manifest.every_blob():
        a = by_path.get(b.prefixes[0]) if b.bucket is not None else None
        if a is not None and b.bucket is not None:
            out[b.id] = -(-a.grid[0] // b.bucket.width) if a.grid else 1
    return out, listing


def _blob_size(listing: list[Any], manifest: Any, blob: str) -> tuple[int, int]:
    """Bytes and objects under `blob` now: each listed key resolved."""
    from toolkit.archive.resolve import Trie

    trie = Trie([manifest])
    size = objects = 0
    for o in listing:
        if trie.lookup(o.key).blob == blob:
            size += o.size
            objects += 1
    return size, objects


@app.command()
def show(
    scope: Annotated[str, typer.Argument(help="Store path (the manifest's scope).")],
    manifests: Manifests = "manifests",
    as_json: Json = False,
    stores: Storage = STORAGE,
) -> None:
    """Print a scope's manifest."""
    from toolkit.archive.manifests import ManifestStore

    with _errors():
        scope = _scope(scope)
        m = _open(manifests, stores)
        stored = ManifestStore(m).read(scope)
        if stored is None:
            raise _fail(
                1,
                f"no manifest for scope {scope!r} under {m.url}: check the scope "
                "(`toolkit archive show` lists them), or partition it first",
            )
    man = stored.manifest
    if as_json:
        _echo(man.dumps().decode().rstrip())
        return
    p = man.policy
    _echo(f"{man.scope}  epoch {man.epoch}  t_max={p.t_max} t_hot={p.t_hot} t_min={p.t_min}")
    for b in man.blobs:
        how = (  # the names resolve, report and mark use: one per bucket
            f", in buckets {b.id}_0, {b.id}_1, ... of {b.bucket.width} first-index chunks each"
            if b.bucket
            else ""
        )
        _echo(f"  blob {b.id}: {b.bytes} B, {b.objects} objects{how}")
        for prefix in b.prefixes:
            _echo(f"    {prefix}")
    for h in man.hot:
        _echo(f"  hot  {h}")
    for pin in man.pins:
        _echo(f"  pin  {pin.prefix} by {pin.who} until {pin.until or '-'}: {pin.why}")


PinScope = Annotated[str, typer.Argument()]
PinPrefix = Annotated[str, typer.Argument()]


def _edit(
    scope: str,
    prefix: str,
    manifests: str,
    stores: StorageOptions,
    break_lock: bool,
    change: Any,
    as_json: bool = False,
) -> None:
    """Apply `change(manifest, prefix)` to SCOPE's manifest, scope and prefix through the key
    rule first (a refused one writes nothing): `pin add` and `pin remove`."""
    from toolkit.archive.keys import check_key
    from toolkit.archive.manifests import ManifestStore

    with _errors():
        scope = _scope(scope)
        prefix = check_key(prefix, "prefix")
        ms = ManifestStore(_open(manifests, stores), break_lock)
        stored = ms.read(scope)
        if stored is None:
            raise _fail(1, f"no manifest for scope {scope!r}: partition it first")
        new = change(stored.manifest, prefix)
        ms.write(new, stored)
    if as_json:
        _echo(json_text({"scope": scope, "prefix": prefix, "epoch_before": stored.manifest.epoch,
                          "epoch": new.epoch}))  # fmt: skip
        return
    _echo(f"{scope}: epoch {stored.manifest.epoch} -> {new.epoch}")


@pin_app.command("add")
def pin_add(
    scope: PinScope,
    prefix: PinPrefix,
    who: Annotated[str, typer.Option("--who")],
    why: Annotated[str, typer.Option("--why")],
    until: Annotated[str | None, typer.Option("--until", help="YYYY-MM-DD")] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Add a pin inside or around a pinned prefix, or one --until a past date.",
        ),
    ] = False,
    manifests: Manifests = "manifests",
    stores: Storage = STORAGE,
    break_lock: BreakLock = False,
    as_json: Json = False,
) -> None:
    """Pin PREFIX hot in SCOPE's manifest (a conditional write; epoch + 1).

    A pin inside or around another pin (exit 1), or until a past date (exit 2), is refused
    unless --force; pinning a pinned prefix again replaces its pin.
    """
    import datetime as dt

    from toolkit.archive.model import Pin

    today = dt.datetime.now(dt.UTC).date()

    def pin(m: Any, p: str) -> Any:
        return m.with_pin(Pin(p, who, why, until), today=today, force=force)

    _edit(scope, prefix, manifests, stores, break_lock, pin, as_json)


@pin_app.command("remove")
def pin_remove(
    scope: PinScope,
    prefix: PinPrefix,
    manifests: Manifests = "manifests",
    stores: Storage = STORAGE,
    break_lock: BreakLock = False,
    as_json: Json = False,
) -> None:
    """Remove the pin on PREFIX (a conditional write; epoch + 1)."""
    _edit(scope, prefix, manifests, stores, break_lock, lambda m, p: m.without_pin(p), as_json)


@app.command()
def schema() -> None:
    """Print the manifest JSON Schema (needs no store)."""
    from toolkit.archive.schema import schema_text

    _echo(schema_text().rstrip())


@app.command()
def report(
    scopes: Annotated[
        list[str] | None, typer.Argument(help="Scopes (default: every manifest).")
    ] = None,
    data: Data = ".",
    manifests: Manifests = "manifests",
    rate: Annotated[
        str, options.Option("--rate", check=options.RATE, help="Tape read rate.")
    ] = "300MB/s",
    mount: Annotated[
        float,
        options.Option(
            "--mount", check=options.seconds(0), help="Seconds per tape mount and seek."
        ),
    ] = 90.0,
    events: Annotated[
        Path | None,
        typer.Option(
            "--events",
            help="Recorded event notifications (JSON / JSON lines).",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    as_json: Json = False,
    stores: Storage = STORAGE,
) -> None:
    """Blobs with sizes, object counts, estimated recall time, and read/write counts from events."""
    from toolkit.archive.discover import dedupe, read_events
    from toolkit.archive.service import report as run_report
    from toolkit.archive.units import parse_rate
    from toolkit.archive.watch import relative_events

    with _errors():
        bps = parse_rate(rate)
        scopes = _scopes(scopes)
        d = _open_data(data, stores)
        m = _open(manifests, stores)
        _require_scopes(m, scopes)
        evs = list(dedupe(read_events(_text(events)))) if events else []
        loaded, broken = _load(m)
        rows = run_report(d, m, scopes, relative_events(d, evs), bps, mount, loaded=loaded)
        tiers = _tiers_of(m, {r.scope for r in rows if r.kind == "blob"})
    for scope, state in tiers.items():
        for blob, t in state.stale().items():
            typer.echo(
                f"warning: scope {scope!r} blob {blob}: stale since {t.since}: its tape copy "
                f"misses {t.stale_writes} write(s); write it again (mark writing, then archived)",
                err=True,
            )
    if as_json:
        blobs = [{**r.to_dict(), "tier": _tier_doc(tiers, r)} for r in rows]
        _echo(json_text({"rate_bytes_per_s": bps, "mount_s": mount, "blobs": blobs}, indent=2))
    else:
        _report_table(rows, bps, mount, tiers)
    if broken and (scopes is None or set(scopes) & set(broken)):
        raise typer.Exit(1)


def _report_table(rows: list[Any], bps: float, mount: float, tiers: dict[str, Any]) -> None:
    """The report, a borderless table per scope wrapped to the terminal (--json has every
    field): r/w counts the --events' reads and writes, tier r/w those recorded by `watch`."""
    from rich.text import Text

    from toolkit.console import Table, print_plain

    parts: list[Any] = [
        f"recall estimate: {mount:g} s per mount + bytes at {bps / 1e6:g} MB/s; "
        "r/w: reads/writes in --events, tier r/w: recorded by watch"
    ]
    for scope in dict.fromkeys(r.scope for r in rows):
        table = Table(title=Text(scope or "-"), title_justify="left", box=None, pad_edge=False)
        for col in ("blob", "bytes", "objects", "recall s", "r/w", "tier", "tier r/w"):
            wraps = col in ("blob", "tier")  # numbers stay whole
            table.add_column(col, justify="left" if wraps else "right", no_wrap=not wraps)
        for r in (r for r in rows if r.scope == scope):
            label = r.blob if r.kind == "blob" else f"({r.kind})"
            cells = [label, r.bytes, r.objects, f"{r.recall_s:.1f}", f"{r.reads}/{r.writes}"]
            table.add_row(*(Text(str(c)) for c in [*cells, *_tier_cells(tiers, r)]))
        parts.append(table)
    print_plain(*parts)


def _tier_cells(tiers: dict[str, Any], row: Any) -> tuple[str, str]:
    """A report row's tier (`archived since T`) and the reads/writes `watch` recorded."""
    t = _tier_doc(tiers, row)
    if t is None:
        return "-", "-"
    since = t["since"] and t["since"][:16].replace("T", " ")  # to the minute; --json has it all
    return " since ".join(filter(None, (t["state"], since))), f"{t['reads']}/{t['writes']}"


def _tiers_of(m: Any, scopes: set[str | None]) -> dict[str, Any]:
    """Scope -> its tier state (one GET each; a scope with none has every blob hot)."""
    from toolkit.archive.tierstore import TierStore

    store = TierStore(m)
    return {s: store.read(s)[0] for s in sorted(x for x in scopes if x)}


def _tier_doc(tiers: dict[str, Any], row: Any) -> dict[str, Any] | None:
    """A blob's tier record as JSON (hot with no counts when none is stored); None for rows
    that are not blobs."""
    scope, blob = (row["scope"], row["blob"]) if isinstance(row, dict) else (row.scope, row.blob)
    if blob is None or scope not in tiers:
        return None
    return tiers[scope].tier(blob).to_dict()


def _tier_name(tiers: dict[str, Any], row: dict[str, Any]) -> str | None:
    doc = _tier_doc(tiers, row)
    return doc["state"] if doc else None


@app.command("plan-read")
def plan_read(
    scope: Annotated[str, typer.Argument(help="Store path under --data (the manifest's scope).")],
    data: Data = ".",
    manifests: Manifests = "manifests",
    var: Annotated[
        list[str] | None,
        typer.Option(
            "--var",
            "--variable",
            "-v",
            help="Data variable to read (repeatable; default: every data variable).",
        ),
    ] = None,
    isel: Annotated[
        list[str] | None,
        typer.Option(
            "--isel",
            help="DIM=START:STOP (half-open) or DIM=INDEX, by position; negative as Python "
            "(repeatable).",
        ),
    ] = None,
    sel: Annotated[
        list[str] | None,
        typer.Option(
            "--sel",
            help="DIM=VALUE or DIM=START:STOP by label, STOP included as xarray's .sel; dates "
            "as 2020-01-03 (repeatable).",
        ),
    ] = None,
    rate: Annotated[
        str, options.Option("--rate", check=options.RATE, help="Tape read rate.")
    ] = "300MB/s",
    mount: Annotated[
        float,
        options.Option(
            "--mount", check=options.seconds(0), help="Seconds per tape mount and seek."
        ),
    ] = 90.0,
    as_json: Json = False,
    stores: Storage = STORAGE,
) -> None:
    """What must be recalled before a selection of SCOPE can be read, and how long it takes.

    Maps the selection to the chunk keys it reads (from metadata; a --sel reads the hot 1-d
    coordinates), resolves them to blobs with their tier, bytes and recall estimate.
    """
    from toolkit.archive.recall_plan import MissingManifest, plan
    from toolkit.archive.selection import parse_isel, parse_sel
    from toolkit.archive.units import parse_rate

    with _errors():
        bps = parse_rate(rate)
        scope = _scope(scope)
        positional = dict(_flags(parse_isel, isel, "--isel"))
        labels = dict(_flags(parse_sel, sel, "--sel"))
        d = _open_data(data, stores)
        m = _open(manifests, stores)
        try:
            out = plan(
                d, m, scope, variables=var, isel=positional, sel=labels, rate=bps, mount=mount
            )
        except MissingManifest as err:
            raise _fail(1, str(err)) from None
    _echo(json_text(out.to_dict(), indent=2) if as_json else out.table())


def _flags(parse: Any, texts: list[str] | None, flag: str) -> Iterator[tuple[str, Any]]:
    """Each DIM=... flag parsed; one dim given twice is refused (which would win is a guess)."""
    seen: set[str] = set()
    for text in texts or ():
        dim, spec = parse(text)
        if dim in seen:
            raise ValueError(f"{flag} {dim}: given twice; give each dim once")
        seen.add(dim)
        yield dim, spec
