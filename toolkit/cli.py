"""The `toolkit` command line.

Exit codes: 0 success, 1 a failed gate or check, 2 bad usage or an unreachable store, 130 / 143
interrupted by SIGINT / SIGTERM (toolkit.engine.interrupt).
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from importlib.metadata import version as _dist_version
from typing import Annotated, Any, ClassVar

import click
import typer

from toolkit import DISTRIBUTION
from toolkit.archive.cli import app as archive_app
from toolkit.console import PLAIN_HELP, OneLineErrors, Quiet, Verbose, conventions, flags, out
from toolkit.pyramid.cli import app as pyramid_app
from toolkit.virtual import cli as virtual_cli
from toolkit.virtual.grib.cli import app as grib_app


class Toolkit(OneLineErrors):
    """The root command. `demo` is the examples' (`toolkit.examples`, above the jobs) and
    `serve` the web map's (`toolkit.webmap`): each is loaded by name when it is run or listed,
    so the library never imports the examples and no other command imports the web server."""

    BY_NAME: ClassVar[dict[str, str]] = {
        "demo": "toolkit.examples.cli",
        "serve": "toolkit.webmap.cli",
    }  # command -> the module whose `command` it is

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        conventions(self)  # the lazily loaded commands as they are loaded (get_command)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.BY_NAME, *(n for n in super().list_commands(ctx) if n not in self.BY_NAME)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.BY_NAME and cmd_name not in self.commands:
            self.add_command(importlib.import_module(self.BY_NAME[cmd_name]).command, cmd_name)
            conventions(self)
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    cls=Toolkit,
    help="Dask-distributed array processing for Zarr v3 and Icechunk on object storage.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    **PLAIN_HELP,
)
app.add_typer(pyramid_app, name="pyramid")
app.add_typer(virtual_cli.app, name="virtual")
app.add_typer(grib_app, name="grib")
app.add_typer(archive_app, name="archive")


class State:
    cluster: str | None = None


state = State()


def _version(value: bool) -> None:
    if value:
        out.print(f"toolkit {_dist_version(DISTRIBUTION)} ({DISTRIBUTION})")
        raise typer.Exit(0)


def _pyramid_levels(repo: Any, variables: list[str]) -> tuple[Any, Any]:
    """For `toolkit virtual update --pyramid V`: the in-fire level build (update's
    `after_commit`) and the check of every level on main. Composed here, above both jobs,
    which never import each other."""
    from toolkit.pyramid import verify
    from toolkit.pyramid.repo import FireLevels

    def check() -> list[str]:
        result = verify(repo.store, executor="sync", private=repo.credentials == "env")
        return [f"pyramid {f}" for f in result.failures]

    return FireLevels(repo, tuple(variables)), check


virtual_cli.pyramid_levels = _pyramid_levels  # the toolkit command composes the two jobs


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
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Print full tracebacks (also TOOLKIT_DEBUG=1), not one line per error."
        ),
    ] = False,
    quiet: Quiet = False,  # set as parsed, here or after the command (console._verbosity)
    verbose: Verbose = 0,
) -> None:
    state.cluster = cluster
    flags.debug = debug
    flags.json = flags.json_written = False  # a command's --json says otherwise as it is parsed


def main() -> None:
    """The `toolkit` console script.

    Once the command has ended, its threads have finished and every atexit handler has run,
    the process exits without the interpreter tearing down its modules: numba's and LLVM's
    teardown alone takes 0.3-0.4 s (benchmarks/results/pyramid_build.md), and a command has
    nothing left to finalize by then. The threads end as at interpreter exit
    (`threading._shutdown`): thread pools (zarr's codec pool, dask's threaded scheduler) are
    told to stop first, then every non-daemon thread is joined; joining an idle pool's workers
    without telling them would wait forever.
    """
    import psutil

    flags.started = psutil.Process().create_time()  # `--scheduled-at now`: start-up counts
    try:
        app()
        code: int | str | None = 0
    except SystemExit as done:
        code = done.code
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter runs at exit
    atexit._run_exitfuncs()
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    main()
