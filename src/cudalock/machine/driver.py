"""The probe's other sources of driver facts, for when NVML cannot answer: the kernel module's
version files (``/proc/driver/nvidia``, ``/sys/module/nvidia``) and ``nvidia-smi``.

The parsers are pure functions; the readers add what they learn to a :class:`DriverFindings`."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cudalock.errors import CudalockError
from cudalock.machine.host import read_text_or_none
from cudalock.matrix import load_matrix
from cudalock.model import Gpu
from cudalock.versions import (
    CudaVersion,
    DriverVersion,
    format_cuda,
    parse_compute_capability,
)

if TYPE_CHECKING:
    from cudalock.matrix import Matrix

__all__ = [
    "NVIDIA_SMI_QUERY_FIELDS",
    "NVIDIA_SMI_TIMEOUT_S",
    "DriverFindings",
    "MatrixOnDemand",
    "SmiGpu",
    "cuda_from_matrix",
    "default_nvidia_smi",
    "driver_or_none",
    "parse_nvidia_smi_csv",
    "parse_proc_driver_version",
    "parse_proc_gpu_information",
    "parse_sys_driver_version",
    "read_kernel_module",
    "read_nvidia_smi",
]


NVIDIA_SMI_QUERY_FIELDS = ("index", "name", "uuid", "driver_version", "compute_cap", "memory.total")
#: A line per GPU: a few kB at most.
_SMI_OUTPUT_LIMIT = 1 * 2**20
#: How long nvidia-smi may take; one that hangs (a wedged driver or GPU) is stopped after it.
NVIDIA_SMI_TIMEOUT_S = 20.0


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
            return driver_or_none(match.group(1))
    return None


def parse_sys_driver_version(text: str) -> DriverVersion | None:
    """``/sys/module/nvidia/version`` holds just the version, e.g. ``580.95.05``."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return driver_or_none(first)


def driver_or_none(text: str) -> DriverVersion | None:
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
        int(minor) if minor.isdecimal() and len(minor) <= 9 else None,
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
                driver_version=driver_or_none(_smi_value(cells.get("driver_version")) or ""),
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
    return int(cleaned) if cleaned and cleaned.isdecimal() and len(cleaned) <= 18 else None


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
    return int(number) * 1024 * 1024 if number.isdecimal() and len(number) <= 18 else None


@dataclass
class DriverFindings:
    """What the probe has learned so far (mutable while probing, frozen into a Target)."""

    driver_version: DriverVersion | None = None
    driver_cuda: CudaVersion | None = None
    gpus: list[Gpu] = field(default_factory=list)
    source: str = "none"
    notes: list[str] = field(default_factory=list)
    nvml_error_code: int | None = None
    #: nvidia-smi is there but gave no answer (hung, flooded): the driver is unknown, not absent.
    smi_failed: bool = False


class MatrixOnDemand:
    """The matrix, loaded only when a fallback needs its tables (a failure becomes a note)."""

    def __init__(self, matrix: Matrix | None) -> None:
        self._matrix = matrix
        self._tried = matrix is not None
        self.problem: str | None = None

    def get(self) -> Matrix | None:
        if not self._tried:
            self._tried = True

            try:
                self._matrix = load_matrix()
            except CudalockError as err:
                self.problem = err.message
        return self._matrix


def read_kernel_module(
    found: DriverFindings, proc_root: Path, sys_root: Path, matrix: MatrixOnDemand
) -> None:
    proc_file = proc_root / "driver" / "nvidia" / "version"
    sys_file = sys_root / "module" / "nvidia" / "version"
    for path, parse in (
        (proc_file, parse_proc_driver_version),
        (sys_file, parse_sys_driver_version),
    ):
        text = read_text_or_none(path)
        if text is None:
            continue
        version = parse(text)
        if version is None:
            found.notes.append(
                f"{path} has no driver version I can read: "
                f"{text.strip().splitlines()[0][:120] if text.strip() else ''!r}"
            )
            continue
        found.driver_version = version
        found.source = "procfs"
        found.notes.append(f"driver version {version} read from {path} (the loaded kernel module)")
        break
    if found.driver_version is not None and not found.gpus:
        found.gpus.extend(_proc_gpus(proc_root, matrix))


def _proc_gpus(proc_root: Path, matrix: MatrixOnDemand) -> list[Gpu]:
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
        gpus.append(
            Gpu(
                name=name,
                compute_capability=known.compute_capability if known else None,
                index=minor if minor is not None else position,
                uuid=uuid,
            )
        )
    return gpus


def _on_path(name: str) -> str | None:
    """``shutil.which(name)`` for a plain name on POSIX, without importing shutil (and the
    compression modules it brings) into every command that probes."""
    if os.name != "posix":
        import shutil

        return shutil.which(name)
    path = os.environ.get("PATH", os.defpath)
    if not path:
        return None  # an empty PATH names no directory, as for shutil.which
    for directory in path.split(os.pathsep):
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def default_nvidia_smi() -> str | None:
    """nvidia-smi's CSV query output, or None when it is missing or answers an error.

    One that hangs or floods its output raises (the caller says so: the driver is unknown).
    """
    executable = _on_path("nvidia-smi")
    if executable is None:
        return None
    from cudalock import procs  # subprocess, only when there is something to run

    fields = list(NVIDIA_SMI_QUERY_FIELDS)
    for attempt in (fields, [f for f in fields if f != "compute_cap"]):
        # Old nvidia-smi (e.g. 470.x) rejects compute_cap; ask again without it.
        try:
            completed = procs.run(
                [executable, f"--query-gpu={','.join(attempt)}", "--format=csv,nounits"],
                what="nvidia-smi",
                timeout=NVIDIA_SMI_TIMEOUT_S,
                output_limit=_SMI_OUTPUT_LIMIT,
            )
        except OSError:  # cannot start: no answer
            return None
        if completed.returncode == 0:
            return completed.stdout_text()
    return None


def read_nvidia_smi(
    found: DriverFindings, run: Callable[[], str | None], matrix: MatrixOnDemand
) -> None:
    try:
        output = run()
    except CudalockError as err:  # hung or flooded: said, since the driver is then unknown
        found.smi_failed = True
        found.notes.append(
            f"nvidia-smi gave no answer ({err.message}): the NVIDIA driver could not be read, so "
            "nothing is known of its GPUs; give --driver-version or --driver-cuda, or fix the "
            "driver (a hung GPU or driver makes nvidia-smi hang)"
        )
        return
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
        found.gpus.append(
            Gpu(
                name=row.name,
                compute_capability=cc,
                index=row.index if row.index is not None else position,
                uuid=row.uuid,
                memory_total_bytes=row.memory_total_bytes,
            )
        )


def cuda_from_matrix(found: DriverFindings, platform: str, matrix: MatrixOnDemand) -> None:
    assert found.driver_version is not None
    loaded = matrix.get()
    if loaded is None:
        found.notes.append(
            f"the driver's maximum CUDA version is unknown: the matrix could not "
            f"be loaded ({matrix.problem})"
        )
        return
    found.driver_cuda = loaded.max_cuda_for_driver(found.driver_version, platform)
    if found.driver_cuda is None:
        found.notes.append(
            f"the driver's maximum CUDA version is unknown: driver "
            f"{found.driver_version} is older than every CUDA release in the matrix"
        )
    else:
        found.notes.append(
            f"maximum CUDA {format_cuda(found.driver_cuda)} taken from the "
            f"matrix's CUDA driver table for driver {found.driver_version}"
        )
