"""`toolkit virtual` commands."""

import typer

app = typer.Typer(help="virtual commands (not yet implemented).", no_args_is_help=True)
