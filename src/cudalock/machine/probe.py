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

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cudalock.machine.driver import (
    DriverFindings,
    MatrixOnDemand,
    cuda_from_matrix,
    default_nvidia_smi,
    read_kernel_module,
    read_nvidia_smi,
)
from cudalock.machine.host import probe_host, system_and_machine
from cudalock.machine.nvml import NVML_ERROR_LIB_RM_VERSION_MISMATCH, NvmlLike, read_nvml
from cudalock.model import Gpu, Target
from cudalock.platforms import platform_for
from cudalock.units import format_gib
from cudalock.versions import (
    format_cc,
)

if TYPE_CHECKING:
    from cudalock.matrix import Matrix


@dataclass(frozen=True)
class VisibleDevices:
    """What ``CUDA_VISIBLE_DEVICES`` leaves visible to CUDA, as NVML indices."""

    indices: tuple[int, ...]
    #: False when CUDA's numbering may differ from NVML's (mixed GPUs, FASTEST_FIRST order).
    exact: bool


def cuda_visible_devices(
    value: str, gpus: Sequence[Gpu], device_order: str | None
) -> VisibleDevices:
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
        if re.fullmatch(r"\d{1,6}", entry):
            number = int(entry)
            if number < len(gpus):
                position = number
                exact = exact and (same_model or pci_order)
        elif entry.upper().startswith(("GPU-", "MIG-")):
            # CUDA accepts any unambiguous UUID prefix.
            matches = [
                i for i, g in enumerate(gpus) if g.uuid and g.uuid.lower().startswith(entry.lower())
            ]
            if len(matches) == 1:
                position = matches[0]
        if position is None or position in chosen:
            break
        chosen.append(position)
    return VisibleDevices(tuple(chosen), exact)


# --------------------------------------------------------------------------------------------
# Reading the machine


def probe_machine(
    *,
    proc_root: Path = Path("/proc"),
    sys_root: Path = Path("/sys"),
    nvml: NvmlLike | None = None,
    environ: Mapping[str, str] | None = None,
    run_nvidia_smi: Callable[[], str | None] | None = None,
    matrix: Matrix | None = None,
    hardware: bool = True,
) -> Target:
    """Describe this machine. Never raises for machine problems: they become ``notes``.

    ``hardware`` False reads the platform and the host only, no driver or GPU (for flags that
    give both: what NVML would say is replaced anyway)."""
    env = os.environ if environ is None else environ
    platform = platform_for(*system_and_machine())
    if not hardware:
        return Target(
            platform=platform,
            host=probe_host(proc_root=proc_root, sys_root=sys_root, environ=env),
            name="this machine",
            source="none",
        )
    matrix_source = MatrixOnDemand(matrix)
    found = DriverFindings()

    read_nvml(found, nvml)
    if found.driver_version is None and found.driver_cuda is None:
        read_kernel_module(found, proc_root, sys_root, matrix_source)
    if found.driver_version is None and found.driver_cuda is None:
        read_nvidia_smi(found, run_nvidia_smi or default_nvidia_smi, matrix_source)
    if found.nvml_error_code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        loaded = f", {found.driver_version}" if found.driver_version else ""
        found.notes.append(
            "NVML error 18, NVML/driver version mismatch: the NVIDIA driver was upgraded without "
            f"a reboot, so its library no longer matches the running kernel module{loaded}. "
            "Reboot (or reload the nvidia kernel modules) before using the GPUs; until then CUDA "
            "programs fail to initialise."
        )
    if found.driver_version is not None and found.driver_cuda is None:
        cuda_from_matrix(found, platform, matrix_source)
    if found.driver_version is None and found.driver_cuda is None and found.smi_failed:
        found.notes.insert(0, "the NVIDIA driver did not answer: taken as a CPU-only target")
    elif found.driver_version is None and found.driver_cuda is None:
        found.notes.insert(0, "no NVIDIA driver found: this is a CPU-only target")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and found.gpus:
        found.notes.append(_visible_devices_note(visible, found.gpus, env.get("CUDA_DEVICE_ORDER")))
    return Target(
        platform=platform,
        driver_version=found.driver_version,
        driver_cuda=found.driver_cuda,
        gpus=tuple(found.gpus),
        host=probe_host(proc_root=proc_root, sys_root=sys_root, environ=env),
        name="this machine",
        source=found.source,
        notes=tuple(found.notes),
    )


def _visible_devices_note(value: str, gpus: Sequence[Gpu], device_order: str | None) -> str:
    shown = f"CUDA_VISIBLE_DEVICES={value!r}"
    if "mig-" in value.lower():
        return (
            f"{shown} selects MIG instances: CUDA programs see those slices, not whole GPUs "
            f"(NVML lists all {len(gpus)} GPUs; the Target keeps them all)"
        )
    visible = cuda_visible_devices(value, gpus, device_order)
    if not visible.indices:
        return (
            f"{shown} hides every GPU from CUDA programs (NVML still lists all "
            f"{len(gpus)}; the Target keeps them)"
        )
    names = ", ".join(
        f"{gpus[i].index if gpus[i].index is not None else i} {gpus[i].name}"
        for i in visible.indices
    )
    note = (
        f"{shown}: CUDA programs see {len(visible.indices)} of {len(gpus)} GPUs: {names} "
        f"(NVML lists all {len(gpus)}; the Target keeps them all)"
    )
    if not visible.exact:
        note += (
            "; CUDA numbers mixed GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, "
            "so its index may not be NVML's index shown here"
        )
    return note


# --------------------------------------------------------------------------------------------
# The host


def describe_memory(value: int | None) -> str:
    """Bytes as GiB for people (``80.00GiB``), or "unknown"."""
    return "unknown" if value is None else format_gib(value)


def format_gpu(gpu: Gpu) -> str:
    cc = format_cc(gpu.compute_capability) if gpu.compute_capability else "unknown"
    parts = [f"{gpu.index}: " if gpu.index is not None else "", gpu.name, f"  CC {cc}"]
    if gpu.memory_total_bytes is not None:
        parts.append(f"  {describe_memory(gpu.memory_total_bytes)}")
    if gpu.uuid:
        parts.append(f"  {gpu.uuid}")
    return "".join(parts)
