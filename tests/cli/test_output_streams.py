"""Whatever stdout and stderr are — full, closed, a pipe whose reader left, an encoding without
'≥' — a command ends with its documented status and no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.cli.test_errors import GPU_TARGET
from tests.support.cli import CUDALOCK
from tests.support.index import offline_env

#: A command whose output is long (a plan and its rejected candidates) and needs no network.
RESOLVE = [str(CUDALOCK), "resolve", *GPU_TARGET]


def shell(line: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", line],
        capture_output=True,
        text=True,
        env={**offline_env(), **env},
        timeout=60,
        check=False,
    )


def command_line(*extra: str) -> str:
    return " ".join([*RESOLVE, *extra])


def test_a_full_stdout_is_one_line_exit_3() -> None:
    done = shell(f"{command_line()} > /dev/full")
    assert done.returncode == 3, done.stderr
    assert done.stderr == "cudalock: error: cannot write the output: No space left on device\n"


def test_full_stdout_and_stderr_end_quietly_with_exit_3() -> None:
    done = shell(f"{command_line()} > /dev/full 2>/dev/full; echo status=$?")
    assert done.stdout == "status=3\n" and done.stderr == ""


def test_a_closed_stdout_or_stderr_is_no_traceback() -> None:
    for redirect in (">&-", "2>&-", ">&- 2>&-"):
        done = shell(f"{command_line()} {redirect}; echo status=$?")
        assert done.stdout.endswith("status=0\n"), (redirect, done.stdout, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    run = subprocess.Popen(
        [*RESOLVE, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=offline_env(),
    )
    assert run.stdout is not None and run.stderr is not None
    run.stdout.close()  # as '| head -1' does after its line
    stderr = run.stderr.read().decode()
    assert run.wait(timeout=60) == 141
    assert stderr == ""


def test_head_dash_one_gets_its_line_and_no_traceback() -> None:
    done = shell(f"{command_line()} 2>&1 | head -1")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1
    assert "Traceback" not in done.stdout


def test_an_ascii_output_encoding_degrades_the_characters_it_lacks() -> None:
    done = shell(command_line(), PYTHONIOENCODING="ascii")
    assert done.returncode == 0, done.stderr
    assert "needs driver >= " in done.stdout and "≥" not in done.stdout
    done = shell(command_line(), PYTHONIOENCODING="latin-1", LC_ALL="C")
    assert done.returncode == 0 and "Traceback" not in done.stderr


def test_sighup_stops_a_command_like_sigterm_and_its_child_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 1000\n")
    python.chmod(0o755)
    run = subprocess.Popen(
        [str(CUDALOCK), "audit", "--no-gpu", "--python", str(python)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=offline_env(),
    )
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    run.send_signal(signal.SIGHUP)  # the terminal went away
    _out, err = run.communicate(timeout=30)
    assert run.returncode == 129, err
    assert err == "cudalock: hung up\n"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}")
