"""Building the Targets a command works for: probe files, overrides, or the live probe.

``--probe FILE`` and ``--probe -`` are read by :mod:`cudalock.machine.probefiles`. The
override flags (``--driver-version``, ``--driver-cuda``, ``--no-gpu``,
``--compute-capability``, ``--gpu``, ``--platform``, and the environment variables the command
line reads for the first two) replace fields of the live probe's Target, or of each file's
Target. No flags: the live probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from cudalock.errors import UsageError
from cudalock.machine.probe import probe_machine
from cudalock.machine.probefiles import GIVEN_BY_FLAGS, read_probe_files
from cudalock.matrix.model import names_model
from cudalock.model import (
    Gpu,
    Host,
    Target,
)
from cudalock.platforms import platform_named
from cudalock.versions import (
    CudaVersion,
    DriverVersion,
    format_cc,
    format_cuda,
    parse_compute_capability,
    parse_cuda_flag,
    parse_driver_version,
)

if TYPE_CHECKING:
    from cudalock.matrix import GpuModel, Matrix


@dataclass(frozen=True)
class TargetOptions:
    """The Target flags as given; :func:`targets_from_options` reads them."""

    probe_files: tuple[Path, ...] = ()
    driver_version: str | None = None
    driver_cuda: str | None = None
    no_gpu: bool = False
    compute_capabilities: tuple[str, ...] = ()
    gpu_names: tuple[str, ...] = ()
    platform: str | None = None
    matrix_dir: Path | None = None

    @property
    def overrides_given(self) -> bool:
        return bool(
            self.driver_version
            or self.driver_cuda
            or self.no_gpu
            or self.compute_capabilities
            or self.gpu_names
            or self.platform
        )


@dataclass(frozen=True)
class Overrides:
    """The override flags, validated."""

    driver_version: DriverVersion | None = None
    driver_cuda: CudaVersion | None = None
    no_gpu: bool = False
    gpus: tuple[Gpu, ...] = ()
    platform: str | None = None

    @property
    def driver_branch(self) -> bool:
        """Whether ``--driver-version`` named a branch (``570``), as nvidia-smi users say it."""
        return self.driver_version is not None and len(self.driver_version.parts) == 1

    @property
    def given(self) -> bool:
        return bool(
            self.driver_version or self.driver_cuda or self.no_gpu or self.gpus or self.platform
        )

    @property
    def driver_given(self) -> bool:
        return self.driver_version is not None or self.driver_cuda is not None


@dataclass(frozen=True)
class GivenTargets:
    """The Target flags read once, by every command alike: the overrides parsed and checked
    (a bad value is exit 2 before any other work), the ``--probe`` files read.

    :meth:`targets` lays the overrides over the probe files' machines, else over the machine
    the command describes when none is given: this one, probed now, or (``audit --report``)
    the machine a pasted report names.
    """

    matrix: Matrix
    options: TargetOptions
    overrides: Overrides
    #: The ``--probe`` files' machines as read, before the overrides.
    probed: tuple[Target, ...] = ()

    @property
    def driver_given(self) -> bool:
        """Whether the driver is known from the flags or probe files, not left to the base
        machine (``--no-gpu`` says there is none)."""
        return bool(self.probed) or self.overrides.driver_given or self.overrides.no_gpu

    def probe_file_targets(self) -> tuple[Target, ...]:
        """The ``--probe`` files' machines with the overrides applied; () when none given."""
        return tuple(apply_overrides(t, self.overrides, self.matrix) for t in self.probed)

    def targets(self, machine: Callable[[], Target] | None = None) -> tuple[Target, ...]:
        """The Targets described: the probe files', else ``machine()`` (default: this machine,
        probed now), with the overrides applied."""
        if self.probed:
            return self.probe_file_targets()
        if machine is None:
            # The driver and the GPUs given (or --no-gpu): the live values would all be
            # replaced, so neither is probed.
            overrides = self.overrides
            hardware = not (overrides.no_gpu or (overrides.driver_given and overrides.gpus))
            base = probe_machine(matrix=self.matrix, hardware=hardware)
        else:
            base = machine()
        return (apply_overrides(base, self.overrides, self.matrix),)


def read_target_options(options: TargetOptions, matrix: Matrix) -> GivenTargets:
    """The Target flags parsed and checked, and the probe files read (see :class:`GivenTargets`)."""
    overrides = overrides_from_options(options, matrix)
    probed = tuple(read_probe_files(options.probe_files)) if options.probe_files else ()
    return GivenTargets(matrix, options, overrides, probed)


def targets_from_options(
    options: TargetOptions,
    matrix: Matrix,
    *,
    probe: Callable[[], Target] | None = None,
) -> list[Target]:
    """The Targets the flags describe (see the module docstring for the precedence)."""
    return list(read_target_options(options, matrix).targets(probe))


