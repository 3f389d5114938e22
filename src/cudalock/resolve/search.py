"""The resolver: the torch stack a target (or a fleet) can run, and why.

``resolve(matrix, targets, request) -> Plan`` is pure: no I/O, no globals. The choice is the
newest torch release matching ``request.torch`` that has an allowed build for the Python and
platform; within it, the newest CUDA build the driver can run (``strict`` or ``minor``) whose
architectures cover every GPU. Nothing fits: :class:`Unsatisfiable` with the nearest rejected
candidates, newest first, each with the reason and its fixes.

A fix is data (:class:`~cudalock.model.Fix`: changes to the target or the request, and the
candidate that then fits) and is suggested only after a quiet search with its changes made
found that candidate fitting: a fix never promises what it cannot give. A build without kernels
for a GPU cannot be fixed by anything; its fixes name the other builds that have them.

A fleet reduces before the search: one platform, the lowest driver per driver-CUDA level, and the
union of compute capabilities, each remembered with the node it came from so the explanation can
name the node that constrained each choice.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from cudalock.errors import Unsatisfiable, sentence
from cudalock.matrix import DeepSpeedRelease, Matrix, TorchBuild, TorchRelease
from cudalock.model import (
    Alternative,
    Change,
    Fix,
    PackagePin,
    Plan,
    Rejection,
    Target,
    flag_assumptions,
)
from cudalock.request import (
    CPU_VARIANT,
    Companion,
    CudaPin,
    Request,
    cuda_pin_text,
    parse_torch_spec,
)
from cudalock.resolve.compat import MINOR_COMPAT_COST, DriverVerdict, missing_archs
from cudalock.resolve.fixes import apply_change
from cudalock.resolve.fleet import Fleet, cc_text, node_name, reduce_fleet
from cudalock.resolve.policy import (
    CudaPreference,
    builds_against_cuda,
    cuda_preferences,
    declined_reason,
)
from cudalock.versions import (
    ComputeCapability,
    DriverVersion,
    cuda_from_variant,
    format_cc,
    format_cuda,
    python_key,
)

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

#: How many rejected candidates a plan or an error carries (newest first).
MAX_REJECTED = 10


# --------------------------------------------------------------------------------------------
# The search


@dataclass(frozen=True)
class _Known:
    """The matrix's releases parsed once, newest first, shared by a search and its trials."""

    releases: tuple[tuple[Version, TorchRelease], ...]
    deepspeed: tuple[tuple[Version, DeepSpeedRelease], ...]


def _known(matrix: Matrix) -> _Known:
    releases = [(Version(r.version), r) for r in matrix.torch_releases if _is_version(r.version)]
    deepspeed = [(Version(d.version), d) for d in matrix.deepspeed if _is_version(d.version)]
    return _Known(
        tuple(sorted(releases, key=lambda item: item[0], reverse=True)),
        tuple(sorted(deepspeed, key=lambda item: item[0], reverse=True)),
    )


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
    #: Newer builds of the release that would run but rest on unverified facts.
    passed_over: tuple[TorchBuild, ...] = ()


@dataclass(frozen=True)
class _Alternative:
    """Another build with kernels for every GPU, and the changes that make it fit."""

    changes: tuple[Change, ...]
    choice: _Choice
    #: The driver it needs (None: the targets' drivers already run it).
    driver: DriverVersion | None = None


