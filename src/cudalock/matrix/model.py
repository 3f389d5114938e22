"""The compatibility matrix as typed values: CUDA toolkits, torch releases and builds, GPUs,
DeepSpeed releases, each with its provenance."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from cudalock.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    parse_cuda_version,
)

SCHEMA_VERSION = 1


MATRIX_FILES = ("matrix.toml", "cuda.toml", "torch.toml", "gpus.toml", "deepspeed.toml")
#: Files a matrix directory may leave out (an older or a user's matrix): read as empty tables.
OPTIONAL_MATRIX_FILES = ("cuda_builds.toml", "torch_pairings.toml")


STATUSES = ("verified", "unverified")


@dataclass(frozen=True)
class Provenance:
    """Where a fact comes from and whether it was verified against a primary source."""

    source: tuple[str, ...]
    status: str
    #: Fields of this entry whose values are not verified even though the entry is.
    unverified_fields: tuple[str, ...] = ()
    note: str | None = None

    @property
    def verified(self) -> bool:
        return self.status == "verified"

    def field_verified(self, name: str) -> bool:
        return self.verified and name not in self.unverified_fields


@dataclass(frozen=True)
class CudaToolkit:
    """A CUDA toolkit release (patch level) and the minimum driver it needs."""

    version: str  # "12.1.0"
    label: str
    driver_linux: DriverVersion | None
    driver_windows: DriverVersion | None
    provenance: Provenance

    @property
    def cuda(self) -> CudaVersion:
        return parse_cuda_version(self.version)


@dataclass(frozen=True)
class CudaMajor:
    """Minor-version compatibility for one CUDA major (absent before 11)."""

    major: int
    minor_compat_linux: DriverVersion | None
    minor_compat_windows: DriverVersion | None
    provenance: Provenance


@dataclass(frozen=True)
class ArchSupport:
    """The GPU architectures nvcc of a CUDA version can compile for (SASS targets)."""

    cuda: CudaVersion
    sass: tuple[ComputeCapability, ...]
    provenance: Provenance


@dataclass(frozen=True)
class TorchBuild:
    """One published build of a torch release: ``cpu``, ``cu121``, ``rocm6.1``, ..."""

    variant: str
    cuda: CudaVersion | None
    cudnn: str | None
    nccl: str | None
    sass: tuple[ComputeCapability, ...]
    ptx: tuple[ComputeCapability, ...]
    platforms: tuple[str, ...]
    provenance: Provenance

    @property
    def kind(self) -> str:
        if self.variant == "cpu":
            return "cpu"
        if self.variant.startswith("cu"):
            return "cuda"
        if self.variant.startswith("rocm"):
            return "rocm"
        return "other"


@dataclass(frozen=True)
class TorchRelease:
    """One torch release: its Python wheels, companions and builds (torch.toml)."""

    version: str
    date: str
    requires_python: str
    #: CPython versions with wheels, per platform ("3.13t" is free-threaded).
    python: Mapping[str, tuple[str, ...]]
    #: The variant PyPI serves by default, per platform (a CUDA build on Linux, CPU on Windows).
    pypi_default: Mapping[str, str]
    torchvision: str | None
    torchaudio: str | None
    builds: tuple[TorchBuild, ...]
    provenance: Provenance

    def builds_for(self, platform: str) -> tuple[TorchBuild, ...]:
        return tuple(b for b in self.builds if platform in b.platforms)


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: how NVML names it and its compute capability (gpus.toml)."""

    name: str
    #: Substrings of NVML's device name that identify this model (case-insensitive).
    match: tuple[str, ...]
    compute_capability: ComputeCapability
    architecture: str
    provenance: Provenance
    #: How people write the model on a command line ("4090", "A6000"): lookup keys for --gpu.
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeepSpeedRelease:
    """One DeepSpeed release and the torch versions it supports (deepspeed.toml)."""

    version: str
    date: str | None
    requires_python: str | None
    #: PEP 440 specifier of the torch versions this release supports.
    torch: str
    provenance: Provenance


@dataclass(frozen=True)
class DeepSpeedCudaCheck:
    """DeepSpeed's op builder rule: which nvcc/torch CUDA minor mismatches it accepts."""

    deepspeed: str  # specifier of DeepSpeed versions this rule applies to
    minor_mismatch_ok: Mapping[int, tuple[CudaVersion, ...]]
    provenance: Provenance


