"""The ``cudalock`` typer application: command registration and error reporting.

Command modules import only typer and the standard library at the top; each command body
imports the machinery it needs, so ``cudalock resolve`` does not pay for ``requests`` or
``pynvml`` and ``cudalock audit`` never imports torch.
"""

from __future__ import annotations

import sys

import typer

from cudalock.cli import (
    audit_cmd,
    bootstrap_cmd,
    doctor_cmd,
    lock_cmd,
    matrix_cmd,
    probe_cmd,
    resolve_cmd,
)
from cudalock.errors import CudalockError

app = typer.Typer(
    name="cudalock",
    help="The PyTorch stack this machine's NVIDIA driver and GPUs can run: probe, resolve, "
    "bootstrap, lock, audit, and explain -9 / -11 crashes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version_callback(value: bool) -> None:
    if value:
        from cudalock import __version__
        from cudalock.matrix import load_matrix

        try:
            matrix = load_matrix()
            detail = f"matrix {matrix.matrix_version} (schema {matrix.schema_version})"
        except CudalockError as err:
            detail = f"matrix unavailable: {err.message}"
        typer.echo(f"cudalock {__version__}, {detail}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True,
        help="Print cudalock's version and the matrix version, then exit.",
    ),
) -> None:
    """cudalock: the PyTorch stack this machine can run."""


app.command("probe")(probe_cmd.probe)
app.command("resolve")(resolve_cmd.resolve)
app.command("bootstrap")(bootstrap_cmd.bootstrap)
app.command("lock")(lock_cmd.lock)
app.command("audit")(audit_cmd.audit)
app.command("doctor")(doctor_cmd.doctor)
app.command("memory")(doctor_cmd.memory)
app.add_typer(matrix_cmd.app, name="matrix")


def report_error(err: CudalockError) -> None:
    """One line (plus an optional hint) on stderr, no traceback."""
    typer.echo(f"cudalock: error: {err.message}", err=True)
    if err.hint:
        typer.echo(f"hint: {err.hint}", err=True)


def run(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, prog_name="cudalock")
    except CudalockError as err:
        report_error(err)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        typer.echo("cudalock: interrupted", err=True)
        sys.exit(130)
