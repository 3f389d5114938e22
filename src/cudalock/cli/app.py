"""The ``cudalock`` typer application: command registration and error reporting.

Command modules import only typer and the standard library at the top; each command body
imports the machinery it needs, so ``cudalock resolve`` does not pay for ``requests`` or
``pynvml`` and ``cudalock audit`` never imports torch.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from cudalock.errors import CudalockError

#: Every command, in the order ``--help`` lists them: name → (module, attribute). A module is
#: imported, and its click command built, only when that command runs or help lists them all:
#: ``cudalock resolve`` pays for one command's options, not for eight (issue 9, start-up).
COMMANDS: dict[str, tuple[str, str]] = {
    "probe": ("cudalock.cli.probe_cmd", "probe"),
    "resolve": ("cudalock.cli.resolve_cmd", "resolve"),
    "bootstrap": ("cudalock.cli.bootstrap_cmd", "bootstrap"),
    "lock": ("cudalock.cli.lock_cmd", "lock"),
    "audit": ("cudalock.cli.audit_cmd", "audit"),
    "doctor": ("cudalock.cli.doctor_cmd", "doctor"),
    "memory": ("cudalock.cli.doctor_cmd", "memory"),
    "matrix": ("cudalock.cli.matrix_cmd", "app"),  # a typer sub-application
}


def build_command(name: str) -> Any:
    """The click command for ``name``, built the way ``app.command``/``app.add_typer`` would."""
    module_name, attribute = COMMANDS[name]
    target = getattr(importlib.import_module(module_name), attribute)
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
        return typer.main.get_group(holder).commands[name]
    holder.command(name)(target)
    return typer.main.get_command(holder)


class LazyCommands(TyperGroup):
    """A typer group whose subcommands are imported on first use (see :data:`COMMANDS`)."""

    def list_commands(self, ctx: Any) -> list[str]:
        # Commands registered the eager way (app.command) are listed after the lazy ones.
        return [*COMMANDS, *(name for name in self.commands if name not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.commands[cmd_name] = build_command(cmd_name)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in COMMANDS and not args[0].startswith("-"):
            # An unknown command fails below; build them all first so that typer's "Did you
            # mean ...?" draws on every command, not only those built so far.
            for name in COMMANDS:
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=LazyCommands,
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


def report_error(err: CudalockError) -> None:
    """One line (plus an optional hint) on stderr, no traceback, URL credentials hidden."""
    from cudalock.urls import redact

    # Messages quote flags and URLs as given; one last redaction here covers every command.
    typer.echo(redact(f"cudalock: error: {err.message}"), err=True)
    if err.hint:
        typer.echo(redact(f"hint: {err.hint}"), err=True)


def run(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, prog_name="cudalock")
    except CudalockError as err:
        report_error(err)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        typer.echo("cudalock: interrupted", err=True)
        sys.exit(130)
