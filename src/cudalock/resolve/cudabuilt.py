"""The CUDA a package other than torch was built for, and whether it fits the plan's torch.

vllm, xformers, bitsandbytes, prebuilt flash-attn and their kin ship CUDA kernels compiled
against one torch and one CUDA. Installed next to a torch of another CUDA major they fail to
load (``libcudart.so.12: cannot open shared object file``) or crash; built for a newer CUDA
than the driver runs, they fail at their first kernel. What they were built for is read from
the wheel itself, in this order:

- ``xformers/cpp_lib.json``: ``{"version": {"cuda": 1208, "torch": "2.7.1+cu126"}}``;
- the CUDA runtime its extensions need (ELF ``DT_NEEDED``): ``libcudart.so.12`` is CUDA 12.x;
- a ``nvidia-*-cuNN`` requirement: CUDA NN, the minor from a pinned ``nvidia-cuda-runtime``;
- else the matrix's ``cuda_builds.toml`` (a pasted report names only a version).

Pure: the edges (the lock's wheel reader, the audit's inspection) hand in what they read. The
readings of a wheel's own files are :mod:`cudalock.wheelbuild`'s (``matrix refresh`` reads
wheels too); they are named here with the matrix's and the label's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cudalock.matrix import Matrix
from cudalock.model import Target
from cudalock.packagenames import canonical_name
from cudalock.resolve.compat import driver_verdict
from cudalock.versions import CudaVersion, cuda_from_variant, format_cuda
from cudalock.wheelbuild import (
    BuiltFor,
    from_cpp_lib,
    from_needed,
    from_per_cuda_extensions,
    from_requirements,
)

__all__ = [
    "FINDING_CODE",
    "BuiltFor",
    "first_known",
    "from_cpp_lib",
    "from_label",
    "from_matrix",
    "from_needed",
    "from_per_cuda_extensions",
    "from_requirements",
    "mismatch",
]

#: The finding an audit reports for such a package, and the words a lock refuses with.
FINDING_CODE = "cuda-build-mismatch"


def from_matrix(matrix: Matrix, package: str, version: str) -> BuiltFor | None:
    """The matrix's record of PyPI's ``package`` ``version`` (a label-free version only:
    ``0.0.31+cu118`` is the PyTorch index's own build, of that label's CUDA)."""
    name = canonical_name(package)
    if "+" in version:
        return None
    entry = matrix.package_build(name, version)
    if entry is None:
        return None
    note = "" if entry.provenance.verified else ", unverified"
    return BuiltFor(
        package=name,
        version=version,
        cuda=entry.cuda,
        torch=entry.torch,
        evidence=f"cuda_builds.toml ({entry.read_from}{note})",
    )


def from_label(package: str, version: str) -> BuiltFor | None:
    """A PyTorch-index build names its CUDA in its label: ``xformers 0.0.28.post3+cu118``."""
    label = version.partition("+")[2]
    cuda = cuda_from_variant(label) if label else None
    if cuda is None:
        return None
    return BuiltFor(
        package=canonical_name(package),
        version=version,
        cuda=format_cuda(cuda),
        torch=None,
        evidence=f"its version label +{label}",
    )


def mismatch(
    built: BuiltFor,
    *,
    torch_version: str,
    torch_cuda: CudaVersion | None,
    matrix: Matrix,
    targets: Sequence[Target] = (),
    compat: str = "strict",
) -> str | None:
    """Why ``built`` cannot run beside this torch on these targets; None when it can.

    Another CUDA major than torch's (or a CPU torch) never loads; a CUDA newer than a target's
    driver allows (under ``compat``) fails at its first kernel. A newer minor of torch's own
    major is what PyPI's builds are (xformers 0.0.31: CUDA 12.8 against torch 2.7.1+cu126).
    """
    if built.choices:
        if torch_cuda is None or format_cuda(torch_cuda) in built.choices:
            return None
        return (
            f"{built.package} {built.version} ships builds for CUDA "
            f"{', '.join(built.choices)} only; this torch is {torch_version}"
        )
    head = f"{built.package} {built.version} is built for CUDA {built.cuda}"
    if built.torch:
        head += f" against torch {built.torch}"
    if torch_cuda is None:
        return f"{head}; this torch is {torch_version}, a build without CUDA"
    if built.cuda_major != torch_cuda[0]:
        return f"{head}; this torch is {torch_version}"
    cuda = built.cuda_version
    if cuda is None:
        return None
    for target in targets:
        if not target.has_driver:
            continue
        verdict = driver_verdict(matrix, cuda, target, compat)
        if not verdict.allowed:
            return f"{head}; {verdict.reason}"
    return None


def first_known(candidates: Iterable[BuiltFor | None]) -> BuiltFor | None:
    """The first reading that says something (the order of trust is the caller's)."""
    return next((c for c in candidates if c is not None), None)
