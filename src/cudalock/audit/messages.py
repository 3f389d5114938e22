"""The error and warning lines of PyTorch, DeepSpeed, xFormers, the CUDA runtime and the dynamic
loader that people paste, read as evidence.

:func:`read_message` turns one line of a paste into a :class:`~cudalock.audit.installed.
ReportedMessage` (or None); what a message says about the machine or the environment (the
driver's CUDA in "found version 12010", the nvcc in DeepSpeed's "Installed CUDA version 12.1")
is in its fields, and ``audit`` turns every message into a finding. Pure and bounded: each
pattern is tested only after a cheap substring check.
"""

from __future__ import annotations

import re

from cudalock.audit.installed import ReportedMessage

#: Message kinds (ReportedMessage.kind).
DRIVER_TOO_OLD = "driver-too-old"
DRIVER_INSUFFICIENT = "driver-insufficient"
FORWARD_COMPAT_UNSUPPORTED = "forward-compat-unsupported"
DRIVER_LIBRARY_MISMATCH = "driver-library-mismatch"
NO_KERNEL_IMAGE = "no-kernel-image"
ARCH_UNSUPPORTED = "arch-unsupported"
NOT_COMPILED_WITH_CUDA = "not-compiled-with-cuda"
UNDEFINED_SYMBOL = "undefined-symbol"
LIBRARY_MISSING = "library-missing"
CUDNN_MISMATCH = "cudnn-mismatch"
NVCC_MISMATCH = "nvcc-mismatch"
XFORMERS_BUILT_FOR = "xformers-built-for"
#: collect_env's "Is CUDA available: False": not a line of an error, but the same evidence.
CUDA_UNAVAILABLE = "cuda-unavailable"
DEEPSPEED_OPS_MISMATCH = "deepspeed-ops-mismatch"
#: "operator torchvision::nms does not exist": torchvision's compiled operators did not load
#: into this torch (a torchvision built for another torch, or for another CUDA).
TORCHVISION_OPERATOR_MISSING = "torchvision-operator-missing"
#: PyG's extensions (torch_scatter, torch_sparse, ...) refusing another CUDA major at import.
PYG_CUDA_MISMATCH = "pyg-cuda-mismatch"
#: flash-attn's own refusal of an older GPU: "FlashAttention only supports Ampere GPUs or
#: newer." (its C++ check of the device's compute capability).
FLASH_ATTN_GPU_TOO_OLD = "flash-attn-gpu-too-old"

_MAX_TEXT = 300

_TOO_OLD = re.compile(r"driver on your system is too old \(found version (\d{4,5})\)")
_TOO_OLD_BARE = re.compile(r"NVIDIA driver on your system is too old")
_INSUFFICIENT = re.compile(
    r"CUDA driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver"
)
#: CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE (804): the forward-compatibility libcuda was
#: loaded on a GPU it does not support (it covers data-center GPUs; NVIDIA's forward
#: compatibility guide, research/driver_cuda_deepspeed.md A4).
_COMPAT_UNSUPPORTED = re.compile(
    r"Error 804\b|forward compatibility was attempted on non supported HW"
    r"|cudaErrorCompatNotSupportedOnDevice|CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"
)
#: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803) and NVML's "Driver/library version mismatch": the
#: loaded kernel module and the driver's user-space libraries are of different versions.
_DRIVER_LIBRARY_MISMATCH = re.compile(
    r"Error 803\b|system has unsupported display driver / cuda driver combination"
    r"|cudaErrorSystemDriverMismatch|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"
    r"|Driver/library version mismatch"
)
_NO_KERNEL = re.compile(r"no kernel image is available for execution on the device")
_ARCH = re.compile(r"with CUDA capability sm_(\d+)\s+is not compatible with the current PyTorch")
_NOT_COMPILED = re.compile(r"Torch not compiled with CUDA enabled", re.IGNORECASE)
_UNDEFINED = re.compile(r"([^\s:'\"()]+\.so(?:\.[\d.]+)?)[^\s:]*:\s*undefined symbol:\s*([\w.@]+)")
_UNDEFINED_BARE = re.compile(r"undefined symbol:\s*([\w.@]+)")
_TORCHVISION_OPERATOR = re.compile(r"operator torchvision::(\w+) does not exist")
_PYG_CUDA = re.compile(
    r"Detected that PyTorch and (\w+) were compiled with different CUDA versions\. PyTorch has "
    r"CUDA version (\d+\.\d+) and \w+ has CUDA version (-?\d+\.\d+)"
)
_FLASH_ATTN_GPU = re.compile(r"FlashAttention only supports (\w+) GPUs or newer")
_MISSING = re.compile(
    r"(lib[A-Za-z0-9_+-]+\.so(?:\.[\d.]+)?):\s*cannot open shared object file",
)
_CUDNN = re.compile(
    r"cuDNN version (?:incompatibility|mismatch):\s*PyTorch was compiled\s+against\s+"
    r"(\([\d, ]+\)|\d+)\s+but\s+(?:found runtime version|linked against)\s+(\([\d, ]+\)|\d+)"
)
_DS_NVCC = re.compile(
    r"Installed CUDA version (\d{1,2}\.\d{1,2}) does not match the version torch was "
    r"compiled with (\d{1,2}\.\d{1,2})(.{0,80})"
)
_EXT_NVCC = re.compile(
    r"detected CUDA version \((\d{1,2}\.\d{1,2})\) mismatches the version that was used to "
    r"compile\s+PyTorch \((\d{1,2}\.\d{1,2})\)"
)
_XFORMERS = re.compile(
    r"PyTorch (\d[\w.+]*)(?: with CUDA (\d{3,4}))? \(you have (\d[\w.+]*)\)",
)
#: The line after it: "Python  3.10.11 (you have 3.13.12)".
_XFORMERS_PYTHON = re.compile(r"^Python\s+(\d+\.\d+)[\d.]*\s+\(you have (\d+\.\d+)[\d.]*\)")