def overrides_from_options(options: TargetOptions, matrix: Matrix) -> Overrides:
    """Parse and check the override flags; bad values are :class:`InputError` (exit 2)."""
    # An empty value (CUDALOCK_DRIVER_VERSION= in a shell profile) counts as not given.
    driver_version = (
        parse_driver_version(options.driver_version)
        if options.driver_version and options.driver_version.strip()
        else None
    )
    driver_cuda = (
        parse_cuda_flag(options.driver_cuda, "--driver-cuda")
        if options.driver_cuda and options.driver_cuda.strip()
        else None
    )
    gpus = [
        Gpu(name=f"GPU with compute capability {format_cc(cc)}", compute_capability=cc)
        for cc in (parse_compute_capability(text) for text in options.compute_capabilities)
    ]
    gpus.extend(_gpu_from_name(name, matrix) for name in options.gpu_names)
    platform = options.platform.strip() if options.platform is not None else None
    if platform is not None:
        platform = platform_named(platform).name
    if options.no_gpu:
        clashing = [
            flag
            for flag, value in (
                ("--driver-version", driver_version),
                ("--driver-cuda", driver_cuda),
                ("--compute-capability", options.compute_capabilities),
                ("--gpu", options.gpu_names),
            )
            if value
        ]
        if clashing:
            raise UsageError(
                f"--no-gpu describes a machine without NVIDIA GPUs; it cannot be "
                f"combined with {', '.join(clashing)}"
            )
    return Overrides(
        driver_version=driver_version,
        driver_cuda=driver_cuda,
        no_gpu=options.no_gpu,
        gpus=tuple(gpus),
        platform=platform,
    )


#: Vendor prefixes NVML names carry and people leave out ("H100" for "NVIDIA H100 80GB HBM3").
_NAME_PREFIXES = ("", "NVIDIA ", "Tesla ", "NVIDIA GeForce ")


def nearest_gpu_names(name: str, matrix: Matrix, limit: int = 3) -> list[str]:
    """Up to ``limit`` GPU names of the matrix that look like ``name`` (typos, case, prefixes)."""
    known = sorted({g.name for g in matrix.gpus} | {m for g in matrix.gpus for m in g.match})
    # Compare without case and without the vendor prefixes, so 'h1oo' finds 'H100 80GB' as
    # readily as 'RTX 4O90' finds 'RTX 4090'.
    by_short: dict[str, str] = {}
    for display in known:
        by_short.setdefault(_without_vendor(display.lower()), display)
    wanted = _without_vendor(name.strip().lower())
    import difflib  # only to suggest a GPU name

    close = difflib.get_close_matches(wanted, list(by_short), n=limit, cutoff=0.5)
    if not close:
        close = [short for short in by_short if wanted and wanted in short][:limit]
    return [by_short[short] for short in close]


def _without_vendor(lowered: str) -> str:
    for prefix in ("nvidia geforce ", "nvidia ", "tesla ", "geforce "):
        lowered = lowered.removeprefix(prefix)
    return lowered


def _gpu_from_name(name: str, matrix: Matrix) -> Gpu:
    model = gpu_model_named(name, matrix)
    return Gpu(name=model.name, compute_capability=model.compute_capability)


def gpu_model_named(name: str, matrix: Matrix) -> GpuModel:
    """The matrix's GPU model for a name as people write it ("H100", "RTX 4090", "RTX5090",
    "4090", "A100 80GB", NVML's name)."""
    # The GPU table matches NVML device names; try the name as NVML would spell it.
    model = next(
        (
            found
            for prefix in _NAME_PREFIXES
            if (found := matrix.gpu_by_name(prefix + name.strip())) is not None
        ),
        None,
    )
    if model is None:
        model = _gpu_by_squeezed_name(name, matrix)
    if model is None:
        nearest = nearest_gpu_names(name, matrix)
        suggestion = f"; did you mean {', '.join(repr(n) for n in nearest)}?" if nearest else ""
        raise UsageError(
            f"unknown GPU {name!r}: not in the matrix's GPU table{suggestion}",
            hint="Give its compute capability instead (--compute-capability 8.6); "
            "'cudalock matrix show --gpus' lists the GPUs the matrix knows and the names it "
            "takes for each.",
        )
    return model


def _squeeze(text: str) -> str:
    """A GPU name without case, spaces or punctuation: "RTX5090" and "rtx 5090" are one."""
    return "".join(ch for ch in text.lower() if ch.isascii() and ch.isalnum())


def _gpu_by_squeezed_name(name: str, matrix: Matrix) -> GpuModel | None:
    """The model an alias names, else the one whose match string the squeezed name contains
    (the longest wins, as for NVML names)."""
    wanted = _squeeze(_without_vendor(name.strip().lower()))
    if not wanted:
        return None
    best: tuple[int, GpuModel] | None = None
    for gpu in matrix.gpus:
        if any(_squeeze(alias) == wanted for alias in gpu.aliases):
            return gpu
        for needle in gpu.match:
            squeezed = _squeeze(_without_vendor(needle.lower()))
            if (
                squeezed
                and names_model(wanted, squeezed)
                and (best is None or len(squeezed) > best[0])
            ):
                best = (len(squeezed), gpu)
    return best[1] if best else None


