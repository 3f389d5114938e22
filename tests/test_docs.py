"""The README and docs/ document the interface: the finding codes, the test command CI runs, links
that lead somewhere, and sample output that the commands really print."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cudalock.audit.checks import CODES
from cudalock.doctor.diagnosis import FINDING_CODES
from tests.support.cli import cudalock

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))
FINDING_CODES_DOC = (ROOT / "docs" / "finding-codes.md").read_text(encoding="utf-8")
#: The README says what cudalock is and links to the reference; it stays short.
README_LIMIT_BYTES = 20_000


def _code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("code", sorted({*CODES, *FINDING_CODES}))
def test_every_finding_code_is_documented(code: str) -> None:
    assert f"`{code}`" in FINDING_CODES_DOC


def test_readme_is_short() -> None:
    assert len(README.encode("utf-8")) < README_LIMIT_BYTES


def test_ci_runs_exactly_the_readme_test_command() -> None:
    after = README.split("run the tests", 1)[1]
    readme_command = _code_blocks(after, "sh")[0].strip()
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci_lines[-1] == readme_command


@pytest.mark.parametrize("page", [README_PATH, *DOCS], ids=lambda p: p.name)
def test_relative_links_lead_to_files(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", text)
    assert [t for t in targets if not (page.parent / t).exists()] == []


def test_docs_cover_every_former_readme_section() -> None:
    titles = {page.read_text(encoding="utf-8").splitlines()[0] for page in DOCS}
    assert {
        "# Commands",
        "# Compatibility policy",
        "# The compatibility matrix",
        "# JSON outputs",
        "# Audit and doctor finding codes",
        "# Exit codes and errors",
        "# Security and limits",
        "# Benchmarks",
        "# Development",
    } <= titles
    for page in DOCS:
        assert f"(docs/{page.name})" in README


@pytest.mark.parametrize(
    ("args", "status", "block"),
    [
        (
            (
                "resolve",
                "--driver-version",
                "570.86.15",
                "--gpu",
                "RTX 5090",
                "--with",
                "deepspeed",
            ),
            0,
            0,
        ),
        (
            (
                "memory",
                "--params",
                "7B",
                "--zero",
                "2",
                "--gpus-per-node",
                "8",
                "--host-memory",
                "256GiB",
            ),
            1,
            1,
        ),
    ],
    ids=["resolve", "memory"],
)
def test_readme_sample_output_is_what_the_command_prints(
    args: tuple[str, ...], status: int, block: int
) -> None:
    sample = _code_blocks(README, "text")[block]
    done = cudalock(*args)
    assert done.returncode == status, done.stderr
    printed = iter(done.stdout.splitlines())
    # Each line the README shows appears in the output, in the README's order ("..." skips).
    missing = [
        line for line in sample.splitlines() if line.strip() != "..." and line not in printed
    ]
    assert missing == []
