"""Terminal plumbing shared by every `toolkit` command: exit codes, progress, report tables.

Lives beside the jobs (not in the face module) so each job's CLI can use it without importing
`toolkit.cli`. Exit codes: 0 success, 1 a failed gate or check, 2 bad usage or an unreachable
store or cluster.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import os
import re
import sys
import traceback
import typing
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable
from typer.core import TyperGroup

from toolkit import options, storage, textin
from toolkit.engine import (
    BadOption,
    ClusterUnreachable,
    Runner,
    Session,
    VersionMismatch,
    progress_bar,
)
from toolkit.engine.cluster import WAIT_FOR_WORKERS
from toolkit.engine.interrupt import Interrupts, interrupted
from toolkit.plan import IncompleteStageError, Report, task_context

err_console = Console(stderr=True, soft_wrap=True)  # one-line errors in logs and pipes
out = Console()

ProgressFn = Callable[[str, int, int], None]


class Flags:
    """What the root command was told, set afresh by every invocation (`toolkit --debug`)."""

    debug = False
    quiet = False  # warnings and errors only: no progress bars, no hints
    verbose = 0  # 1: the toolkit.* loggers' INFO lines; 2: DEBUG
    started: float | None = None  # when the `toolkit` process started (its console script)
    json = False  # the command was given --json: a failure is one JSON object on stdout too
    json_written = False  # the command's own JSON object is out: nothing more goes to stdout


flags = Flags()


class _Stderr(logging.Handler):
    """Log lines of the toolkit.* loggers on whatever sys.stderr is when they are emitted (a
    test runner swaps it), one line each: `level: message (logger)`."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = f"{record.levelname.lower()}: {record.getMessage()} ({record.name})"
            sys.stderr.write(storage.readable(line) + "\n")
        except Exception:
            self.handleError(record)


_HANDLER = _Stderr()


def configure_logging(quiet: bool = False, verbose: int = 0) -> int:
    """The level of the `toolkit` logger for this command: WARNING by default, ERROR with
    --quiet, INFO with --verbose, DEBUG with it twice. One handler, however often the CLI is
    invoked in a process; records do not also reach the root logger (no line twice). Returns
    the level."""
    flags.quiet, flags.verbose = quiet, verbose
    level = (
        logging.ERROR
        if quiet
        else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    )
    log = logging.getLogger("toolkit")
    if _HANDLER not in log.handlers:
        log.addHandler(_HANDLER)
    log.setLevel(level)
    log.propagate = False
    return level


def _verbosity(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """--quiet / --verbose as given to any command on the line (`toolkit --quiet pyramid build
    S` or `toolkit pyramid build S --quiet`): the values add up over the commands, which share
    `ctx.meta`, and set the logging level as they are parsed. Both at once is bad usage."""
    if ctx.resilient_parsing:  # shell completion: nothing is run
        return value
    said = ctx.meta.setdefault("toolkit.verbosity", {})
    said[id(ctx), param.name] = value
    quiet = any(v for (_, name), v in said.items() if name == "quiet")
    verbose = sum(v for (_, name), v in said.items() if name == "verbose")
    if quiet and verbose:
        ctx.fail("--quiet and --verbose contradict each other: give one")
    configure_logging(quiet, verbose)
    return value


# The verbosity flags, which every command takes (`conventions`): no short -v, which is
# --variable wherever a command takes variables.
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        callback=_verbosity,
        expose_value=False,
        help="Warnings and errors only: no progress bars, links or hints.",
    ),
]
Verbose = Annotated[
    int,
    typer.Option(
        "--verbose",
        count=True,
        callback=_verbosity,
        expose_value=False,
        show_default=False,
        help="Log what the toolkit.* loggers say: their INFO lines; given twice, DEBUG too.",
    ),
]


@functools.cache
def _verbosity_params() -> tuple[Any, ...]:
    """The click parameters of `Quiet` and `Verbose`, shared by every command."""

    def verbosity(quiet: Quiet = False, verbose: Verbose = 0) -> None:
        """Only their parameters are used."""

    holder = typer.Typer(add_completion=False)
    holder.command()(verbosity)
    return tuple(typer.main.get_command(holder).params)


_SENTENCE_END = re.compile(r"(?<=[^.]\.)\s+(?=[A-Z])")


