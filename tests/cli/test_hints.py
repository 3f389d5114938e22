"""Every hint is a sentence: the real command line, run over inputs that fail in the ways people
make them fail, prints each ``hint:`` line (and the ``--json`` failure's ``"hint"``) with a
capital first letter, a full stop at the end, and no joins left empty or doubled.

The inputs cover the resolver's own next steps (nothing fits on an old driver, a strict
refusal --compat minor would accept, one target with two GPU generations, a fleet on two
platforms), the Target and Request flags, probe files and stdin, index URLs, an offline
bootstrap and lock, and the clash of two stdin readers in audit and doctor.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cudalock.doctor.diagnosis import FINDING_CODES as DOCTOR_CODES
from tests.support.cli import cudalock

#: A join whose part went missing ("… — ; given by …"), a doubled or dangling separator.
_GARBLED = re.compile(r"[;,:—]\s*[;,.:]|\(\s*\)|\s[;,.]\s|\s{2,}")


def assert_sentence(hint: str) -> None:
    assert hint[:1].isupper(), f"hint does not start with a capital: {hint!r}"
    assert hint.endswith((".", "?", "!")), f"hint does not end a sentence: {hint!r}"
    assert not _GARBLED.search(hint), f"hint has a broken join: {hint!r}"


def hints_of(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    return [line.removeprefix("hint: ") for line in lines if line.startswith("hint: ")]


def _probe_file(path: Path, name: str, platform: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "name": name,
                "platform": platform,
                "driver_version": "570.86.15",
                "driver_cuda": "12.8",
                "gpus": [{"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}],
            }
        )
    )
    return path


CASES: dict[str, list[str]] = {
    "unknown GPU": ["resolve", "--gpu", "H10"],
    "nothing fits on an old driver": ["resolve", "--driver-version", "470.82.01", "--gpu", "V100"],
    "strict refuses what minor runs": [
        "resolve", "--driver-version", "535.104.05", "--gpu", "A100", "--cuda", "12.6",
    ],
    "two GPU generations on one target": [
        "resolve", "--driver-version", "580.65.06",
        "--compute-capability", "6.1", "--compute-capability", "12.0",
    ],
    "a torch the matrix does not have": ["resolve", "--torch", ">=9", "--no-gpu"],
    "a CUDA build without a driver": ["resolve", "--cuda", "12.1", "--compute-capability", "8.0"],
    "plain http index": [
        "resolve", "--no-gpu", "--pypi-index", "http://example.com/simple",
    ],
    "a bad CUDA version": ["resolve", "--driver-version", "570.86.15", "--driver-cuda", "12"],
    "a bad driver version": ["resolve", "--driver-version", "latest"],
}  # fmt: skip


@pytest.mark.parametrize("args", list(CASES.values()), ids=list(CASES))
def test_every_hint_a_failing_command_prints_is_a_sentence(
    known_matrix_dir: Path, args: list[str]
) -> None:
    done = cudalock(*args, "--matrix", known_matrix_dir)
    assert done.returncode in (1, 2), done.stderr
    assert "Traceback" not in done.stderr
    for hint in hints_of(done.stderr):
        assert_sentence(hint)
    # The nearest candidates' fixes are next steps too.
    for line in done.stderr.splitlines():
        if line.startswith("    fix: "):
            assert_sentence(line.removeprefix("    fix: "))
    # The --json failure object carries the same hint.
    if args[0] == "resolve" and done.returncode == 1:
        document = json.loads(cudalock(*args, "--matrix", known_matrix_dir, "--json").stdout)
        if document.get("hint"):
            assert_sentence(document["hint"])


def test_the_resolvers_next_steps_are_given(known_matrix_dir: Path) -> None:
    # The test above must not pass for want of hints: these inputs each give one.
    for name in (
        "unknown GPU",
        "nothing fits on an old driver",
        "strict refuses what minor runs",
        "two GPU generations on one target",
        "a torch the matrix does not have",
        "a CUDA build without a driver",
        "plain http index",
    ):
        done = cudalock(*CASES[name], "--matrix", known_matrix_dir)
        assert hints_of(done.stderr), f"{name}: no hint in {done.stderr!r}"


def test_hints_of_files_fleets_and_stdin_are_sentences(
    known_matrix_dir: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    x86 = _probe_file(tmp_path / "a.json", "node-a", "linux-x86_64")
    arm = _probe_file(tmp_path / "b.json", "node-b", "linux-aarch64")
    report = tmp_path / "freeze.txt"
    report.write_text("torch==2.7.1+cu128\n")
    runs = [
        cudalock("resolve", "--matrix", known_matrix_dir, "--probe", broken),
        cudalock("resolve", "--matrix", known_matrix_dir, "--probe", x86, "--probe", arm),
        cudalock("resolve", "--matrix", known_matrix_dir, "--probe", "-", stdin=b""),
        cudalock("audit", "--report", "-", "--probe", "-", stdin=b""),
        cudalock("doctor", "--exit-code", "-11", "--report", "-", "--probe", "-", stdin=b""),
        # Offline, with no uv cache: the files bootstrap can write, and what to run next.
        cudalock(
            "bootstrap", "-o", tmp_path / "out", "--offline", "--matrix", known_matrix_dir,
            "--driver-version", "570", "--gpu", "RTX5090", "--torch", "2.7.1", "--with", "none",
            "--python", "3.11",
        ),
        cudalock(
            "lock", "-o", tmp_path / "lock", "--offline", "--matrix", known_matrix_dir,
            "--driver-version", "570", "--gpu", "RTX5090", "--torch", "2.7.1", "--with", "none",
            "--python", "3.11",
        ),
    ]  # fmt: skip
    printed = [hint for done in runs for hint in hints_of(done.stderr)]
    assert len(printed) >= len(runs) - 1, [done.stderr for done in runs]
    for done in runs:
        assert "Traceback" not in done.stderr
    for hint in printed:
        assert_sentence(hint)


@pytest.mark.parametrize(
    "args",
    [
        ["--exit-code", "-11", "--no-run"],
        ["--exit-code", "-7"],
        ["--exit-code", "-11", "--no-run", "--host", "gpu-node-03"],
        ["--exit-code", "-9"],
        ["--exit-code", "137", "--host", "gpu-node-03"],
    ],
    ids=[
        "segfault",
        "bus-error",
        "segfault-elsewhere",
        "sigkill-undetermined",
        "sigkill-elsewhere",
    ],
)
def test_doctors_next_steps_for_a_crash_are_sentences(
    known_matrix_dir: Path, tmp_path: Path, args: list[str]
) -> None:
    report = tmp_path / "freeze.txt"
    report.write_text("torch==2.7.1+cu128\n")
    extra = ["--report", str(report)] if "-11" in args else []
    done = cudalock("doctor", *args, *extra, "--matrix", known_matrix_dir, "--json")
    assert "Traceback" not in done.stderr, done.stderr
    # doctor's own findings (the audit's fixes are shell lines to run, comments included).
    findings = json.loads(done.stdout)["findings"]
    fixes = [fix for f in findings if f["code"] in DOCTOR_CODES for fix in f["fix"]]
    assert fixes, done.stdout
    for fix in fixes:
        assert_sentence(fix)