class _Search:
    def __init__(
        self,
        matrix: Matrix,
        fleet: Fleet,
        request: Request,
        known: _Known,
        *,
        explain: bool = True,
        targets: Sequence[Target] = (),
    ) -> None:
        self.matrix = matrix
        self.fleet = fleet
        self.request = request
        self.known = known
        self.targets = tuple(targets)
        #: False for the quiet searches that check a fix: they record reasons, not fixes.
        self.explain = explain
        self.python = request.python
        self.cuda_pin: CudaPin | None = request.cuda
        self.companions = list(request.with_packages)
        self.rejected: list[Rejection] = []
        self.platform = fleet.platform
        self.releases = known.releases
        self.deepspeed = known.deepspeed
        #: Limits that removed newer candidates: kind → sentence (first one wins).
        self.limits: dict[str, str] = {}
        self._specs: dict[str, SpecifierSet] = {}
        #: Compute capability → the variants rejected for lacking its kernels.
        self.arch_limits: dict[ComputeCapability, list[str]] = {}
        self._trials: dict[tuple[Request, DriverVersion | None], _Search] = {}
        self._upgraded: dict[DriverVersion, Fleet] = {}
        self._alternatives: tuple[_Alternative, ...] | None = None
        self._paired_alternative: dict[str, _Alternative | None] = {}
        self.choice: _Choice | None = None
        #: The choice policy's passes (resolve/policy.py), most preferred first; the search
        #: takes the first that finds a plan, then any build that runs.
        self.driver_cuda = fleet.lowest_cuda(matrix) if fleet.has_driver else None
        self.preferences = cuda_preferences(self.driver_cuda, self.targets, request, matrix)
        self.preference: CudaPreference | None = None
        #: Builds that would run but the pass's preference passed over, newest first.
        self.declined: list[_Choice] = []
        #: The preferences that found nothing, each with its newest rejection.
        self.missed: list[tuple[CudaPreference, Rejection | None]] = []

    def _spec(self, text: str) -> SpecifierSet:
        """Matrix specifiers repeat across candidates: parse each once per search."""
        parsed = self._specs.get(text)
        if parsed is None:
            from packaging.specifiers import SpecifierSet

            parsed = self._specs[text] = SpecifierSet(text)
        return parsed

    def wanted(self, version: Version) -> bool:
        """Whether a torch version matches the requested spec (any, without --torch)."""
        return self.request.torch.admits(version)

    def reject(
        self, release: TorchRelease, variant: str, reason: str, fixes: Sequence[Fix] = ()
    ) -> None:
        self.rejected.append(Rejection(release.version, variant, reason, tuple(fixes)))

    def run(self) -> _Choice | None:
        matching = [(v, r) for v, r in self.releases if self.wanted(v)]
        if not matching:
            newest = self.releases[0][1].version if self.releases else "none"
            oldest = self.releases[-1][1].version if self.releases else "none"
            raise Unsatisfiable(
                f"no torch release in matrix {self.matrix.matrix_version} matches "
                f"{str(self.request.torch)!r} (it knows {oldest} to {newest})",
                hint="Relax --torch, or point --matrix at a newer matrix.",
            )
        for preference in (*self.preferences, None):
            self._start_pass(preference)
            for version, release in matching:
                choice = self._try_release(version, release)
                if choice is not None:
                    self.choice = choice
                    return choice
            if preference is not None:
                self.missed.append((preference, self._newest_missed(preference)))
        return None

    def _start_pass(self, preference: CudaPreference | None) -> None:
        """Forget what the previous pass found: its rejections spoke of its preference."""
        self.preference = preference
        self.rejected = []
        self.limits = {}
        self.arch_limits = {}
        self._alternatives = None
        self._paired_alternative = {}
        self.declined = []

    def _newest_missed(self, preference: CudaPreference) -> Rejection | None:
        """The newest rejection of a build the preference takes: why it found nothing."""
        for rejection in self.rejected:
            cuda = cuda_from_variant(rejection.variant)
            if cuda is not None and preference.accepts_cuda(cuda):
                return rejection
        return None

    # ----------------------------------------------------------------------------------------
    # Checking a fix: a quiet search with its changes made

    def _trial(self, request: Request, driver: DriverVersion | None) -> _Search:
        """The quiet search for ``request`` on this fleet, its drivers raised to ``driver``."""
        key = (request, driver)
        trial = self._trials.get(key)
        if trial is None:
            fleet = self.fleet if driver is None else self._fleet_at(driver)
            trial = _Search(
                self.matrix, fleet, request, self.known, explain=False, targets=self.targets
            )
            try:
                trial.run()
            except Unsatisfiable:
                trial.choice = None
            self._trials[key] = trial
        return trial

    def _fleet_at(self, driver: DriverVersion) -> Fleet:
        fleet = self._upgraded.get(driver)
        if fleet is None:
            fleet = self._upgraded[driver] = self.fleet.upgraded(self.matrix, driver)
        return fleet

    def _try(
        self,
        changes: Sequence[Change],
        *,
        torch: str,
        build: TorchBuild | None = None,
        unpin_cuda: bool = False,
    ) -> _Search:
        """The quiet search with ``changes`` made, for torch ``torch`` (and ``build``) only."""
        request = self.request
        driver: DriverVersion | None = None
        for change in changes:
            if change.kind == "driver":
                driver = DriverVersion(change.value)
            else:
                request = apply_change(self.matrix, (), request, change)[1]
        request = replace(request, torch=parse_torch_spec(f"=={torch}"))
        if build is not None and build.cuda is not None:
            request = replace(request, cuda=build.cuda)
        elif unpin_cuda:
            request = replace(request, cuda=None)
        return self._trial(request, driver)

    def _fix(
        self,
        changes: tuple[Change, ...],
        text: str,
        *,
        torch: str,
        build: TorchBuild | None = None,
    ) -> Fix | None:
        """``changes`` as a Fix when a search with them made finds the candidate fitting."""
        choice = self._try(changes, torch=torch, build=build).choice
        if choice is None:
            return None
        return Fix(changes, choice.release.version, choice.build.variant, text)

    def _pins(self, version: Version, choice: _Choice) -> tuple[Change, ...]:
        """The torch and CUDA changes that make ``choice`` one the request admits."""
        changes = []
        if not self.wanted(version):
            changes.append(Change("torch", f"=={choice.release.version}"))
        if self.cuda_pin is not None and choice.build.cuda != self.cuda_pin:
            changes.append(Change("cuda", _cuda_text(choice.build)))
        return tuple(changes)

    # ----------------------------------------------------------------------------------------
    # One release

    def _try_release(self, version: Version, release: TorchRelease) -> _Choice | None:
        builds = release.builds_for(self.platform)
        if not builds:
            self.reject(release, "*", f"torch {release.version} has no builds for {self.platform}")
            return None
        offered = release.python.get(self.platform, ())
        if self.python is not None:
            python = self.python
            if python not in offered:
                self._python_problem(release, python, offered)
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

    def _python_problem(self, release: TorchRelease, python: str, offered: Sequence[str]) -> None:
        gil = [p for p in offered if not p.endswith("t")]
        span = f"{min(gil, key=python_key)}–{max(gil, key=python_key)}" if gil else "none"
        reason = (
            f"torch {release.version} has no wheels for Python {python} on "
            f"{self.platform} (it has {span})"
        )
        fixes: list[Fix] = []
        if gil and self.explain:
            other = max(gil, key=python_key)
            changes = (Change("python", other),)
            trial = self._try(changes, torch=release.version)
            if trial.choice is not None:
                fixes.append(
                    Fix(
                        changes,
                        release.version,
                        trial.choice.build.variant,
                        f"use --python {other}",
                    )
                )
            elif trial.rejected:
                # Say what else stands in the way rather than offer a fix that gives nothing.
                reason += (
                    f"; with Python {other} it would not fit either ({trial.rejected[-1].reason})"
                )
        self.reject(release, "*", reason, fixes)
        self.limits.setdefault(
            "python",
            f"Python {python} limits torch to releases that still ship wheels for it",
        )

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
                hint="Give --driver-version for the machine that will run it, or drop --cuda.",
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
                self._pin_problem(release, cuda_builds)
                return None
            cuda_builds = pinned
        if not cuda_builds:
            self.reject(
                release, "*", f"torch {release.version} has no CUDA build for {self.platform}"
            )
            return None
        ccs = tuple(self.fleet.ccs)
        chosen: _Choice | None = None
        # A build that fits but rests on unverified facts is the choice only when no verified
        # build of the release fits: a wrong arch list or a build that was never published
        # fails at run or install time. --cuda pins one build and takes it as it is.
        unverified: list[_Choice] = []
        failed: list[tuple[TorchBuild, DriverVerdict, Target, tuple[ComputeCapability, ...]]] = []
        for build in cuda_builds:
            assert build.cuda is not None
            verdict, node = self.fleet.verdict(self.matrix, build.cuda, self.request.compat)
            missing = missing_archs(build, ccs)
            if verdict.allowed and not missing:
                choice = _Choice(release, build, python, companions, verdict, node)
                if self.preference is not None and not self.preference.accepts(build):
                    self.declined.append(choice)
                    continue
                if self.cuda_pin is None and rests_on_unverified(build):
                    unverified.append(choice)
                    continue
                chosen = replace(choice, passed_over=tuple(c.build for c in unverified))
                break
            failed.append((build, verdict, node, missing))
        if chosen is None and unverified:
            chosen = unverified[0]
        # Report the builds newer than the choice (all of them when nothing fits).
        newer = cuda_builds.index(chosen.build) if chosen is not None else len(cuda_builds)
        for build, verdict, node, missing in failed:
            if cuda_builds.index(build) < newer:
                self._build_problem(release, build, verdict, node, missing)
        return chosen

    def _pin_problem(self, release: TorchRelease, cuda_builds: Sequence[TorchBuild]) -> None:
        assert isinstance(self.cuda_pin, tuple)
        variant = f"cu{self.cuda_pin[0]}{self.cuda_pin[1]}"
        have = ", ".join(b.variant for b in cuda_builds) or "none"
        fixes: list[Fix] = []
        if self.explain and cuda_builds:
            trial = self._try((), torch=release.version, unpin_cuda=True)
            if trial.choice is not None:
                changes = (Change("cuda", _cuda_text(trial.choice.build)),)
                fixes.append(
                    Fix(
                        changes,
                        release.version,
                        trial.choice.build.variant,
                        f"use --cuda {changes[0].value}",
                    )
                )
        self.reject(
            release,
            variant,
            f"torch {release.version} has no {variant} build for {self.platform} (it has {have})",
            fixes,
        )

    def _build_problem(
        self,
        release: TorchRelease,
        build: TorchBuild,
        verdict: DriverVerdict,
        node: Target,
        missing: tuple[ComputeCapability, ...],
    ) -> None:
        # Both checks are reported, so the reason is complete; the fixes depend on which failed.
        reasons: list[str] = []
        if not verdict.allowed:
            where = f" on {node_name(node)}" if self.fleet.size > 1 else ""
            reasons.append(_driver_reason(build, verdict, node) + where)
            self._note_driver_limit(verdict, node)
        if missing:
            described = ", ".join(cc_text(cc, self.fleet.ccs[cc]) for cc in missing)
            reasons.append(
                f"no kernels for compute capability {described} (it has {_arch_list(build)})"
            )
            for cc in missing:
                variants = self.arch_limits.setdefault(cc, [])
                if build.variant not in variants:
                    variants.append(build.variant)
        fixes: list[Fix] = []
        if self.explain:
            if missing:
                # No change makes this build grow kernels: name the builds that have them.
                fixes = self._kernel_fixes(missing)
            else:
                fixes = self._driver_fixes(release, build, verdict)
        self.reject(
            release,
            build.variant,
            f"torch {release.version}+{build.variant}: " + "; and ".join(reasons),
            fixes,
        )

    def _note_driver_limit(self, verdict: DriverVerdict, node: Target) -> None:
        if verdict.driver_cuda is None:
            return
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

    # ----------------------------------------------------------------------------------------
    # Fixes

    def _driver_fixes(
        self, release: TorchRelease, build: TorchBuild, verdict: DriverVerdict
    ) -> list[Fix]:
        # The build passed every other check, so the driver verdict alone decides whether a
        # change of driver or policy lets it fit: the check a quiet search would make.
        assert build.cuda is not None
        fixes = []
        changes: tuple[Change, ...]
        if verdict.required_driver is not None:
            required = verdict.required_driver
            upgraded = self._fleet_at(required)
            if upgraded.verdict(self.matrix, build.cuda, self.request.compat)[0].allowed:
                changes = (Change("driver", str(required)),)
                text = self._upgrade_text(required)
                fixes.append(Fix(changes, release.version, build.variant, text))
        if (
            self.request.compat == "strict"
            and self.fleet.verdict(self.matrix, build.cuda, "minor")[0].allowed
        ):
            changes = (Change("compat", "minor"),)
            fixes.append(Fix(changes, release.version, build.variant, "use --compat minor"))
        return fixes

    def _upgrade_text(self, driver: DriverVersion) -> str:
        nodes = self._nodes_below(driver)
        return f"upgrade {nodes + ' ' if nodes else ''}to driver ≥ {driver}"

    def _nodes_below(self, driver: DriverVersion) -> str:
        """The fleet's nodes a driver upgrade to ``driver`` concerns ("" for one target)."""
        if self.fleet.size == 1:
            return ""
        below = self.fleet.below(self.matrix, driver)
        names = [node_name(group.node) for group in below[:3]]
        more = sum(group.count for group in below) - len(names)
        return ", ".join(names) + (
            f" and {more} more node{'s' if more > 1 else ''}" if more else ""
        )

    def _kernel_fixes(self, missing: tuple[ComputeCapability, ...]) -> list[Fix]:
        kernels = "kernels for compute capability " + ", ".join(format_cc(cc) for cc in missing)
        subject = "this target" if self.fleet.size == 1 else "these targets"
        fixes = []
        for alternative in self._kernel_alternatives():
            choice = alternative.choice
            build = f"torch {choice.release.version}+{choice.build.variant}"
            flags = _flags(alternative.changes)
            if alternative.driver is None:
                within = (
                    f" --torch {shlex.quote(str(self.request.torch))} allows"
                    if self.request.torch
                    and not any(c.kind == "torch" for c in alternative.changes)
                    else ""
                )
                text = (
                    f"use {flags}: {build} is the newest build{within} with {kernels} "
                    f"that fits {subject}"
                )
            else:
                # The driver is what running that build needs; it adds no kernels to this one.
                nodes = self._nodes_below(alternative.driver) or "the driver"
                text = (
                    f"{build} has {kernels} and needs driver ≥ {alternative.driver}: "
                    f"upgrade {nodes}" + (f" and use {flags}" if flags else "")
                )
            fixes.append(
                Fix(alternative.changes, choice.release.version, choice.build.variant, text)
            )
        return fixes

    def _kernel_alternatives(self) -> tuple[_Alternative, ...]:
        """Builds with kernels for every GPU: the newest one that fits as the targets are, and a
        newer one that a driver upgrade would let fit. Found once per search."""
        if self._alternatives is not None:
            return self._alternatives
        found: list[_Alternative] = []
        runnable_version: Version | None = None
        # The releases --torch asks for first: the fewest changes.
        ordered = sorted(self.releases, key=lambda item: not self.wanted(item[0]))
        for version, release in ordered:
            if not release.builds_for(self.platform):
                continue
            trial = self._try((), torch=release.version)
            if trial.choice is None and self.cuda_pin is not None:
                trial = self._try((), torch=release.version, unpin_cuda=True)
            if trial.choice is not None:
                runnable_version = version
                changes = self._pins(version, trial.choice)
                if changes:  # without changes it is the plan itself
                    found.append(_Alternative(changes, trial.choice))
                break
        upgrade = self._upgrade_alternative(runnable_version)
        if upgrade is not None:
            found.insert(0, upgrade)
        self._alternatives = tuple(found)
        return self._alternatives

    def _upgrade_alternative(self, older_than: Version | None) -> _Alternative | None:
        """The newest build with kernels for every GPU that fits once the drivers are raised,
        with the lowest driver that does it."""
        ccs = tuple(self.fleet.ccs)
        for version, release in self.releases:
            if older_than is not None and version <= older_than:
                return None
            covering = sorted(
                (
                    b
                    for b in release.builds_for(self.platform)
                    if b.kind == "cuda" and b.cuda is not None and not missing_archs(b, ccs)
                ),
                key=lambda b: b.cuda or (0, 0),
            )
            for build in covering:
                assert build.cuda is not None
                required = self.matrix.min_driver_for_cuda(build.cuda, self.platform)
                if required is None or not self.fleet.below(self.matrix, required):
                    continue
                upgrade = (Change("driver", str(required)),)
                trial = self._try(upgrade, torch=release.version, build=build)
                if trial.choice is not None:
                    changes = upgrade + self._pins(version, trial.choice)
                    return _Alternative(changes, trial.choice, required)
        return None

    def _paired_fix(self, name: str) -> Fix | None:
        """The newest release paired with ``name`` that fits, when --torch excludes it."""
        if name not in self._paired_alternative:
            found: _Alternative | None = None
            for version, release in self.releases:
                if self.wanted(version) or getattr(release, name) is None:
                    continue
                trial = self._try((), torch=release.version)
                if trial.choice is not None:
                    found = _Alternative(self._pins(version, trial.choice), trial.choice)
                    break
            self._paired_alternative[name] = found
        alternative = self._paired_alternative[name]
        if alternative is None:
            return None
        choice = alternative.choice
        paired = getattr(choice.release, name)
        return Fix(
            alternative.changes,
            choice.release.version,
            choice.build.variant,
            f"use {_flags(alternative.changes)}: torch {choice.release.version} pairs with "
            f"{name} {paired}",
        )

    # ----------------------------------------------------------------------------------------
    # Companions

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
                    self._unpaired(release, name)
                    return None
                if requirement.specifier and not requirement.specifier.contains(
                    paired, prereleases=True
                ):
                    fixes = []
                    if self.explain:
                        fix = self._fix(
                            (Change("with", name),),
                            f"use --with {name} without a version spec",
                            torch=release.version,
                        )
                        fixes = [fix] if fix else []
                    self.reject(
                        release,
                        "*",
                        f"torch {release.version} pairs with {name} {paired}, "
                        f"outside {requirement.specifier}",
                        fixes,
                    )
                    return None
                pins.append((name, paired, True))
            elif name == "deepspeed":
                deepspeed = self._deepspeed(version, release, python, requirement)
                if deepspeed is None:
                    return None
                pins.append((name, deepspeed.version, False))
        return _Companions(tuple(pins), deepspeed)

    def _unpaired(self, release: TorchRelease, name: str) -> None:
        fixes: list[Fix] = []
        if self.explain:
            drop = self._fix(
                (Change("without", name),), f"drop --with {name}", torch=release.version
            )
            paired = self._paired_fix(name)
            fixes = [fix for fix in (drop, paired) if fix is not None]
        self.reject(release, "*", f"torch {release.version} has no paired {name} release", fixes)
        self.limits.setdefault(name, f"--with {name} limits torch to releases with a paired {name}")

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
        fixes = []
        if self.explain and requirement.specifier:
            fix = self._fix(
                (Change("with", "deepspeed"),),
                "use --with deepspeed without a version spec",
                torch=release.version,
            )
            fixes = [fix] if fix else []
        self.reject(
            release,
            "*",
            f"no DeepSpeed{spec} release in the matrix supports torch {release.version} "
            f"with Python {python}",
            fixes,
        )
        self.limits.setdefault(
            "deepspeed", f"--with {requirement} limits torch to releases DeepSpeed supports"
        )
        return None


