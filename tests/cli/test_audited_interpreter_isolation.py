"""The audited interpreter runs only its own code: nothing from the directory cudalock is
started in (an untrusted repository's ``json.py``), and ``--python ./python3`` is that file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.cli import cudalock
from tests.support.index import offline_env


@pytest.fixture
def untrusted_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A directory whose json.py, email.py and sitecustomize.py leave a mark when imported."""
    repo = tmp_path / "repo"
    repo.mkdir()
    marker = tmp_path / "ran"
    for module in ("json", "importlib_metadata", "sitecustomize", "email"):
        (repo / f"{module}.py").write_text(
            f"open({str(marker)!r}, 'a').write({module!r} + '\\n')\nraise SystemExit(9)\n"
        )
    return repo, marker


@pytest.mark.parametrize(
    "command",
    [
        ["audit", "--no-gpu"],
        ["audit", "--no-gpu", "--json"],
        ["doctor", "--exit-code", "-11", "--no-run", "--no-gpu"],
    ],
)
def test_the_audited_interpreter_runs_nothing_from_the_working_directory(
    untrusted_repo: tuple[Path, Path], command: list[str]
) -> None:
    repo, marker = untrusted_repo
    done = cudalock(*command, "--python", sys.executable, cwd=repo, env=offline_env())
    assert "Traceback" not in done.stderr
    assert not marker.exists(), marker.read_text()
    assert done.returncode in (0, 1), done.stderr


def test_python_dot_slash_names_that_file_not_the_one_on_path(tmp_path: Path) -> None:
    marker = tmp_path / "wrapper-ran"
    wrapper = tmp_path / "python3"
    wrapper.write_text(f'#!/bin/sh\necho yes > {marker}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    # python3 on PATH is another interpreter; ./python3 must still mean the wrapper.
    done = cudalock("audit", "--no-gpu", "--python", "./python3", cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    assert marker.read_text() == "yes\n"
