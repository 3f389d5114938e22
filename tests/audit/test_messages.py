"""The error and warning lines people paste, read one line at a time (audit.messages)."""

from __future__ import annotations

import pytest

from cudalock.audit import messages
from cudalock.audit.messages import extension_package, read_message


@pytest.mark.parametrize(
    ("line", "kind", "fields"),
    [
        (
            "RuntimeError: The NVIDIA driver on your system is too old (found version 12010). "
            "Please update your GPU driver",
            messages.DRIVER_TOO_OLD,
            {"found": "12010"},
        ),
        ("RuntimeError: The NVIDIA driver on your system is too old", messages.DRIVER_TOO_OLD, {}),
        (
            "CUDA error: CUDA driver version is insufficient for CUDA runtime version",
            messages.DRIVER_INSUFFICIENT,
            {},
        ),
        (
            "Error 804: forward compatibility was attempted on non supported HW",
            messages.FORWARD_COMPAT_UNSUPPORTED,
            {},
        ),
        (
            "Error 803: system has unsupported display driver / cuda driver combination",
            messages.DRIVER_LIBRARY_MISMATCH,
            {},
        ),
        (
            "Failed to initialize NVML: Driver/library version mismatch",
            messages.DRIVER_LIBRARY_MISMATCH,
            {},
        ),
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            messages.NO_KERNEL_IMAGE,
            {},
        ),
        (
            "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the "
            "current PyTorch installation.",
            messages.ARCH_UNSUPPORTED,
            {"sm": "120"},
        ),
        (
            "AssertionError: Torch not compiled with CUDA enabled",
            messages.NOT_COMPILED_WITH_CUDA,
            {},
        ),
        (
            "ImportError: /opt/lib/python3.12/site-packages/flash_attn_2_cuda.cpython-312-x86_64-"
            "linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
            messages.UNDEFINED_SYMBOL,
            {
                "library": "/opt/lib/python3.12/site-packages/flash_attn_2_cuda.cpython-312-"
                "x86_64-linux-gnu.so",
                "symbol": "_ZN3c104cuda9SetDeviceEi",
            },
        ),
        (
            "ImportError: libcudart.so.11.0: cannot open shared object file: No such file",
            messages.LIBRARY_MISSING,
            {"library": "libcudart.so.11.0"},
        ),
        (
            "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 9, 2) "
            "but found runtime version (8, 5, 0).",
            messages.CUDNN_MISMATCH,
            {"compiled": "8.9.2", "found": "8.5.0"},
        ),
        (
            "RuntimeError: cuDNN version mismatch: PyTorch was compiled against 7102 but linked "
            "against 7605",
            messages.CUDNN_MISMATCH,
            {"compiled": "7.1.2", "found": "7.6.5"},
        ),
        (
            "RuntimeError: Detected that PyTorch and torch_sparse were compiled with different "
            "CUDA versions. PyTorch has CUDA version 10.2 and torch_sparse has CUDA version 11.4. "
            "Please reinstall the torch_sparse that matches your PyTorch install.",
            messages.PYG_CUDA_MISMATCH,
            {"package": "torch_sparse", "torch_cuda": "10.2", "built_cuda": "11.4"},
        ),
        (
            "RuntimeError: operator torchvision::nms does not exist",
            messages.TORCHVISION_OPERATOR_MISSING,
            {"operator": "nms"},
        ),
        (
            "Exception: >- DeepSpeed Op Builder: Installed CUDA version 12.1 does not match the "
            "version torch was compiled with 11.8, unable to compile cuda/cpp extensions",
            messages.NVCC_MISMATCH,
            {"nvcc": "12.1", "torch_cuda": "11.8", "accepted": "no", "by": "deepspeed"},
        ),
        (
            "Installed CUDA version 11.1 does not match the version torch was compiled with 11.7 "
            "but since the APIs are compatible, accepting this combination",
            messages.NVCC_MISMATCH,
            {"nvcc": "11.1", "torch_cuda": "11.7", "accepted": "yes", "by": "deepspeed"},
        ),
        (
            "RuntimeError: PyTorch version mismatch! DeepSpeed ops were compiled and installed "
            "with a different version than what is being used at runtime. Please re-install "
            "DeepSpeed or switch torch versions. Install torch version=2.3, Runtime torch "
            "version=2.2",
            messages.DEEPSPEED_OPS_MISMATCH,
            {"what": "pytorch", "built": "2.3", "runtime": "2.2"},
        ),
        (
            "RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
            messages.FLASH_ATTN_GPU_TOO_OLD,
            {"oldest": "Ampere"},
        ),
    ],
)
def test_each_message_is_read_with_what_it_states(
    line: str, kind: str, fields: dict[str, str]
) -> None:
    message = read_message(line)
    assert message is not None
    assert message.kind == kind
    assert dict(message.fields) == fields


def test_xformers_built_for_names_its_cuda_and_is_read_without_its_header() -> None:
    # Pastes often start below "xFormers was built for:"; "with CUDA 1201" is xFormers' own.
    message = read_message("    PyTorch 2.1.2+cu121 with CUDA 1201 (you have 2.1.2+cpu)")
    assert message is not None and message.kind == messages.XFORMERS_BUILT_FOR
    assert dict(message.fields) == {
        "built": "2.1.2+cu121",
        "installed": "2.1.2+cpu",
        "cuda": "12.1",
    }


def test_xformers_built_for_without_its_cuda_is_read_only_after_its_header() -> None:
    line = "    PyTorch 2.0.1 (you have 2.1.0+cu121)"
    assert read_message(line) is None
    message = read_message(line, after_xformers_header=True)
    assert message is not None
    assert dict(message.fields) == {"built": "2.0.1", "installed": "2.1.0+cu121"}


def test_the_python_line_after_xformers_built_for_joins_it() -> None:
    message = read_message("PyTorch 2.8.0 with CUDA 1209 (you have 2.8.0)")
    assert message is not None
    joined = messages.with_xformers_python(message, "    Python  3.12.3 (you have 3.10.12)")
    assert joined is not None
    assert joined.get("built_python") == "3.12" and joined.get("python") == "3.10"
    assert joined.text.endswith("/ Python  3.12.3 (you have 3.10.12)")
    assert messages.with_xformers_python(message, "  Please reinstall xformers") is None


@pytest.mark.parametrize(
    "line",
    ["Requirement already satisfied: torch", "PyTorch version: 2.1.0+cu121", "x" * 5000, ""],
)
def test_other_lines_are_no_message(line: str) -> None:
    assert read_message(line) is None


@pytest.mark.parametrize(
    ("library", "package"),
    [
        ("/env/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so", "flash-attn"),
        ("/usr/local/lib/python3.8/dist-packages/vllm/_C.abi3.so", "vllm"),
        ("/root/.cache/torch_extensions/py310_cu121/fused_adam/fused_adam.so", "deepspeed"),
        ("/env/site-packages/torch/lib/libtorch_cuda.so", None),
    ],
)
def test_the_failing_library_names_its_package(library: str, package: str | None) -> None:
    assert extension_package(library) == package
