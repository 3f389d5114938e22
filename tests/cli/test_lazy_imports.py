"""A command imports its own module and the core it uses, nothing more (start-up time)."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from cudalock.cli.main import COMMANDS

CLI = Path(__file__).resolve().parents[2] / "src" / "cudalock" / "cli"

#: Run `cudalock ARGS` in a fresh interpreter, then print the modules it imported.
LOADED = """
import sys
from cudalock.cli.main import run
try:
    run(sys.argv[1:])
except SystemExit:
    pass
print("\\nLOADED", " ".join(sorted(sys.modules)), file=sys.stderr)
"""

#: Modules the resolve path must never import: the network, TOML writing, YAML, the old CLI
#: framework and torch.
HEAVY = (
    "requests",
    "urllib3",
    "tomlkit",
    "yaml",
    "typer",
    "click",
    "rich",
    "pydantic",
    "torch",
    "packaging.requirements",
)


def loaded_modules(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("LOADED "), done.stderr
    return done, set(line.split()[1:])


def command_modules(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith("cudalock.cli.")}


#: The commands that read Target flags (through cudalock.cli.inputs).
TAKES_A_TARGET = ("probe", "resolve", "bootstrap", "lock", "audit", "doctor")


def nvml_loads() -> bool:
    """Whether libnvidia-ml loads here (the probe then imports pynvml, as it should)."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_resolve_imports_only_its_own_command_module() -> None:
    done, modules = loaded_modules(
        "resolve", "--driver-version", "535.104.05", "--python", "3.11", "--json"
    )
    assert '"torch"' in done.stdout, done.stderr
    assert command_modules(modules) == {
        "cudalock.cli.main",
        "cudalock.cli.args",
        "cudalock.cli.inputs",
        "cudalock.cli.output",
        "cudalock.cli.resolve",
    }
    heavy = [*HEAVY, *([] if nvml_loads() else ["pynvml"])]
    assert [m for m in heavy if m in modules] == []


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["resolv"], []])
def test_top_level_help_and_errors_import_no_command_module(args: list[str]) -> None:
    _, modules = loaded_modules(*args)
    assert command_modules(modules) <= {
        "cudalock.cli.main",
        "cudalock.cli.args",
        "cudalock.cli.output",
    }


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_command_help_imports_only_that_command(command: str) -> None:
    done, modules = loaded_modules(command, "--help")
    assert done.stdout.startswith(f"usage: cudalock {command}"), done.stderr
    shared = {"cudalock.cli.main", "cudalock.cli.args", "cudalock.cli.output"}
    if command in ("doctor", "memory"):
        shared.add("cudalock.cli.training")
    if command in TAKES_A_TARGET:
        shared.add("cudalock.cli.inputs")
    assert command_modules(modules) == {*shared, COMMANDS[command][0]}
    assert [m for m in HEAVY if m in modules] == []


#: Imports a command module alone and prints what it brought in beyond the interpreter's start.
TOP_LEVEL = """
import sys
before = set(sys.modules)
import importlib
importlib.import_module(sys.argv[1])
print(" ".join(sorted(set(sys.modules) - before)))
"""


@pytest.mark.parametrize("module", sorted(p.stem for p in CLI.glob("*.py")))
def test_command_modules_import_only_the_standard_library_at_the_top(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", TOP_LEVEL, f"cudalock.cli.{module}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    imported = set(done.stdout.split())
    outside = {
        m
        for m in imported
        if m.split(".")[0] not in sys.stdlib_module_names
        and m
        not in (
            "cudalock",
            "cudalock.cli",
            "cudalock.defaults",
            "cudalock.errors",
            "cudalock.platforms",
        )
        and not m.startswith("cudalock.cli.")
    }
    assert outside == set(), module


def test_a_live_audit_loads_no_report_parser_and_no_requirement_parser() -> None:
    """The live audit judges what the inspection read: the pasted-report parser, the deep
    check and packaging's requirement and wheel-tag parsers (logging, sysconfig) stay unloaded."""
    done, modules = loaded_modules("audit", "--python", sys.executable, "--json")
    assert '"findings"' in done.stdout, done.stderr
    unwanted = (
        "cudalock.audit.reports",
        "cudalock.audit.deep",
        "packaging.requirements",
        "packaging.tags",
        "packaging.utils",
        "logging",
        "uuid",
        "zipfile",
    )
    assert [m for m in unwanted if m in modules] == []
