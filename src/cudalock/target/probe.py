"""Reading this machine: the NVIDIA driver, its GPUs and the host, as a :class:`Target`.

Sources, in order: NVML (through nvidia-ml-py's ``pynvml``), then the kernel module's version
files (``/proc/driver/nvidia/version``, ``/sys/module/nvidia/version``), then ``nvidia-smi``.
Nothing here raises for a machine problem: what went wrong becomes a note on the Target, and
``Target.source`` says which source answered.

The I/O boundaries are parameters so tests can replace them: ``nvml`` (anything shaped like the
``pynvml`` module, see :class:`NvmlLike`), ``proc_root`` / ``sys_root`` (prepared trees),
``environ`` and ``run_nvidia_smi``. The parsers below them are pure functions.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cudalock.errors import CudalockError
from cudalock.model import Gpu, Host, Target
from cudalock.versions import (
    CudaVersion,
    DriverVersion,
    cuda_from_nvml,
    format_cc,
    format_cuda,
    parse_compute_capability,
)

if TYPE_CHECKING:
    from cudalock.matrix.load import Matrix

# NVML return codes (nvml.h); pynvml raises NVMLError subclasses carrying them as ``.value``.
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

#: cgroup v1 reports "no limit" as a huge page-aligned number (e.g. 9223372036854771712).
_CGROUP_V1_UNLIMITED = 1 << 60

NVIDIA_SMI_QUERY_FIELDS = ("index", "name", "uuid", "driver_version", "compute_cap",
                           "memory.total")


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


# --------------------------------------------------------------------------------------------
# Pure parsers


_PROC_VERSION_RE = re.compile(
    r"NVRM version:.*?Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+){1,2})\b"
)


def parse_proc_driver_version(text: str) -> DriverVersion | None:
    """The loaded kernel module's version from ``/proc/driver/nvidia/version``.

    Proprietary: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  <date>``;
    open: ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build``.
    """
    for line in text.splitlines():
        match = _PROC_VERSION_RE.search(line)
        if match:
            return _driver_or_none(match.group(1))
    return None


def parse_sys_driver_version(text: str) -> DriverVersion | None:
    """``/sys/module/nvidia/version`` holds just the version, e.g. ``580.95.05``."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return _driver_or_none(first)


def _driver_or_none(text: str) -> DriverVersion | None:
    try:
        return DriverVersion(text)
    except CudalockError:
        return None


def parse_proc_gpu_information(text: str) -> tuple[str | None, str | None, int | None]:
    """Model, UUID and device minor from ``/proc/driver/nvidia/gpus/<bus>/information``."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip().lower()] = value.strip()
    minor = fields.get("device minor", "")
    return (
        fields.get("model") or None,
        fields.get("gpu uuid") or None,
        int(minor) if minor.isdecimal() else None,
    )


@dataclass(frozen=True)
class SmiGpu:
    """One row of ``nvidia-smi --query-gpu=... --format=csv,nounits``."""

    index: int | None
    name: str
    uuid: str | None
    driver_version: DriverVersion | None
    compute_capability: tuple[int, int] | None
    memory_total_bytes: int | None


def parse_nvidia_smi_csv(text: str) -> list[SmiGpu]:
    """Rows of nvidia-smi's CSV query output; the header names the columns.

    Columns are found by header so old nvidia-smi without ``compute_cap`` (e.g. 470.x) still
    parses. Values such as ``[N/A]`` become None. Memory is in MiB (``memory.total [MiB]``).
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in lines[0].split(",")]
    if "name" not in header and "driver_version" not in header:
        return []
    rows: list[SmiGpu] = []
    for line in lines[1:]:
        # GPU names contain no commas, so a plain split is what nvidia-smi's CSV needs.
        cells = dict(zip(header, (c.strip() for c in line.split(",")), strict=False))
        rows.append(
            SmiGpu(
                index=_int_or_none(cells.get("index")),
                name=_smi_value(cells.get("name")) or "unknown NVIDIA GPU",
                uuid=_smi_value(cells.get("uuid")),
                driver_version=_driver_or_none(_smi_value(cells.get("driver_version")) or ""),
                compute_capability=_cc_or_none(_smi_value(cells.get("compute_cap"))),
                memory_total_bytes=_mib_to_bytes(_smi_value(cells.get("memory.total"))),
            )
        )
    return rows


