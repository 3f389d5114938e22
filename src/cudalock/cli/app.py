"""The ``cudalock`` typer application: help, usage errors and the typer-declared commands.

:func:`cudalock.cli.main.run` comes here for every command line it does not run itself.
Command modules import only the standard library (and typer, if typer-declared) at the top;
each command body imports the machinery it needs, so ``cudalock resolve`` does not pay for
``requests`` or ``pynvml`` and ``cudalock audit`` never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import typer
from typer.core import TyperGroup

from cudalock.cli.flags import Command
from cudalock.cli.main import COMMANDS, command_object
from cudalock.cli.typer_bridge import typer_command
from cudalock.errors import CudalockError


def build_command(name: str) -> Any:
    """The click command for ``name``, built the way ``app.command``/``app.add_typer`` would."""
    target = command_object(name)
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
        return typer.main.get_group(holder).commands[name]
    function = typer_command(name, target) if isinstance(target, Command) else target
    holder.command(name)(cast(Callable[..., Any], function))
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
        from cudalock.matrix.load import load_matrix

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


def run_typer(args: list[str]) -> None:
    """Run ``args`` through typer (exits; :func:`cudalock.cli.main.run` reports errors)."""
    app(args=args, prog_name="cudalock")
