"""The resolver: the torch stack a target (or a fleet) can run, and why.

``resolve(matrix, targets, request) -> Plan`` is pure: no I/O, no globals. The choice is the
newest torch release matching ``request.torch`` that has an allowed build for the Python and
platform; within it, the newest CUDA build the driver can run (``strict`` or ``minor``) whose
architectures cover every GPU. Nothing fits: :class:`Unsatisfiable` with the nearest rejected
candidates, newest first, each with the reason and a fix.

A fleet reduces before the search: one platform, the lowest driver per driver-CUDA level, and the
union of compute capabilities, each remembered with the node it came from so the explanation can
name the node that constrained each choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from cudalock.errors import Unsatisfiable, UsageError
from cudalock.matrix import DeepSpeedRelease, Matrix, TorchBuild, TorchRelease
from cudalock.model import Compat, PackagePin, Plan, Rejection, Request, Target
from cudalock.resolve.compat import MINOR_COMPAT_COST, DriverVerdict, missing_archs
from cudalock.resolve.fleet import Fleet, cc_text, node_name, reduce_fleet
from cudalock.resolve.request import CPU_VARIANT, Companion, parse_companion, parse_torch_spec
from cudalock.versions import (
    ComputeCapability,
    CudaVersion,
    format_cuda,
    parse_cuda_version,
    parse_python_version,
    python_key,
)

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

#: How many rejected candidates a plan or an error carries (newest first).
MAX_REJECTED = 10


# --------------------------------------------------------------------------------------------
# The search


@dataclass(frozen=True)
class _Companions:
    """The companion pins chosen for one torch build."""

    pins: tuple[tuple[str, str, bool], ...]  # (name, version, from the PyTorch index)
    deepspeed: DeepSpeedRelease | None = None


@dataclass(frozen=True)
class _Choice:
    """The build the search settled on, with its Python and companions."""

    release: TorchRelease
    build: TorchBuild
    python: str
    companions: _Companions
    verdict: DriverVerdict | None
    verdict_node: Target | None


class _Search:
    def __init__(self, matrix: Matrix, fleet: Fleet, request: Request) -> None:
        self.matrix = matrix
        self.fleet = fleet
        self.request = request
        self.spec = parse_torch_spec(request.torch)
        self.python = parse_python_version(request.python) if request.python else None
        self.cuda_pin: CudaVersion | str | None = None
        if request.cuda:
            text = request.cuda.strip().lower()
            self.cuda_pin = CPU_VARIANT if text == CPU_VARIANT else parse_cuda_version(text)
        self.companions = [parse_companion(text) for text in request.with_packages]
        self.rejected: list[Rejection] = []
        self.platform = fleet.platform
        # Newest first, by PEP 440 ordering, parsed once.
        parsed = []
        for release in matrix.torch_releases:
            try:
                parsed.append((Version(release.version), release))
            except InvalidVersion:
                continue
        parsed.sort(key=lambda item: item[0], reverse=True)
        self.releases = parsed
        self.deepspeed = sorted(
            ((Version(ds.version), ds) for ds in matrix.deepspeed if _is_version(ds.version)),
            key=lambda item: item[0],
            reverse=True,
        )
        #: Limits that removed newer candidates: kind → sentence (first one wins).
        self.limits: dict[str, str] = {}
        self._specs: dict[str, SpecifierSet] = {}
        #: Compute capability → the variants rejected for lacking its kernels.
        self.arch_limits: dict[ComputeCapability, list[str]] = {}
        self._arch_fixes: dict[ComputeCapability, str | None] = {}

    def _spec(self, text: str) -> SpecifierSet:
        """Matrix specifiers repeat across candidates: parse each once per search."""
        parsed = self._specs.get(text)
        if parsed is None:
            from packaging.specifiers import SpecifierSet

            parsed = self._specs[text] = SpecifierSet(text)
        return parsed

    def wanted(self, version: Version) -> bool:
        """Whether a torch version matches the requested spec (any, without --torch)."""
        return self.spec is None or self.spec.contains(version, prereleases=True)

    def reject(
        self, release: TorchRelease, variant: str, reason: str, fix: str | None = None
    ) -> None:
        self.rejected.append(Rejection(release.version, variant, reason, fix))

    def run(self) -> _Choice | None:
        matching = [(v, r) for v, r in self.releases if self.wanted(v)]
        if not matching:
            newest = self.releases[0][1].version if self.releases else "none"
            oldest = self.releases[-1][1].version if self.releases else "none"
            raise Unsatisfiable(
                f"no torch release in matrix {self.matrix.matrix_version} matches "
                f"{self.request.torch!r} (it knows {oldest} to {newest})",
                hint="relax --torch, or point --matrix at a newer matrix",
            )
        for version, release in matching:
            choice = self._try_release(version, release)
            if choice is not None:
                return choice
        return None

    def _try_release(self, version: Version, release: TorchRelease) -> _Choice | None:
        builds = release.builds_for(self.platform)
        if not builds:
            self.reject(release, "*", f"torch {release.version} has no builds for {self.platform}")
            return None
        offered = release.python.get(self.platform, ())
        if self.python is not None:
            python = self.python
            if python not in offered:
                gil = [p for p in offered if not p.endswith("t")]
                span = f"{min(gil, key=python_key)}–{max(gil, key=python_key)}" if gil else "none"
                self.reject(
                    release,
                    "*",
                    f"torch {release.version} has no wheels for Python {python} on "
                    f"{self.platform} (it has {span})",
                    f"use --python {max(gil, key=python_key)}" if gil else None,
                )
                self.limits.setdefault(
                    "python",
                    f"Python {python} limits torch to releases that still ship wheels for it",
                )
                return None
        else:
            gil = [p for p in offered if not p.endswith("t")]
            if not gil:
                self.reject(
                    release,
                    "*",
                    f"torch {release.version} lists no CPython wheels for {self.platform}",
                )
                return None
            python = max(gil, key=python_key)

        companions = self._companions(version, release, python)
        if companions is None:
            return None

        if not self.fleet.has_driver or self.cuda_pin == CPU_VARIANT:
            return self._cpu_choice(release, builds, python, companions)
        return self._cuda_choice(release, builds, python, companions)

    def _cpu_choice(
        self,
        release: TorchRelease,
        builds: Sequence[TorchBuild],
        python: str,
        companions: _Companions,
    ) -> _Choice | None:
        if isinstance(self.cuda_pin, tuple):
            raise Unsatisfiable(
                f"--cuda {format_cuda(self.cuda_pin)} asks for a CUDA build, but "
                f"{self._no_driver_subject()} no NVIDIA driver",
                hint="give --driver-version for the machine that will run it, or drop --cuda",
            )
        cpu = next((b for b in builds if b.kind == "cpu"), None)
        if cpu is None:
            self.reject(
                release,
                CPU_VARIANT,
                f"torch {release.version} has no CPU build for {self.platform}",
            )
            return None
        return _Choice(release, cpu, python, companions, None, None)

    def _no_driver_subject(self) -> str:
        if self.fleet.size == 1:
            return "the target has"
        return "no target has"

    def _cuda_choice(
        self,
        release: TorchRelease,
        builds: Sequence[TorchBuild],
        python: str,
        companions: _Companions,
    ) -> _Choice | None:
        # ROCm builds never serve NVIDIA targets; the CPU build would hide the GPU.
        cuda_builds = sorted(
            (b for b in builds if b.kind == "cuda" and b.cuda is not None),
            key=lambda b: b.cuda or (0, 0),
            reverse=True,
        )
        if isinstance(self.cuda_pin, tuple):
            pinned = [b for b in cuda_builds if b.cuda == self.cuda_pin]
            if not pinned:
                variant = f"cu{self.cuda_pin[0]}{self.cuda_pin[1]}"
                have = ", ".join(b.variant for b in cuda_builds) or "none"
                self.reject(
                    release,
                    variant,
                    f"torch {release.version} has no {variant} build for "
                    f"{self.platform} (it has {have})",
                    "drop --cuda or choose one of those",
                )
                return None
            cuda_builds = pinned
        if not cuda_builds:
            self.reject(
                release, "*", f"torch {release.version} has no CUDA build for {self.platform}"
            )
            return None
        ccs = tuple(self.fleet.ccs)
        for build in cuda_builds:
            assert build.cuda is not None
            verdict, node = self.fleet.verdict(self.matrix, build.cuda, self.request.compat)
            missing = missing_archs(build, ccs)
            if verdict.allowed and not missing:
                return _Choice(release, build, python, companions, verdict, node)
            # Both checks are reported, so a fix never promises a fit the other one denies.
            reasons: list[str] = []
            fixes: list[str] = []
            if not verdict.allowed:
                self._driver_problem(build, verdict, node, reasons, fixes)
            if missing:
                self._arch_problem(release, build, missing, reasons, fixes)
            self.reject(
                release,
                build.variant,
                f"torch {release.version}+{build.variant}: " + "; and ".join(reasons),
                "; and ".join(fixes) or None,
            )
        return None

    def _driver_problem(
        self,
        build: TorchBuild,
        verdict: DriverVerdict,
        node: Target,
        reasons: list[str],
        fixes: list[str],
    ) -> None:
        where = f" on {node_name(node)}" if self.fleet.size > 1 else ""
        reasons.append(_driver_reason(build, verdict, node) + where)
        options = []
        if verdict.required_driver is not None:
            options.append(
                f"upgrade{' ' + node_name(node) if self.fleet.size > 1 else ''} "
                f"to driver ≥ {verdict.required_driver}"
            )
        if verdict.minor_compat_possible:
            options.append("use --compat minor")
        if options:
            fixes.append(" or ".join(options))
        if verdict.driver_cuda is not None:
            self.limits.setdefault(
                "driver",
                f"driver {node.driver_version or '(version unknown)'}"
                f"{' on ' + node_name(node) if self.fleet.size > 1 else ''} "
                f"limits CUDA to {format_cuda(verdict.driver_cuda)}"
                + (
                    " (and what minor-version compatibility allows)"
                    if self.request.compat == "minor"
                    else ""
                ),
            )

    def _arch_problem(
        self,
        release: TorchRelease,
        build: TorchBuild,
        missing: tuple[ComputeCapability, ...],
        reasons: list[str],
        fixes: list[str],
    ) -> None:
        described = ", ".join(cc_text(cc, self.fleet.ccs[cc]) for cc in missing)
        reasons.append(
            f"no kernels for compute capability {described} (it has {_arch_list(build)})"
        )
        fix = self._arch_fix(release, build, missing[0])
        if fix:
            fixes.append(fix)
        for cc in missing:
            variants = self.arch_limits.setdefault(cc, [])
            if build.variant not in variants:
                variants.append(build.variant)

    def _arch_fix(
        self, release: TorchRelease, build: TorchBuild, cc: ComputeCapability
    ) -> str | None:
        """What would bring kernels for ``cc``: a newer driver, or another torch release."""
        if cc in self._arch_fixes:
            return self._arch_fixes[cc]
        sm = f"sm_{cc[0]}{cc[1]}"
        covering = [
            (other, candidate)
            for version, other in self.releases
            if self.wanted(version)
            for candidate in other.builds_for(self.platform)
            if candidate.kind == "cuda"
            and candidate.cuda is not None
            and not missing_archs(candidate, (cc,))
        ]
        fix: str | None
        if not covering:
            anywhere = next(
                (
                    other
                    for _version, other in self.releases
                    for candidate in other.builds_for(self.platform)
                    if candidate.kind == "cuda" and not missing_archs(candidate, (cc,))
                ),
                None,
            )
            fix = (
                f"relax --torch: torch {anywhere.version} is the newest release with {sm} kernels"
                if anywhere
                else None
            )
        else:
            lowest = min(candidate.cuda or (0, 0) for _other, candidate in covering)
            driver_cuda = self.fleet.lowest_cuda(self.matrix)
            needed = self.matrix.min_driver_for_cuda(lowest, self.platform)
            if driver_cuda is not None and lowest > driver_cuda and needed is not None:
                fix = (
                    f"upgrade to driver ≥ {needed} for {sm} (CUDA {format_cuda(lowest)} "
                    "builds and newer have it)"
                )
            else:
                runnable = [
                    (o, c)
                    for o, c in covering
                    if driver_cuda is None or (c.cuda or (0, 0)) <= driver_cuda
                ]
                other, candidate = (runnable or covering)[0]
                fix = (
                    f"torch {other.version}+{candidate.variant} is the newest build with "
                    f"{sm} kernels: --torch '<={other.version}'"
                )
        self._arch_fixes[cc] = fix
        return fix

    def _companions(
        self, version: Version, release: TorchRelease, python: str
    ) -> _Companions | None:
        pins: list[tuple[str, str, bool]] = []
        deepspeed: DeepSpeedRelease | None = None
        for requirement in self.companions:
            name = requirement.name
            if name in ("torchvision", "torchaudio"):
                paired = release.torchvision if name == "torchvision" else release.torchaudio
                if paired is None:
                    self.reject(
                        release,
                        "*",
                        f"torch {release.version} has no paired {name} release",
                        f"drop --with {name}"
                        + (
                            " (torchaudio has no release for torch 2.12 and newer)"
                            if name == "torchaudio"
                            else ""
                        ),
                    )
                    self.limits.setdefault(
                        name, f"--with {name} limits torch to releases with a paired {name}"
                    )
                    return None
                if requirement.specifier and not requirement.specifier.contains(
                    paired, prereleases=True
                ):
                    self.reject(
                        release,
                        "*",
                        f"torch {release.version} pairs with {name} {paired}, "
                        f"outside {requirement.specifier}",
                        f"relax the {name} spec or --torch",
                    )
                    return None
                pins.append((name, paired, True))
            else:  # deepspeed
                deepspeed = self._deepspeed(version, release, python, requirement)
                if deepspeed is None:
                    return None
                pins.append((name, deepspeed.version, False))
        return _Companions(tuple(pins), deepspeed)

    def _deepspeed(
        self, version: Version, release: TorchRelease, python: str, requirement: Companion
    ) -> DeepSpeedRelease | None:
        py = Version(python.rstrip("t"))
        for ds_version, ds in self.deepspeed:
            if requirement.specifier and not requirement.specifier.contains(
                ds_version, prereleases=True
            ):
                continue
            if ds.torch and not self._spec(ds.torch).contains(version, prereleases=True):
                continue
            if ds.requires_python and not self._spec(ds.requires_python).contains(
                py, prereleases=True
            ):
                continue
            return ds
        spec = f" {requirement.specifier}" if requirement.specifier else ""
        self.reject(
            release,
            "*",
            f"no DeepSpeed{spec} release in the matrix supports torch {release.version} "
            f"with Python {python}",
            "relax the deepspeed spec or --torch",
        )
        self.limits.setdefault(
            "deepspeed", f"--with {requirement} limits torch to releases DeepSpeed supports"
        )
        return None


def _driver_reason(build: TorchBuild, verdict: DriverVerdict, node: Target) -> str:
    """``CUDA 13.2 needs driver ≥ 595.45.04; driver 535.104.05 supports CUDA 12.2``."""
    if verdict.status != "too-old":
        return verdict.reason
    cuda = format_cuda(build.cuda or (0, 0))
    needs = (
        f"CUDA {cuda} needs driver ≥ {verdict.required_driver}"
        if verdict.required_driver
        else f"CUDA {cuda} is not in the matrix's driver table"
    )
    driver = f"driver {node.driver_version}" if node.driver_version else "the driver"
    supports = (
        f"supports CUDA {format_cuda(verdict.driver_cuda)}"
        if verdict.driver_cuda
        else "is older than every CUDA release in the matrix"
    )
    return f"{needs}; {driver} {supports}"


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def _arch_list(build: TorchBuild) -> str:
    sass = ", ".join(f"sm_{cc[0]}{cc[1]}" for cc in build.sass) or "none"
    ptx = ", ".join(f"compute_{cc[0]}{cc[1]}" for cc in build.ptx) or "none"
    return f"SASS {sass}; PTX {ptx}"


# --------------------------------------------------------------------------------------------
# The entry point


def resolve(matrix: Matrix, targets: Sequence[Target], request: Request) -> Plan:
    """The Plan every target can run, or :class:`Unsatisfiable` naming the nearest candidates."""
    if request.compat not in ("strict", "minor"):
        raise UsageError(f"invalid compat policy {request.compat!r}: expected strict or minor")
    fleet = reduce_fleet(matrix, targets)
    search = _Search(matrix, fleet, request)
    choice = search.run()
    if choice is None:
        error = _unsatisfiable(search, fleet, request)
        if request.compat == "strict" and fleet.has_driver:
            # Say whether --compat minor would really give a plan, and which.
            trial = _Search(matrix, fleet, replace(request, compat="minor")).run()
            if trial is not None:
                minor = (
                    f"--compat minor would give torch {trial.release.version}"
                    f"+{trial.build.variant}, at a cost: {MINOR_COMPAT_COST}"
                )
                error.hint = f"{error.hint}; or {minor}" if error.hint else minor
        raise error
    return _plan(matrix, targets, fleet, request, search, choice)


def nearest(rejected: Sequence[Rejection], limit: int = MAX_REJECTED) -> tuple[Rejection, ...]:
    """A handful of rejections, newest first: the newest candidate for each distinct fix.

    A driver that is too old rejects dozens of builds; what helps is the ladder of upgrades
    (driver ≥ 595 for 2.15+cu132, ≥ 580 for cu130, ..., ≥ 520 for cu118), each shown once.
    """
    kept: list[Rejection] = []
    seen: set[str] = set()
    for rejection in rejected:
        key = rejection.fix or rejection.reason
        if key in seen:
            continue
        seen.add(key)
        kept.append(rejection)
    if len(kept) > limit:
        # Keep the newest and the nearest (the smallest change, at the old end).
        kept = [*kept[: limit // 2], *kept[-(limit - limit // 2) :]]
    return tuple(kept)


def _candidate(rejection: Rejection) -> str:
    if rejection.variant == "*":
        return f"torch {rejection.torch}"
    return f"torch {rejection.torch}+{rejection.variant}"


def _unsatisfiable(search: _Search, fleet: Fleet, request: Request) -> Unsatisfiable:
    rejected = nearest(search.rejected)
    wanted = f"torch {request.torch}" if request.torch else "any torch release"
    parts = [wanted]
    if request.cuda:
        parts.append(f"CUDA {request.cuda}")
    if search.python:
        parts.append(f"Python {search.python}")
    subject = "this target" if fleet.size == 1 else f"all {fleet.size} targets"
    message = (
        f"nothing fits {', '.join(parts)} on {subject} ({fleet.platform}, "
        f"compat {request.compat}): {len(search.rejected)} candidates rejected"
    )
    # The nearest: the oldest candidate with one thing to fix (else the oldest with any fix).
    with_fix = [r for r in rejected if r.fix]
    single = [r for r in with_fix if r.fix and "; and " not in r.fix]
    hint = None
    if with_fix:
        closest = (single or with_fix)[-1]
        hint = f"{closest.fix} (for {_candidate(closest)}, the nearest candidate)"
    return Unsatisfiable(message, rejected=rejected, hint=hint)


def _plan(
    matrix: Matrix,
    targets: Sequence[Target],
    fleet: Fleet,
    request: Request,
    search: _Search,
    choice: _Choice,
) -> Plan:
    release, build = choice.release, choice.build
    macos = fleet.platform.startswith("macos")
    # macOS wheels carry no local label and come from PyPI (there is only the CPU/MPS build).
    label = "" if macos else f"+{build.variant}"
    index_url = request.pypi_index if macos else f"{request.pytorch_index}/{build.variant}"
    packages = [PackagePin("torch", f"{release.version}{label}", index_url)]
    for name, version, from_pytorch_index in choice.companions.pins:
        if from_pytorch_index:
            packages.append(PackagePin(name, f"{version}{label}", index_url))
        else:
            packages.append(PackagePin(name, version, request.pypi_index))
    requested = {pin.name for pin in packages}
    paired = tuple(
        PackagePin(name, f"{version}{label}", index_url)
        for name, version in (
            ("torchvision", release.torchvision),
            ("torchaudio", release.torchaudio),
        )
        if version is not None and name not in requested
    )

    explanation = _explain(matrix, fleet, request, search, choice, index_url)
    unverified = _unverified(matrix, choice, fleet)
    if unverified:
        explanation.append(
            "This plan rests on facts the matrix marks unverified: "
            + "; ".join(unverified)
            + ". Check them (cudalock audit --deep after installing) before relying on them."
        )
    return Plan(
        matrix_version=matrix.matrix_version,
        python=choice.python,
        platform=fleet.platform,
        compat=_compat(request.compat),
        torch_version=release.version,
        variant=build.variant,
        cuda=build.cuda,
        cudnn=build.cudnn,
        index_url=index_url or "",
        packages=tuple(packages),
        paired=paired,
        targets=tuple(targets),
        rejected=nearest(search.rejected),
        explanation=tuple(explanation),
        unverified=tuple(unverified),
    )


def _compat(value: str) -> Compat:
    return "minor" if value == "minor" else "strict"


def _explain(
    matrix: Matrix,
    fleet: Fleet,
    request: Request,
    search: _Search,
    choice: _Choice,
    index_url: str | None,
) -> list[str]:
    release, build = choice.release, choice.build
    lines: list[str] = []
    source = index_url or "PyPI"
    what = (
        f"torch {release.version}+{build.variant}"
        if not fleet.platform.startswith("macos")
        else f"torch {release.version}"
    )
    cuda = f"CUDA {format_cuda(build.cuda)}" if build.cuda else "no CUDA"
    cudnn = f", cuDNN {build.cudnn}" if build.cudnn else ""
    lines.append(
        f"Chose {what} ({cuda}{cudnn}) from {source} for Python {choice.python} "
        f"on {fleet.platform}."
    )
    if build.kind == "cpu":
        if request.cuda == CPU_VARIANT:
            lines.append("CPU-ONLY BUILD, as --cuda cpu asked: torch will not use the GPU.")
        else:
            subject = "THE TARGET HAS" if fleet.size == 1 else "NO TARGET HAS"
            lines.append(
                f"{subject} NO NVIDIA DRIVER: chose the CPU-only build; torch will not use a GPU. "
                "If that is wrong, run cudalock on the GPU machine or give --driver-version."
            )
    if request.python is None:
        lines.append(
            f"Python {choice.python} is the newest CPython torch {release.version} "
            f"ships wheels for on {fleet.platform} (--python chooses another)."
        )
    if request.torch:
        lines.append(
            f"torch {release.version} is the newest release matching {request.torch!r} that fits."
        )
    for sentence in search.limits.values():
        lines.append(sentence[0].upper() + sentence[1:] + ".")
    for cc, variants in sorted(search.arch_limits.items()):
        lines.append(
            f"Compute capability {cc_text(cc, fleet.ccs[cc])} rules out the "
            f"{', '.join(variants)} build{'s' if len(variants) > 1 else ''} "
            "newer than the choice: no kernels for it."
        )
    verdict, node = choice.verdict, choice.verdict_node
    if verdict is not None and node is not None:
        where = f" on {node_name(node)}" if fleet.size > 1 else ""
        if verdict.status == "minor-compat":
            lines.append(
                f"COMPAT MINOR: {build.variant} needs CUDA {format_cuda(build.cuda or (0, 0))} "
                f"but driver {node.driver_version or '?'}{where} supports "
                f"CUDA {format_cuda(verdict.driver_cuda or (0, 0))}; it runs through "
                f"minor-version compatibility (CUDA {(build.cuda or (0, 0))[0]}.x floor "
                f"{verdict.floor}), at a cost: {MINOR_COMPAT_COST}."
            )
        elif "driver" not in search.limits and verdict.driver_cuda is not None:
            lines.append(
                f"Driver {node.driver_version or '(version unknown)'}{where} supports "
                f"CUDA {format_cuda(verdict.driver_cuda)}; {build.variant} needs "
                f"CUDA {format_cuda(build.cuda or (0, 0))}"
                + (f" (driver ≥ {verdict.required_driver})." if verdict.required_driver else ".")
            )
    if build.kind == "cuda":
        if fleet.ccs:
            covered = ", ".join(cc_text(cc, label) for cc, label in sorted(fleet.ccs.items()))
            lines.append(f"Its kernels cover every GPU: {covered}; {_arch_list(build)}.")
        else:
            lines.append(
                "No GPU compute capability is known: the architectures were not "
                "checked (give --compute-capability or --gpu)."
            )
        if fleet.unknown_gpus:
            lines.append(
                "Unknown compute capability, not checked: " + ", ".join(fleet.unknown_gpus) + "."
            )
        if fleet.without_driver:
            shown = ", ".join(fleet.without_driver[:5])
            more = len(fleet.without_driver) - 5
            lines.append(
                f"No NVIDIA driver on {shown}{f' and {more} more' if more > 0 else ''}: "
                "they can install this build but will run torch on the CPU only."
            )
    if fleet.size > 1:
        lines.append(f"One plan for {fleet.size} targets: it runs on every one of them.")
    names = [n for n, _v, _i in choice.companions.pins]
    if names:
        lines.append(
            "Paired with the same build: "
            + ", ".join(f"{n} {v}" for n, v, _i in choice.companions.pins)
            + "."
        )
    return lines


#: Build fields a plan rests on, in words (nccl is informational only).
_BUILD_FACTS = {
    "sass": "SASS architecture list",
    "ptx": "PTX architecture list",
    "cuda": "CUDA version",
    "cudnn": "cuDNN version",
    "platforms": "platform list",
    "variant": "variant name",
}


def _unverified(matrix: Matrix, choice: _Choice, fleet: Fleet) -> list[str]:
    release, build = choice.release, choice.build
    facts: list[str] = []
    paired = {name for name, _version, _index in choice.companions.pins}
    if not release.provenance.verified:
        facts.append(f"the torch {release.version} release entry")
    for name in release.provenance.unverified_fields:
        # Only what this plan uses: the Python list, and the companions it pins.
        if name in ("python", "requires_python") or name in paired:
            facts.append(f"the {name} of torch {release.version}")
    if not build.provenance.verified:
        facts.append(
            f"that the {release.version}+{build.variant} build exists for "
            f"{fleet.platform} as listed"
        )
    for name in build.provenance.unverified_fields:
        if name in _BUILD_FACTS:
            facts.append(f"the {_BUILD_FACTS[name]} of {release.version}+{build.variant}")
    if build.cuda is not None:
        toolkits = [tk for tk in matrix.toolkits if tk.cuda == build.cuda]
        if toolkits and not any(tk.provenance.verified for tk in toolkits):
            facts.append(f"the driver minimum of CUDA {format_cuda(build.cuda)}")
    deepspeed = choice.companions.deepspeed
    if deepspeed is not None and not deepspeed.provenance.field_verified("torch"):
        facts.append(f"the torch range of DeepSpeed {deepspeed.version}")
    return facts


__all__ = ["MAX_REJECTED", "nearest", "resolve"]