def apply_overrides(target: Target, overrides: Overrides, matrix: Matrix) -> Target:
    """``target`` with the given fields replaced; the rest stays as probed."""
    if not overrides.given:
        return target
    notes: list[str] = []
    platform = overrides.platform or target.platform
    host = target.host
    if platform != target.platform:
        # The probed host details (glibc, RAM) belong to another OS/architecture.
        system, _, arch = platform.partition("-")
        host = Host(os=system, arch=arch)
        notes.append(f"platform {platform} given; host details of {target.name} dropped")

    if overrides.no_gpu:
        name = GIVEN_BY_FLAGS if target.name == "this machine" else target.name
        return replace(
            target,
            name=name,
            platform=platform,
            host=host,
            driver_version=None,
            driver_cuda=None,
            gpus=(),
            source="override",
            notes=("no NVIDIA GPU (--no-gpu): a CPU-only target", *notes),
        )

    driver_version, driver_cuda = target.driver_version, target.driver_cuda
    # The driver's two fields are replaced together: a probed version next to a given CUDA
    # version (or the reverse) would describe neither machine.
    driver_given = overrides.driver_given
    if (driver_given or overrides.gpus) and target.name == "this machine":
        # The flags describe another machine: this one's RAM, cgroup limit, name and CUDA
        # toolkit are not the target's; a memory check must not judge that machine by them,
        # nor the choice policy prefer the build this machine's nvcc matches.
        dropped = [
            label
            for label, value in (
                ("RAM", host.memory_total_bytes),
                ("cgroup limit", host.cgroup_memory_limit_bytes),
                ("hostname", host.hostname),
                ("CUDA toolkit", host.cuda_toolkit),
            )
            if value is not None
        ]
        if dropped:
            host = replace(
                host,
                memory_total_bytes=None,
                cgroup_memory_limit_bytes=None,
                hostname=None,
                cuda_toolkit=None,
                cuda_toolkit_path=None,
            )
            listed = ", ".join(dropped[:-1]) + " and " if len(dropped) > 1 else ""
            notes.append(
                f"this machine's {listed}{dropped[-1]} left out: the Target flags describe "
                "another machine (give its RAM with --host-memory where a memory check needs it)"
            )
    if driver_given:
        driver_version = overrides.driver_version
        driver_cuda = overrides.driver_cuda
    if overrides.driver_version is not None:
        from_table = matrix.max_cuda_for_driver(overrides.driver_version, platform)
        branch = (
            matrix.branch_cuda(overrides.driver_version.branch, platform)
            if overrides.driver_branch
            else None
        )
        if branch is not None:
            # "570" is the R570 branch, not 570.0: every release of it supports this CUDA.
            from_table = branch[0]
        if driver_cuda is None:
            driver_cuda = from_table
            notes.append(_derived_note(overrides.driver_version, from_table, branch))
        elif from_table is not None and driver_cuda > from_table:
            notes.append(
                f"--driver-cuda {format_cuda(driver_cuda)} is above the "
                f"{format_cuda(from_table)} the matrix lists for driver "
                f"{overrides.driver_version}; using the value given"
            )
    gpus = overrides.gpus or target.gpus
    if gpus and driver_version is None and driver_cuda is None:
        notes.append(
            "GPUs given but no driver: add --driver-version or --driver-cuda, or the "
            "target is treated as CPU-only"
        )

    # Probe notes about the driver or GPUs no longer apply once both are replaced; a probe that
    # found no driver noted only that, which a given driver contradicts.
    fully_replaced = driver_given and (bool(overrides.gpus) or not target.has_driver)
    kept = () if fully_replaced else target.notes
    # A live probe's "this machine" is no longer this machine once its driver is replaced.
    name = GIVEN_BY_FLAGS if driver_given and target.name == "this machine" else target.name
    return replace(
        target,
        name=name,
        platform=platform,
        host=host,
        driver_version=driver_version,
        driver_cuda=driver_cuda,
        gpus=gpus,
        source="override",
        notes=(*notes, *kept),
    )


def _derived_note(
    driver: DriverVersion,
    cuda: CudaVersion | None,
    branch: tuple[CudaVersion, DriverVersion] | None = None,
) -> str:
    if cuda is None:
        return (
            f"driver {driver} is older than every CUDA release in the matrix: its maximum "
            "CUDA version is unknown (give --driver-cuda)"
        )
    if branch is not None:
        return (
            f"driver {driver} is taken as the R{driver} branch, every release of which "
            f"supports CUDA {format_cuda(cuda)} ({branch[1]} is its first release in the "
            "matrix's driver table); give the full version (nvidia-smi's 'Driver Version') or "
            "--driver-cuda if that is not so"
        )
    if len(driver.parts) == 1:
        return (
            f"driver {driver} is taken as the R{driver} branch; the matrix's driver table has "
            f"no release of it, so CUDA {format_cuda(cuda)} is assumed from the branches before "
            "it (give the full version or --driver-cuda)"
        )
    return f"maximum CUDA {format_cuda(cuda)} for driver {driver} from the matrix's driver table"
