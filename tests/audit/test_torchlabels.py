"""Packages whose version label names the torch they were built against (PyG's ``+pt21cu121``)."""

from __future__ import annotations

import pytest

from cudalock.audit.installed import Distribution, Installed, TorchInstall
from cudalock.audit.torchlabels import check_torch_labels


def env(torch: str, cuda: str | None, *dists: tuple[str, str]) -> Installed:
    return Installed(
        source="report",
        torch=(TorchInstall(torch, cuda, location="report:pip freeze"),),
        distributions=tuple(Distribution(name, version, "report") for name, version in dists),
    )


def test_wheels_for_another_torch_minor_are_one_abi_finding_with_pygs_page() -> None:
    (finding,) = check_torch_labels(
        env(
            "2.1.0+cu121",
            "12.1",
            ("torch-scatter", "2.0.9+pt113cu117"),
            ("torch-sparse", "0.6.17+pt113cu117"),
            ("numpy", "1.26.4"),
        )
    )
    assert finding.code == "extension-abi-mismatch" and finding.severity == "error"
    assert "torch-scatter 2.0.9+pt113cu117 (torch 1.13, CUDA 11.7)" in finding.message
    assert finding.fix[1] == (
        "pip install --force-reinstall --no-deps --no-index torch-scatter torch-sparse "
        "-f https://data.pyg.org/whl/torch-2.1.0+cu121.html"
    )


def test_a_two_digit_torch_minor_is_read_whole() -> None:
    # torch 2.11's wheels are +pt211cu128.
    assert check_torch_labels(env("2.11.0+cu128", "12.8", ("pyg-lib", "0.6.0+pt211cu128"))) == []
    (finding,) = check_torch_labels(env("2.1.2+cu121", "12.1", ("pyg-lib", "0.6.0+pt211cu128")))
    assert "(torch 2.11, CUDA 12.8)" in finding.message


def test_another_cuda_major_of_the_same_torch_is_a_cuda_build_mismatch() -> None:
    (finding,) = check_torch_labels(
        env("2.1.0+cu121", "12.1", ("torch-cluster", "1.6.3+pt21cu118"))
    )
    assert finding.code == "cuda-build-mismatch"
    assert finding.fix[1].endswith(
        "torch-cluster -f https://data.pyg.org/whl/torch-2.1.0+cu121.html"
    )


@pytest.mark.parametrize(
    ("torch", "cuda", "version"),
    [
        ("2.1.0+cu121", "12.1", "2.1.2+pt21cu121"),  # its own build
        # another minor of torch's CUDA major: torch_scatter's check accepts it
        ("2.4.0+cu124", "12.4", "2.1.2+pt24cu121"),
        ("2.1.0+cu121", "12.1", "2.1.2+pt21cpu"),  # a CPU build beside a CUDA torch: not judged
        ("2.1.0+cu121", "12.1", "2.1.2"),  # no label: nothing to read
    ],
)
def test_builds_that_load_beside_the_torch_are_no_finding(
    torch: str, cuda: str, version: str
) -> None:
    assert check_torch_labels(env(torch, cuda, ("torch-scatter", version))) == []