_DS_OPS = re.compile(
    r"(PyTorch|CUDA) version mismatch! DeepSpeed ops were compiled and installed with a "
    r"different version.*?Install (?:torch|CUDA) version=(\d+\.\d+), Runtime (?:torch|CUDA) "
    r"version=(\d+\.\d+)"
)

#: Words every message holds: a line without one is no message.
PHRASES = (
    "DeepSpeed ops were compiled",
    "too old",
    "Error 804",
    "forward compatibility was attempted",
    "COMPAT_NOT_SUPPORTED",
    "CompatNotSupported",
    "Error 803",
    "unsupported display driver",
    "DRIVER_MISMATCH",
    "SystemDriverMismatch",
    "Driver/library version mismatch",
    "insufficient",
    "cudaErrorInsufficientDriver",
    "no kernel image",
    "CUDA capability sm_",
    "ompiled with CUDA",
    "undefined symbol",
    "cannot open shared object",
    "cuDNN version",
    "does not match the version torch",
    "mismatches the version",
    "(you have ",
    "operator torchvision::",
    "were compiled with different CUDA versions",
    "FlashAttention only supports",
)

#: How a message whose own text holds a line break ends its first line: torch's cpp_extension
#: prints CUDA_MISMATCH_MESSAGE as "...that was used to compile\nPyTorch (11.3). ...".
BROKEN_BY_THEIR_AUTHORS = ("mismatches the version that was used to compile",)


def read_message(line: str, *, after_xformers_header: bool = False) -> ReportedMessage | None:
    """The message ``line`` carries, if any. ``after_xformers_header``: the line follows
    xFormers' "xFormers was built for:" (its "PyTorch X (you have Y)" line)."""
    if not any(token in line for token in PHRASES):
        return None
    text = line.strip()[:_MAX_TEXT]
    match = _DS_OPS.search(line)
    if match:
        return ReportedMessage(
            DEEPSPEED_OPS_MISMATCH,
            text,
            (
                ("what", match.group(1).lower()),
                ("built", match.group(2)),
                ("runtime", match.group(3)),
            ),
        )
    match = _TOO_OLD.search(line)
    if match:
        return ReportedMessage(DRIVER_TOO_OLD, text, (("found", match.group(1)),))
    if _TOO_OLD_BARE.search(line):
        return ReportedMessage(DRIVER_TOO_OLD, text)
    if _INSUFFICIENT.search(line):
        return ReportedMessage(DRIVER_INSUFFICIENT, text)
    if _COMPAT_UNSUPPORTED.search(line):
        return ReportedMessage(FORWARD_COMPAT_UNSUPPORTED, text)
    if _DRIVER_LIBRARY_MISMATCH.search(line):
        return ReportedMessage(DRIVER_LIBRARY_MISMATCH, text)
    if _NO_KERNEL.search(line):
        return ReportedMessage(NO_KERNEL_IMAGE, text)
    match = _ARCH.search(line)
    if match:
        return ReportedMessage(ARCH_UNSUPPORTED, text, (("sm", match.group(1)),))
    if _NOT_COMPILED.search(line):
        return ReportedMessage(NOT_COMPILED_WITH_CUDA, text)
    match = _UNDEFINED.search(line)
    if match:
        return ReportedMessage(
            UNDEFINED_SYMBOL, text, (("library", match.group(1)), ("symbol", match.group(2)))
        )
    match = _UNDEFINED_BARE.search(line)
    if match:  # "ImportError: undefined symbol: ...", the library not named
        return ReportedMessage(UNDEFINED_SYMBOL, text, (("symbol", match.group(1)),))
    match = _FLASH_ATTN_GPU.search(line)
    if match:
        return ReportedMessage(FLASH_ATTN_GPU_TOO_OLD, text, (("oldest", match.group(1)),))
    match = _PYG_CUDA.search(line)
    if match:
        package, torch_cuda, built = match.groups()
        return ReportedMessage(
            PYG_CUDA_MISMATCH,
            text,
            (("package", package), ("torch_cuda", torch_cuda), ("built_cuda", built)),
        )
    match = _TORCHVISION_OPERATOR.search(line)
    if match:
        return ReportedMessage(TORCHVISION_OPERATOR_MISSING, text, (("operator", match.group(1)),))
    match = _MISSING.search(line)
    if match:
        return ReportedMessage(LIBRARY_MISSING, text, (("library", match.group(1)),))
    match = _CUDNN.search(line)
    if match:
        return ReportedMessage(
            CUDNN_MISMATCH,
            text,
            (
                ("compiled", _cudnn_version(match.group(1))),
                ("found", _cudnn_version(match.group(2))),
            ),
        )
    match = _DS_NVCC.search(line)
    if match:
        accepted = "accepting this combination" in match.group(3)
        return ReportedMessage(
            NVCC_MISMATCH,
            text,
            (
                ("nvcc", match.group(1)),
                ("torch_cuda", match.group(2)),
                ("accepted", "yes" if accepted else "no"),
                ("by", "deepspeed"),
            ),
        )
    match = _EXT_NVCC.search(line)
    if match:
        return ReportedMessage(
            NVCC_MISMATCH,
            text,
            (("nvcc", match.group(1)), ("torch_cuda", match.group(2)), ("by", "cpp_extension")),
        )
    match = _XFORMERS.search(line)
    # Its CUDA ("with CUDA 1208") makes the line xFormers' own without the header above it,
    # which pastes often leave out.
    if match and (after_xformers_header or match.group(2)):
        cuda = match.group(2)
        return ReportedMessage(
            XFORMERS_BUILT_FOR,
            text,
            (
                ("built", match.group(1)),
                ("installed", match.group(3)),
                *((("cuda", f"{int(cuda) // 100}.{int(cuda) % 100}"),) if cuda else ()),
            ),
        )
    return None


