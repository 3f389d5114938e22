"""Audit: packages built against CUDA (xformers, vllm, ...) that do not fit the installed torch.

What each was built for comes from its own files where the environment is at hand (its
``cpp_lib.json``, the CUDA runtime its extensions need), else from what a pasted report quotes
of them (xFormers' "built for: PyTorch 2.6.0+cu118 with CUDA 1107", read from its
``cpp_lib.json``), else from its version label (``+cu118``, a PyTorch-index build) or the
matrix's record of the PyPI release (a pasted report). The judgement is
:func:`cudalock.resolve.cudabuilt.mismatch`, the one ``lock`` makes.
"""

from __future__ import annotations

from collections.abc import Sequence

from cudalock.audit import messages
from cudalock.audit.installed import Distribution, ExtensionBuild, Installed, ReportedMessage
from cudalock.matrix import Matrix
from cudalock.model import Finding, Target
from cudalock.request import TORCH_FAMILY, Compat
from cudalock.resolve.cudabuilt import (
    FINDING_CODE,
    BuiltFor,
    first_known,
    from_cpp_lib,
    from_label,
    from_matrix,
    from_needed,
    from_per_cuda_extensions,
    mismatch,
)
from cudalock.versions import CudaVersion, parse_cuda_version

__all__ = [
    "built_for",
    "check_cuda_builds",
    "fitting_release",
]


def built_for(
    dist: Distribution,
    files: ExtensionBuild | None,
    matrix: Matrix,
    pasted: Sequence[ReportedMessage] = (),
) -> BuiltFor | None:
    """What ``dist`` was built for, from the most direct evidence there is."""
    version = dist.version or (files.version if files else None)
    if not version:
        return None
    readings = []
    if files is not None:
        readings.append(from_per_cuda_extensions(dist.name, version, files.per_cuda))
        if files.cpp_lib is not None:
            readings.append(from_cpp_lib(dist.name, version, files.cpp_lib[1], files.cpp_lib[0]))
        readings.append(from_needed(dist.name, version, files.needed))
    readings += [_from_pasted(dist.name, version, pasted)]
    readings += [from_label(dist.name, version), from_matrix(matrix, dist.name, version)]
    return first_known(readings)


def _from_pasted(name: str, version: str, pasted: Sequence[ReportedMessage]) -> BuiltFor | None:
    """What xFormers' own warning, pasted, says its build is (its cpp_lib.json, as it read it)."""
    if name != "xformers":
        return None
    for message in pasted:
        cuda, torch = message.get("cuda"), message.get("built")
        if message.kind == messages.XFORMERS_BUILT_FOR and cuda and torch:
            return BuiltFor(
                package=name,
                version=version,
                cuda=cuda,
                torch=torch,
                evidence=f"the pasted xFormers warning: {message.text}",
            )
    return None


def check_cuda_builds(
    installed: Installed, target: Target, matrix: Matrix, compat: Compat = "strict"
) -> list[Finding]:
    """One ``cuda-build-mismatch`` error per package built for a CUDA this torch or this driver
    cannot run beside it."""
    torch = installed.active_torch
    if torch is None or not torch.version or not torch.cuda_known or torch.hip:
        return []
    torch_cuda = parse_cuda_version(torch.cuda) if torch.cuda else None
    files = {build.name: build for build in installed.cuda_builds}
    findings = []
    for dist in installed.distributions:
        if dist.name in TORCH_FAMILY:  # judged by the torch checks themselves
            continue
        built = built_for(dist, files.get(dist.name), matrix, installed.messages)
        if built is None:
            continue
        problem = mismatch(
            built,
            torch_version=torch.version,
            torch_cuda=torch_cuda,
            matrix=matrix,
            targets=(target,),
            compat=compat,
        )
        if problem is None:
            continue
        findings.append(
            Finding(
                code=FINDING_CODE,
                severity="error",
                message=f"{problem}: its CUDA kernels fail to load beside this torch "
                "(a missing libcudart, undefined symbols) or crash at their first launch",
                evidence=(
                    f"{dist.name} {dist.version}: {built.evidence}",
                    f"torch {torch.version} (CUDA {torch.cuda or 'none'})",
                ),
                fix=_fix(dist, torch.version, torch_cuda, target, matrix, compat),
            )
        )
    return findings


def _fix(
    dist: Distribution,
    torch_version: str,
    torch_cuda: tuple[int, int] | None,
    target: Target,
    matrix: Matrix,
    compat: Compat,
) -> tuple[str, ...]:
    """The newest release built against this torch; else removing the package (both leave no
    such error when audited again)."""
    fitting = fitting_release(dist.name, torch_version, torch_cuda, target, matrix, compat)
    if fitting:
        return (f"pip install --no-deps '{dist.name}=={fitting}'",)
    return (f"pip uninstall -y {dist.name}",)


def fitting_release(
    package: str,
    torch_version: str,
    torch_cuda: CudaVersion | None,
    target: Target,
    matrix: Matrix,
    compat: Compat,
) -> str | None:
    """The newest release of ``package`` the matrix records as built against this torch's
    version and fitting it and ``target``'s driver, if any."""
    public = torch_version.split("+", 1)[0]
    fitting = [
        entry.version
        for entry in matrix.package_builds
        if entry.package == package
        and entry.torch is not None
        and entry.torch.split("+", 1)[0] == public
        and (found := from_matrix(matrix, entry.package, entry.version)) is not None
        and mismatch(
            found,
            torch_version=torch_version,
            torch_cuda=torch_cuda,
            matrix=matrix,
            targets=(target,),
            compat=compat,
        )
        is None
    ]
    return fitting[-1] if fitting else None
