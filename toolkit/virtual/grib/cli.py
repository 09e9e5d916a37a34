"""`toolkit grib` commands."""

import typer

app = typer.Typer(help="grib commands (not yet implemented).", no_args_is_help=True)
