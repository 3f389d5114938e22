"""Audit of packages built against CUDA: from their own files (live), their label, or the
matrix's record of the PyPI release (a pasted report). The build facts are the real wheels'
(compat_matrix/cuda_builds.toml)."""

from __future__ import annotations

from dataclasses import replace

from cudalock.audit.checks import audit
from cudalock.audit.installed import Distribution, ExtensionBuild, Installed, TorchInstall
from cudalock.audit.reports import parse_report
from cudalock.matrix import load_matrix
from cudalock.model import Finding, Gpu, Target
from cudalock.versions import DriverVersion
from tests.support.wheels import xformers_cpp_lib

MATRIX = load_matrix()
A100 = Gpu(name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0), index=0)
DRIVER_525 = Target(
    platform="linux-x86_64", driver_version=DriverVersion("525.125.06"), gpus=(A100,)
)
DRIVER_530 = Target(
    platform="linux-x86_64",
    driver_version=DriverVersion("530.30.02"),
    driver_cuda=(12, 1),
    gpus=(A100,),
)
DRIVER_570 = Target(
    platform="linux-x86_64", driver_version=DriverVersion("570.124.06"), gpus=(A100,)
)


def env(torch: str, cuda: str | None, *dists: tuple[str, str], **fields: object) -> Installed:
    return Installed(
        source="test",
        python_version="3.11.7",
        platform="linux-x86_64",
        distributions=(
            Distribution("torch", torch),
            *(Distribution(name, version) for name, version in dists),
        ),
        torch=(TorchInstall(version=torch, cuda=cuda),),
        **fields,  # type: ignore[arg-type]
    )


def mismatches(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.code == "cuda-build-mismatch"]


def test_a_cuda_12_1_xformers_beside_a_cu118_torch_is_an_error() -> None:
    installed = env("2.5.1+cu118", "11.8", ("xformers", "0.0.28.post3"))
    [found] = mismatches(audit(installed, DRIVER_525, MATRIX))
    assert found.severity == "error"
    assert found.message.startswith(
        "xformers 0.0.28.post3 is built for CUDA 12.1 against torch 2.5.1+cu121; "
        "this torch is 2.5.1+cu118"
    )
    assert "cuda_builds.toml (xformers/cpp_lib.json)" in found.evidence[0]


def test_the_files_of_a_live_environment_come_first() -> None:
    files = ExtensionBuild(
        "xformers",
        "0.0.31",
        cpp_lib=("xformers/cpp_lib.json", xformers_cpp_lib(1208, "2.7.1+cu126")),
        needed=(("xformers/_C.so", ("libtorch.so", "libcudart.so.12")),),
    )
    installed = env("2.7.1+cu118", "11.8", ("xformers", "0.0.31"), cuda_builds=(files,))
    [found] = mismatches(audit(installed, DRIVER_525, MATRIX))
    assert found.message.startswith(
        "xformers 0.0.31 is built for CUDA 12.8 against torch 2.7.1+cu126; "
        "this torch is 2.7.1+cu118"
    )
    assert found.evidence[0] == (
        "xformers 0.0.31: xformers/cpp_lib.json: cuda 1208, torch 2.7.1+cu126"
    )


def test_an_index_build_is_judged_by_its_label_and_a_fitting_one_passes() -> None:
    labelled = env("2.5.1+cu121", "12.1", ("xformers", "0.0.28.post3+cu118"))
    [found] = mismatches(audit(labelled, DRIVER_530, MATRIX))
    assert "its version label +cu118" in found.evidence[0]
    fitting = env("2.5.1+cu121", "12.1", ("xformers", "0.0.28.post3"))
    assert mismatches(audit(fitting, DRIVER_530, MATRIX)) == []


