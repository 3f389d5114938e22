"""Reading the driver and its GPUs through NVML (nvidia-ml-py's ``pynvml`` module).

Tests pass a stand-in shaped like the module (:class:`NvmlLike`) built from recorded answers; it
raises pynvml's real ``NVMLError`` subclasses, so the error handling here is the code that runs
on real machines."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from cudalock.machine.driver import DriverFindings, driver_or_none
from cudalock.model import Gpu
from cudalock.versions import (
    CudaVersion,
    cuda_from_nvml,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    "NVML_ERROR_NO_PERMISSION",
    "NvmlLike",
    "load_pynvml",
    "nvml_library_loadable",
    "read_nvml",
]


# NVML return codes (nvml.h); pynvml raises NVMLError subclasses carrying them as ``.value``.
NVML_ERROR_NO_PERMISSION = 4


NVML_ERROR_DRIVER_NOT_LOADED = 9


NVML_ERROR_LIBRARY_NOT_FOUND = 12


NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18


class NvmlLike(Protocol):
    """The part of the ``pynvml`` module (nvidia-ml-py) the probe calls.

    Tests pass a fake built from recorded answers; it raises pynvml's real ``NVMLError``
    subclasses, so the error handling below is the code that runs on real machines.
    """

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlSystemGetCudaDriverVersion_v2(self) -> int: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...


def load_pynvml(found: DriverFindings) -> NvmlLike | None:
    try:
        with warnings.catch_warnings():
            # The deprecated "pynvml" distribution, when installed next to nvidia-ml-py, hooks
            # every pynvml import to warn; the module imported is still nvidia-ml-py's.
            warnings.simplefilter("ignore", FutureWarning)
            import pynvml
    except ImportError:
        found.notes.append(
            "NVML not read: the nvidia-ml-py package (module pynvml) is not installed"
        )
        return None
    return pynvml  # type: ignore[no-any-return]


def nvml_library_loadable() -> bool:
    """Whether libnvidia-ml loads, asked the way nvidia-ml-py asks, without importing pynvml.

    pynvml is a large module; on the many machines without an NVIDIA driver
    this answers the same question for the price of one failed dlopen.
    """
    if not sys.platform.startswith("linux"):
        return True  # pynvml knows where the library lives on Windows
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")  # the name nvidia-ml-py loads on Linux
    except OSError:
        return False
    return True


def read_nvml(found: DriverFindings, nvml: NvmlLike | None) -> None:
    if nvml is None and not nvml_library_loadable():
        found.nvml_error_code = NVML_ERROR_LIBRARY_NOT_FOUND
        found.notes.append(
            _library_not_found_note(
                f"NVML Shared Library Not Found (NVML error {NVML_ERROR_LIBRARY_NOT_FOUND})"
            )
        )
        return
    library = nvml if nvml is not None else load_pynvml(found)
    if library is None:
        return
    nvml_error: type[Exception] = getattr(library, "NVMLError", Exception)
    try:
        library.nvmlInit()
    except nvml_error as err:
        found.nvml_error_code = _nvml_code(err)
        if found.nvml_error_code != NVML_ERROR_LIB_RM_VERSION_MISMATCH:
            found.notes.append(_init_failure_note(err))  # 18 gets its own note, with the fix
        return
    except Exception as err:  # a broken binding must not stop the probe
        found.notes.append(f"NVML could not start: {type(err).__name__}: {err}")
        return
    try:
        _read_nvml_initialised(found, library, nvml_error)
    finally:
        with contextlib.suppress(Exception):
            library.nvmlShutdown()


def _read_nvml_initialised(
    found: DriverFindings, library: NvmlLike, nvml_error: type[Exception]
) -> None:
    def ask(what: str, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except nvml_error as err:
            found.notes.append(f"NVML could not tell {what}: {_describe_nvml_error(err)}")
        except Exception as err:  # e.g. a binding too old for the call
            found.notes.append(f"NVML could not tell {what}: {type(err).__name__}: {err}")
        return None

    text = ask("the driver version", library.nvmlSystemGetDriverVersion)
    if text is not None:
        found.driver_version = driver_or_none(_text(text))
        if found.driver_version is None:
            found.notes.append(f"NVML reported an unreadable driver version {_text(text)!r}")
    found.driver_cuda = _nvml_cuda_version(found, library, nvml_error)
    found.source = "nvml"

    count = ask("the number of GPUs", library.nvmlDeviceGetCount)
    for index in range(count if isinstance(count, int) else 0):
        handle = ask(f"GPU {index}", library.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            continue
        name = ask(f"GPU {index}'s name", library.nvmlDeviceGetName, handle)
        uuid = ask(f"GPU {index}'s UUID", library.nvmlDeviceGetUUID, handle)
        cc = ask(
            f"GPU {index}'s compute capability", library.nvmlDeviceGetCudaComputeCapability, handle
        )
        memory = ask(f"GPU {index}'s memory", library.nvmlDeviceGetMemoryInfo, handle)
        total = getattr(memory, "total", None)
        found.gpus.append(
            Gpu(
                name=_text(name) if name is not None else f"GPU {index}",
                compute_capability=_nvml_cc(cc),
                index=index,
                uuid=_text(uuid) if uuid is not None else None,
                memory_total_bytes=int(total) if isinstance(total, int) else None,
            )
        )


def _nvml_cuda_version(
    found: DriverFindings, library: NvmlLike, nvml_error: type[Exception]
) -> CudaVersion | None:
    """v2 asks libcuda itself; v1 (older drivers/bindings) may fall back to a built-in value."""
    problems: list[str] = []
    for call in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        try:
            value = getattr(library, call)()
        except nvml_error as err:
            problems.append(f"{call}: {_describe_nvml_error(err)}")
            continue
        except Exception as err:  # AttributeError on old bindings, for one
            problems.append(f"{call}: {type(err).__name__}: {err}")
            continue
        if isinstance(value, int) and value > 0:
            return cuda_from_nvml(value)
        problems.append(f"{call}: unreadable value {value!r}")
    found.notes.append(
        "NVML could not tell the driver's CUDA version (" + "; ".join(problems) + ")"
    )
    return None


def _nvml_cc(value: Any) -> tuple[int, int] | None:
    if (
        isinstance(value, tuple | list)
        and len(value) == 2
        and all(isinstance(v, int) and v >= 0 for v in value)
    ):
        return int(value[0]), int(value[1])
    return None


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _nvml_code(err: Exception) -> int | None:
    code = getattr(err, "value", None)
    return code if isinstance(code, int) else None


def _describe_nvml_error(err: Exception) -> str:
    code = _nvml_code(err)
    try:
        text = str(err).rstrip(".")
    except Exception:  # pynvml's __str__ calls into the library
        text = type(err).__name__
    return f"{text} (NVML error {code})" if code is not None else text


def _library_not_found_note(described: str) -> str:
    return (
        f"NVML library (libnvidia-ml) not found: {described}. No NVIDIA driver is "
        "installed here, or this is a container started without GPU access "
        "(docker --gpus / the NVIDIA container runtime)."
    )


def _init_failure_note(err: Exception) -> str:
    code = _nvml_code(err)
    described = _describe_nvml_error(err)
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return _library_not_found_note(described)
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return (
            f"NVIDIA driver not loaded: {described}. The driver's libraries are installed "
            "but the nvidia kernel module is not running (see 'lsmod | grep nvidia' and "
            "'dmesg'; a Secure Boot or kernel-update mismatch is a common cause)."
        )
    if code == NVML_ERROR_NO_PERMISSION:
        return f"NVML could not start: {described}: this user may not open /dev/nvidia* devices."
    return f"NVML could not start: {described}."