#: Build fields whose being unverified makes the build itself uncertain: whether it exists where
#: listed, and whether its kernels cover a GPU (cudnn and nccl are informational).
_BUILD_DECIDING = ("variant", "cuda", "platforms", "sass", "ptx")


def rests_on_unverified(build: TorchBuild) -> bool:
    """Whether choosing ``build`` rests on facts the matrix marks unverified."""
    provenance = build.provenance
    return not provenance.verified or any(
        f in provenance.unverified_fields for f in _BUILD_DECIDING
    )


def _cuda_text(build: TorchBuild) -> str:
    return format_cuda(build.cuda) if build.cuda is not None else CPU_VARIANT


def _flags(changes: Sequence[Change]) -> str:
    """The request changes as the command-line flags that make them (driver changes aside)."""
    words = []
    for change in changes:
        value = change.value
        if change.kind == "torch":
            words.append(f"--torch {shlex.quote(value.removeprefix('=='))}")
        elif change.kind in ("python", "cuda", "compat", "with"):
            words.append(f"--{change.kind} {shlex.quote(value)}")
        elif change.kind == "without":
            words.append(f"no --with {value}")
    return " ".join(words)


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
    fleet = reduce_fleet(matrix, targets)
    search = _Search(matrix, fleet, request, _known(matrix), targets=targets)
    choice = search.run()
    if choice is None:
        raise _unsatisfiable(matrix, search, fleet, targets, request)
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


