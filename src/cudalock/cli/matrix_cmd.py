"""`cudalock matrix ...` (placeholder until its implementation lands)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Inspect, check and refresh the compatibility matrix.", no_args_is_help=True)


@app.command("check")
def check() -> None:
    """Not available yet."""
    raise typer.Exit(2)