def test_the_fix_leaves_no_such_error_when_applied() -> None:
    # xformers 0.0.31 (CUDA 12.8) beside torch 2.5.1+cu121 on a CUDA 12.1 driver: the newest
    # PyPI xformers built against torch 2.5.1 is 0.0.29.post1, a CUDA 12.1 build.
    installed = env("2.5.1+cu121", "12.1", ("xformers", "0.0.31"))
    [found] = mismatches(audit(installed, DRIVER_530, MATRIX))
    assert "CUDA 12.8 needs driver ≥" in found.message
    assert found.fix == ("pip install --no-deps 'xformers==0.0.29.post1'",)
    fixed = replace(
        installed,
        distributions=(
            Distribution("torch", "2.5.1+cu121"),
            Distribution("xformers", "0.0.29.post1"),
        ),
    )
    assert mismatches(audit(fixed, DRIVER_530, MATRIX)) == []
    # Nothing recorded fits a cu118 torch: removing it is what is left.
    cu118 = env("2.5.1+cu118", "11.8", ("xformers", "0.0.28.post3"))
    [found] = mismatches(audit(cu118, DRIVER_525, MATRIX))
    assert found.fix == ("pip uninstall -y xformers",)
    removed = replace(cu118, distributions=cu118.distributions[:1])
    assert mismatches(audit(removed, DRIVER_525, MATRIX)) == []


def test_a_pasted_report_names_the_mismatch() -> None:
    report = parse_report(
        "PyTorch version: 2.5.1+cu118\n"
        "Is debug build: False\n"
        "CUDA used to build PyTorch: 11.8\n"
        "\n"
        "Versions of relevant libraries:\n"
        "[pip3] torch==2.5.1+cu118\n"
        "[pip3] xformers==0.0.28.post3\n"
    )
    [found] = mismatches(audit(report.installed, DRIVER_525, MATRIX))
    assert found.message.startswith("xformers 0.0.28.post3 is built for CUDA 12.1")


def test_xformers_own_pasted_build_line_comes_before_the_matrix() -> None:
    # facebookresearch/xformers#1250: the matrix's PyPI 0.0.29 is built for CUDA 12.1 against
    # torch 2.5.1+cu121, but the installed one says it was built against 2.6.0+cu118.
    report = parse_report(
        "WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
        "    PyTorch 2.6.0+cu118 with CUDA 1107 (you have 2.6.0+cu118)\n"
        "    Python  3.10.17 (you have 3.10.17)\n"
        "xFormers 0.0.29\n"
    )
    findings = audit(report.installed, DRIVER_525, MATRIX)
    assert not mismatches(findings)
    assert not [f for f in findings if f.code == "extension-abi-mismatch"]


def test_a_pasted_xformers_build_of_another_cuda_major_is_an_error() -> None:
    report = parse_report(
        "PyTorch 2.6.0+cu124 with CUDA 1204 (you have 2.6.0+cu118)\nxFormers 0.0.29.post3\n"
    )
    [found] = mismatches(audit(report.installed, DRIVER_525, MATRIX))
    assert found.message.startswith("xformers 0.0.29.post3 is built for CUDA 12.4 against torch")
    assert "the pasted xFormers warning" in found.evidence[0]


def test_xformers_built_for_another_python_is_an_abi_error_fixed_by_the_release_for_its_torch() -> (
    None
):
    # dusty-nv/jetson-inference#1946: the same torch, another Python.
    report = parse_report(
        "    PyTorch 2.8.0+cu128 with CUDA 1208 (you have 2.8.0+cu128)\n"
        "    Python  3.12.3 (you have 3.10.12)\n"
    )
    [found] = [
        f for f in audit(report.installed, DRIVER_570, MATRIX) if f.code == "extension-abi-mismatch"
    ]
    assert found.message.startswith(
        "xFormers was built for Python 3.12 but this environment has Python 3.10:"
    )
    # The newest PyPI release built against torch 2.8.0 (cuda_builds.toml).
    assert found.fix == (
        "pip install --force-reinstall --no-deps 'xformers==0.0.32.post2'"
        "   # built against this torch",
    )


def test_xformers_for_a_torch_without_a_recorded_release_is_rebuilt_against_it() -> None:
    report = parse_report("PyTorch 2.0.1+cu118 with CUDA 1108 (you have 1.13.1+cu117)\n")
    [found] = [
        f for f in audit(report.installed, DRIVER_530, MATRIX) if f.code == "extension-abi-mismatch"
    ]
    assert "--no-build-isolation" in found.fix[-1]
