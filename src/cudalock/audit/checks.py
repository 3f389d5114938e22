"""Audit: what in an installed environment will crash (or quietly misbehave) on a target.

``audit(installed, target, matrix, compat=...) -> list[Finding]`` is pure: it judges the
:class:`~cudalock.audit.installed.Installed` value (from a live inspection or a pasted
report) with the policy predicates of :mod:`cudalock.resolve.compat` under the same
compatibility policy ``resolve`` takes (``strict`` or ``minor``) and the facts of the matrix,
and names the replacement build the resolver would choose under that policy. Findings come
errors first, then warnings, then notes; their ``code`` values are part of the interface
(docs/finding-codes.md).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from packaging.version import InvalidVersion, Version

from cudalock.audit import messages as msg
from cudalock.audit.cudabuilt import check_cuda_builds, fitting_release
from cudalock.audit.installed import (
    DeepSpeedBuild,
    Distribution,
    Installed,
    ReportedMessage,
    SharedLibrary,
    TorchInstall,
    local_label,
    public_version,
)
from cudalock.audit.pairings import check_torch_pairings
from cudalock.audit.torchlabels import check_torch_labels, wheels_fix
from cudalock.defaults import DEFAULT_PYTORCH_INDEX
from cudalock.errors import CudalockError, Unsatisfiable
from cudalock.matrix import Matrix, TorchBuild, TorchRelease
from cudalock.matrix.model import arch_covers
from cudalock.model import Finding, Fix, Plan, Rejection, Severity, Target
from cudalock.request import Compat, Request
from cudalock.resolve import make_request, resolve
from cudalock.resolve.compat import (
    DriverVerdict,
    driver_verdict,
    missing_archs,
    target_driver_cuda,
)
from cudalock.resolve.cudabuilt import from_matrix
from cudalock.resolve.fixes import apply_fix
from cudalock.versions import (
    ComputeCapability,
    CudaVersion,
    cuda_from_variant,
    format_cc,
    format_cuda,
    parse_compute_capability,
    parse_cuda_version,
    parse_python_version,
    variant_for_cuda,
)

#: Every code audit can emit (docs/finding-codes.md). doctor adds its own.
CODES = (
    "no-driver",
    "driver-too-old",
    "forward-compat-unsupported",
    "driver-library-mismatch",
    "minor-compat-only",
    "gpu-arch-unsupported",
    "cpu-only-build",
    "mixed-cuda-builds",
    "torchvision-mismatch",
    "torchaudio-mismatch",
    "duplicate-torch",
    "deepspeed-built-without-torch",
    "deepspeed-cuda-mismatch",
    "deepspeed-torch-mismatch",
    "nvcc-mismatch",
    "library-shadowing",
    "torch-import-crash",
    "torch-import-timeout",
    "torch-import-failed",
    "cuda-init-failed",
    "no-torch",
    "unknown-torch-build",
    "driver-unknown",
    "rocm-build-on-nvidia",
    "broken-torch-install",
    "cuda-unavailable",
    "cuda-build-mismatch",
    "torch-pairing-mismatch",
    "extension-abi-mismatch",
    "cuda-library-missing",
    "cudnn-mismatch",
    "nccl-mismatch",
    "check-skipped",
    "target-assumed",
)

_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}

#: CUDA libraries on LD_LIBRARY_PATH → the pip distribution that ships the same library.
_LIBRARY_PACKAGES = {
    "libnvJitLink": "nvidia-nvjitlink",
    "libcudart": "nvidia-cuda-runtime",
    "libcublas": "nvidia-cublas",
    "libcublasLt": "nvidia-cublas",
    "libcusparse": "nvidia-cusparse",
    "libcusolver": "nvidia-cusolver",
    "libcufft": "nvidia-cufft",
    "libcurand": "nvidia-curand",
    "libnvrtc": "nvidia-cuda-nvrtc",
    "libcupti": "nvidia-cuda-cupti",
    "libcudnn": "nvidia-cudnn",
    "libnccl": "nvidia-nccl",
    "libnvToolsExt": "nvidia-nvtx",
}
#: Libraries whose version is the CUDA version itself (judged against torch's CUDA without a
#: matching pip distribution, e.g. when torch bundles them).
_CUDA_VERSIONED = ("libcudart", "libnvJitLink", "libnvrtc")
#: NVIDIA pip packages without a -cuNN suffix whose version major is the CUDA major (CUDA 13).
_UNSUFFIXED_CUDA_MAJOR = (
    "nvidia-cuda-runtime",
    "nvidia-cuda-nvrtc",
    "nvidia-nvjitlink",
    "nvidia-cuda-cupti",
    "nvidia-cublas",
    "nvidia-nvtx",
)


def audit(
    installed: Installed,
    target: Target,
    matrix: Matrix,
    *,
    driver_known: bool = True,
    compat: Compat = "strict",
    check_fixes: bool = True,
) -> list[Finding]:
    """Findings for ``installed`` on ``target`` under policy ``compat``, most severe first.

    ``driver_known=False`` says the target's driver was not given (a report that names none):
    driver checks become one ``driver-unknown`` note instead of ``no-driver``. ``compat`` is
    ``resolve``'s ``--compat``: a build the policy would not choose for this driver is an error.
    A replacement build is offered only after it is checked: applied to ``installed`` and
    audited again (``check_fixes=False``: that second audit, which offers none), it leaves no
    error.
    """
    context = _Context(installed, target, matrix, driver_known, compat, check_fixes)
    findings: list[Finding] = []
    for check in (
        _check_torch_present,
        _check_duplicates,
        _check_driver,
        _check_arch,
        _check_cpu_build,
        _check_companions,
        _check_nvidia_libraries,
        _check_deepspeed,
        _check_nvcc,
        _check_library_shadowing,
        _check_extension_archs,
        _check_skipped,
    ):
        findings.extend(check(context))
    findings.extend(check_cuda_builds(installed, target, matrix, compat))
    findings.extend(check_torch_pairings(installed, matrix))
    findings.extend(check_torch_labels(installed))
    findings = _with_reported_messages(context, findings)
    return sort_findings(findings)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors, then warnings, then notes; the order within each stays as found."""
    return sorted(findings, key=lambda f: _ORDER.get(f.severity, 3))


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


# --------------------------------------------------------------------------------------------
# What the checks share


@dataclass(frozen=True)
class _Torch:
    """The active torch, read once: version, label, CUDA, and its matrix entry."""

    install: TorchInstall
    public: str | None
    label: str | None
    cuda: CudaVersion | None
    release: TorchRelease | None
    build: TorchBuild | None

    @property
    def described(self) -> str:
        return f"torch {self.install.version}" if self.install.version else "torch"

    @property
    def is_cuda(self) -> bool:
        return self.cuda is not None

    @property
    def is_rocm(self) -> bool:
        return bool(self.install.hip) or bool(self.label and self.label.startswith("rocm"))

    @property
    def is_cpu(self) -> bool:
        if self.label == "cpu":
            return True  # the wheel's own label, whatever else the report left out
        return self.install.cuda_known and not self.is_cuda and not self.is_rocm


class _Context:
    def __init__(
        self,
        installed: Installed,
        target: Target,
        matrix: Matrix,
        driver_known: bool,
        compat: Compat,
        check_fixes: bool = True,
    ) -> None:
        self.installed = installed
        self.target = target
        self.matrix = matrix
        self.driver_known = driver_known
        self.compat: Compat = compat
        self.check_fixes = check_fixes
        self._replacements: dict[tuple[bool, bool, str, str | None], _Replacement] = {}

    @cached_property
    def torch(self) -> _Torch | None:
        install = self.installed.active_torch
        if install is None or not install.version:
            return None  # a torch without a readable version is reported as broken
        version = install.version
        public = public_version(version) if version else None
        label = local_label(version)
        cuda = _cuda_or_none(install.cuda)
        if cuda is None and not install.cuda_known and label:
            cuda = cuda_from_variant(label)
        release = self.matrix.torch_release(public) if public else None
        build = None
        if release is not None:
            variant = label or (variant_for_cuda(cuda) if cuda else None)
            if variant is None and install.cuda_known and not install.hip:
                variant = "cpu"
            if variant:
                build = next(
                    (b for b in release.builds_for(self.target.platform) if b.variant == variant),
                    None,
                )
        return _Torch(install, public, label, cuda, release, build)

    @cached_property
    def pip(self) -> str:
        """How the fixes call pip: the audited interpreter's own pip when known."""
        if self.installed.python:
            return f"{shlex.quote(self.installed.python)} -m pip"
        return "pip"

    @cached_property
    def python(self) -> str | None:
        if not self.installed.python_version:
            return None
        try:
            return parse_python_version(self.installed.python_version)
        except CudalockError:
            return None

    @cached_property
    def companions(self) -> list[str]:
        return [name for name in ("torchvision", "torchaudio") if self.installed.dist(name)]

    def replacement(
        self,
        *,
        same_version: bool = True,
        same_major_as_driver: bool = False,
        compat: Compat | None = None,
        torch: str | None = None,
    ) -> _Replacement:
        """The build the resolver chooses instead, as pip commands, checked by auditing the
        environment with it installed: under the audit's policy unless ``compat`` names
        another; of release ``torch`` only, where that is given."""
        key = (same_version, same_major_as_driver, compat or self.compat, torch)
        if not self.check_fixes:
            return _Replacement(None, (), "not computed while a fix is checked")
        if key not in self._replacements:
            self._replacements[key] = _replacement(
                self,
                same_version=same_version,
                same_major_as_driver=same_major_as_driver,
                compat=compat or self.compat,
                release=torch,
            )
        return self._replacements[key]

    @cached_property
    def gpu_evidence(self) -> bool:
        """True unless the evidence shows a machine without NVIDIA GPUs: a report that names
        no driver is no evidence that there is none."""
        if self.target.gpus or self.target.has_driver:
            return True
        return not self.driver_known


@dataclass(frozen=True)
class _Replacement:
    plan: Plan | None
    commands: tuple[str, ...]
    #: Why nothing fits, or the resolver's hint for a looser choice.
    remark: str | None = None

    @property
    def pin(self) -> str | None:
        return self.plan.torch_pin.version if self.plan else None