@dataclass(frozen=True)
class PackageBuild:
    """The CUDA a package's PyPI wheel was built for, where cudalock cannot (or need not) read
    it from the wheel at lock time: a pasted report names only the version (cuda_builds.toml)."""

    package: str  # canonical name
    version: str
    #: "12.8", or "12" where the wheel names only the major (``libcudart.so.12``).
    cuda: str
    #: The torch it was built against: "2.7.1+cu126" (cpp_lib.json), "2.7.1" (a pin); None.
    torch: str | None
    #: What in the wheel says so ("xformers/cpp_lib.json", "DT_NEEDED of vllm/_C.abi3.so").
    read_from: str
    provenance: Provenance

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".", 1)[0])

    @property
    def cuda_version(self) -> CudaVersion | None:
        """(major, minor) where the minor is known."""
        return parse_cuda_version(self.cuda) if "." in self.cuda else None


@dataclass(frozen=True)
class TorchPairing:
    """The torch releases one release of a package built against torch works with, where the
    package declares no torch requirement (torchao; torch_pairings.toml)."""

    package: str  # canonical name
    version: str
    #: PEP 440 specifiers of torch releases, any one of which it accepts ("==2.10.0").
    torch: tuple[str, ...]
    read_from: str
    provenance: Provenance

    def accepts(self, torch_version: str) -> bool:
        """Whether it works with ``torch_version`` (its local label ignored, as its check does)."""
        from packaging.specifiers import SpecifierSet

        public = torch_version.split("+", 1)[0]
        return any(SpecifierSet(spec).contains(public, prereleases=True) for spec in self.torch)

    @property
    def torch_text(self) -> str:
        """The accepted torch releases in words: "torch 2.7.1, 2.6.0 or 2.5.0", "torch >= 2.11"."""
        exact = [s.removeprefix("==") for s in self.torch if s.startswith("==")]
        if len(exact) == len(self.torch):
            head = ", ".join(exact[:-1])
            return "torch " + (f"{head} or {exact[-1]}" if head else exact[-1])
        return "torch " + " or ".join(s.replace(">=", ">= ") for s in self.torch)


