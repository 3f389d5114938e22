"""Command-line options declared as data, and the small parser that reads them without typer.

A command declared as a :class:`Command` (its flags and the function that runs with their
values) is built into a typer command by :mod:`cudalock.cli.typer_bridge`, which gives it help,
completion and typer's usage errors. The same table feeds :func:`parse_command_line`, which reads
well-formed command lines with the standard library alone, so ``cudalock resolve`` does not pay
for importing typer (issue 9, start-up). The parser accepts a strict subset of what typer
accepts and answers ``None`` for anything else (``--help``, an unknown or misspelt flag, a
missing or doubtful value), and the caller then hands the command line to typer unchanged.
``tests/test_cli_flags.py`` checks that both read generated command lines alike.

Standard library only, and nothing imported here that the hot commands do not need anyway.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: nothing to build at start-up
    from typing import Literal, TypeAlias

    #: How a flag's value is read. "strs" and "paths" repeat (``--gpu A --gpu B``).
    Kind: TypeAlias = Literal["bool", "str", "path", "float", "int", "strs", "paths"]

REPEATABLE: frozenset[str] = frozenset({"strs", "paths"})


class Flag:
    """One option: how it is spelt, read and documented.

    A plain class: a NamedTuple or dataclass here would cost more start-up time (typing
    compiles every annotation of a NamedTuple) than reading the command line does.
    """

    __slots__ = ("default", "dest", "envvar", "help", "kind", "metavar", "minimum", "names",
                 "panel", "required")

    def __init__(self, dest: str, names: tuple[str, ...], kind: Kind, *, help: str,
                 default: Any = None, envvar: str | None = None, metavar: str | None = None,
                 minimum: float | None = None, panel: str | None = None,
                 required: bool = False) -> None:
        #: The name the command's function receives the value under.
        self.dest = dest
        #: Its spellings: ``("--driver-version",)``, ``("--output-dir", "-o")``; a boolean
        #: on/off pair as typer spells it: ``("--gather/--no-gather",)``.
        self.names = names
        self.kind = kind
        self.help = help
        #: The value when neither the flag nor its environment variable is given (repeatable
        #: and optional flags: None).
        self.default = default
        self.envvar = envvar
        self.metavar = metavar
        #: Smallest value allowed (numeric kinds).
        self.minimum = minimum
        #: The heading ``--help`` lists it under (None: "Options").
        self.panel = panel
        #: The command cannot run without it (``default`` is then unused).
        self.required = required

    def __repr__(self) -> str:
        return f"Flag({self.dest!r}, {self.names!r}, {self.kind!r})"


class FlagGroup:
    """Flags several commands share (the Target, the Request...), handed to a command's
    function as one value: ``build(values by dest)`` under the name ``argument``."""

    __slots__ = ("argument", "build", "flags")

    def __init__(self, argument: str, flags: tuple[Flag, ...],
                 build: Callable[[Mapping[str, Any]], object]) -> None:
        self.argument = argument
        self.flags = flags
        self.build = build


class Command:
    """A command declared as data: its own flags, the groups it shares, and its function.

    The function takes each own flag's value as the keyword ``dest`` and each group's value as
    the keyword ``argument``; its docstring is the ``--help`` text.
    """

    __slots__ = ("flags", "function", "groups", "help", "own")

    def __init__(self, function: Callable[..., None], *, flags: tuple[Flag, ...] = (),
                 groups: tuple[FlagGroup, ...] = ()) -> None:
        self.function = function
        self.own = flags
        self.groups = groups
        #: Every flag the command line may give: its own, then each group's.
        self.flags = flags + tuple(flag for group in groups for flag in group.flags)
        self.help = function.__doc__ or ""

    def run(self, values: Mapping[str, Any]) -> None:
        """Call the function with ``values`` (by ``dest``, every flag present)."""
        self.function(**{flag.dest: values[flag.dest] for flag in self.own},
                      **{group.argument: group.build(values) for group in self.groups})


def parse_command_line(args: Sequence[str], flags: Sequence[Flag],
                       environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The values of ``flags`` by ``dest`` for the command line ``args``, or None to let typer
    read it (and explain what is wrong with it, if anything is).

    Accepted: ``--name value``, ``--name=value``, bare boolean flags, a short name followed by
    its value, repeatable flags given several times; for a flag not given, its non-empty
    environment variable, else its default. Anything else is None, and so is a command line
    that leaves out a required flag.
    """
    env = os.environ if environ is None else environ
    # A boolean flag may be an on/off pair, spelt as typer spells it: "--gather/--no-gather".
    by_name: dict[str, tuple[Flag, bool]] = {}
    for flag in flags:
        for spelling in flag.names:
            on, _, off = spelling.partition("/")
            by_name[on] = (flag, True)
            if off:
                by_name[off] = (flag, False)
    given: dict[str, Any] = {}
    position = 0
    while position < len(args):
        token = args[position]
        position += 1
        if token.startswith("--"):
            name, equals, inline = token.partition("=")
            has_inline = bool(equals)
        else:
            name, has_inline, inline = token, False, ""  # "-o=x" is no short flag's spelling
        found = by_name.get(name)
        if found is None:
            return None  # --help, positional words, unknown or abbreviated flags: typer's job
        flag, switch = found
        if flag.kind == "bool":
            if has_inline:
                return None
            given[flag.dest] = switch
            continue
        if has_inline:
            raw = inline
        elif position < len(args):
            # The next word is the value even when it starts with "-" ("--exit-code -9"), as
            # for typer.
            raw = args[position]
            position += 1
        else:
            return None  # the value is missing
        value = _convert(flag, raw)
        if value is None:
            return None
        if flag.kind in REPEATABLE:
            given.setdefault(flag.dest, []).append(value)
        else:
            given[flag.dest] = value  # as with typer, the last one given counts
    values: dict[str, Any] = {}
    for flag in flags:
        if flag.dest in given:
            values[flag.dest] = given[flag.dest]
            continue
        from_env = env.get(flag.envvar) if flag.envvar else None
        if from_env:
            if flag.kind == "bool" or flag.kind in REPEATABLE:
                return None  # spelt differently in environment variables; typer knows how
            value = _convert(flag, from_env)
            if value is None:
                return None
            values[flag.dest] = value
        elif flag.required:
            return None  # typer says which flag is missing
        else:
            values[flag.dest] = flag.default
    return values


def _convert(flag: Flag, raw: str) -> Any:
    """``raw`` as the flag's type, or None where typer would refuse it (or might)."""
    if flag.kind in ("str", "strs"):
        return raw
    if flag.kind in ("path", "paths"):
        return Path(raw)
    number: float
    try:
        number = int(raw) if flag.kind == "int" else float(raw)
    except ValueError:
        return None
    if not math.isfinite(number) or (flag.minimum is not None and number < flag.minimum):
        return None
    return number
