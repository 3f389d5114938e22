"""Audit of torchao beside a torch its own version check rejects: live inspection and pasted
reports alike, judged by compat_matrix/torch_pairings.toml (torchao's __init__.py checks and
pytorch/ao#2919's table), and the fix checked by auditing it applied."""

from __future__ import annotations

from dataclasses import replace

from cudalock.audit.checks import audit
from cudalock.audit.installed import Distribution, Installed, TorchInstall
from cudalock.audit.reports import parse_report
from cudalock.matrix import load_matrix
from cudalock.model import Finding, Gpu, Target
from cudalock.versions import DriverVersion

MATRIX = load_matrix()
A100 = Gpu(name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0), index=0)
DRIVER_530 = Target(
    platform="linux-x86_64",
    driver_version=DriverVersion("530.30.02"),
    driver_cuda=(12, 1),
    gpus=(A100,),
)


def env(torch: str, cuda: str, torchao: str) -> Installed:
    return Installed(
        source="test",
        python_version="3.11.7",
        platform="linux-x86_64",
        distributions=(Distribution("torch", torch), Distribution("torchao", torchao)),
        torch=(TorchInstall(version=torch, cuda=cuda),),
    )


def pairing_findings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.code == "torch-pairing-mismatch"]


def test_torchao_0_18_beside_torch_2_7_1_is_an_error_with_its_source() -> None:
    [found] = pairing_findings(audit(env("2.7.1+cu118", "11.8", "0.18.0"), DRIVER_530, MATRIX))
    assert found.severity == "error"
    assert found.message.startswith(
        "torchao 0.18.0 works with torch >= 2.11.0; this torch is 2.7.1+cu118"
    )
    assert found.evidence[0] == "torchao 0.18.0: torchao/__init__.py min_torch_version"
    assert "torchao-0.18.0-py3-none-any.whl" in found.evidence[1]
    # The newest recorded release built against torch 2.7.1 (pytorch/ao#2919, unverified).
    assert found.fix == ("pip install --no-deps 'torchao==0.12.0'",)


def test_the_fix_audits_clean() -> None:
    [found] = pairing_findings(audit(env("2.7.1+cu118", "11.8", "0.18.0"), DRIVER_530, MATRIX))
    fixed_version = found.fix[0].split("==")[1].rstrip("'")
    assert (
        pairing_findings(audit(env("2.7.1+cu118", "11.8", fixed_version), DRIVER_530, MATRIX)) == []
    )


def test_exact_pairings_are_compared_without_the_local_label() -> None:
    assert pairing_findings(audit(env("2.10.0+cu126", "12.6", "0.16.0"), DRIVER_530, MATRIX)) == []
    [found] = pairing_findings(audit(env("2.9.0+cu126", "12.6", "0.16.0"), DRIVER_530, MATRIX))
    assert "works with torch 2.10.0; this torch is 2.9.0+cu126" in found.message
    assert found.fix == ("pip install --no-deps 'torchao==0.14.1'",)


def test_an_unverified_row_says_so() -> None:
    [found] = pairing_findings(audit(env("2.8.0+cu126", "12.6", "0.12.0"), DRIVER_530, MATRIX))
    assert "a fact the matrix marks unverified" in found.evidence[0]
    assert "https://github.com/pytorch/ao/issues/2919" in found.evidence[1]


def test_a_release_the_matrix_does_not_record_is_not_judged() -> None:
    assert pairing_findings(audit(env("2.7.1+cu118", "11.8", "0.11.0"), DRIVER_530, MATRIX)) == []


def test_a_pasted_report_names_the_mismatch() -> None:
    # collect_env lists every installed package whose name holds "torch", torchao included.
    report = parse_report(
        "PyTorch version: 2.7.1+cu118\n"
        "Is debug build: False\n"
        "CUDA used to build PyTorch: 11.8\n"
        "\n"
        "Versions of relevant libraries:\n"
        "[pip3] torch==2.7.1+cu118\n"
        "[pip3] torchao==0.18.0\n"
    )
    [found] = pairing_findings(audit(report.installed, DRIVER_530, MATRIX))
    assert found.message.startswith("torchao 0.18.0 works with torch >= 2.11.0")
    none = replace(report.installed, distributions=report.installed.distributions[:1])
    assert pairing_findings(audit(none, DRIVER_530, MATRIX)) == []
