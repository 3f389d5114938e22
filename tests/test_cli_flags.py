"""The standard-library parser reads command lines the way typer does, or hands them to typer.

Both read the same flag tables; generated command lines check that whenever the parser accepts
one, typer accepts it too and gives the command the same values, and that well-formed lines are
accepted (else the fast path would silently never run).
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cudalock.cli.flags import REPEATABLE, Command, Flag, parse_command_line
from cudalock.cli.main import COMMANDS, command_object
from cudalock.cli.typer_bridge import typer_command

#: Every command declared as a table (all but the ``matrix`` group).
TABLES: dict[str, tuple[Flag, ...]] = {
    name: found.flags for name in COMMANDS
    if isinstance(found := command_object(name), Command)
}
ENVVARS = sorted({f.envvar for flags in TABLES.values() for f in flags if f.envvar})

WORD = st.text(alphabet=string.ascii_letters + string.digits + "./_:=<>,+ ", max_size=12)
NUMBER = st.one_of(st.integers(-5, 500).map(str), st.floats(-10, 1e4).map(repr),
                   st.sampled_from(["1e3", "nan", "inf", "0x10", "", "2.5 "]))


def typer_values(flags: Sequence[Flag], args: list[str],
                 env: Mapping[str, str]) -> tuple[int, dict[str, Any] | None]:
    """(exit code, values the command received) when typer reads ``args``."""
    received: dict[str, Any] = {}
    def command_function(**values: Any) -> None:
        """test command"""
        received.update(values)

    command = Command(command_function, flags=tuple(flags))
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command("cmd")(typer_command("cmd", command))
    app.command("other")(lambda: None)  # two commands: typer then expects the name first
    result = CliRunner().invoke(app, ["cmd", *args], env=dict(env))
    return result.exit_code, (received if result.exit_code == 0 else None)


def normalised(flags: Sequence[Flag], values: Mapping[str, Any]) -> dict[str, Any]:
    """Repeatable flags not given are None for typer and for the parser alike; lists → tuples."""
    return {f.dest: (tuple(values[f.dest] or ()) if f.kind in REPEATABLE else values[f.dest])
            for f in flags}


def _value_strategy(flag: Flag, well_formed: bool) -> st.SearchStrategy[str]:
    if flag.kind in ("float", "int"):
        if well_formed:
            return st.integers(1, 10_000).map(str) if flag.kind == "int" else st.floats(
                1, 1e6, allow_nan=False).map(repr)
        return NUMBER
    # Values may start with "-": the next word is the value ("--exit-code -9"), as for typer.
    return st.one_of(WORD, st.sampled_from(["-", "-9", "-x", "--json", "--help", "--"]))


def _spellings(flag: Flag) -> list[str]:
    return [part for name in flag.names for part in name.split("/")]


@st.composite
def command_lines(draw: st.DrawFn, well_formed: bool) -> tuple[str, list[str], dict[str, str]]:
    name = draw(st.sampled_from(sorted(TABLES)))
    flags = TABLES[name]
    args: list[str] = []
    chosen = draw(st.lists(st.sampled_from(flags), max_size=8))
    chosen += [flag for flag in flags if flag.required]
    for flag in draw(st.permutations(chosen)):
        spelling = draw(st.sampled_from(_spellings(flag)))
        if flag.kind == "bool":
            args.append(spelling)
            continue
        value = draw(_value_strategy(flag, well_formed))
        if spelling.startswith("--") and draw(st.booleans()):  # "-o=x" means "=x" to typer
            args.append(f"{spelling}={value}")
        else:
            args += [spelling, value]
    if not well_formed:
        position = draw(st.integers(0, len(args)))
        extra = draw(st.lists(st.sampled_from(["--help", "--jsn", "word", "--", "-j",
                                               "--json=1", "--probe"]), max_size=2))
        args[position:position] = extra
    env = draw(st.dictionaries(st.sampled_from(ENVVARS), st.one_of(st.just(""), WORD),
                               max_size=len(ENVVARS)))
    return name, args, env


@pytest.fixture(autouse=True)
def _no_cudalock_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ENVVARS:
        monkeypatch.delenv(variable, raising=False)


def assert_typer_reads_the_same(name: str, args: list[str], env: dict[str, str],
                                fast: Mapping[str, Any]) -> None:
    flags = TABLES[name]
    code, slow = typer_values(flags, args, env)
    assert code == 0 and slow is not None, (args, env)
    assert normalised(flags, fast) == normalised(flags, slow)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command_lines(well_formed=True))
def test_well_formed_command_lines_are_read_without_typer_and_alike(
        line: tuple[str, list[str], dict[str, str]]) -> None:
    name, args, env = line
    fast = parse_command_line(args, TABLES[name], environ=env)
    assert fast is not None, args
    assert_typer_reads_the_same(name, args, env, fast)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command_lines(well_formed=False))
def test_what_the_parser_accepts_typer_reads_the_same(
        line: tuple[str, list[str], dict[str, str]]) -> None:
    name, args, env = line
    fast = parse_command_line(args, TABLES[name], environ=env)
    if fast is not None:  # else typer's turn: nothing to compare
        assert_typer_reads_the_same(name, args, env, fast)


@pytest.mark.parametrize("args", [
    ["--help"], ["--json", "--help"], ["--jsn"], ["--js"], ["extra"], ["--"],
    ["--torch"], ["--json=yes"], ["--deep-timeout", "0.5"],
    ["--deep-timeout", "nan"], ["--python", "-", "--prefix"],
])
def test_unusual_command_lines_go_to_typer(args: list[str]) -> None:
    flags = TABLES["resolve"] + TABLES["audit"][:5]
    assert parse_command_line(args, flags, environ={}) is None


def test_a_missing_required_flag_and_on_off_pairs() -> None:
    doctor = TABLES["doctor"]
    assert parse_command_line(["--json"], doctor, environ={}) is None  # no --exit-code
    values = parse_command_line(["--exit-code", "-9", "--no-gather-16bit-weights"], doctor,
                                environ={})
    assert values is not None
    assert values["exit_code"] == "-9" and values["gather_16bit_weights"] is False
    values = parse_command_line(["--exit-code=137", "--gather-16bit-weights"], doctor,
                                environ={})
    assert values is not None and values["gather_16bit_weights"] is True
    values = parse_command_line(["--exit-code", "-11"], doctor, environ={})
    assert values is not None and values["gather_16bit_weights"] is None


def test_values_defaults_and_environment() -> None:
    flags = TABLES["resolve"]
    values = parse_command_line(
        ["--gpu", "H100", "--gpu=A100", "--driver-version", "535.1", "--driver-version=550.2",
         "--matrix", "m", "--json"],
        flags, environ={"CUDALOCK_DRIVER_CUDA": "12.2", "CUDALOCK_PYPI_INDEX": ""})
    assert values is not None
    assert values["gpu"] == ["H100", "A100"]
    assert values["driver_version"] == "550.2"  # the last one given counts
    assert values["driver_cuda"] == "12.2"  # from the environment
    assert values["pypi_index"] is None  # an empty variable counts as not set
    assert values["matrix"] == Path("m") and values["json_output"] is True
    assert values["probe"] is None and values["no_gpu"] is False


def test_a_short_name_takes_the_next_word() -> None:
    flags = (Flag("output_dir", ("--output-dir", "-o"), "path", help="out", default=Path(".")),)
    assert parse_command_line(["-o", "x"], flags, environ={}) == {"output_dir": Path("x")}
    assert parse_command_line([], flags, environ={}) == {"output_dir": Path(".")}
    assert parse_command_line(["-ox"], flags, environ={}) is None
    assert parse_command_line(["-o=x"], flags, environ={}) is None