def _unsatisfiable(
    matrix: Matrix,
    search: _Search,
    fleet: Fleet,
    targets: Sequence[Target],
    request: Request,
) -> Unsatisfiable:
    rejected = nearest(search.rejected)
    asked = []
    if request.torch:
        asked.append(f"torch {request.torch}")
    if request.cuda:
        asked.append(f"CUDA {cuda_pin_text(request.cuda)}")
    if search.python:
        asked.append(f"Python {search.python}")
    subject = "this target" if fleet.size == 1 else f"all {fleet.size} targets"
    count = len(search.rejected)
    # "Nothing fits" is a statement about the matrix, not about every torch there is.
    message = (
        f"nothing in the matrix ({matrix.torch_span}) fits {subject}"
        f"{' with ' + ', '.join(asked) if asked else ''} ({fleet.platform}, "
        f"compat {request.compat}): {count} candidate{'s' if count != 1 else ''} rejected"
    )
    split = _generations(matrix, fleet, targets)
    if split is not None:
        reason, generations = split
        return Unsatisfiable(f"{message}; {reason}", rejected=rejected, hint=generations)
    return Unsatisfiable(message, rejected=rejected, hint=_next_step(search, rejected))


def _next_step(search: _Search, rejected: Sequence[Rejection]) -> str | None:
    """What to do when nothing fits, as one sentence: what ``--compat minor`` would give on this
    driver and at what cost, then the driver upgrade that opens the newest build (and the
    smallest one, when it is another); else the fix of the nearest candidate."""
    steps: list[str] = []
    request = search.request
    if request.compat == "strict" and search.fleet.has_driver:
        # Said only when a search with --compat minor really finds a plan.
        trial = search._trial(replace(request, compat="minor"), None).choice
        if trial is not None:
            steps.append(
                f"with --compat minor, torch {trial.release.version}+{trial.build.variant} "
                f"would run on this driver, at a cost: {MINOR_COMPAT_COST}"
            )
    upgrades = [
        (fix, DriverVersion(fix.changes[0].value))
        for r in rejected
        for fix in r.fixes
        if len(fix.changes) == 1 and fix.changes[0].kind == "driver"
    ]
    if upgrades:
        newest_fix, newest_driver = upgrades[0]  # rejections come newest first
        smallest_fix, smallest_driver = min(upgrades, key=lambda item: item[1])
        nodes = search._nodes_below(newest_driver)
        upgrade = (
            f"upgrade {nodes + ' ' if nodes else 'the driver '}to ≥ {newest_driver} "
            f"for torch {newest_fix.torch}+{newest_fix.variant}, the newest build that then fits"
        )
        if smallest_driver < newest_driver:
            upgrade += (
                f" (≥ {smallest_driver}, the smallest upgrade that opens a build, gives "
                f"torch {smallest_fix.torch}+{smallest_fix.variant})"
            )
        steps.append(upgrade)
    if not steps:
        # The nearest: the oldest candidate with one change to make (else the oldest with a fix).
        with_fix = [r for r in rejected if r.fixes]
        single = [r for r in with_fix if any(len(f.changes) == 1 for f in r.fixes)]
        if not with_fix:
            return None
        closest = (single or with_fix)[-1]
        fix = min(closest.fixes, key=lambda f: len(f.changes))
        candidate = f"torch {fix.torch}+{fix.variant}"
        return sentence(
            fix.text
            if candidate in fix.text
            else f"{fix.text} (for {candidate}, the nearest candidate)"
        )
    return sentence("; or ".join(steps))


