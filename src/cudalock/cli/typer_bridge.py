"""Flag tables (:mod:`cudalock.cli.flags`) turned into typer parameters and commands.

typer reads a command's options from its function signature; these helpers write that
signature from the tables, so a flag is declared once and both typer and the standard-library
parser read the same declaration.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from cudalock.cli.flags import Command, Flag

F = TypeVar("F", bound=Callable[..., Any])

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
    if flag.kind in ("bool", "float", "int") and flag.default is None:
        hint = hint | None
    option = typer.Option(*flag.names, help=flag.help, envvar=flag.envvar, metavar=flag.metavar,
                          min=flag.minimum, rich_help_panel=flag.panel)
    return Annotated[hint, option]


def _parameters(flags: Iterable[Flag]) -> list[inspect.Parameter]:
    return [inspect.Parameter(flag.dest, inspect.Parameter.KEYWORD_ONLY, default=flag.default,
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


def add_options(func: F, argument: str, flags: Sequence[Flag],
                build: Callable[[Mapping[str, Any]], object]) -> F:
    """Add ``flags`` to a typer-declared command as keyword-only options; the command receives
    ``build(values by dest)`` as its ``argument``.

    The options come after the command's own, so shared flags sit in the same place everywhere.
    """
    signature = inspect.signature(func)
    # Resolved in the command's own module: string annotations (PEP 563) would otherwise be
    # evaluated later in this module's namespace, where the command's names do not exist.
    annotations = {k: v for k, v in typing.get_type_hints(func, include_extras=True).items()
                   if k != argument}
    kept = [p.replace(annotation=annotations.get(name, p.annotation))
            for name, p in signature.parameters.items() if name != argument]
    added = _parameters(flags)
    names = [flag.dest for flag in flags]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        return func(*args, **{argument: build(values)}, **kwargs)

    positional = [p for p in kept if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    keyword = [p for p in kept if p.kind is inspect.Parameter.KEYWORD_ONLY]
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*positional, *keyword, *added]
    )
    annotations.update({p.name: p.annotation for p in added})
    wrapper.__annotations__ = annotations
    del wrapper.__wrapped__  # typer must see the new signature, not the wrapped one
    return wrapper  # type: ignore[return-value]