def _smi_value(value: str | None) -> str | None:
    if value is None:
        return None
    cleaned = value.strip()
    if not cleaned or cleaned.strip("[]").lower() in ("n/a", "not supported", "unknown error"):
        return None
    return cleaned


def _int_or_none(value: str | None) -> int | None:
    cleaned = _smi_value(value)
    return int(cleaned) if cleaned and cleaned.isdecimal() else None


def _cc_or_none(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        return parse_compute_capability(value)
    except CudalockError:
        return None


def _mib_to_bytes(value: str | None) -> int | None:
    if value is None:
        return None
    number = value.split()[0]
    return int(number) * 1024 * 1024 if number.isdecimal() else None


def parse_meminfo_total(text: str) -> int | None:
    """``MemTotal:       32780352 kB`` from ``/proc/meminfo``, in bytes."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdecimal():
                unit = parts[2].lower() if len(parts) > 2 else "kb"
                return int(parts[1]) * (1024 if unit == "kb" else 1)
    return None


def parse_cgroup_limit(text: str) -> int | None:
    """A cgroup memory limit file's value in bytes; None for no limit.

    v2 ``memory.max`` says ``max``; v1 ``memory.limit_in_bytes`` says a huge number.
    """
    value = text.strip()
    if not value.isdecimal():
        return None
    number = int(value)
    return None if number >= _CGROUP_V1_UNLIMITED else number


def parse_proc_self_cgroup(text: str) -> tuple[str | None, str | None]:
    """The v2 path (``0::/path``) and the v1 memory controller path (``N:memory:/path``)."""
    v2_path: str | None = None
    v1_memory_path: str | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2_path = path.strip()
        elif "memory" in controllers.split(","):
            v1_memory_path = path.strip()
    return v2_path, v1_memory_path


def platform_for(system: str, machine: str) -> str:
    """cudalock's platform string: ``linux-x86_64``, ``linux-aarch64``, ``windows-x86_64``,
    ``macos-arm64`` (other combinations keep the same ``os-arch`` shape)."""
    system_name = os_name(system)
    arch = normalise_arch(machine)
    if system_name == "macos" and arch == "aarch64":
        arch = "arm64"  # Apple's and PyTorch's name for it
    return f"{system_name}-{arch}"


def os_name(system: str) -> str:
    """``platform.system()`` (or ``sys.platform``) as cudalock names it: linux, windows, macos."""
    lowered = system.lower()
    return {"darwin": "macos", "win32": "windows"}.get(lowered, lowered or "unknown")


def normalise_arch(machine: str) -> str:
    lowered = machine.lower()
    if lowered in ("amd64", "x86_64", "x64"):
        return "x86_64"
    if lowered in ("arm64", "aarch64", "armv8", "armv8l"):
        return "aarch64"
    return lowered or "unknown"


@dataclass(frozen=True)
class VisibleDevices:
    """What ``CUDA_VISIBLE_DEVICES`` leaves visible to CUDA, as NVML indices."""

    indices: tuple[int, ...]
    #: False when CUDA's numbering may differ from NVML's (mixed GPUs, FASTEST_FIRST order).
    exact: bool


def cuda_visible_devices(value: str, gpus: Sequence[Gpu], device_order: str | None) -> (
        VisibleDevices):
    """Which of ``gpus`` (NVML order) a CUDA program sees under ``CUDA_VISIBLE_DEVICES=value``.

    CUDA reads the list up to the first entry it cannot use (an unknown index or UUID, ``-1``,
    a repeat): that entry and the rest are ignored. Integer entries count in CUDA's own order,
    which is fastest-first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; NVML counts in PCI bus
    order. The two agree when the GPUs are all the same model, so only then are indices exact.
    """
    same_model = len({g.name for g in gpus}) <= 1
    pci_order = (device_order or "").strip().upper() == "PCI_BUS_ID"
    exact = True
    chosen: list[int] = []
    for raw in value.split(","):
        entry = raw.strip()
        position: int | None = None
        if re.fullmatch(r"\d+", entry):
            number = int(entry)
            if number < len(gpus):
                position = number
                exact = exact and (same_model or pci_order)
        elif entry.upper().startswith(("GPU-", "MIG-")):
            # CUDA accepts any unambiguous UUID prefix.
            matches = [i for i, g in enumerate(gpus)
                       if g.uuid and g.uuid.lower().startswith(entry.lower())]
            if len(matches) == 1:
                position = matches[0]
        if position is None or position in chosen:
            break
        chosen.append(position)
    return VisibleDevices(tuple(chosen), exact)


# --------------------------------------------------------------------------------------------
# Reading the machine


@dataclass
class _Findings:
    """What the probe has learned so far (mutable while probing, frozen into a Target)."""

    driver_version: DriverVersion | None = None
    driver_cuda: CudaVersion | None = None
    gpus: list[Gpu] = field(default_factory=list)
    source: str = "none"
    notes: list[str] = field(default_factory=list)
    nvml_error_code: int | None = None


def probe_machine(
    *,
    proc_root: Path = Path("/proc"),
    sys_root: Path = Path("/sys"),
    nvml: NvmlLike | None = None,
    environ: Mapping[str, str] | None = None,
    run_nvidia_smi: Callable[[], str | None] | None = None,
    matrix: Matrix | None = None,
) -> Target:
    """Describe this machine. Never raises for machine problems: they become ``notes``."""
    env = os.environ if environ is None else environ
    platform = platform_for(*system_and_machine())
    matrix_source = _MatrixOnDemand(matrix)
    found = _Findings()

    _read_nvml(found, nvml)
    if found.driver_version is None and found.driver_cuda is None:
        _read_kernel_module(found, proc_root, sys_root, matrix_source)
    if found.driver_version is None and found.driver_cuda is None:
        _read_nvidia_smi(found, run_nvidia_smi or default_nvidia_smi, matrix_source)
    if found.nvml_error_code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        loaded = f", {found.driver_version}" if found.driver_version else ""
        found.notes.append(
            "NVML error 18, NVML/driver version mismatch: the NVIDIA driver was upgraded without "
            f"a reboot, so its library no longer matches the running kernel module{loaded}. "
            "Reboot (or reload the nvidia kernel modules) before using the GPUs; until then CUDA "
            "programs fail to initialise."
        )
    if found.driver_version is not None and found.driver_cuda is None:
        _cuda_from_matrix(found, platform, matrix_source)
    if found.driver_version is None and found.driver_cuda is None:
        found.notes.insert(0, "no NVIDIA driver found: this is a CPU-only target")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and found.gpus:
        found.notes.append(_visible_devices_note(visible, found.gpus,
                                                 env.get("CUDA_DEVICE_ORDER")))
    return Target(
        platform=platform,
        driver_version=found.driver_version,
        driver_cuda=found.driver_cuda,
        gpus=tuple(found.gpus),
        host=probe_host(proc_root=proc_root, sys_root=sys_root),
        name="this machine",
        source=found.source,
        notes=tuple(found.notes),
    )


class _MatrixOnDemand:
    """The matrix, loaded only when a fallback needs its tables (a failure becomes a note)."""

    def __init__(self, matrix: Matrix | None) -> None:
        self._matrix = matrix
        self._tried = matrix is not None
        self.problem: str | None = None

    def get(self) -> Matrix | None:
        if not self._tried:
            self._tried = True
            from cudalock.matrix.load import load_matrix

            try:
                self._matrix = load_matrix()
            except CudalockError as err:
                self.problem = err.message
        return self._matrix


def _load_pynvml(found: _Findings) -> NvmlLike | None:
    try:
        with warnings.catch_warnings():
            # The deprecated "pynvml" distribution, when installed next to nvidia-ml-py, hooks
            # every pynvml import to warn; the module imported is still nvidia-ml-py's.
            warnings.simplefilter("ignore", FutureWarning)
            import pynvml
    except ImportError:
        found.notes.append("NVML not read: the nvidia-ml-py package (module pynvml) is not "
                           "installed")
        return None
    return pynvml  # type: ignore[no-any-return]


def _nvml_library_loadable() -> bool:
    """Whether libnvidia-ml loads, asked the way nvidia-ml-py asks, without importing pynvml.

    pynvml is a large module (~15 ms to import); on the many machines without an NVIDIA driver
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


def _read_nvml(found: _Findings, nvml: NvmlLike | None) -> None:
    if nvml is None and not _nvml_library_loadable():
        found.nvml_error_code = NVML_ERROR_LIBRARY_NOT_FOUND
        found.notes.append(_library_not_found_note(
            f"NVML Shared Library Not Found (NVML error {NVML_ERROR_LIBRARY_NOT_FOUND})"))
        return
    library = nvml if nvml is not None else _load_pynvml(found)
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


def _read_nvml_initialised(found: _Findings, library: NvmlLike,
                           nvml_error: type[Exception]) -> None:
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
        found.driver_version = _driver_or_none(_text(text))
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
        cc = ask(f"GPU {index}'s compute capability",
                 library.nvmlDeviceGetCudaComputeCapability, handle)
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


def _nvml_cuda_version(found: _Findings, library: NvmlLike,
                       nvml_error: type[Exception]) -> CudaVersion | None:
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
    found.notes.append("NVML could not tell the driver's CUDA version (" + "; ".join(problems)
                       + ")")
    return None


def _nvml_cc(value: Any) -> tuple[int, int] | None:
    if (isinstance(value, tuple | list) and len(value) == 2
            and all(isinstance(v, int) and v >= 0 for v in value)):
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
    return (f"NVML library (libnvidia-ml) not found: {described}. No NVIDIA driver is "
            "installed here, or this is a container started without GPU access "
            "(docker --gpus / the NVIDIA container runtime).")


def _init_failure_note(err: Exception) -> str:
    code = _nvml_code(err)
    described = _describe_nvml_error(err)
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return _library_not_found_note(described)
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return (f"NVIDIA driver not loaded: {described}. The driver's libraries are installed "
                "but the nvidia kernel module is not running (see 'lsmod | grep nvidia' and "
                "'dmesg'; a Secure Boot or kernel-update mismatch is a common cause).")
    if code == NVML_ERROR_NO_PERMISSION:
        return (f"NVML could not start: {described}: this user may not open /dev/nvidia* "
                "devices.")
    return f"NVML could not start: {described}."


def _read_kernel_module(found: _Findings, proc_root: Path, sys_root: Path,
                        matrix: _MatrixOnDemand) -> None:
    proc_file = proc_root / "driver" / "nvidia" / "version"
    sys_file = sys_root / "module" / "nvidia" / "version"
    for path, parse in ((proc_file, parse_proc_driver_version),
                        (sys_file, parse_sys_driver_version)):
        text = read_text_or_none(path)
        if text is None:
            continue
        version = parse(text)
        if version is None:
            found.notes.append(f"{path} has no driver version I can read: "
                               f"{text.strip().splitlines()[0][:120] if text.strip() else ''!r}")
            continue
        found.driver_version = version
        found.source = "procfs"
        found.notes.append(f"driver version {version} read from {path} (the loaded kernel "
                           "module)")
        break
    if found.driver_version is not None and not found.gpus:
        found.gpus.extend(_proc_gpus(proc_root, matrix))


def _proc_gpus(proc_root: Path, matrix: _MatrixOnDemand) -> list[Gpu]:
    """GPU models from ``/proc/driver/nvidia/gpus/*/information``; CC from the matrix."""
    directory = proc_root / "driver" / "nvidia" / "gpus"
    try:
        buses = sorted(p for p in directory.iterdir() if p.is_dir())
    except OSError:
        return []
    gpus: list[Gpu] = []
    for position, bus in enumerate(buses):
        text = read_text_or_none(bus / "information")
        if text is None:
            continue
        model, uuid, minor = parse_proc_gpu_information(text)
        name = model or "unknown NVIDIA GPU"
        loaded = matrix.get()
        known = loaded.gpu_by_name(name) if loaded is not None else None
        gpus.append(Gpu(
            name=name,
            compute_capability=known.compute_capability if known else None,
            index=minor if minor is not None else position,
            uuid=uuid,
        ))
    return gpus


def default_nvidia_smi() -> str | None:
    """nvidia-smi's CSV query output, or None when it is missing or fails."""
    executable = find_executable("nvidia-smi")
    if executable is None:
        return None
    import subprocess  # here: only a machine with nvidia-smi but no NVML gets this far

    fields = list(NVIDIA_SMI_QUERY_FIELDS)
    for attempt in (fields, [f for f in fields if f != "compute_cap"]):
        # Old nvidia-smi (e.g. 470.x) rejects compute_cap; ask again without it.
        try:
            completed = subprocess.run(  # noqa: S603 - fixed arguments, no shell
                [executable, f"--query-gpu={','.join(attempt)}", "--format=csv,nounits"],
                capture_output=True, text=True, timeout=20, check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        if completed.returncode == 0:
            return completed.stdout
    return None


def find_executable(name: str) -> str | None:
    """``shutil.which(name)``; on POSIX without importing shutil.

    Every probe of a machine without a driver asks for nvidia-smi, and importing shutil (which
    loads its compression modules) costs more than the rest of that probe.
    """
    if os.name != "posix":
        import shutil

        return shutil.which(name)
    for directory in os.get_exec_path():
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _read_nvidia_smi(found: _Findings, run: Callable[[], str | None],
                     matrix: _MatrixOnDemand) -> None:
    try:
        output = run()
    except Exception as err:  # a failing helper is a note, not a crash
        found.notes.append(f"nvidia-smi failed: {type(err).__name__}: {err}")
        return
    if not output:
        return
    rows = parse_nvidia_smi_csv(output)
    versions = [r.driver_version for r in rows if r.driver_version is not None]
    if not versions:
        return
    found.driver_version = versions[0]
    found.source = "nvidia-smi"
    found.notes.append(f"driver version {versions[0]} read from nvidia-smi")
    loaded = matrix.get()
    for position, row in enumerate(rows):
        cc = row.compute_capability
        if cc is None and loaded is not None:
            known = loaded.gpu_by_name(row.name)
            cc = known.compute_capability if known else None
        found.gpus.append(Gpu(
            name=row.name,
            compute_capability=cc,
            index=row.index if row.index is not None else position,
            uuid=row.uuid,
            memory_total_bytes=row.memory_total_bytes,
        ))


def _cuda_from_matrix(found: _Findings, platform: str, matrix: _MatrixOnDemand) -> None:
    assert found.driver_version is not None
    loaded = matrix.get()
    if loaded is None:
        found.notes.append(f"the driver's maximum CUDA version is unknown: the matrix could not "
                           f"be loaded ({matrix.problem})")
        return
    found.driver_cuda = loaded.max_cuda_for_driver(found.driver_version, platform)
    if found.driver_cuda is None:
        found.notes.append(f"the driver's maximum CUDA version is unknown: driver "
                           f"{found.driver_version} is older than every CUDA release in the matrix")
    else:
        found.notes.append(f"maximum CUDA {format_cuda(found.driver_cuda)} taken from the "
                           f"matrix's CUDA driver table for driver {found.driver_version}")


def _visible_devices_note(value: str, gpus: Sequence[Gpu], device_order: str | None) -> str:
    shown = f"CUDA_VISIBLE_DEVICES={value!r}"
    if "mig-" in value.lower():
        return (f"{shown} selects MIG instances: CUDA programs see those slices, not whole GPUs "
                f"(NVML lists all {len(gpus)} GPUs; the Target keeps them all)")
    visible = cuda_visible_devices(value, gpus, device_order)
    if not visible.indices:
        return (f"{shown} hides every GPU from CUDA programs (NVML still lists all "
                f"{len(gpus)}; the Target keeps them)")
    names = ", ".join(
        f"{gpus[i].index if gpus[i].index is not None else i} {gpus[i].name}"
        for i in visible.indices
    )
    note = (f"{shown}: CUDA programs see {len(visible.indices)} of {len(gpus)} GPUs: {names} "
            f"(NVML lists all {len(gpus)}; the Target keeps them all)")
    if not visible.exact:
        note += ("; CUDA numbers mixed GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, "
                 "so its index may not be NVML's index shown here")
    return note


# --------------------------------------------------------------------------------------------
# The host


def probe_host(*, proc_root: Path = Path("/proc"), sys_root: Path = Path("/sys")) -> Host:
    """OS, architecture, glibc, RAM and the cgroup memory limit of this machine."""
    meminfo = read_text_or_none(proc_root / "meminfo")
    system, machine = system_and_machine()
    return Host(
        os=os_name(system),
        arch=normalise_arch(machine),
        glibc=glibc_version(),
        memory_total_bytes=parse_meminfo_total(meminfo) if meminfo else None,
        cgroup_memory_limit_bytes=cgroup_memory_limit(proc_root=proc_root, sys_root=sys_root),
        hostname=hostname(),
    )


def system_and_machine() -> tuple[str, str]:
    """``platform.system()`` and ``platform.machine()``: from ``os.uname()`` where it exists.

    Both ``platform`` and ``socket`` take milliseconds to import, and every command probes.
    """
    if hasattr(os, "uname"):
        uname = os.uname()
        return uname.sysname, uname.machine
    import platform

    return platform.system(), platform.machine()


def hostname() -> str | None:
    """``socket.gethostname()``: the uname node name where there is one (the same call)."""
    if hasattr(os, "uname"):
        return os.uname().nodename or None
    import socket

    return socket.gethostname() or None


def glibc_version() -> str | None:
    """``"2.36"``; None on musl, macOS and Windows."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        text = None
    if text and text.startswith("glibc "):
        return text.split()[1]
    import platform

    library, version = platform.libc_ver()
    return version if library == "glibc" and version else None


def cgroup_memory_limit(*, proc_root: Path = Path("/proc"),
                        sys_root: Path = Path("/sys")) -> int | None:
    """The tightest memory limit on this process's cgroup and its ancestors; None for none.

    The process's cgroup path comes from ``/proc/self/cgroup``. Inside a container that path
    often does not exist under the container's ``/sys/fs/cgroup`` (which is its own root), so
    the root's file counts too.
    """
    base = sys_root / "fs" / "cgroup"
    own_cgroup = read_text_or_none(proc_root / "self" / "cgroup") or ""
    v2_path, v1_path = parse_proc_self_cgroup(own_cgroup)
    limits: list[int] = []
    if (base / "cgroup.controllers").exists() or v2_path is not None:
        limits.extend(_limits_along(base, v2_path, "memory.max"))
    limits.extend(_limits_along(base / "memory", v1_path, "memory.limit_in_bytes"))
    return min(limits) if limits else None


def _limits_along(root: Path, path: str | None, file_name: str) -> list[int]:
    limits: list[int] = []
    for _relative, directory in cgroup_ancestry(root, path or "/"):
        text = read_text_or_none(directory / file_name)
        limit = parse_cgroup_limit(text) if text is not None else None
        if limit is not None:
            limits.append(limit)
    return limits


def cgroup_ancestry(base: Path, relative: str) -> list[tuple[str, Path]]:
    """The process's cgroup and its parents that exist under ``base``, leaf first.

    Inside a container with its own cgroup namespace the recorded path may not exist under
    the mount; then the mount root itself is the container's cgroup.
    """
    parts = [p for p in relative.strip("/").split("/") if p and p != ".."]
    chain: list[tuple[str, Path]] = []
    for depth in range(len(parts), -1, -1):
        rel = "/" + "/".join(parts[:depth])
        directory = base.joinpath(*parts[:depth])
        if directory.is_dir():
            chain.append((rel, directory))
    return chain


def read_text_or_none(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def describe_memory(value: int | None) -> str:
    """Bytes as GiB for people (``80.0 GiB``)."""
    if value is None:
        return "unknown"
    return f"{value / (1 << 30):.1f} GiB"


def format_gpu(gpu: Gpu) -> str:
    cc = format_cc(gpu.compute_capability) if gpu.compute_capability else "unknown"
    parts = [f"{gpu.index}: " if gpu.index is not None else "", gpu.name, f"  CC {cc}"]
    if gpu.memory_total_bytes is not None:
        parts.append(f"  {describe_memory(gpu.memory_total_bytes)}")
    if gpu.uuid:
        parts.append(f"  {gpu.uuid}")
    return "".join(parts)
