"""Smoke run of the benchmark runner: one repetition of the cheap cases, no timed assertions.

It proves the runner drives the installed ``cudalock``, records each figure with the command
that produced it, and writes its table; the figures themselves are for ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