def with_xformers_python(message: ReportedMessage, line: str) -> ReportedMessage | None:
    """``message`` (xFormers' "PyTorch X (you have Y)") with the Python its extensions were
    built for and the one running, when ``line``, the line after it, names them."""
    match = _XFORMERS_PYTHON.match(line.strip())
    if message.kind != XFORMERS_BUILT_FOR or not match:
        return None
    return ReportedMessage(
        message.kind,
        f"{message.text} / {line.strip()}"[:_MAX_TEXT],
        (*message.fields, ("built_python", match.group(1)), ("python", match.group(2))),
    )


def _cudnn_version(text: str) -> str:
    """ "(8, 9, 2)" → "8.9.2"; the old form 7102 → "7.1.2"."""
    numbers = re.findall(r"\d+", text)
    if len(numbers) == 1 and len(numbers[0]) >= 4:
        value = int(numbers[0])
        return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"
    return ".".join(numbers)


#: What a message says about which package the error comes from, by the failing library's path.
_EXTENSIONS = (
    ("flash_attn", "flash-attn"),
    ("xformers", "xformers"),
    ("vllm", "vllm"),
    ("deepspeed", "deepspeed"),
    ("torch_extensions", "deepspeed"),
    ("bitsandbytes", "bitsandbytes"),
    ("apex", "apex"),
    ("torchvision", "torchvision"),
    ("torchaudio", "torchaudio"),
    ("mmcv", "mmcv"),
)


def extension_package(library: str) -> str | None:
    """The distribution whose compiled extension ``library`` is (a path in the message)."""
    lowered = library.lower()
    for marker, package in _EXTENSIONS:
        if marker in lowered:
            return package
    return None


__all__ = [
    "ARCH_UNSUPPORTED",
    "CUDA_UNAVAILABLE",
    "CUDNN_MISMATCH",
    "DEEPSPEED_OPS_MISMATCH",
    "DRIVER_INSUFFICIENT",
    "DRIVER_LIBRARY_MISMATCH",
    "DRIVER_TOO_OLD",
    "FLASH_ATTN_GPU_TOO_OLD",
    "FORWARD_COMPAT_UNSUPPORTED",
    "LIBRARY_MISSING",
    "NOT_COMPILED_WITH_CUDA",
    "NO_KERNEL_IMAGE",
    "NVCC_MISMATCH",
    "PHRASES",
    "PYG_CUDA_MISMATCH",
    "TORCHVISION_OPERATOR_MISSING",
    "UNDEFINED_SYMBOL",
    "XFORMERS_BUILT_FOR",
    "extension_package",
    "read_message",
    "with_xformers_python",
]