def _replacement(
    context: _Context,
    *,
    same_version: bool,
    same_major_as_driver: bool,
    compat: Compat,
    release: str | None = None,
) -> _Replacement:

    torch = context.torch
    companions = context.companions or ["none"]
    attempts: list[dict[str, str | None]] = []
    toolkit = _toolkit_cuda(context)
    if release is not None:
        attempts.append({"torch": f"=={release}", "cuda": None})
        if toolkit:
            attempts.append({"torch": f"=={release}", "cuda": toolkit})
    elif same_version and torch is not None and torch.public:
        attempts.append({"torch": f"=={torch.public}", "cuda": None})
        if toolkit:
            attempts.append({"torch": f"=={torch.public}", "cuda": toolkit})
    if toolkit and release is None:
        # Ops built against torch need nvcc's CUDA: the build the toolkit matches first.
        attempts.append({"torch": None, "cuda": toolkit})
    if same_major_as_driver and release is None:
        driver_cuda = target_driver_cuda(context.matrix, context.target)
        if driver_cuda is not None:
            for minor in range(driver_cuda[1], -1, -1):
                attempts.append({"torch": None, "cuda": f"{driver_cuda[0]}.{minor}"})
    if release is None:
        attempts.append({"torch": None, "cuda": None})
    kept_hint: str | None = None
    #: Why nothing resolved (the last attempt is the least constrained), and why a plan that
    #: resolved was refused when checked: the reason a person is told.
    resolve_error = ""
    refused = ""
    seen: list[tuple[str, str]] = []
    for attempt in attempts:
        try:
            request = make_request(
                torch=attempt["torch"],
                python=context.python,
                cuda=attempt["cuda"],
                compat=compat,
                with_packages=companions,
            )
            plan = resolve(context.matrix, [context.target], request)
        except CudalockError as err:
            resolve_error = err.message
            if attempt["torch"] and torch is not None and isinstance(err, Unsatisfiable):
                kept_hint = kept_hint or _keeping(context, err, request, torch.public or "")
            continue
        if (plan.torch_version, plan.variant) in seen:
            continue
        seen.append((plan.torch_version, plan.variant))
        applied, extra = apply_plan(context, plan)
        problem = _check_replacement(context, plan, applied, context.target, compat)
        if problem:
            refused = refused or problem
            continue
        return _Replacement(plan, install_commands(plan, context.pip) + extra, kept_hint)
    return _Replacement(None, (), kept_hint or refused or resolve_error or None)


def _toolkit_cuda(context: _Context) -> str | None:
    """The CUDA of the nvcc ops would be built with, when something builds against torch."""
    installed = context.installed
    builds = installed.deepspeed is not None or any(
        installed.dist(name) for name in ("deepspeed", "flash-attn", "apex")
    )
    nvcc = installed.effective_nvcc
    version = _major_minor(nvcc.version) if nvcc else None
    return format_cuda(version) if builds and version else None


def _check_replacement(
    context: _Context, plan: Plan, applied: Installed, target: Target, compat: Compat
) -> str | None:
    """Why ``plan`` is no fix here (None: it is one): a CPU build where the evidence shows
    NVIDIA GPUs, or an environment that, with it installed, still audits with an error."""
    if plan.variant == "cpu" and context.gpu_evidence:
        return (
            "the report does not name the NVIDIA driver, so no CUDA build can be checked "
            "against it (and a CPU build is no fix for a GPU machine): give --driver-version "
            "(nvidia-smi shows it)"
            if not context.driver_known
            else "only a CPU build fits, and this machine has NVIDIA GPUs"
        )
    after = audit(
        applied,
        target,
        context.matrix,
        driver_known=context.driver_known,
        compat=compat,
        check_fixes=False,
    )
    errors = [f for f in after if f.severity == "error"]
    if errors:
        return f"torch {plan.torch_pin.version} would still leave " + ", ".join(
            sorted({f.code for f in errors})
        )
    return None


#: Packages built against torch's C++ API: a new torch needs them rebuilt against it.
_BUILT_AGAINST_TORCH = ("deepspeed", "flash-attn", "apex")


def apply_plan(context: _Context, plan: Plan) -> tuple[Installed, tuple[str, ...]]:
    """The environment with ``plan``'s pins installed, and the commands beyond
    ``install_commands`` that this takes: removing every other torch install, the NVIDIA
    runtime packages of another CUDA major, and rebuilding what builds against torch."""
    installed = context.installed
    pins = {pin.name: pin.version for pin in plan.packages}
    commands: list[str] = []
    if len(installed.torch) > 1:
        # The pinned torch replaces the first; every other install goes.
        commands += _torch_removals(
            context, [t for t in installed.torch if (t.location or "").startswith("report:")]
        )
    major = plan.cuda[0] if plan.cuda else None
    leftovers = sorted(
        {
            d.name
            for d in installed.distributions
            if (found := _nvidia_major(d)) is not None and found != major
        }
    )
    if leftovers:
        commands.append(
            f"{context.pip} uninstall -y {' '.join(shlex.quote(n) for n in leftovers)}"
            "   # NVIDIA runtime packages of another CUDA"
        )
    dists: list[Distribution] = []
    for dist in installed.distributions:
        if dist.name in leftovers or dist.name in ("torch", "torch-nightly", "pytorch"):
            continue  # the torch installs are replaced by the pinned one
        pinned = pins.get(dist.name)
        dists.append(Distribution(dist.name, pinned, "fix") if pinned else dist)
    for name, version in pins.items():
        if not any(d.name == name for d in dists):
            dists.append(Distribution(name, version, "fix"))
    deepspeed = installed.deepspeed
    cuda_text = format_cuda(plan.cuda) if plan.cuda else None
    torch_mm = ".".join(plan.torch_version.split(".")[:2])
    rebuilt = [name for name in _BUILT_AGAINST_TORCH if installed.dist(name)]
    if deepspeed is not None and "deepspeed" not in rebuilt:
        rebuilt.insert(0, "deepspeed")
    for name in rebuilt:
        built = installed.dist(name)
        ds_version = deepspeed.version if name == "deepspeed" and deepspeed else None
        commands.extend(
            _rebuild_commands(context, name, ds_version or (built.version if built else None))[1:]
        )
    if deepspeed is not None:
        deepspeed = DeepSpeedBuild(
            version=deepspeed.version,
            torch_version=torch_mm if deepspeed.has_build_info else deepspeed.torch_version,
            torch_cuda=cuda_text if deepspeed.has_build_info else deepspeed.torch_cuda,
            installed_ops=deepspeed.installed_ops,
            has_build_info=deepspeed.has_build_info,
            location=deepspeed.location,
        )
    torch_install = TorchInstall(
        version=plan.torch_pin.version, cuda=cuda_text, location="fix", cuda_known=True
    )
    applied = Installed(
        source=installed.source,
        python=installed.python,
        python_version=installed.python_version,
        platform=installed.platform,
        prefix=installed.prefix,
        distributions=tuple(dists),
        torch=(torch_install,),
        deepspeed=deepspeed,
        nvcc=installed.nvcc,
        ld_library_path=installed.ld_library_path,
        cuda_libraries=installed.cuda_libraries,
        cuda_builds=installed.cuda_builds,
        # The runtime errors were this environment's; the arch list was the old torch's.
        arch_list=None,
        extension_archs=installed.extension_archs,
        notes=installed.notes,
        messages=(),
    )
    return applied, tuple(commands)


def _keeping(context: _Context, error: Unsatisfiable, request: Request, version: str) -> str | None:
    """What would keep torch ``version`` (a driver upgrade, --compat minor): only the fixes
    whose candidate is that release, each resolved with its changes made and audited, and
    named by the build that resolving with it really gives."""
    candidates: list[Fix] = []
    for rejection in error.rejected:
        if not isinstance(rejection, Rejection):
            continue
        for fix in rejection.fixes:
            if fix.torch == version and fix not in candidates:
                candidates.append(fix)
    # The smallest change first: the last rejections are the nearest candidates.
    for fix in reversed(candidates):
        try:
            targets, changed = apply_fix(context.matrix, [context.target], request, fix)
            plan = resolve(context.matrix, targets, changed)
        except CudalockError:
            continue
        if plan.torch_version != version:
            continue
        applied, _extra = apply_plan(context, plan)
        if _check_replacement(context, plan, applied, targets[0], changed.compat):
            continue
        return (
            f"to keep torch {version} (cudalock bootstrap --torch {version}): {fix.text} "
            f"(torch {plan.torch_pin.version})"
        )
    return None


def install_commands(plan: Plan, pip: str = "pip") -> tuple[str, ...]:
    """``pip install --force-reinstall`` of the plan's pins, one command per index."""
    groups: dict[str | None, list[str]] = {}
    for pin in plan.packages:
        groups.setdefault(pin.index_url, []).append(shlex.quote(pin.requirement))
    commands = []
    for index, pins in groups.items():
        command = f"{pip} install --force-reinstall {' '.join(pins)}"
        if index:
            command += f" --index-url {shlex.quote(index)}"
        commands.append(command)
    return tuple(commands)


def _cuda_or_none(text: str | None) -> CudaVersion | None:
    if not text:
        return None
    try:
        version = parse_cuda_version(text)
    except CudalockError:
        return None
    return None if version == (0, 0) else version


def _finding(
    code: str, severity: Severity, message: str, evidence: Sequence[str], fix: Sequence[str] = ()
) -> Finding:
    return Finding(
        code=code, severity=severity, message=message, evidence=tuple(evidence), fix=tuple(fix)
    )


def _torch_evidence(torch: _Torch) -> list[str]:
    install = torch.install
    evidence = [
        f"torch.__version__ = {install.version!r}",
        f"torch.version.cuda = {install.cuda!r}",
    ]
    if install.location and install.location != "report":
        evidence.append(f"torch location: {install.location}")
    return evidence


def _target_evidence(context: _Context) -> list[str]:
    target = context.target
    evidence = [f"target: {target.name} ({target.platform}, from {target.source})"]
    if target.driver_version is not None:
        evidence.append(f"NVIDIA driver {target.driver_version}")
    if target.driver_cuda is not None:
        evidence.append(f"driver supports CUDA ≤ {format_cuda(target.driver_cuda)}")
    return evidence


def _fix_lines(replacement: _Replacement, what: str) -> list[str]:
    if replacement.commands:
        lines = [f"# {what}: torch {replacement.pin}"]
        lines.extend(replacement.commands)
        if replacement.remark:
            lines.append(f"# or, {replacement.remark}")
        return lines
    return [f"# no torch build in the matrix fits this target: {replacement.remark}"]


# --------------------------------------------------------------------------------------------
# The checks


