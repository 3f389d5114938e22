"""The scheduled matrix refresh (.github/workflows/matrix-refresh.yml) runs real commands.

GitHub runs the workflow, not the test suite; what can be checked here is that it is scheduled,
that it refreshes, checks and tests the matrix, and that every cudalock command line in it is
one the command-line parser accepts, so renaming a flag cannot silently break the weekly run.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from cudalock.cli.main import build_parser

WORKFLOW = Path(__file__).parents[2] / ".github" / "workflows" / "matrix-refresh.yml"


def load() -> dict[Any, Any]:
    document = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(document, dict)
    return document


def command_lines(document: dict[Any, Any]) -> list[list[str]]:
    """Each ``cudalock ...`` command of the workflow's run steps, without redirections."""
    commands = []
    for job in document["jobs"].values():
        for step in job["steps"]:
            for line in str(step.get("run", "")).splitlines():
                words = shlex.split(line.strip(), comments=True)
                if not words or words[0] != "cudalock":
                    continue
                cut = next(
                    (i for i, w in enumerate(words) if w[:1] in "|>" or w.startswith("2>")),
                    len(words),
                )
                commands.append(words[1:cut])
    return commands


def test_it_runs_weekly_and_refreshes_checks_and_tests() -> None:
    document = load()
    # YAML 1.1 reads the key "on" as True.
    triggers = document["on"] if "on" in document else document[True]
    assert triggers["schedule"][0]["cron"].endswith("* * 1")
    assert "workflow_dispatch" in triggers
    commands = command_lines(document)
    assert ["matrix", "refresh", "--matrix", "compat_matrix"] in commands
    assert ["matrix", "check", "compat_matrix"] in commands
    text = WORKFLOW.read_text()
    assert "tests/matrix/test_invariants.py" in text
    assert "peter-evans/create-pull-request" in text


def test_its_commands_parse() -> None:
    for words in command_lines(load()):
        parser = build_parser([words[0]], with_flags=True)
        parsed = parser.parse_args(words)
        assert callable(parsed.handler), words
