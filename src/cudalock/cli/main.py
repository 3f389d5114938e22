"""The ``cudalock`` entry point: commands declared as tables run without typer when they can.

``run`` imports the module of the command named first. A command declared as a
:class:`~cudalock.cli.flags.Command` whose command line the standard-library parser accepts runs
straight away; every other command line (help, a typo, a typer-declared command) goes to the
typer application in :mod:`cudalock.cli.app`, which reads it exactly as before. typer costs
60-90 ms to import on a small machine, more than the rest of ``cudalock resolve`` together.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from cudalock.cli.output import echo
from cudalock.errors import CudalockError

#: Every command, in the order ``--help`` lists them: name → (module, attribute). A module is
#: imported only when its command runs (or help lists them all). The attribute is either a
#: :class:`~cudalock.cli.flags.Command` table or a typer-declared function or sub-application.
COMMANDS: dict[str, tuple[str, str]] = {
    "probe": ("cudalock.cli.probe", "COMMAND"),
    "resolve": ("cudalock.cli.resolve", "COMMAND"),
    "bootstrap": ("cudalock.cli.bootstrap", "COMMAND"),
    "lock": ("cudalock.cli.lock", "COMMAND"),
    "audit": ("cudalock.cli.audit", "COMMAND"),
    "doctor": ("cudalock.cli.doctor", "DOCTOR"),
    "memory": ("cudalock.cli.doctor", "MEMORY"),
    "matrix": ("cudalock.cli.matrix", "app"),  # a typer sub-application
}


def command_object(name: str) -> object:
    """What :data:`COMMANDS` declares for ``name``, its module imported."""
    module_name, attribute = COMMANDS[name]
    return getattr(importlib.import_module(module_name), attribute)


def report_error(err: CudalockError) -> None:
    """One line (plus an optional hint) on stderr, no traceback, URL credentials hidden."""
    from cudalock.urls import redact

    # Messages quote flags and URLs as given; one last redaction here covers every command.
    echo(redact(f"cudalock: error: {err.message}"), err=True)
    if err.hint:
        echo(redact(f"hint: {err.hint}"), err=True)


def run(argv: Sequence[str] | None = None) -> None:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); exits with its status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if not _run_without_typer(args):
            from cudalock.cli.app import run_typer

            run_typer(args)
    except CudalockError as err:
        report_error(err)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        echo("cudalock: interrupted", err=True)
        sys.exit(130)


def _run_without_typer(args: list[str]) -> bool:
    """Run a table-declared command whose command line is well formed; False: typer's turn."""
    if not args or args[0] not in COMMANDS:
        return False
    command = command_object(args[0])
    from cudalock.cli.flags import Command, parse_command_line

    if not isinstance(command, Command):
        return False
    values = parse_command_line(args[1:], command.flags)
    if values is None:
        return False
    command.run(values)
    return True
