"""Audit of real virtual environments holding stand-in wheels, on targets given by hand.

Expected replacement builds are derived from the research tables, not from running the code:
- driver 535.104.05 supports CUDA 12.2 (535.54.03 is CUDA 12.2's minimum driver); the choice is
  the newest build for the driver's own CUDA 12 at or below 12.2: cu121, last published for torch
  2.5.1 (2.6.0 has cu118/cu124/cu126; 2.7.1's cu118 is newer but CUDA 11) → torch 2.5.1+cu121,
  torchvision 0.20.1.
- driver 530.30.02 supports CUDA 12.1: the same reasoning → torch 2.5.1+cu121.
- torch 2.3.1 has cu118 and cu121 builds; on a 12.2 driver the newest allowed is cu121.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from cudalock.audit.checks import audit
from cudalock.audit.deep import deep_inspect
from cudalock.audit.inspection import inspect_environment, start_inspection
from cudalock.audit.runner import audit_live
from cudalock.doctor import DoctorRequest, MachineReaders, run_doctor
from cudalock.doctor.kernel import CommandResult, read_kernel_log
from cudalock.machine.host import CgroupMemory
from cudalock.matrix import Matrix, load_matrix
from cudalock.model import Finding, Gpu, Target
from cudalock.request import Compat
from cudalock.versions import DriverVersion
from tests.support.venvs import EnvSpec, hide_cuda_toolkit, make_env, standin_env, torch_with
from tests.support.wheels import (
    StandIn,
    cuda_extension_standin,
    elf_shared_object,
    xformers_cpp_lib,
)

A100 = Gpu(name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0), index=0)
DRIVER_535 = Target(
    platform="linux-x86_64",
    driver_version=DriverVersion("535.104.05"),
    driver_cuda=(12, 2),
    gpus=(A100,),
    name="node",
    source="override",
)
DRIVER_530 = Target(
    platform="linux-x86_64",
    driver_version=DriverVersion("530.30.02"),
    driver_cuda=(12, 1),
    gpus=(A100,),
    name="node",
    source="override",
)
NO_GPU = Target(platform="linux-x86_64", name="cpu node", source="override")


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix()


@pytest.fixture(autouse=True)
def _no_cuda_toolkit_of_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hide_cuda_toolkit(monkeypatch, tmp_path / "no-cuda-toolkit")


def _env(factory: pytest.TempPathFactory, key: str) -> Path:
    return standin_env(factory, key)


def _by_code(findings: list[Finding]) -> dict[str, Finding]:
    return {f.code: f for f in findings}


def _install(finding: Finding) -> str:
    """The pip install command of a fix (comments start with '#')."""
    return next(line for line in finding.fix if not line.startswith("#") and " install " in line)


def _errors(findings: list[Finding]) -> set[str]:
    return {f.code for f in findings if f.severity == "error"}


def test_cu130_torch_on_a_535_driver_is_driver_too_old(
    tmp_path_factory: pytest.TempPathFactory, matrix: Matrix
) -> None:
    python = _env(tmp_path_factory, "pypi-2.11.0")
    findings = audit(inspect_environment(python=python), DRIVER_535, matrix)
    assert _errors(findings) == {"driver-too-old"}
    finding = _by_code(findings)["driver-too-old"]
    assert finding.severity == "error"
    assert "2.11.0+cu130" in finding.message and "CUDA 13.0" in finding.message
    # CUDA 13.x has no minor-version compatibility below driver 580.
    assert "580" in finding.message
    assert "NVIDIA driver 535.104.05" in finding.evidence
    install = _install(finding)
    assert install.startswith(f"{python} -m pip install --force-reinstall ")
    assert "torch==2.5.1+cu121" in install and "torchvision==0.20.1+cu121" in install
    assert install.endswith("--index-url https://download.pytorch.org/whl/cu121")


def test_cu128_torch_on_a_530_driver_is_an_error_under_strict(
    tmp_path_factory: pytest.TempPathFactory, matrix: Matrix
) -> None:
    python = _env(tmp_path_factory, "cu128-2.9.1")
    findings = audit(inspect_environment(python=python), DRIVER_530, matrix)
    assert _errors(findings) == {"minor-compat-only"}
    finding = _by_code(findings)["minor-compat-only"]
    # What may run, what fails, and that it is the mismatch behind -11 crashes.
    assert "minor-version compatibility may let it start" in finding.message
    assert "PTX newer than the driver" in finding.message
    assert "APIs that need the newer driver fail" in finding.message
    assert "-11 (SIGSEGV)" in finding.message
    assert "525.60.13" in " ".join(finding.evidence)  # the CUDA 12.x floor
    # resolve's strict choice for driver 530.30.02 and an A100, or the driver cu128 needs.
    install = _install(finding)
    assert install.startswith(f"{python} -m pip install --force-reinstall ")
    assert "torch==2.5.1+cu121" in install
    assert install.endswith("--index-url https://download.pytorch.org/whl/cu121")
    assert "# or upgrade the NVIDIA driver to ≥ 570.26" in finding.fix


def test_cu128_torch_on_a_530_driver_is_a_warning_under_minor(
    tmp_path_factory: pytest.TempPathFactory, matrix: Matrix
) -> None:
    python = _env(tmp_path_factory, "cu128-2.9.1")
    findings = audit(inspect_environment(python=python), DRIVER_530, matrix, compat="minor")
    assert _errors(findings) == set()
    finding = _by_code(findings)["minor-compat-only"]
    assert finding.severity == "warning"
    assert "minor-version compatibility" in finding.message
    # What it does not cover, in words:
    assert "PTX" in finding.message and "newer driver" in finding.message
    assert "525.60.13" in " ".join(finding.evidence)  # the CUDA 12.x floor
    install = _install(finding)
    assert "torch==2.5.1+cu121" in install
    assert install.endswith("--index-url https://download.pytorch.org/whl/cu121")


def test_doctor_names_the_driver_mismatch_first_for_a_segfault(
    tmp_path_factory: pytest.TempPathFactory, matrix: Matrix
) -> None:
    python = _env(tmp_path_factory, "cu128-2.9.1")

    def audit_on_the_530_node(
        audited: Path | None, deep: bool, compat: Compat
    ) -> Sequence[Finding]:
        # The real audit of the real environment; the node is given as --driver-version would.
        with start_inspection(python=audited) as inspection:
            return audit_live([DRIVER_530], matrix, inspection, compat=compat).findings

    quiet_machine = MachineReaders(
        # dmesg answers, and records no segfault.
        read_kernel_log=lambda: read_kernel_log(runner=lambda argv: CommandResult(0, ""), files=()),
        read_cgroup=lambda: CgroupMemory(None),
        read_shm=lambda: None,
        probe=lambda: DRIVER_530,
    )
    crash = DoctorRequest(exit_code="exits with return code = -11", python=python, no_run=True)
    report = run_doctor(crash, quiet_machine, audit=audit_on_the_530_node)
    assert report.verdict == "cuda-newer-than-driver"
    assert report.exit_code == 1
    first = report.findings[0]
    assert (first.code, first.severity) == ("minor-compat-only", "error")
    assert first.message.startswith("Most likely cause: torch 2.9.1+cu128 is built for CUDA 12.8")
    assert "torch==2.5.1+cu121" in _install(first)
    assert "# or upgrade the NVIDIA driver to ≥ 570.26" in first.fix
    # Under --compat minor the same environment is a warning, and not named the cause.
    report = run_doctor(replace(crash, compat="minor"), quiet_machine, audit=audit_on_the_530_node)
    assert report.verdict == "segfault"
    warning = _by_code(list(report.findings))["minor-compat-only"]
    assert warning.severity == "warning" and not warning.message.startswith("Most likely")


def test_cpu_torch_on_a_gpu_target_is_cpu_only_build(
    tmp_path_factory: pytest.TempPathFactory, matrix: Matrix
) -> None:
    installed = inspect_environment(python=_env(tmp_path_factory, "cpu-2.3.1"))
    findings = audit(installed, DRIVER_535, matrix)
    assert _errors(findings) == {"cpu-only-build"}
    fix = " ".join(_by_code(findings)["cpu-only-build"].fix)
    assert "torch==2.3.1+cu121" in fix and "whl/cu121" in fix
    # The same environment on a machine without GPUs is right as it is.
    assert audit(installed, NO_GPU, matrix) == []


def test_cu121_torch_with_cu118_torchvision_is_mixed(
    tmp_path_factory: pytest.TempPathFactory, matrix: Matrix
) -> None:
    findings = audit(
        inspect_environment(python=_env(tmp_path_factory, "cu121-tv-cu118")), DRIVER_535, matrix
    )
    assert _errors(findings) == {"mixed-cuda-builds"}
    finding = _by_code(findings)["mixed-cuda-builds"]
    assert any("torchvision 0.16.0+cu118" in e for e in finding.evidence)
    # torch stays; its own torchvision comes from its own index.
    install = _install(finding)
    assert "torch==" not in install
    assert (
        "--no-deps torchvision==0.16.0+cu121 --index-url https://download.pytorch.org/whl/cu121"
        in install
    )


def test_two_torch_dist_infos_are_duplicate_torch(
    tmp_path_factory: pytest.TempPathFactory, matrix: Matrix
) -> None:
    python = _env(tmp_path_factory, "duplicate-torch")
    findings = audit(inspect_environment(python=python), DRIVER_535, matrix)
    assert _errors(findings) == {"duplicate-torch"}
    finding = _by_code(findings)["duplicate-torch"]
    assert "same site-packages" in finding.message
    assert any("torch-2.1.0+cu121.dist-info" in e for e in finding.evidence)
    assert any("torch-2.0.1+cu118.dist-info" in e for e in finding.evidence)
    assert finding.fix.count(f"{python} -m pip uninstall -y torch") == 2


def test_deepspeed_built_without_torch(
    tmp_path_factory: pytest.TempPathFactory, matrix: Matrix
) -> None:
    python = _env(tmp_path_factory, "deepspeed-no-torch")
    findings = audit(inspect_environment(python=python), DRIVER_535, matrix)
    finding = _by_code(findings)["deepspeed-built-without-torch"]
    assert finding.severity == "warning"
    assert "built with torch 0.0, cuda 0.0" in finding.evidence
    assert (
        f"{python} -m pip install --force-reinstall --no-deps --no-build-isolation "
        "--no-cache-dir deepspeed==0.12.3"
    ) in finding.fix
    assert _errors(findings) == set()


def test_nvcc_of_another_cuda_major_breaks_deepspeed_jit(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    matrix: Matrix,
) -> None:
    home = tmp_path / "cuda-11.8"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 11.8, V11.8.89'\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(home))
    findings = audit(
        inspect_environment(python=_env(tmp_path_factory, "deepspeed-no-torch")), DRIVER_535, matrix
    )
    finding = _by_code(findings)["nvcc-mismatch"]
    # torch is CUDA 12.1; DeepSpeed's op builder refuses a different major outright.
    assert finding.severity == "error"
    assert "CUDA 11.8" in finding.message and "CUDA 12.1" in finding.message
    assert f"nvcc 11.8.89 ({nvcc}, via CUDA_HOME)" in finding.evidence
    assert finding.fix[0].startswith("export CUDA_HOME=/usr/local/cuda-12.1")


def test_old_nvjitlink_on_ld_library_path_shadows_the_wheel(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    matrix: Matrix,
) -> None:
    lib = tmp_path / "cuda-12.1" / "lib64"
    lib.mkdir(parents=True)
    (lib / "libnvJitLink.so.12.1.105").write_bytes(b"")
    (lib / "libnvJitLink.so.12").symlink_to("libnvJitLink.so.12.1.105")
    keep = tmp_path / "other"
    keep.mkdir()
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{lib}:{keep}")
    installed = inspect_environment(python=_env(tmp_path_factory, "nvjitlink-12.4"))
    findings = audit(installed, DRIVER_535, matrix)
    finding = _by_code(findings)["library-shadowing"]
    assert finding.severity == "error"
    assert any("12.1.105" in e and "nvidia-nvjitlink-cu12 12.4.127" in e for e in finding.evidence)
    assert finding.fix[0] == f"export LD_LIBRARY_PATH={keep}"


def deep_findings(python: Path, timeout: float) -> list[Finding]:
    return list(deep_inspect(python, timeout).findings)


def test_deep_check_turns_a_segfault_into_a_finding(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    findings = deep_findings(_env(tmp_path_factory, "segfault-torch"), timeout=60)
    assert [f.code for f in findings] == ["torch-import-crash"]
    crash = findings[0]
    assert crash.severity == "error"
    assert "SIGSEGV" in crash.message and "-11" in crash.message
    assert "return code -11 (SIGSEGV)" in crash.evidence
    assert "stage: import torch" in crash.evidence


def test_deep_check_stops_a_hang(tmp_path_factory: pytest.TempPathFactory) -> None:
    python = _env(tmp_path_factory, "hanging-torch")
    started = time.monotonic()
    findings = deep_findings(python, timeout=3)
    assert time.monotonic() - started < 30
    assert [f.code for f in findings] == ["torch-import-timeout"]
    assert "stage: import torch" in findings[0].evidence


def test_deep_check_reports_an_import_error(tmp_path_factory: pytest.TempPathFactory) -> None:
    findings = deep_findings(_env(tmp_path_factory, "failing-torch"), timeout=60)
    assert [f.code for f in findings] == ["torch-import-failed"]
    assert "libcudnn.so.9" in findings[0].message


def test_deep_check_of_a_torch_without_cuda(tmp_path_factory: pytest.TempPathFactory) -> None:
    result = deep_inspect(_env(tmp_path_factory, "working-cpu-torch"), timeout=60)
    assert result.torch_version == "2.9.1+cpu"
    assert [f.code for f in result.findings] == ["cuda-unavailable"]
    assert result.arch_list is None


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDALOCK_")}
    return subprocess.run(
        [sys.executable, "-m", "cudalock", "audit", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_cli_exit_status_and_json(tmp_path_factory: pytest.TempPathFactory) -> None:
    python = _env(tmp_path_factory, "pypi-2.11.0")
    result = _cli(
        "--python",
        str(python),
        "--driver-version",
        "535.104.05",
        "--compute-capability",
        "8.0",
        "--json",
    )
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert set(document) == {"findings", "compat", "target", "installed"}
    codes = [f["code"] for f in document["findings"]]
    assert "driver-too-old" in codes
    assert set(document["findings"][0]) == {"code", "severity", "message", "evidence", "fix"}
    assert document["target"]["driver_version"] == "535.104.05"
    assert document["installed"]["torch"][0]["version"] == "2.11.0+cu130"

    on_530 = ("--driver-version", "530.30.02", "--compute-capability", "8.0")
    newer_minor = str(_env(tmp_path_factory, "cu128-2.9.1"))
    strict = _cli("--python", newer_minor, *on_530)
    assert strict.returncode == 1, strict.stderr
    assert "Policy: --compat strict (the default)" in strict.stdout
    assert "Errors (1):" in strict.stdout and "[minor-compat-only]" in strict.stdout
    assert "torch==2.5.1+cu121" in strict.stdout

    warning_only = _cli("--python", newer_minor, *on_530, "--compat", "minor")
    assert warning_only.returncode == 0, warning_only.stderr
    assert "Warnings (1):" in warning_only.stdout
    assert "[minor-compat-only]" in warning_only.stdout
    assert "torch==2.5.1+cu121" in warning_only.stdout


def test_cli_deep_survives_a_segfaulting_torch(tmp_path_factory: pytest.TempPathFactory) -> None:
    python = _env(tmp_path_factory, "segfault-torch")
    result = _cli(
        "--python",
        str(python),
        "--deep",
        "--driver-version",
        "570.124.06",
        "--compute-capability",
        "9.0",
        "--json",
    )
    assert result.returncode == 1, result.stderr
    findings = json.loads(result.stdout)["findings"]
    crash = next(f for f in findings if f["code"] == "torch-import-crash")
    assert "SIGSEGV" in crash["message"]
    assert "Traceback" not in result.stderr


def test_cli_never_imports_torch_itself(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A torch that ends any process importing it, first on the path of cudalock and of the
    # audited interpreter alike: the audit must still finish and report it.
    trap = tmp_path / "trap"
    (trap / "torch").mkdir(parents=True)
    (trap / "torch" / "__init__.py").write_text("import os\nos._exit(99)\n")
    (trap / "torch" / "version.py").write_text("__version__ = '2.9.1+cu128'\ncuda = '12.8'\n")
    monkeypatch.setenv("PYTHONPATH", str(trap))
    python = _env(tmp_path_factory, "cu128-2.9.1")
    result = _cli(
        "--python",
        str(python),
        "--driver-version",
        "570.124.06",
        "--compute-capability",
        "9.0",
        "--json",
    )
    assert result.returncode == 1, result.stderr  # two torch package directories: an error
    document = json.loads(result.stdout)
    assert document["installed"]["torch"][0]["location"] == str((trap / "torch").resolve())
    duplicate = next(f for f in document["findings"] if f["code"] == "duplicate-torch")
    assert (
        f"# {(trap / 'torch').resolve()} has no pip metadata: remove it, or its directory "
        "from PYTHONPATH"
    ) in duplicate["fix"]


def test_cli_bad_interpreter_is_exit_2_without_traceback(tmp_path: Path) -> None:
    result = _cli("--python", str(tmp_path / "missing"), "--no-gpu")
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr


def test_a_cuda_12_xformers_beside_a_cu118_torch_is_read_from_its_files(
    tmp_path_factory: pytest.TempPathFactory, matrix: Matrix
) -> None:
    # No cuda_builds.toml entry decides it: the version is not a PyPI one, so only the
    # installed files (cpp_lib.json, the DT_NEEDED of xformers/_C.so) can say.
    xformers = cuda_extension_standin(
        "xformers",
        "0.0.99",
        requires_dist=["torch==2.5.1"],
        cpp_lib=xformers_cpp_lib(1201, "2.5.1+cu121"),
    )
    vllm = cuda_extension_standin("vllm", "0.99.0", extension="vllm/_moe_C.abi3.so")
    # One build per CUDA, as bitsandbytes ships them, but none for this torch's CUDA 11.8 (its
    # first extension, for CUDA 11.7, needs libcudart.so.11: the major alone would pass it).
    bitsandbytes = StandIn(
        "bitsandbytes",
        "0.45.5",
        requires_dist=["torch<3,>=2.0"],
        tag="py3-none-manylinux_2_24_x86_64",
        binary_files={
            f"bitsandbytes/libbitsandbytes_cuda{cuda}.so": elf_shared_object(
                [f"libcudart.so.{cuda[:2]}", "libc.so.6"]
            )
            for cuda in ("117", "121", "126")
        },
    )
    python = make_env(
        tmp_path_factory.mktemp("cudabuilt"),
        "cu118-xformers-cu121",
        EnvSpec(wheels=[torch_with("2.5.1+cu118", "11.8"), xformers, vllm, bitsandbytes]),
    )
    target = replace(DRIVER_530, driver_version=DriverVersion("525.125.06"), driver_cuda=None)
    with start_inspection(python=python) as inspection:
        findings = audit_live([target], matrix, inspection).findings
    found = {f.message.split(";")[0]: f for f in findings if f.code == "cuda-build-mismatch"}
    assert set(found) == {
        "xformers 0.0.99 is built for CUDA 12.1 against torch 2.5.1+cu121",
        "vllm 0.99.0 is built for CUDA 12",
        "bitsandbytes 0.45.5 ships builds for CUDA 11.7, 12.1, 12.6 only",
    }
    assert found["vllm 0.99.0 is built for CUDA 12"].evidence[0] == (
        "vllm 0.99.0: vllm/_moe_C.abi3.so needs libcudart.so.12"
    )
    assert all("this torch is 2.5.1+cu118" in f.message for f in found.values())