def _check_torch_present(context: _Context) -> list[Finding]:
    torch = context.torch
    broken = context.installed.active_torch
    if torch is None and broken is not None:
        replacement = context.replacement(same_version=False)
        return [
            _finding(
                "broken-torch-install",
                "error",
                "the torch package directory has no readable torch/version.py: a partial or "
                "interrupted install, which fails at import",
                [f"torch location: {broken.location}"]
                + [f"{d.location}: torch {d.version}" for d in context.installed.dists("torch")],
                [
                    f"{context.pip} uninstall -y torch",
                    *_fix_lines(replacement, "then install one build"),
                ],
            )
        ]
    if torch is None:
        if context.installed.dists("torch"):
            return []  # a dist-info without a package: reported by _check_duplicates
        from_report = context.installed.source.startswith("report")
        if from_report and context.installed.messages:
            # The errors are diagnosed on their own; say what the torch checks would need.
            return [
                _finding(
                    "check-skipped",
                    "info",
                    "the report names no torch version, so the checks of the torch build are "
                    "skipped (paste the output of 'python -m torch.utils.collect_env' for them)",
                    [f"environment: {context.installed.source}"],
                )
            ]
        replacement = context.replacement(same_version=False)
        return [
            _finding(
                "no-torch",
                "info",
                "the report names no torch, so the torch checks are skipped (paste the output "
                "of 'python -m torch.utils.collect_env', or of 'pip list' in that environment)"
                if from_report
                else "torch is not installed in this environment: nothing here uses the GPU "
                "through torch",
                [f"environment: {context.installed.source}"],
                _fix_lines(replacement, "the build cudalock would install for this target"),
            )
        ]
    findings = []
    if torch.install.cuda_known and torch.build is None and not torch.is_rocm:
        matrix_version = context.matrix.matrix_version
        what = (
            f"torch {torch.public} is not in the matrix ({matrix_version})"
            if torch.release is None
            else f"the matrix ({matrix_version}) lists no "
            f"{torch.label or 'such'} build of torch {torch.public} for "
            f"{context.target.platform}"
        )
        findings.append(
            _finding(
                "unknown-torch-build",
                "info",
                f"{what}: its GPU architectures are unknown, so it is judged by its CUDA version "
                "alone (run 'cudalock audit --deep' on the GPU machine to read its arch list)",
                _torch_evidence(torch),
            )
        )
    if not torch.install.cuda_known and not torch.is_cpu:
        findings.append(
            _finding(
                "unknown-torch-build",
                "info",
                f"{torch.described}: the report does not say which CUDA it was built for, so the "
                "driver and GPU checks are skipped (paste 'python -m torch.utils.collect_env', "
                "or 'python -c \"import torch; print(torch.__version__, torch.version.cuda)\"')",
                _torch_evidence(torch),
            )
        )
    return findings


def _check_duplicates(context: _Context) -> list[Finding]:
    installed = context.installed
    dists = [
        d
        for d in installed.dists("torch")
        if d.location is None or not d.location.startswith("report")
    ]
    live_dirs = [
        t
        for t in installed.torch
        if t.location and t.location != "report" and not t.location.startswith("report")
    ]
    report_installs = [t for t in installed.torch if t.location and t.location.startswith("report")]
    evidence: list[str] = []
    conda_builds: list[TorchInstall] = []
    if len(dists) > 1 or len(live_dirs) > 1:
        evidence += [f"{d.location}: torch {d.version}" for d in dists]
        if len(live_dirs) > 1:
            evidence += [f"{t.location}: torch/version.py says {t.version}" for t in live_dirs]
        count = max(len(dists), 1)
    elif len(report_installs) > 1:
        evidence += [f"{_where(t.location)}: torch {t.version}" for t in report_installs]
        conda_builds = [
            t
            for t in report_installs
            if t.location and "[conda]" in t.location and not t.location.endswith("pypi")
        ]
        count = len(report_installs) - len(conda_builds)
    else:
        return []
    directories = {re.sub(r"[^/]*$", "", d.location or "") for d in dists}
    same_dir = len(dists) > 1 and len(directories) == 1
    message = (
        "more than one torch is installed: "
        + (
            "their dist-info directories sit in the same site-packages, so the files on disk "
            "are a mix of both versions"
            if same_dir
            else "one shadows the other, so 'import torch' loads a different build than pip reports"
        )
        + "; mixed files crash at import (-11 or undefined symbols)"
    )
    replacement = context.replacement()
    if report_installs and not dists and len(live_dirs) <= 1:
        # Keep the torch the report ran with; remove each other install by what installed it.
        keep = installed.torch[0]
        fix = _torch_removals(context, [t for t in installed.torch if t is not keep])
        fix += _fix_lines(replacement, "then, for the build this machine needs")
        return [_finding("duplicate-torch", "error", message, evidence, list(dict.fromkeys(fix)))]
    fix = [f"{context.pip} uninstall -y torch"] * max(count, 1)
    # A torch directory with no dist-info beside it is outside pip's reach (PYTHONPATH, a copy).
    for install in live_dirs:
        parent = re.sub(r"/torch/?$", "/", install.location or "")
        if not any((d.location or "").startswith(parent) for d in dists):
            fix.append(
                f"# {install.location} has no pip metadata: remove it, or its directory "
                "from PYTHONPATH"
            )
    if conda_builds:
        fix.append("conda remove -y --force pytorch   # conda's pytorch beside pip's torch")
    fix += _fix_lines(replacement, "then install one build")
    return [_finding("duplicate-torch", "error", message, evidence, fix)]


def _torch_removals(context: _Context, installs: Sequence[TorchInstall]) -> list[str]:
    """The commands that remove these torch installs of a report: conda's by conda, pip's
    torch-nightly by pip (pip's torch itself is replaced by the install that follows)."""
    commands: list[str] = []
    for install in installs:
        dist = next(
            (
                d
                for d in context.installed.distributions
                if d.location == install.location and d.version == install.version
            ),
            None,
        )
        location = install.location or ""
        conda = location.startswith("report:[conda]") and not location.endswith("pypi")
        name = dist.name if dist else "torch"
        if conda:
            conda_name = "pytorch-nightly" if name == "torch-nightly" else "pytorch"
            commands.append(f"conda remove -y --force {conda_name}   # conda's {conda_name}")
        elif name != "torch":
            commands.append(f"{context.pip} uninstall -y {shlex.quote(name)}")
        elif install is not context.installed.torch[0]:
            commands.append(f"{context.pip} uninstall -y torch")
    return list(dict.fromkeys(commands))


def _where(location: str | None) -> str:
    if not location or location == "report":
        return "the report's torch"
    return location.removeprefix("report:")


def _check_driver(context: _Context) -> list[Finding]:
    torch = context.torch
    if torch is None or not torch.is_cuda or torch.cuda is None:
        return []
    target = context.target
    evidence = _torch_evidence(torch) + _target_evidence(context)
    if not context.driver_known:
        return [
            _finding(
                "driver-unknown",
                "info",
                f"the NVIDIA driver is not known (the report does not name it), so whether it can "
                f"run {torch.described} (CUDA {format_cuda(torch.cuda)}) is not checked",
                evidence,
                [
                    "# give the driver: cudalock audit --report FILE --driver-version 535.104.05",
                    "# (read it with: nvidia-smi --query-gpu=driver_version --format=csv,noheader)",
                ],
            )
        ]
    # The same predicate, with the same policy, that resolve chooses builds with.
    verdict = driver_verdict(context.matrix, torch.cuda, target, compat=context.compat)
    if verdict.status == "ok":
        return []
    if verdict.status == "no-driver":
        severity: Severity = "error" if target.gpus else "warning"
        replacement = context.replacement()
        return [
            _finding(
                "no-driver",
                severity,
                f"{torch.described} is a CUDA {format_cuda(torch.cuda)} build but the target "
                "has no "
                "NVIDIA driver: torch.cuda.is_available() is False and everything runs on the CPU"
                + (" although the target lists GPUs" if target.gpus else ""),
                evidence + list(target.notes),
                [
                    "# install the NVIDIA driver (then check: nvidia-smi), or use the CPU build:",
                    *_fix_lines(replacement, "the build for this target")[1:],
                ],
            )
        ]
    if verdict.status == "minor-compat" or verdict.minor_compat_possible:
        return [_minor_compat_finding(context, torch, verdict, evidence)]
    replacement = context.replacement()
    floor_text = (
        f"; CUDA {torch.cuda[0]}.x needs at least driver {verdict.floor} even under "
        "minor-version compatibility"
        if verdict.floor
        else ""
    )
    return [
        _finding(
            "driver-too-old",
            "error",
            f"the NVIDIA driver cannot run {torch.described} (CUDA {format_cuda(torch.cuda)}): "
            f'{verdict.reason}{floor_text}. CUDA initialisation fails ("The NVIDIA driver on your '
            'system is too old"), or the process dies with SIGSEGV when libraries are mixed',
            evidence
            + (
                [f"CUDA {format_cuda(torch.cuda)} needs driver ≥ {verdict.required_driver}"]
                if verdict.required_driver
                else []
            ),
            _fix_lines(replacement, "a build this driver runs")
            + (
                [f"# or upgrade the NVIDIA driver to ≥ {verdict.required_driver}"]
                if verdict.required_driver
                else []
            ),
        )
    ]


def _minor_compat_finding(
    context: _Context, torch: _Torch, verdict: DriverVerdict, evidence: list[str]
) -> Finding:
    """A build of the driver's CUDA major, newer minor, driver at or above the major's floor:
    an error under ``strict`` (resolve would never choose it), a warning under ``minor``."""
    assert torch.cuda is not None
    cuda = format_cuda(torch.cuda)
    required = verdict.required_driver
    evidence = [
        *evidence,
        f"compatibility policy: --compat {context.compat}",
        f"CUDA {torch.cuda[0]}.x minor-version-compatibility floor: driver ≥ {verdict.floor}",
    ]
    if required is not None:
        evidence.append(f"CUDA {cuda} needs driver ≥ {required} without it")
    upgrade = [f"# or upgrade the NVIDIA driver to ≥ {required}"] if required else []
    if verdict.allowed:
        # --compat minor: accepted, with what it costs; the fix stays within backward
        # compatibility, so it is what strict would choose.
        replacement = context.replacement(
            same_version=False, same_major_as_driver=True, compat="strict"
        )
        return _finding(
            "minor-compat-only",
            "warning",
            f"{torch.described} runs on this driver only through NVIDIA's minor-version "
            f"compatibility: {verdict.reason}. Minor-version compatibility does not cover PTX "
            "JIT of PTX newer than the driver (kernels shipped only as PTX fail with "
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION) nor CUDA features that need the newer driver "
            "(cudaErrorCallRequiresNewerDriver). A warning because of --compat minor; under the "
            "default --compat strict it is an error",
            evidence,
            _fix_lines(replacement, "a build this driver runs without minor-version compatibility")
            + upgrade,
        )
    replacement = context.replacement()
    driver = context.target.driver_version
    # Minor-version compatibility is only possible when the driver's CUDA is known.
    assert verdict.driver_cuda is not None
    supports = (
        f"driver {driver}" if driver is not None else "the driver"
    ) + f" supports CUDA {format_cuda(verdict.driver_cuda)}"
    needs = f"; CUDA {cuda} needs driver ≥ {required}" if required else ""
    return _finding(
        "minor-compat-only",
        "error",
        f"{torch.described} is built for CUDA {cuda}, newer than the driver ({supports}{needs}): "
        "the mismatch --compat strict (the default, as in resolve) never installs. NVIDIA's "
        "minor-version compatibility may let it start (CUDA initialises and kernels shipped as "
        "SASS for these GPUs run), but PTX newer than the driver cannot be JIT-compiled "
        "(CUDA_ERROR_UNSUPPORTED_PTX_VERSION: Triton / torch.compile kernels, JIT-built "
        "extensions such as DeepSpeed ops) and APIs that need the newer driver fail "
        "(cudaErrorCallRequiresNewerDriver); native code that skips those error checks crashes "
        "instead. It is the first cause of return code -11 (SIGSEGV) that troubleshooting "
        "guides name. --compat minor makes this a warning",
        evidence,
        _fix_lines(replacement, "a build this driver runs") + upgrade,
    )


