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
