"""A fleet of Targets reduced to what a build must satisfy: one platform, the lowest driver per
driver-CUDA level, and every compute capability, each remembered with the node it came from so
the explanation can name the node that constrained each choice."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from cudalock.errors import Unsatisfiable, UsageError
from cudalock.matrix import Matrix
from cudalock.model import Target
from cudalock.resolve.compat import DriverVerdict, driver_verdict, target_driver_cuda
from cudalock.versions import ComputeCapability, CudaVersion, DriverVersion, format_cc

__all__ = ["Fleet", "raise_driver", "reduce_fleet"]


@dataclass(frozen=True)
class _DriverGroup:
    """One driver level of the fleet: its lowest node stands for all nodes at that level."""

    node: Target
    count: int


@dataclass
class Fleet:
    """Every Target of the request, grouped: what the resolver checks a build against."""

    platform: str
    #: Lowest driver first; every node with a driver is represented.
    drivers: list[_DriverGroup]
    #: Compute capability → "GTX 1080 Ti on node-b" (the first node seen with it).
    ccs: dict[ComputeCapability, str]
    without_driver: list[str]
    unknown_gpus: list[str]
    size: int
    _verdicts: dict[tuple[CudaVersion, str], tuple[DriverVerdict, Target]] = field(
        default_factory=dict
    )

    @property
    def has_driver(self) -> bool:
        return bool(self.drivers)

    def lowest_cuda(self, matrix: Matrix) -> CudaVersion | None:
        """The maximum CUDA of the lowest driver in the fleet."""
        return target_driver_cuda(matrix, self.drivers[0].node) if self.drivers else None

    def below(self, matrix: Matrix, driver: DriverVersion) -> list[_DriverGroup]:
        """The driver groups a driver upgrade to ``driver`` would change."""
        return [g for g in self.drivers if raise_driver(matrix, g.node, driver) is not g.node]

    def upgraded(self, matrix: Matrix, driver: DriverVersion) -> Fleet:
        """This fleet with every driver below ``driver`` raised to it: what a driver fix does."""
        groups = [_DriverGroup(raise_driver(matrix, g.node, driver), g.count) for g in self.drivers]
        groups.sort(key=lambda g: target_driver_cuda(matrix, g.node) or (0, 0))
        return Fleet(
            self.platform,
            groups,
            self.ccs,
            self.without_driver,
            self.unknown_gpus,
            self.size,
        )

    def verdict(
        self, matrix: Matrix, cuda: CudaVersion, compat: str
    ) -> tuple[DriverVerdict, Target]:
        """The fleet's verdict on ``cuda`` and the node it comes from (the binding one)."""
        cached = self._verdicts.get((cuda, compat))
        if cached is not None:
            return cached
        result: tuple[DriverVerdict, Target] | None = None
        for group in self.drivers:
            verdict = driver_verdict(matrix, cuda, group.node, compat)
            if not verdict.allowed:
                result = (verdict, group.node)
                break
            if result is None or (verdict.status == "minor-compat" and result[0].status == "ok"):
                result = (verdict, group.node)
        assert result is not None
        self._verdicts[(cuda, compat)] = result
        return result


def raise_driver(matrix: Matrix, target: Target, driver: DriverVersion) -> Target:
    """``target`` with its NVIDIA driver raised to ``driver``, or itself when it is already at
    least there (or has no driver: an upgrade cannot install one)."""
    if not target.has_driver:
        return target
    if target.driver_version is not None:
        if target.driver_version >= driver:
            return target
    else:
        # Only the driver's CUDA is known: compare what each driver runs.
        reached = matrix.max_cuda_for_driver(driver, target.platform)
        if reached is None or (target.driver_cuda is not None and target.driver_cuda >= reached):
            return target
    return replace(target, driver_version=driver, driver_cuda=None)


def node_name(target: Target) -> str:
    return target.name or "this machine"


def gpu_label(name: str, target: Target, fleet: bool) -> str:
    """``"GeForce RTX 5090"``, in a fleet ``"GeForce RTX 5090 on node-a"``; "" if nothing to add."""
    named = name if name and not name.startswith("GPU with compute capability") else ""
    if not fleet:
        return named
    return f"{named} on {node_name(target)}" if named else node_name(target)


