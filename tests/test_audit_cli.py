"""`cudalock audit --report`: the command end to end, through the CLI's own entry point.

In-process (``cudalock.cli.main.run``, the function the ``cudalock`` script calls) to keep the
suite fast; test_audit_envs.py runs the command as a separate process.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cudalock.cli.main import run as cli_run

FIXTURES = Path(__file__).parent / "fixtures" / "reports"


Runner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Runner:
    for name in ("CUDALOCK_DRIVER_VERSION", "CUDALOCK_DRIVER_CUDA", "CUDALOCK_MATRIX"):
        monkeypatch.delenv(name, raising=False)

    def invoke(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        try:
            cli_run(["audit", *args])
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, captured.out, captured.err)

    return invoke


def test_report_is_judged_on_the_machine_it_names(run: Runner) -> None:
    result = run("--report", str(FIXTURES / "collect_env_2_11_driver_too_old.txt"), "--json")
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert set(document) == {"findings", "target", "installed", "report"}
    assert document["target"]["driver_version"] == "535.104.05"
    assert document["target"]["source"] == "report"
    assert document["target"]["gpus"][0]["compute_capability"] == "9.0"  # H100, by name
    codes = {f["code"]: f for f in document["findings"]}
    assert codes["driver-too-old"]["severity"] == "error"
    # A report's fixes call plain pip: the reporting machine's interpreter is unknown.
    assert any(
        line.startswith("pip install --force-reinstall ") for line in codes["driver-too-old"]["fix"]
    )
    assert document["report"]["formats"] == ["collect_env"]


def test_report_from_stdin_and_human_output(run: Runner) -> None:
    text = (FIXTURES / "collect_env_indented_cpu_build.txt").read_bytes()
    result = run("--report", "-", stdin=text)
    assert result.returncode == 1, result.stderr
    assert "Errors (1):" in result.stdout
    assert "[cpu-only-build]" in result.stdout
    assert "fix:" in result.stdout and "torch==2.3.1+cu121" in result.stdout
    assert (
        "Target: the machine in the report: driver 550.54.14 (CUDA 12.4); "
        "NVIDIA GeForce RTX 4090 (8.9)" in result.stdout
    )


def test_report_without_a_driver_uses_the_override_flags(run: Runner) -> None:
    report = str(FIXTURES / "llamafactory_env.txt")
    unknown = run("--report", report, "--json")
    assert unknown.returncode == 0, unknown.stderr
    assert [f["code"] for f in json.loads(unknown.stdout)["findings"]] == ["driver-unknown"]
    # torch 2.6.0+cu124 on a 530 driver (CUDA 12.1): minor-version compatibility only.
    given = run("--report", report, "--driver-version", "530.30.02", "--json")
    assert given.returncode == 0, given.stderr
    document = json.loads(given.stdout)
    assert [f["code"] for f in document["findings"]] == ["minor-compat-only"]
    # The GPU still comes from the report.
    assert document["target"]["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"


def test_ds_report_built_without_torch_is_a_warning(run: Runner) -> None:
    result = run("--report", str(FIXTURES / "ds_report_built_without_torch.txt"))
    assert result.returncode == 0, result.stderr
    assert "[deepspeed-built-without-torch]" in result.stdout
    assert "--no-build-isolation --no-cache-dir deepspeed==0.12.3" in result.stdout


def test_empty_binary_and_missing_reports_are_exit_2(run: Runner, tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    binary = tmp_path / "core"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    for path, words in (
        (empty, "is empty"),
        (binary, "binary data"),
        (tmp_path / "nope.txt", "does not exist"),
        (tmp_path, "is a directory"),
    ):
        result = run("--report", str(path))
        assert result.returncode == 2, (path, result.stdout, result.stderr)
        assert words in result.stderr
        assert "Traceback" not in result.stderr


def test_report_cannot_be_combined_with_a_live_environment(run: Runner) -> None:
    result = run("--report", str(FIXTURES / "llamafactory_env.txt"), "--deep")
    assert result.returncode == 2
    assert "cannot be combined" in result.stderr


def test_a_truncated_report_with_a_cpu_build_says_it_cannot_use_a_gpu(run: Runner) -> None:
    # The paste stops before the GPU section: no driver, no GPU. The +cpu build is worth a
    # warning (it cannot use a GPU either way), not an error (the machine may have none).
    report = str(FIXTURES / "collect_env_truncated_cpu_build.txt")
    result = run("--report", report, "--json")
    assert result.returncode == 0, result.stderr
    findings = json.loads(result.stdout)["findings"]
    assert [(f["code"], f["severity"]) for f in findings] == [("cpu-only-build", "warning")]
    assert "cannot use any GPU" in findings[0]["message"]
    # Given the machine's driver and GPU, it is the error it is on a GPU machine.
    result = run("--report", report, "--driver-version", "550.54.14", "--gpu", "A100", "--json")
    assert result.returncode == 1
    codes = [(f["code"], f["severity"]) for f in json.loads(result.stdout)["findings"]]
    assert ("cpu-only-build", "error") in codes