def _generations(matrix: Matrix, fleet: Fleet, targets: Sequence[Target]) -> tuple[str, str] | None:
    """When no build has kernels for every GPU: why, and the environments to make instead (one
    per GPU generation, with the ``--probe`` files of each)."""
    if len(fleet.ccs) < 2:
        return None
    builds = [
        b
        for release in matrix.torch_releases
        for b in release.builds_for(fleet.platform)
        if b.kind == "cuda"
    ]

    def coverable(ccs: frozenset[ComputeCapability]) -> bool:
        return any(not missing_archs(build, ccs) for build in builds)

    if coverable(frozenset(fleet.ccs)):
        return None
    described = [cc_text(cc, label) for cc, label in sorted(fleet.ccs.items())]
    listed = ", ".join(described[:-1]) + " and " + described[-1]
    reason = (
        f"no build in the matrix has kernels for {'both' if len(described) == 2 else 'all of'} "
        f"{listed}"
    )
    # Nodes with the same GPUs go together; each group joins the first generation it fits.
    by_ccs: dict[frozenset[ComputeCapability], list[Target]] = {}
    for target in targets:
        by_ccs.setdefault(frozenset(target.compute_capabilities), []).append(target)
    groups: list[tuple[frozenset[ComputeCapability], list[Target]]] = []
    mixed: list[Target] = []
    for ccs, members in by_ccs.items():
        if ccs and not coverable(ccs):
            mixed.extend(members)
            continue
        for position, (group_ccs, group) in enumerate(groups):
            if coverable(group_ccs | ccs):
                groups[position] = (group_ccs | ccs, group + members)
                break
        else:
            groups.append((ccs, list(members)))
    environments = []
    for ccs, members in groups:
        what = ", ".join(format_cc(cc) for cc in sorted(ccs)) or "no GPU"
        environments.append(f"{what}: {_target_flags(members)}")
    sentences = []
    if environments:
        sentences.append(
            "Make one environment per GPU generation (" + "; ".join(environments) + ")."
        )
    if mixed:
        names = "this target" if len(targets) == 1 else ", ".join(node_name(t) for t in mixed[:3])
        per_cc = " and ".join(f"--compute-capability {format_cc(cc)}" for cc in sorted(fleet.ccs))
        sentences.append(
            f"{names[0].upper() + names[1:]} {'has' if len(mixed) == 1 else 'have'} GPUs of "
            f"several generations: resolve once per generation ({per_cc}, one at a time) and "
            "run each environment on its own GPUs with CUDA_VISIBLE_DEVICES."
        )
    hint = " ".join(sentences)
    return reason, hint


