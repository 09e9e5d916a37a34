"""`toolkit serve STORE|REPO`: loaded by name by `toolkit.cli` when it is run or listed, so the
other commands never import the web server."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from toolkit import options
from toolkit.console import STORAGE, Storage, Typer, exit_codes, out

app = Typer(add_completion=False)


@app.command()
def serve(
    source: Annotated[
        str,
        typer.Argument(
            help="A pyramid (Zarr v3 store) or a virtual dataset's Icechunk repo: a path, "
            "file:// or s3://..."
        ),
    ],
    variable: Annotated[
        str | None, typer.Option("--variable", "-v", help="The variable the page opens on.")
    ] = None,
    port: Annotated[
        int, options.Option(check=options.count(0, 65535, "a port"), help="Port (0: any free one).")
    ] = 8765,
    host: Annotated[
        str,
        typer.Option(help="Address to listen on; 0.0.0.0 opens it to the network."),
    ] = "127.0.0.1",
    branch: Annotated[str, typer.Option(help="A repo's branch to follow.")] = "main",
    credentials: Annotated[
        Literal["anonymous", "env"],
        typer.Option(
            help="How a repo's GRIB sources are read: anonymous, or env (the AWS_* variables)."
        ),
    ] = "anonymous",
    colormap: Annotated[
        str | None, typer.Option(help="A matplotlib colormap (default viridis; tab10 for classes).")
    ] = None,
    value_range: Annotated[
        str | None,
        options.Option(
            "--range",
            check=options.RANGE,
            help="MIN,MAX of the colour scale (default: the data's CF valid_range, else its "
            "2nd..98th percentile).",
        ),
    ] = None,
    refresh: Annotated[
        float,
        options.Option(
            check=options.seconds(0), help="Seconds between looks at a repo's branch for commits."
        ),
    ] = 2.0,
    stores: Storage = STORAGE,
) -> None:
    """Serve a web map of a pyramid or a virtual repo: XYZ tiles read from the level that
    matches each zoom, a legend from the CF metadata, selectors for the other dims, the value
    under the cursor. Read-only; Ctrl-C stops it. See docs/serve.md."""
    from toolkit.engine import interrupt
    from toolkit.webmap import serve as run
    from toolkit.webmap.view import SelectionError

    def ready(url: str) -> None:
        out.print(f"serving {source} at {url} (Ctrl-C stops)", highlight=False, soft_wrap=True)

    interrupt.ending_says("stopped")  # Ctrl-C is how a server ends: exit 130, nothing to resume
    store_options = stores.for_url(source)  # not `options`: that is the option layer
    pair = None if value_range is None else options.parse_range(value_range)
    with exit_codes(usage_errors=(SelectionError, ImportError, ValueError, OSError)):
        run(source, variable=variable, host=host, port=port, credentials=credentials,
            store_options=store_options, branch=branch, colormap=colormap, value_range=pair,
            refresh=refresh, on_ready=ready)  # fmt: skip


command = typer.main.get_command(app)  # the click command `toolkit.cli` adds as `serve`
