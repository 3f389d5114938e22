"""The command group imports a command's module only when that command runs (start-up time)."""

from __future__ import annotations

import os
import subprocess
import sys

from typer.testing import CliRunner

from cudalock.cli.app import app
from cudalock.cli.main import COMMANDS

#: Run `cudalock ARGS` in a fresh interpreter, then print the command modules it imported.
LOADED = """
import sys
from cudalock.cli.main import run
try:
    run(sys.argv[1:])
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m.startswith("cudalock.cli.") and m.endswith("_cmd")),
      "typer" in sys.modules, file=sys.stderr)
"""


def loaded_command_modules(*args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    done = subprocess.run([sys.executable, "-c", LOADED, *args], capture_output=True, text=True,
                          timeout=120, check=False)
    return done, done.stderr.strip().splitlines()[-1]


def test_resolve_imports_only_its_own_command_module() -> None:
    done, loaded = loaded_command_modules(
        "resolve", "--driver-version", "535.104.05", "--python", "3.11", "--json")
    assert '"torch"' in done.stdout
    assert loaded == "['cudalock.cli.resolve'] False"


def test_table_declared_commands_run_without_typer_when_well_formed() -> None:
    for args in (["probe", "--json"], ["resolve", "--no-gpu", "--python", "3.11"],
                 ["audit", "--report", "-", "--no-gpu", "--json"]):
        done, loaded = loaded_command_modules(*args)
        assert loaded.endswith(" False"), (args, done.stderr)


def test_help_typos_and_typer_declared_commands_go_to_typer() -> None:
    for args, module in ((["resolve", "--help"], "resolve"), (["resolve", "--jsn"], "resolve"),
                         (["lock", "--help"], "lock")):
        done, loaded = loaded_command_modules(*args)
        assert loaded == f"['cudalock.cli.{module}_cmd'] True", (args, done.stderr)
    typo = subprocess.run([sys.executable, "-m", "cudalock", "resolve", "--jsn"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert typo.returncode == 2 and "No such option: --jsn" in typo.stderr


def test_help_lists_every_command_in_order() -> None:
    result = CliRunner().invoke(app, ["--help"], prog_name="cudalock", env={"COLUMNS": "120"})
    assert result.exit_code == 0
    # In the commands table each name is followed by its padded help column.
    positions = [result.output.find(f" {name}  ") for name in COMMANDS]
    assert all(p >= 0 for p in positions), result.output
    assert positions == sorted(positions)


def test_every_registered_command_builds_and_has_help() -> None:
    for name in COMMANDS:
        result = CliRunner().invoke(app, [name, "--help"], prog_name="cudalock")
        assert result.exit_code == 0, (name, result.output)
        assert f"cudalock {name}" in result.output


def test_a_mistyped_command_is_named_with_a_suggestion() -> None:
    result = CliRunner().invoke(app, ["resolv"], prog_name="cudalock")
    assert result.exit_code == 2
    assert "No such command 'resolv'" in result.output
    assert "Did you mean 'resolve'?" in result.output


EAGER = """
from typer.testing import CliRunner
from cudalock.cli.app import app

@app.command("zzz-eager")
def eager() -> None:
    "An eagerly registered command."
    print("ran eager")

runner = CliRunner()
print(runner.invoke(app, ["zzz-eager"]).output.strip())
print("listed" if "zzz-eager" in runner.invoke(app, ["--help"]).output else "missing")
"""


def test_a_command_registered_the_eager_way_still_runs_and_is_listed() -> None:
    # In a child process: registering a command changes the shared app.
    done = subprocess.run([sys.executable, "-c", EAGER], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "COLUMNS": "120"})
    assert done.stdout.split() == ["ran", "eager", "listed"], done.stdout + done.stderr