def _arch_lists(
    context: _Context, torch: _Torch
) -> tuple[tuple[ComputeCapability, ...], tuple[ComputeCapability, ...], str] | None:
    """(SASS, PTX, where from): the live arch list when known, else the matrix's."""
    arch_list = context.installed.arch_list
    if arch_list:
        sass: list[ComputeCapability] = []
        ptx: list[ComputeCapability] = []
        for entry in arch_list:
            try:
                cc = parse_compute_capability(entry)
            except CudalockError:
                continue
            (ptx if entry.strip().lower().startswith("compute_") else sass).append(cc)
        return tuple(sass), tuple(ptx), "torch.cuda.get_arch_list()"
    if torch.build is not None and (torch.build.sass or torch.build.ptx):
        return torch.build.sass, torch.build.ptx, f"matrix ({context.matrix.matrix_version})"
    return None


def _check_arch(context: _Context) -> list[Finding]:
    torch = context.torch
    if torch is None or not torch.is_cuda or not context.target.gpus:
        return []
    lists = _arch_lists(context, torch)
    if lists is None:
        return []
    sass, ptx, origin = lists
    if torch.build is not None and origin.startswith("matrix"):
        missing = set(missing_archs(torch.build, context.target.compute_capabilities))
    else:
        missing = {
            cc for cc in context.target.compute_capabilities if not arch_covers(sass, ptx, cc)
        }
    if not missing:
        return []
    gpus = [g for g in context.target.gpus if g.compute_capability in missing]
    names = sorted(
        {
            f"{g.name} (compute capability {format_cc(g.compute_capability)})"
            for g in gpus
            if g.compute_capability
        }
    )
    built = " ".join([f"sm_{c[0]}{c[1]}" for c in sass] + [f"compute_{c[0]}{c[1]}" for c in ptx])
    replacement = context.replacement()
    return [
        _finding(
            "gpu-arch-unsupported",
            "error",
            f"{torch.described} has no kernels for {', '.join(names)}: CUDA calls fail with "
            '"no kernel image is available for execution on the device"',
            _torch_evidence(torch)
            + [f"built for: {built} ({origin})"]
            + [
                f"GPU {g.index if g.index is not None else ''}: {g.name}".replace("GPU : ", "GPU: ")
                for g in gpus
            ],
            _fix_lines(replacement, "a build with kernels for every target GPU"),
        )
    ]


def _check_cpu_build(context: _Context) -> list[Finding]:
    torch = context.torch
    target = context.target
    if torch is None or target.platform.startswith("macos"):
        return []
    gpu_machine = target.has_driver or bool(target.gpus)
    if not gpu_machine:
        return _cpu_build_gpus_unknown(context, torch)
    if torch.is_rocm and _nvidia_machine(context):
        replacement = context.replacement()
        return [
            _finding(
                "rocm-build-on-nvidia",
                "error",
                f"{torch.described} is a ROCm (AMD) build on a machine with NVIDIA GPUs: it cannot "
                "use them",
                _torch_evidence(torch) + _target_evidence(context),
                _fix_lines(replacement, "the CUDA build for this target"),
            )
        ]
    if not torch.is_cpu:
        return []
    replacement = context.replacement()
    return [
        _finding(
            "cpu-only-build",
            "error",
            f"{torch.described} is a CPU-only build on a machine with an NVIDIA GPU: "
            "torch.cuda.is_available() is False and training runs on the CPU",
            _torch_evidence(torch) + _target_evidence(context),
            _fix_lines(replacement, "the CUDA build for this target"),
        )
    ]


def _nvidia_machine(context: _Context) -> bool:
    """An NVIDIA driver, or a GPU that the matrix's (NVIDIA) GPU table or its name shows is one:
    a ROCm report names its AMD GPU ("Device 66a1") and no NVIDIA driver."""
    target = context.target
    if target.has_driver:
        return True
    return any(
        gpu.compute_capability is not None
        or re.search(r"nvidia|geforce|tesla|quadro|titan|rtx", gpu.name, re.IGNORECASE)
        for gpu in target.gpus
    )


def _cpu_build_gpus_unknown(context: _Context, torch: _Torch) -> list[Finding]:
    """A CPU build in a report that names no GPU and no driver (a truncated collect_env): it
    cannot use a GPU whatever the machine has, which matters when a GPU run is in question.
    Where a package beside it was built for a CUDA torch, that torch is what it replaced."""
    if context.driver_known or not torch.is_cpu:
        return []
    replaced = _replaced_cuda_build(context)
    if replaced is not None:
        return [_replaced_build_finding(context, torch, replaced, [])]
    return [
        _finding(
            "cpu-only-build",
            "warning",
            f"{torch.described} is a CPU-only build: it cannot use any GPU "
            "(torch.cuda.is_available() is False). The report names no GPU and no NVIDIA "
            "driver, so whether this machine has one is not known",
            _torch_evidence(torch) + _target_evidence(context),
            [
                "# on a machine with an NVIDIA GPU, audit the report against it:",
                "cudalock audit --report FILE --driver-version 535.104.05 --gpu A100",
                "# (read them with: nvidia-smi --query-gpu=name,driver_version --format=csv)",
            ],
        )
    ]


def _companion_cuda(dist: Distribution) -> tuple[str, CudaVersion | None] | None:
    """("cu118", (11, 8)) / ("cpu", None) from a companion's label; None without a label."""
    label = local_label(dist.version)
    if label is None or not re.match(r"(?:cu\d+|cpu|rocm)", label):
        return None  # no label, or a source build's git hash: no CUDA named
    return label, cuda_from_variant(label)


def _check_companions(context: _Context) -> list[Finding]:
    torch = context.torch
    if torch is None:
        return []
    findings: list[Finding] = []
    torch_variant = torch.label or (
        variant_for_cuda(torch.cuda) if torch.cuda else ("cpu" if torch.is_cpu else None)
    )
    mixed_errors: list[str] = []
    mixed_warnings: list[str] = []
    #: The companion each mixed one should be, at the version that pairs with torch.
    paired: dict[str, str] = {}
    for name in ("torchvision", "torchaudio"):
        dist = context.installed.dist(name)
        if dist is None or not dist.version:
            continue
        companion = _companion_cuda(dist)
        if companion is not None and torch_variant is not None and torch.install.cuda_known:
            label, cuda = companion
            line = f"{name} {dist.version} ({label}) with torch {torch.install.version}"
            expected = getattr(torch.release, name) if torch.release else None
            if label != torch_variant and not label.startswith("rocm"):
                paired[name] = expected or public_version(dist.version)
                if cuda is None or torch.cuda is None or cuda[0] != torch.cuda[0]:
                    mixed_errors.append(line)
                else:
                    mixed_warnings.append(line)
        expected = getattr(torch.release, name) if torch.release else None
        if expected and public_version(dist.version) != expected:
            replacement = context.replacement()
            findings.append(
                _finding(
                    f"{name}-mismatch",
                    "error",
                    f"{name} {dist.version} does not belong to {torch.described}: torch "
                    f"{torch.public} pairs with {name} {expected}. Its compiled operators are "
                    'registered against another torch ABI ("operator torchvision::nms does not '
                    'exist", undefined symbols, or a crash at import)',
                    [
                        f"{name} {dist.version}",
                        f"torch {torch.install.version}",
                        f"matrix: torch {torch.public} ↔ {name} {expected}",
                    ],
                    _companion_fix(context, {name: expected})
                    or _fix_lines(replacement, "install the matching set"),
                )
            )
    if mixed_errors or mixed_warnings:
        severity: Severity = "error" if mixed_errors else "warning"
        replacement = context.replacement()
        detail = (
            "different CUDA major versions: torchvision/torchaudio refuse to load their "
            'CUDA operators ("compiled with different CUDA major versions") or crash'
            if mixed_errors
            else "the same CUDA major with different minors: they load, but two CUDA runtimes "
            "of different minor versions end up in one process"
        )
        findings.append(
            _finding(
                "mixed-cuda-builds",
                severity,
                f"the torch family is built for different CUDA versions ({detail})",
                mixed_errors + mixed_warnings,
                _companion_fix(context, paired)
                or _fix_lines(replacement, "install torch and its companions from one index"),
            )
        )
    return findings


def _companion_fix(context: _Context, versions: dict[str, str]) -> list[str]:
    """Commands that install, beside the installed torch, the companions (torchvision,
    torchaudio) of ``versions`` built as that torch is (its label, its index), when the
    environment audits without an error with them: the torch stays, so no driver needs
    knowing. Empty when it would not, or while a fix is checked."""
    torch = context.torch
    if torch is None or not context.check_fixes or not versions:
        return []
    label = torch.label
    if torch.release is None or (
        label and not any(build.variant == label for build in torch.release.builds)
    ):
        return []  # a build the matrix does not list: no index known to serve its companions
    pins = {name: f"{version}+{label}" if label else version for name, version in versions.items()}
    if not _audits_clean_with(context, pins):
        return []
    requirements = " ".join(shlex.quote(f"{name}=={pin}") for name, pin in pins.items())
    index = f" --index-url {DEFAULT_PYTORCH_INDEX}/{label}" if label else ""
    return [
        f"# keep torch {torch.install.version}: the companions built for it",
        f"{context.pip} install --force-reinstall --no-deps {requirements}{index}",
    ]


def _audits_clean_with(
    context: _Context, pins: dict[str, str], torch: TorchInstall | None = None
) -> bool:
    """Whether the environment audits without an error with ``pins`` installed (and ``torch``
    in place of its torch): the check every such fix passes before it is printed."""
    installed = context.installed
    applied = replace(
        installed,
        distributions=tuple(
            Distribution(d.name, pins[d.name], "fix") if d.name in pins else d
            for d in installed.distributions
        ),
        messages=(),  # the errors were those of the packages replaced
    )
    if torch is not None:
        applied = replace(applied, torch=(torch,), arch_list=None)  # the old build's arch list
    after = audit(
        applied,
        context.target,
        context.matrix,
        driver_known=context.driver_known,
        compat=context.compat,
        check_fixes=False,
    )
    return not any(f.severity == "error" for f in after)


