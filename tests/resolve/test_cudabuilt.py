"""What a CUDA-built package says it was built for, and whether that fits the plan's torch.

The cpp_lib.json texts and DT_NEEDED lists are those of the real PyPI wheels recorded in
compat_matrix/cuda_builds.toml (xformers 0.0.31, vllm 0.10.1.1).
"""

from __future__ import annotations

import pytest

from cudalock.matrix import load_matrix
from cudalock.model import Target
from cudalock.resolve.cudabuilt import (
    BuiltFor,
    from_cpp_lib,
    from_label,
    from_matrix,
    from_needed,
    from_per_cuda_extensions,
    from_requirements,
    mismatch,
)
from cudalock.versions import DriverVersion

MATRIX = load_matrix()
#: xformers-0.0.31-cp39-abi3-manylinux_2_28_x86_64.whl: xformers/cpp_lib.json (abridged).
XFORMERS_0_0_31 = (
    '{"version": {"cuda": 1208, "hip": null, "torch": "2.7.1+cu126", "python": "3.9.23", '
    '"flash": "v2.8.0.post2-3-g3ba6f82", "use_torch_flash": false}, "env": {}}'
)
#: vllm-0.10.1.1-cp38-abi3-manylinux1_x86_64.whl: the DT_NEEDED of two of its extensions.
VLLM_NEEDED = [
    ("vllm/cumem_allocator.abi3.so", ["libcuda.so.1", "libtorch_cpu.so", "libc.so.6"]),
    ("vllm/_flashmla_C.abi3.so", ["libtorch.so", "libcudart.so.12", "libc10.so", "libc.so.6"]),
]
A100_CUDA_12_1 = Target(
    platform="linux-x86_64", driver_version=DriverVersion("530.30.02"), driver_cuda=(12, 1)
)
DRIVER_525 = Target(platform="linux-x86_64", driver_version=DriverVersion("525.125.06"))


def test_cpp_lib_json_gives_cuda_and_torch() -> None:
    built = from_cpp_lib("xformers", "0.0.31", XFORMERS_0_0_31, "xformers/cpp_lib.json")
    assert built == BuiltFor(
        "xformers",
        "0.0.31",
        "12.8",
        "2.7.1+cu126",
        "xformers/cpp_lib.json: cuda 1208, torch 2.7.1+cu126",
    )
    assert built.cuda_version == (12, 8)


@pytest.mark.parametrize(
    "text",
    ['{"version": {"cuda": null, "hip": "6.2", "torch": "2.5.1+rocm6.2"}}', "not json", "[]"],
)
def test_cpp_lib_json_of_a_rocm_build_or_garbage_says_nothing(text: str) -> None:
    assert from_cpp_lib("xformers", "0.0.29", text, "xformers/cpp_lib.json") is None


def test_the_first_extension_that_needs_a_cuda_library_names_the_major() -> None:
    built = from_needed("vllm", "0.10.1.1", VLLM_NEEDED)
    assert built is not None
    assert (built.cuda, built.cuda_major, built.cuda_version) == ("12", 12, None)
    assert built.evidence == "vllm/_flashmla_C.abi3.so needs libcudart.so.12"
    # libcuda.so.1 is the driver's library, not a CUDA version.
    assert from_needed("vllm", "0.10.1.1", VLLM_NEEDED[:1]) is None


def test_nvidia_requirements_give_the_major_and_a_pinned_runtime_the_minor() -> None:
    pinned = [
        "numpy",
        "nvidia-cublas-cu12==12.4.5.8; platform_system == 'Linux'",
        "nvidia-cuda-runtime-cu12==12.4.127; platform_system == 'Linux'",
        "nvidia-cudnn-cu11; extra == 'legacy'",
    ]
    built = from_requirements("somekernels", "1.0", pinned)
    assert built is not None
    assert (built.cuda, built.evidence) == (
        "12.4",
        "Requires-Dist nvidia-cuda-runtime-cu12==12.4.127; platform_system == 'Linux'",
    )
    loose = from_requirements("somekernels", "1.0", ["nvidia-cublas-cu12>=12.1"])
    assert loose is not None and loose.cuda == "12"
    assert from_requirements("plain", "1.0", ["numpy", "nvidia-cudnn-cu11; extra == 'x'"]) is None


def test_the_matrix_answers_for_pypi_versions_and_labels_for_index_builds() -> None:
    built = from_matrix(MATRIX, "xformers", "0.0.28.post3")
    assert built is not None and (built.cuda, built.torch) == ("12.1", "2.5.1+cu121")
    assert from_matrix(MATRIX, "xformers", "0.0.28.post3+cu118") is None
    labelled = from_label("xformers", "0.0.28.post3+cu118")
    assert labelled is not None and labelled.cuda == "11.8"
    assert from_label("xformers", "0.0.28.post3") is None


