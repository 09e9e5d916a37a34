"""`toolkit grib` commands: inspect a GRIB2 file and check its index against its own headers.

Exit codes: 0 ok, 1 the index is stale or invalid (or the file is not valid GRIB2), 2 the input
is unreachable or unreadable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlparse

import typer

from toolkit.console import PLAIN_HELP, RETRY_SECONDS, RetrySeconds, emit_json, json_asked

app = typer.Typer(
    help="Inspect GRIB2 files and their wgrib2 indexes.", no_args_is_help=True, **PLAIN_HELP
)


@dataclass
class Row:
    number: str
    offset: int
    length: int
    element: str
    level: str
    window: str

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


class InputError(Exception):
    """The input cannot be reached or read (exit 2)."""


def _open(target: str, options: dict[str, Any]) -> tuple[Any, str]:
    """(Store, key) for a path or URL; a local path must exist (opening would create it)."""
    from toolkit import storage

    local = storage.local_path_of(target)
    if local is not None:
        try:
            path = local.resolve()
        except (RuntimeError, OSError) as err:  # a symlink loop: said as every store says it
            raise storage.explain(err) or err from None
        if path.is_dir():
            raise InputError(f"{target}: is a folder: name one GRIB2 file in it")
        if not path.is_file():
            raise InputError(f"{target}: no such file: check the path")
        return storage.open_store(str(path.parent)), path.name
    bucket, key = storage.split_bucket(target)
    if not bucket or not key:
        raise InputError(f"{target} names no object (expected scheme://bucket/key)")
    store = storage.open_store(f"{urlparse(target).scheme}://{bucket}", **options)
    return store, key


def _scan_file(store: Any, key: str) -> list[Row]:
    import gribberish

    from toolkit import storage
    from toolkit.virtual.grib.fetch import object_url
    from toolkit.virtual.grib.message import scan_messages

    data = storage.get(store, key).data
    rows = []
    for span in scan_messages(data, object_url(store, key)):
        element = level = window = "?"
        try:
            meta = gribberish.parse_grib_message_metadata(data, span.offset)
            element = meta.var_abbrev
            level = (
                f"{meta.level_value:g} {meta.level_type}"
                if meta.level_value is not None
                else meta.level_type
            )
            window = _window_text(meta)
        except Exception as err:  # metadata gribberish cannot read: still list the boundaries
            window = f"(metadata unreadable: {str(err)[:60]})"
        rows.append(Row(str(span.number), span.offset, span.length, element, level, window))
    return rows


_STAT_STEPS = {"accumulation": "accum", "average": "avg", "maximum": "max", "minimum": "min"}


def _window_text(meta: Any) -> str:
    """The wgrib2 spelling of a message's time window (``anl``, ``7 hour fcst``, ``0-24 hour
    min fcst``), so a scan without an index reads like the index would."""
    from toolkit.virtual.grib.index import Window

    start = meta.forecast_date - meta.reference_date
    step = _STAT_STEPS.get(str(meta.statistical_process or "").lower())
    end = getattr(meta, "forecast_date_end", None)
    if step is None or end is None:
        if meta.statistical_process:  # a statistic wgrib2 has no short word for
            return f"{Window.instant(start).render()} ({meta.statistical_process})"
        return Window.instant(start).render()
    return Window(step, start, end - meta.reference_date).render()


def one_line(exc: BaseException) -> str:
    """An error as one line, its paths as typed (`storage.readable`: decoded, not
    percent-encoded): stores append multi-line debug dumps after a blank line."""
    from toolkit import storage

    text = str(exc).split("\n\n", 1)[0]
    return storage.readable(" ".join(text.split()))


def _check_index(store: Any, key: str, index_store: Any, index_key: str) -> list[Row]:
    """Every index range against the header at its offset (one 16-byte GET per message)."""
    from toolkit import storage
    from toolkit.virtual.grib.errors import StaleIndexError
    from toolkit.virtual.grib.fetch import locate, object_url
    from toolkit.virtual.grib.message import INDICATOR_SIZE, parse_indicator

    url = object_url(store, key)
    size = storage.head(store, key).size
    records = locate(store, key, index_key, file_size=size, index_store=index_store)
    last = records[-1].offset
    for rec in records:
        if rec.offset == last or (rec.submessage or 1) > 1:
            continue
        head = storage.get_range(store, key, rec.offset, INDICATOR_SIZE)
        try:
            declared = parse_indicator(head, url, rec.offset).length
        except Exception as err:
            raise StaleIndexError(
                url, f"record {rec.label} at offset {rec.offset}: {err}"
            ) from None
        if declared != rec.length:
            raise StaleIndexError(
                url,
                f"record {rec.label} at offset {rec.offset}: the index gives {rec.length} bytes, "
                f"the message header {declared}",
            )
    return [
        Row(r.label, r.offset, r.length or 0, r.element, r.level, r.window_text) for r in records
    ]


@app.command()
def scan(
    target: Annotated[str, typer.Argument(help="GRIB2 file: a path or URL (s3://bucket/key, ...)")],
    index: Annotated[
        str | None,
        typer.Option("--index", help="wgrib2 .idx (path or URL) to check against the file"),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of a table.", callback=json_asked)
    ] = False,
    endpoint: Annotated[str | None, typer.Option(help="S3-compatible endpoint URL.")] = None,
    region: Annotated[str | None, typer.Option(help="Bucket region.")] = None,
    anonymous: Annotated[bool, typer.Option(help="Unsigned requests (public buckets).")] = False,
    retry_seconds: RetrySeconds = RETRY_SECONDS,
) -> None:
    """List a file's messages (number, offset, length, element, level, window).

    With --index the listing comes from the index, each range checked against the message
    header at its offset; exit 1 names why when the index is stale or invalid.
    """
    from rich.console import Console
    from rich.markup import escape

    from toolkit import storage
    from toolkit.console import Table
    from toolkit.virtual.grib.errors import GribSourceError

    err = Console(stderr=True)
    options: dict[str, Any] = {"retry_seconds": retry_seconds}
    if endpoint:
        options |= {"endpoint": endpoint, "allow_http": endpoint.startswith("http://")}
    if region:
        options["region"] = region
    if anonymous:
        options["anonymous"] = True
    source = target
    try:
        store, key = _open(target, options)
        source = storage.location(store.url, key)  # the path as typed, not its URL
        if index is None:
            rows = _scan_file(store, key)
        else:
            index_store, index_key = _open(index, options)
            rows = _check_index(store, key, index_store, index_key)
    except GribSourceError as exc:
        if as_json:
            emit_json({"file": source, "index": index, "ok": False, "error": one_line(exc)})
        err.print(f"[red]error: {escape(one_line(exc))}[/red]", soft_wrap=True)
        raise typer.Exit(1) from None
    except (InputError, storage.StorageError, OSError) as exc:
        if as_json:
            emit_json({"file": source, "index": index, "ok": False, "error": one_line(exc)})
        err.print(f"[red]error: cannot read input:[/red] {escape(one_line(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None

    if as_json:
        emit_json(
            {"file": source, "index": index, "ok": True, "messages": [r.as_dict() for r in rows]}
        )
        return
    table = Table(title=f"{source} ({len(rows)} messages{', index checked' if index else ''})")
    for col in ("#", "offset", "length", "element", "level", "window"):
        table.add_column(col, justify="right" if col in ("#", "offset", "length") else "left")
    for r in rows:
        table.add_row(r.number, str(r.offset), str(r.length), r.element, r.level, r.window)
    Console().print(table)