def _replaced_cuda_build(context: _Context) -> str | None:
    """The CUDA torch build (``2.1.0+cu121``) that xFormers' pasted warning says it was built
    for, beside a CPU torch where a GPU may be: the build the environment had before."""
    torch = context.torch
    if torch is None or not torch.is_cpu or not context.gpu_evidence:
        return None
    for message in context.installed.messages:
        built = message.get("built") if message.kind == msg.XFORMERS_BUILT_FOR else None
        if built and (local_label(built) or "").startswith("cu"):
            return built
    return None


def _replaced_build_finding(
    context: _Context, torch: _Torch, replaced: str, pasted: list[str]
) -> Finding:
    return _finding(
        "cpu-only-build",
        "error",
        f"{torch.described} is a CPU-only build, and xFormers beside it was built for torch "
        f"{replaced}: the CUDA build this environment had was replaced by the CPU build (an "
        "update, or another package's install, reinstalled torch from an index that served the "
        "CPU build), so neither the GPU nor xFormers' kernels are usable",
        _torch_evidence(torch) + _target_evidence(context) + pasted,
        _restore_build_fix(context, replaced)
        or _fix_lines(context.replacement(), "the CUDA build for this target"),
    )


def _restore_build_fix(context: _Context, version: str) -> list[str]:
    """Commands that put torch ``version`` (a build the matrix lists) back with the companions
    of that build, when the environment audits without an error with them. Not ``--no-deps``:
    a CUDA build needs the NVIDIA runtime wheels a CPU build goes without."""
    label = local_label(version)
    public = public_version(version)
    release = context.matrix.torch_release(public) if public else None
    if not context.check_fixes or label is None or release is None:
        return []
    build = next(
        (b for b in release.builds_for(context.target.platform) if b.variant == label), None
    )
    if build is None:
        return []
    pins = {"torch": version}
    for name in context.companions:
        paired = getattr(release, name)
        if paired:
            pins[name] = f"{paired}+{label}"
    torch = TorchInstall(
        version=version,
        cuda=format_cuda(build.cuda) if build.cuda else None,
        location="fix",
        cuda_known=True,
    )
    if not _audits_clean_with(context, pins, torch):
        return []
    requirements = " ".join(shlex.quote(f"{name}=={pin}") for name, pin in pins.items())
    return [
        f"# put back torch {version}, the build the environment had, with its companions",
        f"{context.pip} install --force-reinstall {requirements} "
        f"--index-url {DEFAULT_PYTORCH_INDEX}/{label}",
    ]


def _nvidia_major(dist: Distribution) -> int | None:
    """The CUDA major an NVIDIA runtime distribution belongs to (None: not one, or unclear)."""
    suffix = re.fullmatch(r"nvidia-[a-z0-9-]+-cu(\d{2})", dist.name)
    if suffix:
        return int(suffix.group(1))
    if dist.name == "cuda-toolkit" or dist.name in _UNSUFFIXED_CUDA_MAJOR:
        major = re.match(r"(\d{1,4})\.", dist.version or "")
        return int(major.group(1)) if major else None
    return None


def _check_nvidia_libraries(context: _Context) -> list[Finding]:
    torch = context.torch
    if torch is None or torch.cuda is None:
        return []
    others = []
    for dist in context.installed.distributions:
        major = _nvidia_major(dist)
        if major is not None and major != torch.cuda[0]:
            others.append(f"{dist.name} {dist.version} (CUDA {major})")
    if not others:
        return []
    names = " ".join(sorted({shlex.quote(o.split(" ")[0]) for o in others}))
    return [
        _finding(
            "mixed-cuda-builds",
            "warning",
            f"NVIDIA runtime packages of another CUDA major sit beside {torch.described} "
            f"(CUDA {format_cuda(torch.cuda)}): usually leftovers of an earlier torch; if anything "
            "puts their lib directories on the library path, two CUDA majors load into one process",
            others,
            [
                f"{context.pip} uninstall -y {names}   # if nothing else in the environment "
                "needs them"
            ],
        )
    ]