def _target_flags(targets: Sequence[Target]) -> str:
    """``cudalock resolve --probe a.json --probe c.json``, or the node names when the targets do
    not come from probe files."""
    files = [t.source.removeprefix("file:") for t in targets if t.source.startswith("file:")]
    if len(files) == len(targets):
        shown = " ".join(f"--probe {shlex.quote(path)}" for path in files[:20])
        more = len(files) - 20
        return f"cudalock resolve {shown}" + (f" (and {more} more probe files)" if more > 0 else "")
    names = ", ".join(node_name(t) for t in targets[:5])
    more = len(targets) - 5
    return names + (f" and {more} more" if more > 0 else "")


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
    alternative = _alternative(search, choice)
    explanation[1:1] = [*_assumptions(targets), *_policy_lines(search, choice, alternative)]
    unverified = _unverified(matrix, choice, fleet, index_url)
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
        compat=request.compat,
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
        alternative=alternative,
        python_reason=(
            _torch_newest_python(choice.python, release.version, fleet.platform)
            if request.python is None
            else f"Python {choice.python}, as asked (--python or cudalock.toml)."
        ),
        driver_node=fleet.drivers[0].node if fleet.drivers else None,
    )


def _torch_newest_python(python: str, torch_version: str, platform: str) -> str:
    """Why a default Python before the closure is resolved: torch's newest. bootstrap and lock
    replace it with what the closure proves (:mod:`cudalock.lock.python`)."""
    return (
        f"Python {python} is the newest CPython torch {torch_version} ships wheels for on "
        f"{platform}; bootstrap and lock keep it only if the whole stack installs on it "
        "(--python chooses another)."
    )


