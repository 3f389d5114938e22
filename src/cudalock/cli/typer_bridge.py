"""Flag tables (:mod:`cudalock.cli.flags`) turned into typer commands.

typer reads a command's options from its function signature; :func:`typer_command` writes that
signature from the table, so a flag is declared once and both typer and the standard-library
parser read the same declaration.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from cudalock.cli.flags import Command, Flag

_TYPES: dict[str, Any] = {
    "bool": bool,
    "str": str | None,
    "path": Path | None,
    "float": float,
    "int": int,
    "strs": list[str] | None,
    "paths": list[Path] | None,
}


def typer_hint(flag: Flag) -> Any:
    """``Annotated[type, typer.Option(...)]`` for one flag."""
    hint = _TYPES[flag.kind]
    if flag.required and flag.kind in ("str", "path"):
        hint = str if flag.kind == "str" else Path
    elif flag.kind in ("bool", "float", "int") and flag.default is None:
        hint = hint | None
    option = typer.Option(*flag.names, help=flag.help, envvar=flag.envvar, metavar=flag.metavar,
                          min=flag.minimum, rich_help_panel=flag.panel)
    return Annotated[hint, option]


def _parameters(flags: Iterable[Flag]) -> list[inspect.Parameter]:
    return [inspect.Parameter(flag.dest, inspect.Parameter.KEYWORD_ONLY,
                              default=inspect.Parameter.empty if flag.required else flag.default,
                              annotation=typer_hint(flag)) for flag in flags]


def typer_command(name: str, command: Command) -> Callable[..., None]:
    """A function typer can register: its signature is the table, its docstring the help."""

    def run(**values: Any) -> None:
        command.run(values)

    parameters = _parameters(command.flags)
    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    run.__doc__ = command.help
    run.__name__ = run.__qualname__ = name.replace("-", "_")
    return run
