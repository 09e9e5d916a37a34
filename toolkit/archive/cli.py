"""`toolkit archive` commands."""

import typer

app = typer.Typer(help="archive commands (not yet implemented).", no_args_is_help=True)