def test_the_issue_case_another_major_than_torch() -> None:
    built = from_cpp_lib("xformers", "0.0.31", XFORMERS_0_0_31, "xformers/cpp_lib.json")
    assert built is not None
    assert mismatch(built, torch_version="2.7.1+cu118", torch_cuda=(11, 8), matrix=MATRIX) == (
        "xformers 0.0.31 is built for CUDA 12.8 against torch 2.7.1+cu126; "
        "this torch is 2.7.1+cu118"
    )


def test_a_cuda_12_1_xformers_on_a_cu118_torch_and_driver_525() -> None:
    built = from_matrix(MATRIX, "xformers", "0.0.28.post3")
    assert built is not None
    problem = mismatch(
        built,
        torch_version="2.5.1+cu118",
        torch_cuda=(11, 8),
        matrix=MATRIX,
        targets=(DRIVER_525,),
    )
    assert problem == (
        "xformers 0.0.28.post3 is built for CUDA 12.1 against torch 2.5.1+cu121; "
        "this torch is 2.5.1+cu118"
    )


def test_a_newer_minor_than_the_driver_runs() -> None:
    built = from_cpp_lib("xformers", "0.0.31", XFORMERS_0_0_31, "xformers/cpp_lib.json")
    assert built is not None
    problem = mismatch(
        built,
        torch_version="2.7.1+cu126",
        torch_cuda=(12, 6),
        matrix=MATRIX,
        targets=(A100_CUDA_12_1,),
    )
    assert problem is not None
    assert problem.startswith(
        "xformers 0.0.31 is built for CUDA 12.8 against torch 2.7.1+cu126; CUDA 12.8 needs driver ≥"
    )
    assert "driver 530.30.02 supports CUDA 12.1" in problem
    # Under minor-version compatibility the same major runs on a driver above the 12.x floor.
    assert (
        mismatch(
            built,
            torch_version="2.7.1+cu126",
            torch_cuda=(12, 6),
            matrix=MATRIX,
            targets=(A100_CUDA_12_1,),
            compat="minor",
        )
        is None
    )


def test_a_newer_minor_than_torch_of_the_same_major_is_what_pypi_builds_are() -> None:
    built = from_cpp_lib("xformers", "0.0.31", XFORMERS_0_0_31, "xformers/cpp_lib.json")
    assert built is not None
    new_driver = Target(platform="linux-x86_64", driver_version=DriverVersion("575.57.08"))
    assert (
        mismatch(
            built,
            torch_version="2.7.1+cu126",
            torch_cuda=(12, 6),
            matrix=MATRIX,
            targets=(new_driver,),
        )
        is None
    )


def test_a_major_only_build_is_judged_by_its_major() -> None:
    built = from_needed("vllm", "0.10.1.1", VLLM_NEEDED)
    assert built is not None
    assert mismatch(built, torch_version="2.7.1+cu126", torch_cuda=(12, 6), matrix=MATRIX) is None
    assert mismatch(built, torch_version="2.7.1+cu118", torch_cuda=(11, 8), matrix=MATRIX) == (
        "vllm 0.10.1.1 is built for CUDA 12; this torch is 2.7.1+cu118"
    )
    assert mismatch(built, torch_version="2.7.1+cpu", torch_cuda=None, matrix=MATRIX) == (
        "vllm 0.10.1.1 is built for CUDA 12; this torch is 2.7.1+cpu, a build without CUDA"
    )


#: bitsandbytes-0.45.5-py3-none-manylinux_2_24_x86_64.whl: its extensions (abridged).
BITSANDBYTES = [
    "bitsandbytes/libbitsandbytes_cpu.so",
    "bitsandbytes/libbitsandbytes_cuda117.so",
    "bitsandbytes/libbitsandbytes_cuda118.so",
    "bitsandbytes/libbitsandbytes_cuda121.so",
    "bitsandbytes/libbitsandbytes_cuda126.so",
    "bitsandbytes/libbitsandbytes_cuda128.so",
]


def test_one_build_per_cuda_fits_a_torch_of_one_of_them() -> None:
    built = from_per_cuda_extensions("bitsandbytes", "0.45.5", BITSANDBYTES)
    assert built is not None
    assert built.choices == ("11.7", "11.8", "12.1", "12.6", "12.8")
    for torch, cuda in (("2.5.1+cu121", (12, 1)), ("2.7.1+cu118", (11, 8)), ("2.7.1+cpu", None)):
        assert mismatch(built, torch_version=torch, torch_cuda=cuda, matrix=MATRIX) is None
    assert mismatch(built, torch_version="2.8.0+cu129", torch_cuda=(12, 9), matrix=MATRIX) == (
        "bitsandbytes 0.45.5 ships builds for CUDA 11.7, 11.8, 12.1, 12.6, 12.8 only; "
        "this torch is 2.8.0+cu129"
    )
    # A single per-CUDA extension is an ordinary build, read by what it needs.
    assert from_per_cuda_extensions("x", "1", BITSANDBYTES[:2]) is None
