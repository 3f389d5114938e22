"""The new environment's audit starts when install.sh reaches its checks: the hook that says
so (a real install.sh run by bash) and the inspection it starts, on a real environment."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from cudalock.audit.inspection import python_for_prefix
from cudalock.envfiles.bootstrap import (
    STEP_MARKER,
    AuditAhead,
    InstallOptions,
    run_install_script,
)
from cudalock.envfiles.render import Step
from cudalock.fsutil import start_log
from tests.support.venvs import standin_env


def _install_sh(out_dir: Path, steps: tuple[Step, ...]) -> None:
    """An install.sh that announces each step as the real one does, and does nothing else."""
    lines = ["#!/bin/bash", "set -e"]
    for number, step in enumerate(steps, 1):
        lines.append(f"echo '{STEP_MARKER}{number}/{len(steps)}: {step.title}'")
    (out_dir / "install.sh").write_text("\n".join(lines) + "\n")


def _run(tmp_path: Path, steps: tuple[Step, ...]) -> list[tuple[str, list[str]]]:
    """Run install.sh; for each call of the hook: its interpreter and the lines shown by then."""
    _install_sh(tmp_path, steps)
    shown: list[str] = []
    calls: list[tuple[str, list[str]]] = []
    start_log(tmp_path / "log", "the test's install.sh\n")
    run_install_script(
        tmp_path,
        InstallOptions(steps, on_checks=lambda python: calls.append((python, list(shown)))),
        tmp_path / "log",
        dict(os.environ) | {"PYTHON": "/the/env/bin/python"},
        shown.append,
        "rm -rf /the/env",
    )
    return calls


def test_the_hook_is_called_once_when_only_checks_are_left(tmp_path: Path) -> None:
    steps = (
        Step("install", ("true",)),
        Step("a check before the last install", ("true",), reads_only=True),
        Step("build", ("true",)),
        Step("check", ("true",), reads_only=True),
        Step("verify", ("true",), reads_only=True),
    )
    calls = _run(tmp_path, steps)
    assert [python for python, _ in calls] == ["/the/env/bin/python"]
    # Called as step 4 starts (the build is done), before step 5 is reached.
    assert [line.split(":")[0] for line in calls[0][1]] == [f"  step {n}/5" for n in range(1, 5)]


def test_no_hook_when_the_last_step_writes(tmp_path: Path) -> None:
    steps = (Step("check", ("true",), reads_only=True), Step("install", ("true",)))
    assert _run(tmp_path, steps) == []


def test_the_inspection_started_is_the_audit_s(tmp_path_factory: pytest.TempPathFactory) -> None:
    python = standin_env(tmp_path_factory, "pypi-2.11.0")
    environment = python.parent.parent
    with AuditAhead() as ahead:
        ahead.start(str(python_for_prefix(environment)))
        running = ahead.take(environment)
        assert running is not None and ahead.take(environment) is None  # taken once
        with running:
            torch = running.installed().active_torch
    assert torch is not None and torch.version == "2.11.0+cu130"


def test_an_inspection_of_another_environment_is_stopped_not_taken(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    fake = tmp_path / "env" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 30\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with AuditAhead() as ahead:
        ahead.start(str(fake))
        while not pid_file.exists():
            time.sleep(0.01)
        assert ahead.take(tmp_path / "another-env") is None
        assert not Path(f"/proc/{pid_file.read_text().strip()}").exists()  # stopped, reaped


def test_one_not_taken_is_stopped_with_the_run(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 30\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(RuntimeError), AuditAhead() as ahead:
        ahead.start(str(fake))
        while not pid_file.exists():
            time.sleep(0.01)
        raise RuntimeError("install.sh's last check failed")
    assert not Path(f"/proc/{pid_file.read_text().strip()}").exists()


def test_an_interpreter_that_cannot_be_inspected_is_left_to_the_audit(tmp_path: Path) -> None:
    with AuditAhead() as ahead:
        ahead.start(str(tmp_path / "missing" / "python"))  # no error here
        assert ahead.take(tmp_path / "missing") is None