def cc_text(cc: ComputeCapability, label: str) -> str:
    return f"{format_cc(cc)} ({label})" if label else format_cc(cc)


def reduce_fleet(matrix: Matrix, targets: Sequence[Target]) -> Fleet:
    if not targets:
        raise UsageError("no target: give --probe FILE, driver overrides, or run on the machine")
    platforms: dict[str, str] = {}
    for target in targets:
        platforms.setdefault(target.platform, node_name(target))
    if len(platforms) > 1:
        named = ", ".join(f"{p} ({node})" for p, node in platforms.items())
        raise Unsatisfiable(
            f"the targets are on different platforms: {named}; one environment cannot serve them",
            hint="Resolve each platform separately (group the --probe files by platform).",
        )
    # A platform without builds (a probe from an unusual machine) ends as Unsatisfiable below.
    platform = next(iter(platforms))

    derive = _DriverCudaTable(matrix, platform)
    # Driver level → lowest node at that level; a node's level is its maximum CUDA version.
    levels: dict[tuple[CudaVersion | None, bool], tuple[Target, int]] = {}
    seen_keys: set[tuple[DriverVersion | None, CudaVersion | None]] = set()
    ccs: dict[ComputeCapability, str] = {}
    without_driver: list[str] = []
    unknown_gpus: list[str] = []
    fleet = len(targets) > 1
    for target in targets:
        for gpu in target.gpus:
            cc = gpu.compute_capability
            if cc is None:
                if len(unknown_gpus) < 20:
                    unknown_gpus.append(gpu_label(gpu.name, target, fleet) or gpu.name)
            elif cc not in ccs:
                ccs[cc] = gpu_label(gpu.name, target, fleet)
        if not target.has_driver:
            without_driver.append(node_name(target))
            continue
        key = (target.driver_version, target.driver_cuda)
        if key in seen_keys:
            level_key = (_level(target, derive), target.driver_version is None)
            node, count = levels[level_key]
            levels[level_key] = (node, count + 1)
            continue
        seen_keys.add(key)
        level_key = (_level(target, derive), target.driver_version is None)
        current = levels.get(level_key)
        if current is None:
            levels[level_key] = (target, 1)
        elif (
            target.driver_version is not None
            and current[0].driver_version is not None
            and target.driver_version < current[0].driver_version
        ):
            levels[level_key] = (target, current[1] + 1)
        else:
            levels[level_key] = (current[0], current[1] + 1)
    drivers = [
        _DriverGroup(node, count)
        for (_cuda, _no_version), (node, count) in sorted(
            levels.items(), key=lambda item: (item[0][0] or (0, 0), item[0][1])
        )
    ]
    return Fleet(platform, drivers, ccs, without_driver, unknown_gpus, len(targets))


def _level(target: Target, derive: _DriverCudaTable) -> CudaVersion | None:
    if target.driver_cuda is not None:
        return target.driver_cuda
    assert target.driver_version is not None
    return derive.max_cuda(target.driver_version)


class _DriverCudaTable:
    """``Matrix.max_cuda_for_driver`` as a bisect over the toolkit table (fleets are large)."""

    def __init__(self, matrix: Matrix, platform: str) -> None:
        windows = platform.startswith("windows")
        rows: list[tuple[tuple[int, ...], CudaVersion]] = []
        for toolkit in matrix.toolkits:
            minimum = toolkit.driver_windows if windows else toolkit.driver_linux
            if minimum is not None and toolkit.provenance.verified:
                rows.append((_driver_key(minimum), toolkit.cuda))
        rows.sort()
        self._keys = [key for key, _cuda in rows]
        best: list[CudaVersion] = []
        for _key, cuda in rows:
            best.append(max(cuda, best[-1]) if best else cuda)
        self._best = best
        self._cache: dict[tuple[int, ...], CudaVersion | None] = {}

    def max_cuda(self, driver: DriverVersion) -> CudaVersion | None:
        key = _driver_key(driver)
        if key not in self._cache:
            position = bisect_right(self._keys, key)
            self._cache[key] = self._best[position - 1] if position else None
        return self._cache[key]


def _driver_key(driver: DriverVersion) -> tuple[int, ...]:
    return (*driver.parts, 0, 0)[:3]