def _assumptions(targets: Sequence[Target]) -> list[str]:
    """What was derived rather than read for targets given by flags (a driver branch's CUDA, a
    driver's CUDA from the table), each said once."""
    return [f"Assumed: {note}." for note in flag_assumptions(targets)[:3]]


def _alternative(search: _Search, choice: _Choice) -> Alternative | None:
    """The best build the choice policy passed over: the newest that would also have run."""
    if search.preference is None or not search.declined:
        return None
    # The one the next preference would take (a toolkit's major before any build), newest first.
    later = search.preferences[search.preferences.index(search.preference) + 1 :]

    def rank(declined: _Choice) -> int:
        return next((i for i, p in enumerate(later) if p.accepts(declined.build)), len(later))

    best = min(search.declined, key=rank)
    reason = declined_reason(
        search.preference, best.build, search.driver_cuda, builds_against_cuda(search.request)
    )
    newer = (Version(best.release.version), best.build.cuda or (0, 0)) > (
        Version(choice.release.version),
        choice.build.cuda or (0, 0),
    )
    what = f"torch {best.release.version}+{best.build.variant}"
    return Alternative(
        best.release.version,
        best.build.variant,
        f"{what} is {'newer' if newer else 'another build that would run'}, but {reason}",
    )


def _policy_lines(search: _Search, choice: _Choice, alternative: Alternative | None) -> list[str]:
    """The choice policy in the plan's words: which preference chose, what it passed over, and
    which preferences found nothing (and why)."""
    lines: list[str] = []
    for preference, rejection in search.missed:
        newest = f"; the newest such build is {rejection.reason}" if rejection is not None else ""
        lines.append(f"No build fits the preference for {preference.describe()}{newest}.")
    if search.preference is not None:
        lines.append(f"It is the newest build for {search.preference.describe()}.")
    elif search.missed and choice.build.cuda is not None:
        lines.append(
            f"Chose an older CUDA: torch {choice.release.version}+{choice.build.variant} is the "
            "newest build that runs here."
        )
    if alternative is not None:
        lines.append(alternative.reason + ".")
    return lines


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
        lines.append(_torch_newest_python(choice.python, release.version, fleet.platform))
    if request.torch:
        lines.append(
            f"torch {release.version} is the newest release matching "
            f"{str(request.torch)!r} that fits."
        )
    for limit in search.limits.values():
        lines.append(sentence(limit))
    for cc, variants in sorted(search.arch_limits.items()):
        lines.append(
            f"Compute capability {cc_text(cc, fleet.ccs[cc])} rules out the "
            f"{', '.join(variants)} build{'s' if len(variants) > 1 else ''} "
            "newer than the choice: no kernels for it."
        )
    if choice.passed_over:
        newer = ", ".join(b.variant for b in choice.passed_over)
        plural = "s" if len(choice.passed_over) > 1 else ""
        first = choice.passed_over[0]
        lines.append(
            f"Chose the verified {build.variant} build over the newer {newer} build{plural} of "
            f"torch {release.version}, which would run but rest{'' if plural else 's'} on facts "
            "the matrix marks unverified (that the build exists as listed, or its arch lists); "
            f"--cuda {_cuda_text(first)} chooses {'it' if not plural else first.variant}."
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
    others = [
        str(c)
        for c in search.companions
        if c.name not in ("torchvision", "torchaudio", "deepspeed")
    ]
    if others:
        lines.append(
            f"Asked for with --with: {', '.join(others)}, from the variant index's own builds "
            "(checked against its project list and locked with the closure)."
        )
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


def _unverified(matrix: Matrix, choice: _Choice, fleet: Fleet, index_url: str | None) -> list[str]:
    release, build = choice.release, choice.build
    facts: list[str] = []
    paired = {name for name, _version, _index in choice.companions.pins}
    if not release.provenance.verified:
        facts.append(f"the torch {release.version} release entry")
    for name in release.provenance.unverified_fields:
        # Only what this plan uses: the Python list, and the companions it pins.
        if name in ("python", "requires_python"):
            facts.append(f"the {name} of torch {release.version}")
        elif name in paired:
            version = getattr(release, name)
            facts.append(f"that torch {release.version} pairs with {name} {version}")
    if index_url and not fleet.platform.startswith("macos"):
        # The matrix lists torch's builds, not the companions': when the build or the pairing
        # is unverified, so is the companion's file on that index.
        uncertain = not build.provenance.verified
        for name, version, from_index in choice.companions.pins:
            if from_index and (uncertain or not release.provenance.field_verified(name)):
                facts.append(f"that {name} {version}+{build.variant} is published on {index_url}")
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
