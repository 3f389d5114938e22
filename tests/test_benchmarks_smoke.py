"""Smoke run of the benchmark runner: one repetition of the cheap cases, no timed assertions.

It proves the runner drives the installed ``cudalock``, records each figure with the command
that produced it, and writes its table; the figures themselves are for ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "benchmarks" / "run.py"
VENV = Path(sys.prefix)

pytestmark = pytest.mark.skipif(
    not (VENV / "bin" / "cudalock").exists(),
    reason="the tests do not run from a venv with the cudalock console script",
)


def run_benchmarks(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    output = tmp_path / "RESULTS.md"
    done = subprocess.run(
        [
            sys.executable,
            str(RUNNER),
            "--venv",
            str(VENV),
            "--work-dir",
            str(tmp_path / "work"),
            "--output",
            str(output),
            "--no-setup",
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return done, output.read_text(encoding="utf-8") if output.exists() else ""


def figure_row(table: str, name_fragment: str) -> str:
    rows = [line for line in table.splitlines() if line.startswith("| ") and name_fragment in line]
    assert len(rows) == 1, f"no single row for {name_fragment!r} in:\n{table}"
    return rows[0]


def test_cheap_cases_run_and_write_the_table(tmp_path: Path) -> None:
    done, table = run_benchmarks(
        tmp_path,
        "--repeat",
        "1",
        "--only",
        "resolve-startup",
        "--only",
        "matrix-load",
        "--only",
        "fleet-resolve",
        "--fleet-size",
        "20",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "## Machine" in table and "| cores |" in table and "| Python |" in table
    assert "| load average (1, 5, 15 min) |" in table
    for fragment in (
        "`cudalock resolve --driver-version",
        "loading the shipped matrix",
        "resolving a fleet of 20 probe files",
    ):
        row = figure_row(table, fragment)
        # Each figure ran: a median and a verdict, not a skip or an error.
        assert row.rstrip(" |").endswith(("met", "**not met**")), row
        assert " ms |" in row or " s |" in row, row
    # The exact commands are recorded, so anyone can rerun them.
    assert "cudalock resolve --driver-version 535.104.05 --python 3.11 --json`" in table
    assert "python -c pass`" in table
    assert "run.py --child fleet " in table and "run.py --child matrix-load`" in table
    assert "Chose `torch==" in table
    assert "Imports by top-level package" in table
    assert "no CLI at all" in table and "from cudalock.resolve import make_request" in table
    assert len(list((tmp_path / "work" / "fleet-20").glob("*.json"))) == 20


def test_a_missing_prerequisite_is_reported_as_skipped(tmp_path: Path) -> None:
    done, table = run_benchmarks(tmp_path, "--repeat", "1", "--only", "audit")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped (see below)" in figure_row(table, "`cudalock audit")
    assert "Skipped: no venv with real torch" in table


def test_bad_arguments_exit_2_without_writing(tmp_path: Path) -> None:
    done, table = run_benchmarks(tmp_path, "--repeat", "0")
    assert done.returncode == 2
    assert "--repeat must be at least 1" in done.stderr
    assert table == ""
    done, _ = run_benchmarks(tmp_path, "--only", "no-such-case")
    assert done.returncode == 2 and "invalid choice" in done.stderr


def load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmarks_run", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks_run"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_missed_goals_say_what_stands_between_and_peaks_are_figures(tmp_path: Path) -> None:
    run = load_runner()
    lock = run.Figure(name="lock", what="lock", compared_with="uv", goal="≤ 1.3× its time")
    ours = run.Series("cudalock lock (second run)", "cudalock lock ...")
    theirs = run.Series("uv pip compile", "uv pip compile ...")
    for seconds, peak in ((0.5, 40 * 2**20), (0.6, 42 * 2**20)):
        ours.record(seconds, peak)
        theirs.record(seconds / 10, 30 * 2**20)
    lock.series, lock.value, lock.met = [ours, theirs], 10.0, False
    lock.between = "the goal allows 71.5 ms; Python's start-up alone takes 20.0 ms"
    audit = run.Figure(name="audit", what="audit", compared_with="collect_env", goal="≥ 15×")
    audit.skipped = "no venv with real torch"
    figures = [lock, audit]
    figures += run.memory_figures(figures)
    ctx = run.Context(
        venv=VENV, work=tmp_path, repeat=2, setup=False, fleet_size=1, env=dict(os.environ)
    )
    table = run.render(figures, ctx, "python benchmarks/run.py", "0.00, 0.00, 0.00")
    assert "## What stands between each missed goal and its figure" in table
    assert "- **1. lock**: the goal allows 71.5 ms; Python's start-up alone takes 20.0 ms" in table
    row = figure_row(table, "peak memory of `cudalock lock`")
    assert "| 42 MiB | 30 MiB |" in row and row.endswith("| reported |")
    # A skipped figure misses nothing: no line of its own there.
    assert "**2. audit**" not in table
