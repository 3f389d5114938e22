"""`cudalock audit --report`: the command end to end, through the CLI's own entry point.

In-process (``cudalock.cli.main.run``, the function the ``cudalock`` script calls) to keep the
suite fast; tests/e2e/test_audit_envs.py runs the command as a separate process.
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

FIXTURES = Path(__file__).parents[1] / "fixtures" / "reports"


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
    assert set(document) == {"findings", "compat", "target", "installed", "report"}
    assert document["compat"] == "strict"
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
    # torch 2.6.0+cu124 on a 530 driver (CUDA 12.1): minor-version compatibility only, which
    # the default strict policy refuses.
    given = run("--report", report, "--driver-version", "530.30.02", "--json")
    assert given.returncode == 1, given.stderr
    document = json.loads(given.stdout)
    assert [(f["code"], f["severity"]) for f in document["findings"]] == [
        ("minor-compat-only", "error"),
        ("target-assumed", "info"),
    ]
    # The driver's CUDA is derived, and said so, as resolve says it.
    assert document["findings"][1]["message"] == (
        "maximum CUDA 12.1 for driver 530.30.02 from the matrix's driver table"
    )
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


#: The -11 case troubleshooting guides open with: torch 2.9.1+cu128 on a driver whose CUDA is 12.1.
CU128_ON_530 = str(FIXTURES / "collect_env_2_9_cu128_driver_530.txt")


def test_build_newer_than_the_driver_is_an_error_under_the_default_policy(run: Runner) -> None:
    result = run("--report", CU128_ON_530)
    assert result.returncode == 1, result.stderr
    assert "Policy: --compat strict (the default)" in result.stdout
    assert "Errors (1):" in result.stdout and "Warnings" not in result.stdout
    assert "1 error(s), 0 warning(s), 0 note(s)." in result.stdout
    document = json.loads(run("--report", CU128_ON_530, "--json").stdout)
    assert document["compat"] == "strict"
    (finding,) = document["findings"]
    assert (finding["code"], finding["severity"]) == ("minor-compat-only", "error")
    message = finding["message"]
    # What runs, what fails, and why it matters for a crash.
    assert "torch 2.9.1+cu128 is built for CUDA 12.8" in message
    assert "driver 530.30.02 supports CUDA 12.1" in message
    assert "kernels shipped as SASS for these GPUs run" in message
    assert "PTX newer than the driver" in message and "Triton / torch.compile" in message
    assert "JIT-built extensions" in message and "cudaErrorCallRequiresNewerDriver" in message
    assert "-11 (SIGSEGV)" in message
    assert "compatibility policy: --compat strict" in finding["evidence"]
    # CUDA 12.8's own driver minimum (570.26) and the CUDA 12.x floor (525.60.13).
    assert "CUDA 12.8 needs driver ≥ 570.26 without it" in finding["evidence"]
    assert "CUDA 12.x minor-version-compatibility floor: driver ≥ 525.60.13" in finding["evidence"]
    # The fix: what resolve chooses for this driver and these GPUs under strict (the newest
    # build for the driver's own CUDA 12 that is ≤ 12.1 is 2.5.1+cu121, which covers sm_80), or
    # the driver the installed build needs.
    fix = finding["fix"]
    assert fix[0] == "# a build this driver runs: torch 2.5.1+cu121"
    assert fix[1] == (
        "pip install --force-reinstall torch==2.5.1+cu121 torchvision==0.20.1+cu121 "
        "--index-url https://download.pytorch.org/whl/cu121"
    )
    assert "# or upgrade the NVIDIA driver to ≥ 570.26" in fix


def test_build_newer_than_the_driver_is_a_warning_under_compat_minor(run: Runner) -> None:
    result = run("--report", CU128_ON_530, "--compat", "minor")
    assert result.returncode == 0, result.stderr
    assert "Policy: --compat minor (from the command line)" in result.stdout
    assert "0 error(s), 1 warning(s), 0 note(s)." in result.stdout
    document = json.loads(run("--report", CU128_ON_530, "--compat", "minor", "--json").stdout)
    assert document["compat"] == "minor"
    (finding,) = document["findings"]
    assert (finding["code"], finding["severity"]) == ("minor-compat-only", "warning")
    assert "minor-version compatibility" in finding["message"]
    # The way out of minor-version compatibility: a CUDA ≤ 12.1 build of the same major,
    # last published for torch 2.5.1 (cu121).
    assert any("torch==2.5.1+cu121" in line for line in finding["fix"])


def test_policy_comes_from_the_spec_unless_the_flag_says(
    run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "cudalock.toml"
    spec.write_text('spec_version = 1\n\n[request]\ncompat = "minor"\n')
    monkeypatch.chdir(tmp_path)
    here = run("--report", CU128_ON_530)  # ./cudalock.toml
    assert here.returncode == 0, here.stderr
    assert "Policy: --compat minor (from cudalock.toml)" in here.stdout
    flag = run("--report", CU128_ON_530, "--compat", "strict")
    assert flag.returncode == 1, flag.stderr
    # --spec names one elsewhere; a missing or malformed one is bad input.
    monkeypatch.chdir(FIXTURES)
    named = run("--report", CU128_ON_530, "--spec", str(spec))
    assert named.returncode == 0, named.stderr
    assert f"Policy: --compat minor (from {spec})" in named.stdout
    missing = run("--report", CU128_ON_530, "--spec", str(tmp_path / "none.toml"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    spec.write_text('[request]\ncompat = "loose"\n')
    bad = run("--report", CU128_ON_530, "--spec", str(spec))
    assert bad.returncode == 2 and "compat must be strict or minor" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_bad_compat_value_is_a_usage_error(run: Runner) -> None:
    result = run("--report", CU128_ON_530, "--compat", "loose")
    assert result.returncode == 2
    assert result.stderr.startswith("cudalock: error: invalid --compat 'loose'")


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


def test_a_file_of_nothing_readable_is_exit_2_and_says_what_is_read(
    run: Runner, tmp_path: Path
) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("hello world\nthe training got stuck, any idea?\n", encoding="utf-8")
    result = run("--report", str(junk))
    assert result.returncode == 2
    assert "nothing in this file is a report cudalock reads" in result.stderr
    assert "pip freeze" in result.stderr and "collect_env" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_pip_freeze_with_the_driver_given_is_judged(run: Runner, tmp_path: Path) -> None:
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("numpy==1.26.4\ntorch==2.9.1+cu128\n", encoding="utf-8")
    result = run("--report", str(freeze), "--driver-version", "530.30.02", "--json")
    assert result.returncode == 1, result.stdout
    findings = {f["code"] for f in json.loads(result.stdout)["findings"]}
    assert "minor-compat-only" in findings


def test_an_error_line_with_nvidia_smi_is_diagnosed_without_a_torch_version(
    run: Runner, tmp_path: Path
) -> None:
    paste = tmp_path / "paste.txt"
    paste.write_text(
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).\n"
        "| NVIDIA-SMI 470.86       Driver Version: 470.86       CUDA Version: 11.4     |\n"
        "|   0  NVIDIA GeForce RTX 3050 ...  Off  | 00000000:01:00.0 Off |            N/A |\n",
        encoding="utf-8",
    )
    result = run("--report", str(paste), "--json")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    codes = {f["code"] for f in document["findings"]}
    assert "driver-too-old" in codes and "no-torch" not in codes
    assert not any("+cpu" in line for f in document["findings"] for line in f["fix"])


def test_cuda_unavailable_that_the_build_does_not_explain_is_a_warning(
    run: Runner, tmp_path: Path
) -> None:
    paste = tmp_path / "collect_env.txt"
    paste.write_text(
        "PyTorch version: 2.1.0+cu121\nCUDA used to build PyTorch: 12.1\n"
        "Is CUDA available: False\nGPU models and configuration: GPU 0: NVIDIA A100-SXM4-80GB\n"
        "Nvidia driver version: 535.104.05\n",
        encoding="utf-8",
    )
    result = run("--report", str(paste), "--json")
    assert result.returncode == 0
    findings = {f["code"]: f for f in json.loads(result.stdout)["findings"]}
    assert findings["cuda-unavailable"]["severity"] == "warning"
    assert "outside the build" in findings["cuda-unavailable"]["message"]
    # Explained by the build: the driver-too-old error is the finding, not a second guess.
    paste.write_text(
        paste.read_text(encoding="utf-8").replace("535.104.05", "470.82.01"), encoding="utf-8"
    )
    explained = {
        f["code"] for f in json.loads(run("--report", str(paste), "--json").stdout)["findings"]
    }
    assert "cuda-unavailable" not in explained