def _major_minor(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    match = re.match(r"(\d{1,4})\.(\d{1,4})(?!\d)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _deepspeed_fix(context: _Context, version: str | None) -> list[str]:
    return _rebuild_commands(context, "deepspeed", version)


def _installable_spec(name: str, version: str | None) -> str:
    """``name==version`` for a release as PyPI serves it, else ``name``: a local label
    (``0.15.5+46d7d0d1``, a source build) or a development version names a build no index
    serves, so it is never pinned."""
    if not version:
        return name
    public = public_version(version)
    try:
        parsed = Version(public)
    except InvalidVersion:
        return name
    if parsed.is_prerelease or parsed.is_devrelease or parsed.local or version != public:
        return name
    return f"{name}=={public}"


def _rebuild_commands(context: _Context, name: str, version: str | None) -> list[str]:
    """Rebuild ``name`` against the installed torch: no build isolation (torch importable),
    no cached wheel built against another torch."""
    spec = _installable_spec(name, version)
    return [
        f"# rebuild {name} against the installed torch (no build isolation, torch importable):",
        f"{context.pip} install --force-reinstall --no-deps --no-build-isolation "
        f"--no-cache-dir {shlex.quote(spec)}",
    ]


def _check_deepspeed(context: _Context) -> list[Finding]:
    ds = context.installed.deepspeed
    torch = context.torch
    if ds is None or not ds.has_build_info:
        return []
    evidence = [
        f"deepspeed {ds.version}",
        f"built with torch {ds.torch_version}, cuda {ds.torch_cuda}",
    ]
    if torch is not None:
        evidence.append(f"installed torch {torch.install.version} (CUDA {torch.install.cuda})")
    if ds.built_without_torch:
        return [
            _finding(
                "deepspeed-built-without-torch",
                "warning",
                "DeepSpeed was built where torch could not be imported (an isolated pip build "
                "environment): it records torch 0.0 / cuda 0.0, no op was pre-compiled, and "
                "every op "
                "(FusedAdam, cpu_adam for ZeRO offload, ...) is JIT-compiled on first use, which "
                "needs ninja and an nvcc matching torch's CUDA",
                evidence,
                _deepspeed_fix(context, ds.version),
            )
        ]
    if torch is None:
        return []
    findings = []
    severity: Severity = "error" if ds.installed_ops else "warning"
    consequence = (
        f"its pre-compiled ops ({', '.join(ds.installed_ops[:6])}) refuse to load "
        '("DeepSpeed ops were compiled and installed with a different version")'
        if ds.installed_ops
        else "no op was pre-compiled, so this matters only once ops are rebuilt"
    )
    built_cuda = _major_minor(ds.torch_cuda)
    if built_cuda and built_cuda != (0, 0) and torch.cuda and built_cuda != torch.cuda:
        findings.append(
            _finding(
                "deepspeed-cuda-mismatch",
                severity,
                f"DeepSpeed was compiled for CUDA {format_cuda(built_cuda)} but torch uses CUDA "
                f"{format_cuda(torch.cuda)}: {consequence}",
                evidence,
                _deepspeed_fix(context, ds.version),
            )
        )
    built_torch = _major_minor(ds.torch_version)
    installed_torch = _major_minor(torch.public)
    if built_torch and installed_torch and built_torch != installed_torch:
        findings.append(
            _finding(
                "deepspeed-torch-mismatch",
                severity,
                f"DeepSpeed was compiled with torch {built_torch[0]}.{built_torch[1]} but torch "
                f"{torch.public} is installed: {consequence}",
                evidence,
                _deepspeed_fix(context, ds.version),
            )
        )
    return findings


def _deepspeed_accepts(context: _Context, nvcc: CudaVersion, torch_cuda: CudaVersion) -> bool:
    """DeepSpeed's op builder accepts a minor mismatch when both versions are in its list."""
    ds = context.installed.deepspeed
    check = context.matrix.deepspeed_cuda_check(ds.version) if ds and ds.version else None
    if check is None:
        return False
    allowed = check.minor_mismatch_ok.get(nvcc[0], ())
    return nvcc in allowed and torch_cuda in allowed


def _check_nvcc(context: _Context) -> list[Finding]:
    torch = context.torch
    nvcc = context.installed.effective_nvcc
    if torch is None or torch.cuda is None or nvcc is None:
        return []
    nvcc_cuda = _major_minor(nvcc.version)
    if nvcc_cuda is None or nvcc_cuda == torch.cuda:
        return []
    has_deepspeed = context.installed.deepspeed is not None or bool(
        context.installed.dist("deepspeed")
    )
    major_differs = nvcc_cuda[0] != torch.cuda[0]
    if has_deepspeed:
        if not major_differs and _deepspeed_accepts(context, nvcc_cuda, torch.cuda):
            return []
        severity: Severity = "error"
        consequence = (
            'DeepSpeed refuses to JIT-build its ops ("Installed CUDA version '
            f"{format_cuda(nvcc_cuda)} does not match the version torch was compiled "
            f'with {format_cuda(torch.cuda)}") unless DS_SKIP_CUDA_CHECK=1'
        )
    elif major_differs:
        severity = "warning"
        consequence = (
            "torch's cpp_extension refuses to build CUDA extensions "
            "(flash-attn, apex, ...) with a different CUDA major"
        )
    else:
        return []
    where = f"{nvcc.path}, via {nvcc.origin}" if nvcc.path else f"{nvcc.origin}, per the report"
    fix = _nvcc_fix(context, torch.cuda)
    return [
        _finding(
            "nvcc-mismatch",
            severity,
            f"the nvcc that JIT-built ops would use is CUDA {format_cuda(nvcc_cuda)}, but "
            f"{torch.described} uses CUDA {format_cuda(torch.cuda)}: {consequence}",
            [f"nvcc {nvcc.version} ({where})", f"torch.version.cuda = {torch.install.cuda!r}"],
            fix,
        )
    ]


def _nvcc_fix(context: _Context, torch_cuda: CudaVersion) -> list[str]:
    """Point CUDA_HOME at a toolkit of torch's CUDA (or install one into the conda env)."""
    home = f"/usr/local/cuda-{format_cuda(torch_cuda)}"
    toolkit = next((tk.version for tk in context.matrix.toolkits if tk.cuda == torch_cuda), None)
    fix = [
        f"export CUDA_HOME={home}   # a CUDA {format_cuda(torch_cuda)} toolkit, if one is "
        "installed there",
        'export PATH="$CUDA_HOME/bin:$PATH"',
    ]
    if toolkit:
        fix.append(
            f"conda install -y -c nvidia/label/cuda-{toolkit} cuda-nvcc cuda-cudart-dev"
            '   # inside a conda env, then: export CUDA_HOME="$CONDA_PREFIX"'
        )
    return fix


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = re.findall(r"\d+", text)
    if any(len(part) > 18 for part in parts[:4]):  # not a version (and int() would refuse it)
        return None
    return tuple(int(p) for p in parts[:4]) if parts else None


def _wheel_library(context: _Context, library: SharedLibrary) -> Distribution | None:
    base = _LIBRARY_PACKAGES.get(library.name)
    if base is None:
        return None
    for dist in context.installed.distributions:
        if dist.name == base or re.fullmatch(re.escape(base) + r"-cu\d{2}", dist.name):
            return dist
    return None


def _check_library_shadowing(context: _Context) -> list[Finding]:
    torch = context.torch
    if torch is None or torch.cuda is None:
        return []
    evidence: list[str] = []
    severity: Severity = "warning"
    shadowing_dirs: list[str] = []
    for library in context.installed.cuda_libraries:
        found = _version_tuple(library.version)
        if found is None:
            continue
        wheel = _wheel_library(context, library)
        problem: str | None = None
        wheel_version = _version_tuple(wheel.version) if wheel else None
        if wheel is not None and wheel_version:
            if found[0] != wheel_version[0]:
                continue  # another soname: it cannot stand in for the wheel's copy
            if len(found) == 1:
                problem = (
                    f"{library.path} (version unknown beyond {library.version}) can be "
                    f"loaded instead of {wheel.name} {wheel.version}"
                )
            elif found < wheel_version:
                problem = (
                    f"{library.path} ({library.version}) is loaded instead of the "
                    f"newer {wheel.name} {wheel.version}"
                )
                severity = "error"
        elif (
            library.name in _CUDA_VERSIONED
            and found[0] == torch.cuda[0]
            and len(found) >= 2
            and found[:2] < torch.cuda
        ):
            problem = (
                f"{library.path} ({library.version}) is older than torch's CUDA "
                f"{format_cuda(torch.cuda)} and is found first"
            )
            severity = "error"
        if problem:
            evidence.append(problem)
            if library.directory not in shadowing_dirs:
                shadowing_dirs.append(library.directory)
    if not evidence:
        return []
    kept = [p for p in context.installed.ld_library_path if p not in shadowing_dirs]
    fix = (
        [f"export LD_LIBRARY_PATH={shlex.quote(':'.join(kept))}"]
        if kept
        else ["unset LD_LIBRARY_PATH"]
    )
    fix.append(
        "# and remove those directories where LD_LIBRARY_PATH is set (~/.bashrc, "
        "module files, the job script)"
    )
    return [
        _finding(
            "library-shadowing",
            severity,
            "CUDA libraries on LD_LIBRARY_PATH take precedence over the copies torch's wheels "
            "ship: an older one is loaded in their place, and newer libraries then fail with "
            "undefined symbols (e.g. __nvJitLinkComplete_12_4 in libnvJitLink.so.12) or crash",
            [*evidence, f"LD_LIBRARY_PATH={':'.join(context.installed.ld_library_path)}"],
            fix,
        )
    ]


def _check_extension_archs(context: _Context) -> list[Finding]:
    """A package's own ops built without the GPU's architecture (detectron2's "arch flags"):
    they fail with "no kernel image" whatever torch's kernels cover. The list is cuobjdump's
    SASS only, so a newer GPU may still run the ops' PTX: certain only for a GPU older than
    every listed architecture, or where the paste shows the failure."""
    findings = []
    failed = any(m.kind == msg.NO_KERNEL_IMAGE for m in context.installed.messages)
    for ops in context.installed.extension_archs:
        uncovered = sorted(
            {
                (gpu.name, gpu.compute_capability)
                for gpu in context.target.gpus
                if gpu.compute_capability is not None
                and not arch_covers(ops.archs, (), gpu.compute_capability)
            }
        )
        if not uncovered:
            continue
        certain = failed or all(cc < min(ops.archs) for _, cc in uncovered)
        built = ", ".join(format_cc(cc) for cc in ops.archs)
        gpus = ", ".join(f"{name} ({format_cc(cc)})" for name, cc in uncovered)
        wanted = ";".join(
            sorted({format_cc(cc) for _, cc in uncovered} | set(map(format_cc, ops.archs)))
        )
        findings.append(
            _finding(
                "gpu-arch-unsupported",
                "error" if certain else "warning",
                f"{ops.name}'s own compiled ops were built for compute capability {built} only, "
                f'and {gpus} is not among them: its CUDA ops fail with "no kernel image is '
                "available\" whatever torch's kernels cover"
                + ("" if certain else " (unless they also carry PTX, which this list omits)"),
                [f"pasted: {ops.text}", *_target_evidence(context)],
                [
                    f"# rebuild {ops.name} with kernels for this GPU, from its source: "
                    f'TORCH_CUDA_ARCH_LIST="{wanted}" pip install --no-build-isolation '
                    f"--no-deps --force-reinstall --no-cache-dir <{ops.name}'s source directory "
                    "or git URL>",
                ],
            )
        )
    return findings


def _check_skipped(context: _Context) -> list[Finding]:
    """A check the report gives too little for: which one, and what to paste instead."""
    torch = context.torch
    if not context.installed.source.startswith("report") or torch is None or not torch.is_cuda:
        return []
    if context.target.gpus or (_arch_lists(context, torch) is None and torch.build is None):
        return []
    return [
        _finding(
            "check-skipped",
            "info",
            "the report names no GPU, so whether "
            f"{torch.described} has kernels for the GPUs is not checked (paste 'nvidia-smi', "
            "or give --gpu / --compute-capability)",
            _torch_evidence(torch),
        )
    ]


# --------------------------------------------------------------------------------------------
# Findings from the error and warning lines a report carries (audit.messages)


def _with_reported_messages(context: _Context, findings: list[Finding]) -> list[Finding]:
    """Every message becomes a finding: the evidence of one that a check already made, or a
    finding of its own (a report with no torch version still has its errors diagnosed)."""
    result = list(findings)
    for message in context.installed.messages:
        if message.kind == msg.CUDA_UNAVAILABLE:
            result.extend(_cuda_unavailable(context, message, result))
            continue
        finding = _message_finding(context, message)
        if finding is None:
            continue
        codes = {finding.code, *_SAME_CAUSE.get(finding.code, ())}
        same = next((i for i, f in enumerate(result) if f.code in codes), None)
        if same is None:
            result.append(finding)
            continue
        existing = result[same]
        line = f"pasted: {message.text}"
        if line not in existing.evidence:
            result[same] = Finding(
                code=existing.code,
                severity=existing.severity,
                message=existing.message,
                evidence=(*existing.evidence, line),
                fix=existing.fix,
            )
    return result


#: A message's finding that a check's finding of another code already states.
_SAME_CAUSE = {"driver-too-old": ("minor-compat-only",)}


def _message_finding(context: _Context, message: ReportedMessage) -> Finding | None:
    """The finding an error line of a report makes, by its kind (None: a kind without one)."""
    judge = {
        msg.DRIVER_TOO_OLD: _driver_message,
        msg.DRIVER_INSUFFICIENT: _driver_message,
        msg.FORWARD_COMPAT_UNSUPPORTED: _forward_compat_message,
        msg.DRIVER_LIBRARY_MISMATCH: _driver_library_message,
        msg.NO_KERNEL_IMAGE: _arch_message,
        msg.ARCH_UNSUPPORTED: _arch_message,
        msg.NOT_COMPILED_WITH_CUDA: _cpu_message,
        msg.UNDEFINED_SYMBOL: _undefined_symbol,
        msg.LIBRARY_MISSING: _library_missing,
        msg.CUDNN_MISMATCH: _cudnn_message,
        msg.TORCHVISION_OPERATOR_MISSING: _torchvision_operator_message,
        msg.PYG_CUDA_MISMATCH: _pyg_cuda_message,
        msg.FLASH_ATTN_GPU_TOO_OLD: _flash_attn_gpu_message,
        msg.NVCC_MISMATCH: _nvcc_message,
        msg.XFORMERS_BUILT_FOR: _xformers_message,
        msg.DEEPSPEED_OPS_MISMATCH: _deepspeed_ops_message,
    }.get(message.kind)
    return judge(context, message) if judge is not None else None


def _cuda_unavailable(
    context: _Context, message: ReportedMessage, findings: Sequence[Finding]
) -> list[Finding]:
    """CUDA unavailable although nothing in the build explains it: the cause is outside it."""
    torch = context.torch
    explained = any(f.severity == "error" for f in findings) or any(
        f.code in ("no-driver", "cpu-only-build", "rocm-build-on-nvidia") for f in findings
    )
    if explained or torch is None or not torch.is_cuda or not context.target.has_driver:
        return []
    return [
        _finding(
            "cuda-unavailable",
            "warning",
            f"the report says CUDA is not available, yet {torch.described} is a CUDA build this "
            "driver runs: the cause is outside the build (a container started without GPU access, "
            "CUDA_VISIBLE_DEVICES set to no GPU, or a driver whose kernel module and user-space "
            "library differ, e.g. after an upgrade without a reboot)",
            [_pasted(message), *_torch_evidence(torch), *_target_evidence(context)],
            [
                "# check on the machine: nvidia-smi; echo $CUDA_VISIBLE_DEVICES; then "
                "'cudalock audit --deep' in that environment",
            ],
        )
    ]


def _deepspeed_ops_message(context: _Context, message: ReportedMessage) -> Finding:
    what = "torch" if message.get("what") == "pytorch" else "CUDA"
    built, runtime = message.get("built"), message.get("runtime")
    ds = context.installed.deepspeed
    version = ds.version if ds else None
    dist = context.installed.dist("deepspeed")
    return _finding(
        "deepspeed-torch-mismatch" if what == "torch" else "deepspeed-cuda-mismatch",
        "error",
        f"DeepSpeed's ops were compiled for {what} {built} but {what} {runtime} runs: they "
        "refuse to load",
        [_pasted(message)],
        _deepspeed_fix(context, version or (dist.version if dist else None)),
    )


def _pasted(message: ReportedMessage) -> str:
    return f"pasted: {message.text}"


def _replacement_fix(context: _Context, what: str, missing: str) -> list[str]:
    """The checked replacement build's commands, or what to give so that one can be checked."""
    if not context.gpu_evidence or (context.driver_known and context.target.has_driver):
        replacement = context.replacement(same_version=context.torch is not None)
        if replacement.commands:
            return _fix_lines(replacement, what)
        if replacement.remark:
            return [f"# no checked fix: {replacement.remark}"]
    return [f"# {missing}"]


def _driver_message(context: _Context, message: ReportedMessage) -> Finding:
    target = context.target
    if message.kind == msg.DRIVER_TOO_OLD:
        found = message.get("found") or "?"
        cuda = format_cuda(target.driver_cuda) if target.driver_cuda else "?"
        text = (
            f"PyTorch reports that the NVIDIA driver is too old for the torch in use: the driver "
            f"supports CUDA ≤ {cuda} (found version {found}), the build needs a newer CUDA"
        )
    else:
        text = (
            "the CUDA runtime reports that the NVIDIA driver is older than the CUDA the "
            "program was built for (cudaErrorInsufficientDriver): the build needs a newer driver"
        )
    return _finding(
        "driver-too-old",
        "error",
        text,
        [_pasted(message), *_target_evidence(context)],
        [
            *_replacement_fix(
                context,
                "a build this driver runs",
                "paste 'nvidia-smi' (or give --driver-version) to get a build this driver runs",
            ),
            "# or upgrade the NVIDIA driver",
        ],
    )


def _forward_compat_message(context: _Context, message: ReportedMessage) -> Finding:
    """Error 804: a forward-compatibility libcuda (cuda-compat) on a GPU it does not cover.
    The driver need not be too old: an image's compat libraries put before the host's do it
    (a container runtime's bug, as DeepVAC/TorchPod#43 found), so both are said."""
    return _finding(
        "forward-compat-unsupported",
        "error",
        "the CUDA forward-compatibility libraries (cuda-compat's libcuda.so, from a container "
        "image or a toolkit's compat/ directory on the library path) were loaded on a GPU they "
        "do not support: NVIDIA's forward compatibility covers data-center GPUs (and select "
        "server RTX cards), not GeForce. "
        "They are used when the CUDA in use is newer than the host driver runs, or when they "
        "come before the host driver's own libcuda",
        [_pasted(message), *_target_evidence(context)],
        [
            "# see which libcuda.so.1 loads: ldconfig -p | grep libcuda; echo $LD_LIBRARY_PATH",
            "# if one from a compat/ directory (or the image's /usr/local/cuda/compat): take it "
            "off the path, so the host driver's libcuda (mounted by nvidia-container-toolkit) "
            "loads",
            *_replacement_fix(
                context,
                "a build the host driver runs without forward compatibility",
                "paste 'nvidia-smi' (or give --driver-version) to get a build the host driver "
                "runs without forward compatibility",
            ),
        ],
    )


def _driver_library_message(context: _Context, message: ReportedMessage) -> Finding:
    """Error 803 / NVML's "Driver/library version mismatch": the loaded kernel module is of
    another version than the driver's user-space libraries (an update without a reboot)."""
    return _finding(
        "driver-library-mismatch",
        "error",
        "the NVIDIA kernel module that is loaded and the driver's user-space libraries "
        "(libcuda, libnvidia-ml) are of different versions, usually after a driver update "
        "without a reboot: neither CUDA programs nor nvidia-smi can start, whatever the "
        "Python packages",
        [_pasted(message), *_target_evidence(context)],
        [
            "# compare the loaded module with the libraries: cat /proc/driver/nvidia/version",
            "# reboot (or unload and reload the nvidia kernel modules) to load the installed "
            "driver; if that does not end it, reinstall the driver so both are one version",
            "# in a container: the image must not carry its own libcuda / libnvidia-ml",
        ],
    )


def _arch_message(context: _Context, message: ReportedMessage) -> Finding:
    torch = context.torch
    gpus = ", ".join(sorted({g.name for g in context.target.gpus})) or "the GPU"
    covered = (
        torch is not None
        and torch.build is not None
        and context.target.gpus
        and all(c is not None for c in context.target.compute_capabilities)
        and not missing_archs(torch.build, context.target.compute_capabilities)
    )
    if covered:
        assert torch is not None
        return _finding(
            "gpu-arch-unsupported",
            "error",
            f"a CUDA kernel for {gpus} is missing, but {torch.described} ships kernels for it: "
            "an extension built without this GPU's architecture raised it (rebuild it with "
            "TORCH_CUDA_ARCH_LIST naming the GPU's compute capability)",
            [_pasted(message), *_torch_evidence(torch)],
        )
    return _finding(
        "gpu-arch-unsupported",
        "error",
        f'the torch in use has no kernels for {gpus}: CUDA calls fail with "no kernel image is '
        'available for execution on the device"',
        [_pasted(message), *_target_evidence(context)]
        + [
            f"GPU: {g.name} (compute capability {format_cc(g.compute_capability)})"
            for g in context.target.gpus
            if g.compute_capability
        ],
        _arch_fix(context),
    )


def _arch_fix(context: _Context) -> list[str]:
    missing = (
        "paste 'nvidia-smi' (or give --driver-version and --gpu) to get a build with kernels "
        "for this GPU"
    )
    fix = _replacement_fix(context, "a build with kernels for every target GPU", missing)
    if fix == [f"# {missing}"]:  # unchecked: say at least where the fitting builds begin
        first = _first_builds_with_kernels(context)
        if first is None:  # no driver would change that: ask for none
            return [
                f"# no CUDA build of torch {context.matrix.torch_span} (the releases cudalock "
                f"knows) has kernels for compute capability {_ccs_text(context)}: this GPU "
                "cannot run them, only a CPU build of torch runs here"
            ]
        return [*first, *fix]
    return fix


def _ccs_text(context: _Context) -> str:
    return ", ".join(format_cc(cc) for cc in context.target.compute_capabilities if cc is not None)


def _first_builds_with_kernels(context: _Context) -> list[str] | None:
    """Where the matrix's torch builds with kernels for the target's GPUs begin ("which torch
    fits an H100?"), for a fix that cannot be checked without the driver; None where no build
    has kernels for them."""
    ccs = [cc for cc in context.target.compute_capabilities if cc is not None]
    if not ccs:
        return []
    platform = context.target.platform
    for release in sorted(context.matrix.torch_releases, key=lambda r: Version(r.version)):
        covering = [
            build
            for build in release.builds_for(platform)
            if build.kind == "cuda"
            and build.cuda is not None
            and all(arch_covers(build.sass, build.ptx, cc) for cc in ccs)
        ]
        if not covering:
            continue
        first = min(covering, key=lambda build: build.cuda or (0, 0))
        assert first.cuda is not None
        driver = context.matrix.min_driver_for_cuda(first.cuda, platform)
        needs = f", a driver ≥ {driver}" if driver else ""
        unverified = "" if first.provenance.verified else " (unverified)"
        return [
            f"# of torch {context.matrix.torch_span} (the releases cudalock knows), the first "
            f"with kernels for compute capability {_ccs_text(context)} is "
            f"{release.version}+{first.variant}{unverified}: CUDA {format_cuda(first.cuda)}"
            f"{needs}"
        ]
    return None


def _cpu_message(context: _Context, message: ReportedMessage) -> Finding:
    return _finding(
        "cpu-only-build",
        "error",
        "torch says it was not compiled with CUDA: a CPU-only build is installed, so nothing "
        "runs on the GPU",
        [_pasted(message), *_target_evidence(context)],
        _replacement_fix(
            context,
            "the CUDA build for this target",
            "paste 'nvidia-smi' (or give --driver-version) to get the CUDA build this driver runs",
        ),
    )


_NVIDIA_LIBRARIES = (
    "libcusparse",
    "libcublas",
    "libnvjitlink",
    "libcudnn",
    "libcufft",
    "libcusolver",
)


def _undefined_symbol(context: _Context, message: ReportedMessage) -> Finding:
    library = message.get("library") or ""
    symbol = message.get("symbol") or "?"
    name = library.rsplit("/", 1)[-1] or "a compiled extension"
    evidence = [_pasted(message)]
    if symbol.lower().startswith("nccl"):
        return _nccl_finding(context, evidence, f"{name} needs {symbol}")
    if name.lower().startswith(_NVIDIA_LIBRARIES) or "nvJitLink" in symbol:
        return _finding(
            "library-shadowing",
            "error",
            f"{name} is missing {symbol}: an older copy of a CUDA library (from LD_LIBRARY_PATH "
            "or another CUDA's NVIDIA packages) is loaded instead of the one torch's wheels ship",
            evidence,
            [
                "unset LD_LIBRARY_PATH   # or remove the CUDA directories from it",
                *_leftover_commands(context),
            ],
        )
    package = msg.extension_package(library)
    torch = context.torch
    installed = f"the installed {torch.described}" if torch else "the installed torch"
    if package is None:
        return _finding(
            "extension-abi-mismatch",
            "error",
            f"{'the compiled extension ' + name if library else 'a compiled extension'} was "
            f"built against another torch than {installed}: it misses {symbol} (the error "
            "names the library that failed; rebuild its package against the installed torch)",
            evidence,
            ["# rebuild the package that ships it against the installed torch"],
        )
    dist = context.installed.dist(package)
    wheels = any(entry.package == package for entry in context.matrix.package_builds)
    return _finding(
        "extension-abi-mismatch",
        "error",
        f"{package}'s compiled extension ({name}) was built against another torch (or CUDA) "
        f"than {installed}: it misses {symbol} and cannot be imported",
        evidence + ([f"{package} {dist.version}"] if dist else []),
        _prebuilt_fix(context, package, dist.version if dist else None)
        if wheels
        else _rebuild_commands(context, package, dist.version if dist else None),
    )


def _prebuilt_fix(context: _Context, package: str, version: str | None) -> list[str]:
    """For a package PyPI serves as wheels, each built against the one torch release its
    metadata pins (vllm, xformers): reinstalling it builds nothing, so the torch that release
    was built against goes in (what vllm#611 and #1807 did), else a release built against the
    installed torch."""
    recorded = from_matrix(context.matrix, package, version) if version else None
    if recorded is not None and recorded.torch:
        replacement = context.replacement(torch=recorded.torch)
        if replacement.commands:
            return _fix_lines(replacement, f"the torch {package} {version} was built against")
    torch = context.torch
    if torch is not None and torch.install.version:
        fitting = fitting_release(
            package,
            torch.install.version,
            torch.cuda,
            context.target,
            context.matrix,
            context.compat,
        )
        if fitting:
            return [
                f"{context.pip} install --force-reinstall --no-deps '{package}=={fitting}'"
                "   # built against this torch"
            ]
    release = f"{package}=={version}" if version else f"{package}==VERSION"
    return [
        f"# {package}'s wheels on PyPI are each built against the one torch release their "
        f"metadata pins, so reinstalling {package} alone rebuilds nothing. "
        + (
            f"The matrix has no record of {package} {version}: "
            if version
            else "Give its version (paste 'pip list') for a checked fix, or "
        )
        + f"run '{context.pip} install {release}' (the installed version), whose "
        "dependencies put back the torch it pins"
    ]


def _leftover_commands(context: _Context) -> list[str]:
    torch = context.torch
    if torch is None or torch.cuda is None:
        return []
    names = sorted(
        {
            d.name
            for d in context.installed.distributions
            if (major := _nvidia_major(d)) is not None and major != torch.cuda[0]
        }
    )
    if not names:
        return []
    return [f"{context.pip} uninstall -y {' '.join(shlex.quote(n) for n in names)}"]


def _nccl_finding(context: _Context, evidence: list[str], what: str) -> Finding:
    ncc = [d for d in context.installed.distributions if d.name.startswith("nvidia-nccl")]
    return _finding(
        "nccl-mismatch",
        "error",
        f"torch loads an NCCL older than the one it was built with ({what}): a second "
        "nvidia-nccl package (of another CUDA) or a system NCCL on LD_LIBRARY_PATH is found first",
        evidence + [f"{d.name} {d.version}" for d in ncc],
        _leftover_commands(context)
        or (
            [
                f"# {len(ncc)} nvidia-nccl packages: uninstall the one whose CUDA major is not "
                "torch's (python -c 'import torch; print(torch.version.cuda)')"
            ]
            if len(ncc) > 1
            else []
        )
        + ["unset LD_LIBRARY_PATH   # or remove the directory with the older libnccl from it"],
    )


def _library_missing(context: _Context, message: ReportedMessage) -> Finding:
    library = message.get("library") or "?"
    major = re.search(r"\.so\.(\d+)", library)
    torch = context.torch
    cuda_lib = library.startswith(("libcudart", "libcublas", "libnvrtc", "libcusparse"))
    evidence = [_pasted(message)]
    if torch is not None:
        evidence.append(f"torch {torch.install.version} (CUDA {torch.install.cuda})")
    if re.match(r"libcuda\.so\b", library):
        return _driver_library_missing(library, evidence)
    if (
        cuda_lib
        and major
        and torch is not None
        and torch.cuda
        and int(major.group(1)) != torch.cuda[0]
    ):
        detail = (
            f"a package built for CUDA {major.group(1)} is loaded beside {torch.described} "
            f"(CUDA {format_cuda(torch.cuda)}), whose environment has no CUDA {major.group(1)} "
            "runtime: install that package's build for torch's CUDA"
        )
    elif cuda_lib and major:
        detail = (
            f"a package built for CUDA {major.group(1)} cannot find that CUDA's runtime: install "
            "its build for the CUDA torch uses (or the matching nvidia-*-cuNN runtime packages)"
        )
    elif cuda_lib:
        # cuDNN 8 dlopens libnvrtc.so by this name (pytorch/pytorch#97041), while CUDA's
        # runtime packages on PyPI ship the versioned file.
        detail = (
            "it is asked for by its unversioned name, which only a CUDA toolkit's development "
            "files install; the copies torch's environment carries have versioned (or hashed) "
            "file names"
        )
    else:
        detail = "a compiled package cannot find a library it was linked against"
    return _finding(
        "cuda-library-missing",
        "error",
        f"{library} cannot be loaded: {detail}",
        evidence,
        [
            f"# check on the machine: ldconfig -p | grep {library.split('.so')[0]} (which names "
            "the loader can find)"
            if cuda_lib and not major
            else "# paste 'pip list' to see which packages were built for which CUDA"
        ],
    )


def _driver_library_missing(library: str, evidence: list[str]) -> Finding:
    """libcuda is the driver's library: no pip package provides it, the loader must find the
    driver's copy (on WSL 2 the Windows driver's, mounted at /usr/lib/wsl/lib)."""
    return _finding(
        "cuda-library-missing",
        "error",
        f"{library} cannot be loaded: it is the NVIDIA driver's own library, installed with the "
        "driver and never by pip, and the dynamic loader does not find it under that name",
        evidence,
        [
            "# check on the machine: ldconfig -p | grep libcuda (where the loader finds the "
            "driver's libcuda.so*); 'sudo ldconfig' rebuilds its cache after a driver install",
            "# on WSL 2: export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH (the Windows "
            "driver's libcuda.so is mounted there)",
            "# in a container: start it with GPU access (docker run --gpus all)",
        ],
    )


def _flash_attn_gpu_message(context: _Context, message: ReportedMessage) -> Finding:
    """flash-attn refuses the GPU itself: no build of it, nor of torch, changes that."""
    oldest = message.get("oldest") or "newer"
    dist = context.installed.dist("flash-attn")
    gpus = sorted({gpu.name for gpu in context.target.gpus})
    return _finding(
        "gpu-arch-unsupported",
        "error",
        f"flash-attn{' ' + dist.version if dist and dist.version else ''} has no kernels for "
        f"{', '.join(gpus) if gpus else 'this GPU'}: it runs only on {oldest} GPUs or newer, "
        "as its own message says, so no build of flash-attn or of torch helps on this GPU",
        [_pasted(message), *_target_evidence(context)],
        [
            "# use an attention implementation that runs on this GPU: in transformers, "
            'attn_implementation="sdpa" (or "eager") instead of "flash_attention_2"; '
            "a framework that requires flash-attn needs a release that does without it here, "
            f"or an {oldest} or newer GPU",
        ],
    )


def _cudnn_message(context: _Context, message: ReportedMessage) -> Finding:
    compiled, found = message.get("compiled"), message.get("found")
    return _finding(
        "cudnn-mismatch",
        "error",
        f"torch was built against cuDNN {compiled} but loads cuDNN {found}: another cuDNN "
        "(LD_LIBRARY_PATH, a conda cudnn, a system install) is found before the one torch ships",
        [_pasted(message)],
        ["unset LD_LIBRARY_PATH   # or remove the directory with the other libcudnn from it"],
    )


def _torchvision_operator_message(context: _Context, message: ReportedMessage) -> Finding:
    """torchvision's operators did not register into this torch: a torchvision of another
    torch release or CUDA build (the versions, where the report gives them, say which)."""
    torch = context.torch
    dist = context.installed.dist("torchvision")
    expected = torch.release.torchvision if torch is not None and torch.release else None
    evidence = [_pasted(message)]
    if dist is not None and dist.version:
        evidence.append(f"torchvision {dist.version}")
    if torch is not None:
        evidence.append(f"torch {torch.install.version}")
    if torch is not None and expected:
        evidence.append(f"matrix: torch {torch.public} ↔ torchvision {expected}")
        fix = _companion_fix(context, {"torchvision": expected}) or _fix_lines(
            context.replacement(), "install the matching set"
        )
    else:
        fix = [
            "# the versions decide the fix: paste 'pip list' (or run 'cudalock audit' in that "
            "environment) to have the torchvision that pairs with the installed torch named",
        ]
    return _finding(
        "torchvision-mismatch",
        "error",
        f"torchvision's compiled operator torchvision::{message.get('operator') or 'nms'} is "
        "not registered: the installed torchvision was built for another torch release or "
        "CUDA build than the torch it is imported with (each torch release pairs with one "
        "torchvision, from the same index)",
        evidence,
        fix,
    )


def _pyg_cuda_message(context: _Context, message: ReportedMessage) -> Finding:
    """torch_scatter's (torch_sparse's, ...) own import check: built for another CUDA than
    torch's. The fix is PyG's wheels for torch's CUDA, and for its release where known."""
    package = message.get("package") or "torch_scatter"
    name = package.replace("_", "-")
    torch_cuda = _major_minor(message.get("torch_cuda"))
    torch = context.torch
    variant = (
        (torch.label if torch and torch.label else None)
        or (variant_for_cuda(torch_cuda) if torch_cuda else None)
        or "cpu"
    )
    release = ".".join(torch.public.split(".")[:2]) if torch and torch.public else None
    return _finding(
        "cuda-build-mismatch",
        "error",
        f"{package} is built for CUDA {message.get('built_cuda')} and this torch for CUDA "
        f"{message.get('torch_cuda')}: {package} refuses to load beside it (its own check "
        "compares the CUDA majors)",
        [_pasted(message)] + ([f"torch {torch.install.version}"] if torch else []),
        list(wheels_fix([name], release, variant)),
    )


def _nvcc_message(context: _Context, message: ReportedMessage) -> Finding | None:
    nvcc = _major_minor(message.get("nvcc"))
    torch_cuda = _major_minor(message.get("torch_cuda"))
    if nvcc is None or torch_cuda is None:
        return None
    accepted = message.get("accepted") == "yes"
    by = "DeepSpeed's op builder" if message.get("by") == "deepspeed" else "torch's cpp_extension"
    return _finding(
        "nvcc-mismatch",
        "warning" if accepted else "error",
        f"the nvcc that builds ops is CUDA {format_cuda(nvcc)} but torch was compiled with CUDA "
        f"{format_cuda(torch_cuda)}: {by} "
        + ("accepts the pair but warns" if accepted else "refuses to build"),
        [_pasted(message)],
        _nvcc_fix(context, torch_cuda),
    )


def _xformers_message(context: _Context, message: ReportedMessage) -> Finding | None:
    """xFormers' own "built for: PyTorch X (you have Y) / Python A (you have B)": its
    extensions load only beside the torch and under the Python they were built for."""
    built, installed = message.get("built"), message.get("installed")
    built_python, python = message.get("built_python"), message.get("python")
    torch = context.torch
    if torch is not None and built is not None and built == _replaced_cuda_build(context):
        # Where the check of the CPU build states this cause, this line joins its evidence.
        return _replaced_build_finding(context, torch, built, [_pasted(message)])
    built_for, running = [], []
    if built and installed and built != installed:
        built_for.append(f"torch {built}")
        running.append(f"torch {installed}")
    if built_python and python and built_python != python:
        built_for.append(f"Python {built_python}")
        running.append(f"Python {python}")
    if not built_for:
        return None
    dist = context.installed.dist("xformers")
    return _finding(
        "extension-abi-mismatch",
        "error",
        f"xFormers was built for {' and '.join(built_for)} but this environment has "
        f"{' and '.join(running)}: its C++/CUDA extensions do not load (memory-efficient "
        "attention is unavailable)",
        [_pasted(message)] + ([f"xformers {dist.version}"] if dist else []),
        _xformers_fix(context, installed, dist),
    )


def _xformers_fix(
    context: _Context, torch_version: str | None, dist: Distribution | None
) -> list[str]:
    """The xFormers release built against this torch, installed for this Python (pip picks the
    wheel of the running interpreter); without one on record, a build against it."""
    torch = context.torch
    if torch is not None and torch_version and torch.install.version == torch_version:
        fitting = fitting_release(
            "xformers", torch_version, torch.cuda, context.target, context.matrix, context.compat
        )
        if fitting:
            return [
                f"{context.pip} install --force-reinstall --no-deps 'xformers=={fitting}'"
                "   # built against this torch"
            ]
    return _rebuild_commands(context, "xformers", dist.version if dist else None)


__all__ = [
    "CODES",
    "apply_plan",
    "audit",
    "has_errors",
    "install_commands",
    "sort_findings",
]
