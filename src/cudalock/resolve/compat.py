"""Pure compatibility predicates: can this build run on this driver and on these GPUs?

The rules are docs/compatibility-policy.md. Nothing here does I/O; the facts (driver
minimums, minor-version-compatibility floors, arch lists) come from the :class:`Matrix` and the
:class:`TorchBuild` passed in. ``resolve`` and ``audit`` both decide with these functions, so a
plan cudalock resolves is never one its own audit flags.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from cudalock.matrix import Matrix, TorchBuild
from cudalock.matrix.model import arch_covers
from cudalock.model import Target
from cudalock.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    format_cuda,
)

__all__ = [
    "MINOR_COMPAT_COST",
    "DriverVerdict",
    "VerdictStatus",
    "driver_verdict",
    "minor_compat_floor",
    "missing_archs",
    "target_driver_cuda",
]

VerdictStatus = Literal["ok", "minor-compat", "too-old", "no-driver"]

#: What minor-version compatibility gives up, said wherever a plan relies on it.
MINOR_COMPAT_COST = (
    "no PTX JIT for PTX newer than the driver, and features that need a newer driver fail "
    "at run time"
)


def missing_archs(
    build: TorchBuild, ccs: Iterable[ComputeCapability]
) -> tuple[ComputeCapability, ...]:
    """The compute capabilities in ``ccs`` that ``build`` has no kernels for (sorted, unique)."""
    return tuple(sorted({cc for cc in ccs if not arch_covers(build.sass, build.ptx, cc)}))


@dataclass(frozen=True)
class DriverVerdict:
    """Whether a driver runs a CUDA version, and the numbers behind the answer."""

    status: VerdictStatus
    #: The lowest driver that runs this CUDA by backward compatibility (its toolkit's driver).
    required_driver: DriverVersion | None
    #: The minor-version-compatibility floor of this CUDA major (None before CUDA 11).
    floor: DriverVersion | None
    #: One sentence a person understands.
    reason: str
    #: The highest CUDA version the driver supports (as given, or derived from its version).
    driver_cuda: CudaVersion | None = None
    #: True when ``--compat minor`` would allow what ``strict`` refused.
    minor_compat_possible: bool = False

    @property
    def allowed(self) -> bool:
        return self.status in ("ok", "minor-compat")


def target_driver_cuda(matrix: Matrix, target: Target) -> CudaVersion | None:
    """The target driver's maximum CUDA: as reported, else derived from the driver version."""
    if target.driver_cuda is not None:
        return target.driver_cuda
    if target.driver_version is not None:
        return matrix.max_cuda_for_driver(target.driver_version, target.platform)
    return None


def minor_compat_floor(matrix: Matrix, major: int, platform: str) -> DriverVersion | None:
    """The driver floor for minor-version compatibility within CUDA ``major`` (None: none)."""
    entry = matrix.cuda_major(major)
    if entry is None:
        return None
    if platform.startswith("windows"):
        return entry.minor_compat_windows
    return entry.minor_compat_linux


def driver_verdict(
    matrix: Matrix, cuda: CudaVersion, target: Target, compat: str = "strict"
) -> DriverVerdict:
    """Can the target's driver run a build of CUDA ``cuda`` under policy ``compat``?

    ``ok``: ``cuda`` ≤ the driver's maximum CUDA (backward compatibility, always safe).
    ``minor-compat``: same major, newer minor, driver at or above the major's floor, and
    ``compat == "minor"``. ``too-old``: neither (``minor_compat_possible`` says whether
    ``--compat minor`` would have allowed it). ``no-driver``: the target has no NVIDIA driver.
    """
    required = matrix.min_driver_for_cuda(cuda, target.platform)
    floor = minor_compat_floor(matrix, cuda[0], target.platform)
    wanted = f"CUDA {format_cuda(cuda)}"
    needs = f"{wanted} needs driver ≥ {required}" if required else f"{wanted}"
    if not target.has_driver:
        return DriverVerdict(
            "no-driver", required, floor, f"{needs}; the target has no NVIDIA driver"
        )
    driver = target.driver_version
    driver_cuda = target_driver_cuda(matrix, target)
    this = f"driver {driver}" if driver else "the driver"
    supports = (
        f"{this} supports CUDA {format_cuda(driver_cuda)}"
        if driver_cuda
        else f"{this} is older than every CUDA release in the matrix"
    )
    if driver_cuda is not None and cuda <= driver_cuda:
        return DriverVerdict("ok", required, floor, f"{supports}, which runs {wanted}", driver_cuda)

    eligible = (
        driver_cuda is not None
        and floor is not None
        and cuda[0] == driver_cuda[0]
        and _at_least(matrix, target, driver, driver_cuda, floor)
    )
    if eligible and compat == "minor":
        return DriverVerdict(
            "minor-compat",
            required,
            floor,
            f"{supports}; it runs {wanted} only through minor-version compatibility "
            f"(CUDA {cuda[0]}.x floor {floor}), at a cost: {MINOR_COMPAT_COST}",
            driver_cuda,
            minor_compat_possible=True,
        )
    reason = f"{needs}; {supports}"
    if eligible:
        reason += f" (--compat minor would allow it: driver ≥ {floor}, the CUDA {cuda[0]}.x floor)"
    return DriverVerdict(
        "too-old", required, floor, reason, driver_cuda, minor_compat_possible=eligible
    )


def _at_least(
    matrix: Matrix,
    target: Target,
    driver: DriverVersion | None,
    driver_cuda: CudaVersion,
    floor: DriverVersion,
) -> bool:
    """Is the driver at or above ``floor``? Without a version, what its CUDA implies decides."""
    if driver is not None:
        return driver >= floor
    # Only the driver's CUDA is known: it is at least that CUDA's toolkit driver.
    implied = matrix.min_driver_for_cuda(driver_cuda, target.platform)
    return implied is not None and implied >= floor