def first_sentence(text: str | None) -> str:
    """The first sentence of a help text's first paragraph, whitespace collapsed: what a
    group lists for its command, whole (click's own short help cuts it at 45 characters)."""
    paragraph = " ".join(inspect.cleandoc(text or "").split("\n\n")[0].split())
    return _SENTENCE_END.split(paragraph, maxsplit=1)[0]


def conventions(command: Any) -> None:
    """Keep the CLI's conventions on `command` and every command under it: each takes
    --quiet / --verbose after its name too, and each group lists its commands by their whole
    first sentence, wrapped to the terminal. Idempotent (a lazily loaded command is kept)."""
    names = {p.name for p in command.params}
    command.params.extend(p for p in _verbosity_params() if p.name not in names)
    for sub in getattr(command, "commands", {}).values():
        sub.short_help = sub.short_help or first_sentence(sub.help)
        conventions(sub)


class Table(RichTable):
    """A report table whose cells wrap to the terminal's width: a word longer than its column
    is folded onto the next line, never cut with "…"."""

    def add_column(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("overflow", "fold")
        super().add_column(*args, **kwargs)


def print_plain(*parts: Any) -> None:
    """Print a listing (borderless tables, lines) on stdout wrapped to the terminal, each line
    without the cells' trailing padding; no markup is read."""
    with out.capture() as text:
        for part in parts:
            out.print(part, highlight=False, markup=False)
    for line in text.get().splitlines():
        out.print(line.rstrip(), highlight=False, markup=False, soft_wrap=True)


def hint(text: str) -> None:
    """A line that helps but reports nothing (stderr, dim); --quiet drops it."""
    if not flags.quiet:
        err_console.print(f"[dim]{text}[/dim]")


def debugging() -> bool:
    """`toolkit --debug` or TOOLKIT_DEBUG=1: print tracebacks, not just the one line
    (`0`, `false`, `no`, `off` are off, as every switch reads them)."""
    return flags.debug or textin.switch(os.environ, "TOOLKIT_DEBUG")


# exit 2: the user's address is wrong (a local path that cannot be a store is one)
OUT_OF_REACH = (storage.Unreachable, storage.AccessDenied, storage.BadPath)


def one_line(text: str) -> str:
    """`text` with its control characters and line breaks escaped (`\\x1b`, `\\n`): a name
    holding one can neither split an error line nor drive the terminal."""
    return "".join(
        c if c == " " or unicodedata.category(c) not in ("Cc", "Zl", "Zp") else repr(c)[1:-1]
        for c in text
    )


def fail(code: int, message: str) -> typer.Exit:
    """Print one red line to stderr and return the Exit to raise; under --json, also the one
    JSON object the command promised, `{"error": LINE, "exit": CODE}`, on stdout (unless the
    command's own object, a failed check's report, is out already)."""
    line = one_line(storage.readable(message))
    err_console.print(f"[red]error:[/red] {escape(line)}")
    if flags.json and not flags.json_written:
        emit_json({"error": line, "exit": code})
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
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except Exception as err:
        if interrupted():  # whatever the signal broke on the way out is the interrupt itself
            raise KeyboardInterrupt from err
        context = task_context(err)
        if debugging():
            err_console.print(escape("".join(traceback.format_exception(err))), highlight=False)
            if context is not None and context.traceback:
                err_console.print(f"on the worker:\n{escape(context.traceback)}", highlight=False)
        raise _one_line(storage.explain(err) or err, usage_errors, check_errors) from None


def _one_line(
    err: Exception,
    usage_errors: tuple[type[BaseException], ...],
    check_errors: tuple[type[BaseException], ...],
) -> typer.Exit:
    if isinstance(err, IncompleteStageError):
        return fail(1, f"gate failed: {err}")
    context = task_context(err)
    if context is not None:  # a task failed: exit 1, unless its store was out of reach
        code = 2 if isinstance(err, OUT_OF_REACH) else 1
        named = isinstance(err, storage.CorruptObject)  # its line ends with the fix
        hint = "" if debugging() or named else " (--debug shows the traceback)"
        return fail(code, f"{context.line(err)}{hint}")
    code = _code(err, usage_errors, check_errors)
    known = code == 2 or isinstance(err, (storage.StorageError, *check_errors))
    hint = "" if known or debugging() else " (--debug shows the traceback)"
    return fail(code, str(err) if known else f"{type(err).__name__}: {err}{hint}")


def _code(
    err: Exception,
    usage_errors: tuple[type[BaseException], ...],
    check_errors: tuple[type[BaseException], ...],
) -> int:
    """2: bad usage, an unreachable store or cluster, mismatched versions; 1: anything else."""
    bad = (BadOption, storage.BadStorageOption)
    if isinstance(err, (*OUT_OF_REACH, ClusterUnreachable, VersionMismatch, *bad)):
        return 2
    if isinstance(err, storage.StorageError):
        return 1
    if isinstance(err, usage_errors):
        return 2
    return 1


@contextmanager
def progress_bars() -> Iterator[ProgressFn]:
    """A rich progress bar per stage on stderr, counting tasks (the engine's progress callback);
    none with --quiet."""
    if flags.quiet:
        yield None  # type: ignore[misc]
        return
    with progress_bar(err_console) as update:
        yield update


def _announce(line: str) -> None:
    """What the session says as it connects (the dashboard link): kept from --quiet runs."""
    if not flags.quiet:
        err_console.print(escape(storage.redact(line)), highlight=False)


def session(
    ctx: typer.Context,
    cluster: str | None = None,
    performance_report: Path | None = None,
    ship: bool = False,
    executor: str | None = None,
    wait_for_workers: float = WAIT_FOR_WORKERS,
    at_once: bool = True,
) -> Session:
    """The cluster a job command runs on: connected when the job first needs it (after its
    arguments are validated), dashboard link on stderr, closed when the command ends. A
    scheduler given by --cluster / TOOLKIT_CLUSTER that the `executor` will use is reached at
    once, and given `wait_for_workers` seconds to have a worker, before anything is written;
    with `at_once` False only when first needed (an update's commits never wait for the
    cluster of its validation samples)."""
    address = root_cluster(ctx, cluster)
    logging.getLogger("toolkit.console").info(
        "executor %s, cluster %s", executor or "dask", address or "embedded (started when needed)"
    )
    if performance_report is not None and executor == "sync":
        raise BadOption(
            f"--performance-report {performance_report}: distributed's report needs a cluster, "
            "and --executor sync runs in this process; drop one of them"
        )
    where = Session(
        address,
        eager=at_once and address is not None and executor not in (None, "sync"),
        wait_for_workers=wait_for_workers,
        announce=_announce,
        performance_report=performance_report,
        ship=ship,
        quiet=not debugging(),
    )
    if address is not None and executor == "sync":  # the user's choice, never a silent one
        shown = escape(storage.redact(address))
        hint(f"note: --executor sync runs in this process; the cluster {shown} is not used")
    return where


@contextmanager
def runner(
    ctx: typer.Context,
    cluster: str | None = None,
    performance_report: Path | None = None,
    ship: bool = False,
    executor: str = "auto",
    wait_for_workers: float = WAIT_FOR_WORKERS,
    bars: bool = True,
    at_once: bool = True,
) -> Iterator[Runner]:
    """The one `Runner` of a job command, made from its flags: its `session` (the cluster;
    `at_once`: see `session`), the executor, and a progress bar per stage on stderr unless
    `bars` is False or --quiet."""
    args = (ctx, cluster, performance_report, ship, executor, wait_for_workers, at_once)
    with session(*args) as where:
        if not bars:
            yield Runner(where, executor)  # type: ignore[arg-type]
            return
        with progress_bars() as drawn:
            yield Runner(where, executor, drawn)  # type: ignore[arg-type]


def json_asked(value: bool) -> bool:
    """Parsed before the command runs: from here on a failure is a JSON object too."""
    flags.json = bool(value)
    flags.json_written = False
    return value


AsJson = Annotated[
    bool,
    typer.Option(
        "--json",
        help="One JSON object on stdout instead of the tables, for scripts (for a failure: "
        '{"error": ..., "exit": ...}).',
        callback=json_asked,
    ),
]


class NotJson(ValueError):
    """A --json document holding NaN or an infinity, which JSON has no spelling for."""


def _spell(value: Any) -> Any:
    iso = getattr(value, "isoformat", None)
    return iso() if callable(iso) else str(value)


def _non_finite(doc: Any, path: str = "") -> str | None:
    """Where in `doc` the first NaN or infinity is (`blobs[0].recall_s = inf`), or None."""
    if isinstance(doc, float) and not math.isfinite(doc):
        return f"{path or 'the document'} = {doc}"
    if isinstance(doc, dict):
        items = [(f"{path}.{k}".lstrip("."), v) for k, v in doc.items()]
    elif isinstance(doc, (list, tuple)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(doc)]
    else:
        items = []
    return next((where for p, v in items if (where := _non_finite(v, p))), None)


def json_text(doc: Any, indent: int | None = None) -> str:
    """`doc` as JSON for stdout: times and other values JSON lacks as their ISO / str spelling;
    never `NaN` or `Infinity`, which JSON readers refuse (NotJson names the field: a value
    that can be missing is None upstream)."""
    try:
        return json.dumps(doc, default=_spell, indent=indent, allow_nan=False)
    except ValueError:
        where = _non_finite(json.loads(json.dumps(doc, default=_spell)))
        raise NotJson(
            f"--json: {where or 'a value'} has no JSON spelling; nothing printed"
        ) from None


def emit_json(doc: Any) -> None:
    """One JSON object on one line of stdout (what `--json` promises; nothing else goes there),
    never with NaN or Infinity in it (`json_text`)."""
    sys.stdout.write(json_text(doc) + "\n")
    sys.stdout.flush()
    flags.json_written = True


_SUBSECOND = re.compile(r"(T\d\d:\d\d:\d\d)\.\d+")


def to_the_second(text: str) -> str:
    """ISO times in `text` to the second (numpy spells a label to the nanosecond)."""
    return _SUBSECOND.sub(r"\1", text)


def report_json(report: Report) -> dict[str, Any]:
    """A run's report as `--json` writes it: the stage table and the notes."""
    doc = report.as_dict()
    doc["plan"] = to_the_second(doc["plan"])
    return {**doc, "notes": [storage.redact(n) for n in report.notes]}


def print_report(report: Report, json_path: Path | None = None) -> None:
    """The per-stage table (tasks, graph nodes, skipped, written, seconds, gate), optionally
    also as JSON."""
    table = Table(
        title=f"{to_the_second(report.plan)} ({report.digest}, {report.executor}, "
        f"{report.seconds:.2f} s)"
    )
    for col in ("stage", "tasks", "nodes", "skipped", "written", "seconds", "gate have/want"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for s in report.stages:
        gate = "-" if s.gate_want is None else f"{s.gate_have}/{s.gate_want}"
        table.add_row(
            s.name,
            str(s.tasks),
            str(s.nodes),
            str(s.skipped),
            str(s.written),
            f"{s.seconds:.2f}",
            gate,
        )
    out.print(table)
    for note in report.notes:
        out.print(f"note: {escape(storage.readable(note))}", soft_wrap=True)
    if json_path is not None:
        json_path.write_text(json.dumps(report.as_dict(), indent=2))


# The object-store options, each declared once with its help text; a command takes them all
# as one `StorageOptions` parameter (`Storage`, or a narrower alias), which `Typer` below
# spreads into these flags in this order.
Endpoint = Annotated[str | None, typer.Option("--endpoint", help="S3 endpoint URL.")]
Region = Annotated[str | None, typer.Option("--region", help="S3 region.")]
Anonymous = Annotated[bool, typer.Option("--anonymous", help="Unsigned requests (public store).")]
AllowHttp = Annotated[bool, typer.Option("--allow-http", help="Allow an http:// endpoint.")]
PathStyle = Annotated[bool, typer.Option("--path-style", help="Path-style S3 addressing.")]
RETRY_SECONDS = storage.RETRY_SECONDS
RetrySeconds = Annotated[
    float,
    options.Option(
        "--retry-seconds",
        check=options.seconds(1),
        help="Retry every object-store call with backoff for up to this long before giving "
        "up (an outage shorter than this costs only time).",
    ),
]
_FLAGS: dict[str, tuple[Any, Any]] = {  # parameter -> (declaration, default), in --help order
    "endpoint": (Endpoint, None),
    "retry_seconds": (RetrySeconds, RETRY_SECONDS),
    "region": (Region, None),
    "anonymous": (Anonymous, False),
    "allow_http": (AllowHttp, False),
    "path_style": (PathStyle, False),
}
StorageOptions = storage.Options  # the storage flags as one value (`toolkit.storage.Options`)


@dataclass(frozen=True)
class StorageFlags:
    """Which of the storage flags a `StorageOptions` parameter offers (the rest keep their
    defaults): the metadata of `Storage` and its narrower aliases."""

    without: frozenset[str] = frozenset()


Storage = Annotated[StorageOptions, StorageFlags()]
# a command that writes: no --anonymous
WriteStorage = Annotated[StorageOptions, StorageFlags(frozenset({"anonymous"}))]
# the virtual jobs: no --region (an --endpoint is addressed as us-east-1), their own --anonymous
RepoStorage = Annotated[StorageOptions, StorageFlags(frozenset({"anonymous", "region"}))]
STORAGE = StorageOptions()


def _storage_flags(hint: Any) -> StorageFlags | None:
    if typing.get_origin(hint) is not Annotated:
        return None
    return next((m for m in hint.__metadata__ if isinstance(m, StorageFlags)), None)


def spread_storage(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` with its `StorageOptions` parameter spread into the storage flags (as typer
    sees it), gathered back into one value when it runs; unchanged if it has none."""
    hints = typing.get_type_hints(command, include_extras=True)
    signature = inspect.signature(command)
    params: list[inspect.Parameter] = []
    gathered: str | None = None
    offered: list[str] = []
    for p in signature.parameters.values():
        hint = hints.get(p.name, p.annotation)
        flags = _storage_flags(hint)
        if flags is None:
            params.append(p.replace(annotation=hint))
            continue
        gathered = p.name
        for name, (declared, default) in _FLAGS.items():
            if name not in flags.without:
                offered.append(name)
                params.append(p.replace(name=name, annotation=declared, default=default))
    if gathered is None:
        return command
    name = gathered

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        kwargs[name] = StorageOptions(**{n: kwargs.pop(n) for n in offered})
        return command(*args, **kwargs)

    run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run


# Help as click writes it: wrapped to the terminal, flag names whole and plain flags without a
# value. Rich's help panels cut long flag names and words with "…" at 80 columns.
PLAIN_HELP: dict[str, Any] = {"rich_markup_mode": None}


class Typer(typer.Typer):
    """A job's command group: a command's `Storage` parameter is the storage flags."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**PLAIN_HELP, **kwargs})

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
        register = super().command(*args, **kwargs)

        def decorator(command: Callable[..., Any]) -> Callable[..., Any]:
            register(spread_storage(command))
            return command

        return decorator


# The engine options of every job command.
WaitForWorkers = Annotated[
    float,
    options.Option(
        "--wait-for-workers",
        check=options.seconds(0),
        help="With --cluster: seconds to wait for the scheduler's first worker before giving "
        "up (exit 2), before anything is written.",
    ),
]
PerformanceReport = Annotated[
    Path | None,
    typer.Option(
        "--performance-report",
        help="Write distributed's performance report (HTML) of the run to this file.",
    ),
]
Ship = Annotated[
    bool,
    typer.Option(
        "--ship",
        help="Run this toolkit on the cluster's scheduler and workers for this run only (a development checkout).",
    ),
]


def root_cluster(ctx: typer.Context, explicit: str | None = None) -> str | None:
    """A command's own --cluster, else the global `toolkit --cluster`."""
    if explicit:
        return explicit
    value = ctx.find_root().params.get("cluster")
    return value if isinstance(value, str) else None


class OneLineErrors(TyperGroup):
    """The root command: a usage error (an unknown flag, a missing option, a value out of
    range, a file that is not there) is one line and exit 2, naming the command's --help,
    instead of click's five-line box around the same sentence. Ctrl-C or SIGTERM: one line,
    `interrupted: rerun to resume`, exit 130 or 143 (toolkit.engine.interrupt)."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            with Interrupts(lambda line: typer.echo(line, err=True)) as signals:
                try:
                    code = super().main(
                        args, prog_name, complete_var, standalone_mode=False, **extra
                    )
                except Exception:
                    if signals.signum is None:
                        raise
                if signals.signum is not None:  # whatever the command raised on its way out
                    sys.exit(signals.finish(last_word=not flags.debug))
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        except typer.TyperException as err:  # typer's click errors: usage, bad parameter, ...
            ctx = getattr(err, "ctx", None)
            if type(err).__name__ == "NoArgsIsHelpError" and ctx is not None:
                sys.exit(err.exit_code)  # a bare group: its help was printed when raised
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            text = " ".join(err.format_message().split()).replace("Value error, ", "")
            line, code = one_line(f"{text}{where}"), getattr(err, "exit_code", 2)
            typer.echo(f"error: {line}", err=True)
            # the line was refused before its --json was parsed: the words say it was asked
            if "--json" in (sys.argv[1:] if args is None else list(args)):
                emit_json({"error": line, "exit": code})
            sys.exit(code)
        sys.exit(code if isinstance(code, int) else 0)