@dataclass(frozen=True)
class Matrix:
    """The whole compatibility matrix, loaded from compat_matrix/."""

    schema_version: int
    matrix_version: str
    toolkits: tuple[CudaToolkit, ...]
    majors: tuple[CudaMajor, ...]
    arch_support: tuple[ArchSupport, ...]
    torch_releases: tuple[TorchRelease, ...]
    gpus: tuple[GpuModel, ...]
    deepspeed: tuple[DeepSpeedRelease, ...]
    deepspeed_cuda_checks: tuple[DeepSpeedCudaCheck, ...]
    directory: Path | None = field(default=None, compare=False)
    package_builds: tuple[PackageBuild, ...] = ()
    torch_pairings: tuple[TorchPairing, ...] = ()

    def pairings_of(self, name: str) -> tuple[TorchPairing, ...]:
        """The recorded torch pairings of every release of ``name`` (canonical name)."""
        return tuple(p for p in self.torch_pairings if p.package == name)

    def pairing(self, name: str, version: str) -> TorchPairing | None:
        """The recorded torch pairing of ``name`` ``version`` (canonical name), if any."""
        from packaging.version import InvalidVersion, Version

        try:
            wanted = Version(version)
        except InvalidVersion:
            return None
        # torchao 0.13.0's second upload is 0.13.0-1 (a post release of the same build).
        return next(
            (
                p
                for p in self.pairings_of(name)
                if Version(p.version) == Version(wanted.base_version)
            ),
            None,
        )

    def deepspeed_cuda_check(self, version: str) -> DeepSpeedCudaCheck | None:
        """The op-builder rule DeepSpeed ``version`` follows (None: no rule covers it)."""
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            parsed = Version(version)
        except InvalidVersion:
            return None
        for check in self.deepspeed_cuda_checks:
            try:
                if parsed in SpecifierSet(check.deepspeed):
                    return check
            except InvalidSpecifier:
                continue
        return None

    def package_build(self, name: str, version: str) -> PackageBuild | None:
        """The recorded CUDA build of PyPI's ``name`` ``version`` (canonical name), if any."""
        return next(
            (b for b in self.package_builds if b.package == name and b.version == version), None
        )

    @cached_property
    def _releases_by_version(self) -> dict[str, TorchRelease]:
        return {r.version: r for r in self.torch_releases}

    def torch_release(self, version: str) -> TorchRelease | None:
        return self._releases_by_version.get(version)

    @cached_property
    def torch_span(self) -> str:
        """The torch releases the matrix knows, as people say them: ``1.13–2.15``."""
        from packaging.version import InvalidVersion, Version

        versions = []
        for release in self.torch_releases:
            try:
                versions.append(Version(release.version))
            except InvalidVersion:
                continue
        if not versions:
            return "no torch releases"
        low, high = min(versions), max(versions)
        return f"{low.major}.{low.minor}–{high.major}.{high.minor}"

    @cached_property
    def _toolkits_by_cuda(self) -> tuple[tuple[CudaVersion, CudaToolkit], ...]:
        """Each toolkit with its CUDA version parsed once: the resolver asks for driver minimums
        many times per plan."""
        return tuple((tk.cuda, tk) for tk in self.toolkits)

    def cuda_major(self, major: int) -> CudaMajor | None:
        return next((m for m in self.majors if m.major == major), None)

    def min_driver_for_cuda(self, cuda: CudaVersion, platform: str) -> DriverVersion | None:
        """The lowest driver that runs CUDA ``cuda`` by backward compatibility (its GA driver)."""
        windows = platform.startswith("windows")
        candidates = [
            (tk.driver_windows if windows else tk.driver_linux)
            for version, tk in self._toolkits_by_cuda
            if version == cuda
        ]
        known = [d for d in candidates if d is not None]
        return min(known) if known else None

    def branch_cuda(self, branch: int, platform: str) -> tuple[CudaVersion, DriverVersion] | None:
        """The CUDA every release of driver branch ``branch`` supports, and the release that
        says so: the branch's lowest driver in the toolkit table (570 → 12.8, from 570.26).
        None when the table has no driver of that branch."""
        windows = platform.startswith("windows")
        drivers = [
            minimum
            for _version, tk in self._toolkits_by_cuda
            if (minimum := tk.driver_windows if windows else tk.driver_linux) is not None
            and minimum.branch == branch
            and tk.provenance.verified
        ]
        if not drivers:
            return None
        first = min(drivers)
        cuda = self.max_cuda_for_driver(first, platform)
        return (cuda, first) if cuda is not None else None

    @cached_property
    def _max_cuda_memo(self) -> dict[tuple[DriverVersion, bool], CudaVersion | None]:
        return {}

    def max_cuda_for_driver(self, driver: DriverVersion, platform: str) -> CudaVersion | None:
        """The newest CUDA version whose minimum driver is at or below ``driver``."""
        windows = platform.startswith("windows")
        key = (driver, windows)
        if key not in self._max_cuda_memo:
            self._max_cuda_memo[key] = self._max_cuda(driver, windows)
        return self._max_cuda_memo[key]

    def _max_cuda(self, driver: DriverVersion, windows: bool) -> CudaVersion | None:
        best: CudaVersion | None = None
        for version, tk in self._toolkits_by_cuda:
            minimum = tk.driver_windows if windows else tk.driver_linux
            if (
                minimum is not None
                and minimum <= driver
                and tk.provenance.verified
                and (best is None or version > best)
            ):
                best = version
        return best

    def gpu_by_name(self, name: str) -> GpuModel | None:
        """The GPU model whose match strings best fit an NVML device name (longest match wins;
        a match string followed by a digit names another model: "NVIDIA A100" is not in
        "NVIDIA A1000", "NVIDIA L4" not in "NVIDIA L40")."""
        lowered = name.lower()
        best: tuple[int, GpuModel] | None = None
        for gpu in self.gpus:
            for needle in gpu.match:
                if names_model(lowered, needle.lower()) and (best is None or len(needle) > best[0]):
                    best = (len(needle), gpu)
        return best[1] if best else None


def names_model(name: str, needle: str) -> bool:
    """``needle`` occurs in ``name`` with no digit right after it ("V100" in "Tesla V100S")."""
    start = name.find(needle)
    while start != -1:
        end = start + len(needle)
        if end == len(name) or not name[end].isdigit():
            return True
        start = name.find(needle, start + 1)
    return False


def arch_covers(
    sass: Iterable[ComputeCapability],
    ptx: Iterable[ComputeCapability],
    cc: ComputeCapability,
) -> bool:
    """True when a GPU of compute capability ``cc`` can run code built for ``sass``/``ptx``.

    SASS runs on the same major architecture at an equal or higher minor (sm_80 on 8.6, sm_60
    on 6.1, but not sm_90 on 10.0); PTX is JIT-compiled forward to any equal or newer GPU.
    """
    if any(s[0] == cc[0] and s[1] <= cc[1] for s in sass):
        return True
    return any(p <= cc for p in ptx)
