"""`toolkit pyramid` commands."""

import typer

app = typer.Typer(help="pyramid commands (not yet implemented).", no_args_is_help=True)
