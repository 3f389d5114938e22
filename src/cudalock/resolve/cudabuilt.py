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

Pure: the edges (the lock's wheel reader, the audit's inspection) hand in what they read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from cudalock.matrix import Matrix
from cudalock.model import Target
from cudalock.resolve.compat import driver_verdict
from cudalock.sharedlibs import cuda_majors
from cudalock.versions import CudaVersion, cuda_from_variant, format_cuda, parse_cuda_version

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
#: NVIDIA's CUDA wheels carry the major in their name (nvidia-cublas-cu12).
_NVIDIA_CU_RE = re.compile(r"^nvidia-[a-z0-9-]+-cu(\d{2})$")
#: These are versioned like the CUDA toolkit they belong to (12.4.127 is CUDA 12.4).
_TOOLKIT_VERSIONED = ("nvidia-cuda-runtime", "nvidia-cuda-nvrtc")


@dataclass(frozen=True)
class BuiltFor:
    """What one package says it was built for."""

    package: str  # canonical name
    version: str
    #: "12.8", or "12" where only the major is known (``libcudart.so.12``).
    cuda: str
    #: The torch it was built against, where it says ("2.7.1+cu126").
    torch: str | None
    #: Where that was read, in words ("xformers/cpp_lib.json").
    evidence: str
    #: A wheel with one build per CUDA, loading the one of torch's CUDA at run time
    #: (bitsandbytes' libbitsandbytes_cuda118.so … _cuda128.so): their CUDA versions.
    choices: tuple[str, ...] = ()

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".", 1)[0])

    @property
    def cuda_version(self) -> CudaVersion | None:
        return parse_cuda_version(self.cuda) if "." in self.cuda else None

    def to_json(self) -> dict[str, object]:
        return {
            "package": self.package,
            "version": self.version,
            "cuda": self.cuda,
            "torch": self.torch,
            "evidence": self.evidence,
            "choices": list(self.choices),
        }


def from_cpp_lib(package: str, version: str, text: str, where: str) -> BuiltFor | None:
    """xformers' ``cpp_lib.json``: its ``version.cuda`` (1208 = 12.8) and ``version.torch``.
    None for a ROCm or CPU build (``cuda`` null) or a file that is not such JSON."""
    try:
        document = json.loads(text)
    except ValueError:
        return None
    fields = document.get("version") if isinstance(document, dict) else None
    cuda = fields.get("cuda") if isinstance(fields, dict) else None
    if not isinstance(cuda, int) or isinstance(cuda, bool) or not 100 <= cuda < 10000:
        return None
    torch = fields.get("torch") if isinstance(fields, dict) else None
    return BuiltFor(
        package=str(canonicalize_name(package)),
        version=version,
        cuda=f"{cuda // 100}.{cuda % 100}",
        torch=torch if isinstance(torch, str) and torch else None,
        evidence=f"{where}: cuda {cuda}" + (f", torch {torch}" if isinstance(torch, str) else ""),
    )


def from_needed(
    package: str, version: str, needed: Iterable[tuple[str, Sequence[str]]]
) -> BuiltFor | None:
    """The CUDA major of the first extension (path, its DT_NEEDED sonames) that needs a CUDA
    library: ``libcudart.so.12`` → CUDA 12."""
    for path, sonames in needed:
        found = cuda_majors(list(sonames))
        if found:
            soname, major = found[0]
            return BuiltFor(
                package=str(canonicalize_name(package)),
                version=version,
                cuda=str(major),
                torch=None,
                evidence=f"{path} needs {soname}",
            )
    return None


#: An extension built for one CUDA of several a wheel ships: libbitsandbytes_cuda121.so.
_PER_CUDA_RE = re.compile(r"cuda(\d{2,3})\.so$")


def from_per_cuda_extensions(package: str, version: str, paths: Sequence[str]) -> BuiltFor | None:
    """A wheel that ships its extension once per CUDA version (``…_cuda117.so`` to
    ``…_cuda128.so``) and loads the one of torch's CUDA: the versions it has (None: fewer
    than two such extensions)."""
    found: dict[tuple[int, int], str] = {}
    for path in paths:
        match = _PER_CUDA_RE.search(path.rsplit("/", 1)[-1])
        cuda = cuda_from_variant(f"cu{match.group(1)}") if match else None
        if cuda is not None:
            found[cuda] = path
    if len(found) < 2:
        return None
    versions = tuple(format_cuda(cuda) for cuda in sorted(found))
    first, last = min(found), max(found)
    return BuiltFor(
        package=str(canonicalize_name(package)),
        version=version,
        cuda=format_cuda(last),
        torch=None,
        evidence=f"{found[first]} … {found[last]}: one build per CUDA version",
        choices=versions,
    )


def from_requirements(package: str, version: str, requires_dist: Sequence[str]) -> BuiltFor | None:
    """A ``nvidia-*-cuNN`` requirement (outside extras): CUDA NN; the minor where the toolkit-
    versioned runtime is pinned (``nvidia-cuda-runtime-cu12==12.4.127`` is CUDA 12.4)."""
    major: int | None = None
    minor: str | None = None
    evidence = ""
    for line in requires_dist:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and "extra" in str(requirement.marker):
            continue
        name = canonicalize_name(requirement.name)
        match = _NVIDIA_CU_RE.match(name)
        if not match:
            continue
        if major is None:
            major, evidence = int(match.group(1)), f"Requires-Dist {line}"
        pinned = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
        if name.startswith(_TOOLKIT_VERSIONED) and pinned and int(match.group(1)) == major:
            parts = pinned[0].split(".")
            if len(parts) >= 2 and parts[0] == str(major) and parts[1].isdigit():
                minor, evidence = f"{major}.{int(parts[1])}", f"Requires-Dist {line}"
    if major is None:
        return None
    return BuiltFor(
        package=str(canonicalize_name(package)),
        version=version,
        cuda=minor or str(major),
        torch=None,
        evidence=evidence,
    )


def from_matrix(matrix: Matrix, package: str, version: str) -> BuiltFor | None:
    """The matrix's record of PyPI's ``package`` ``version`` (a label-free version only:
    ``0.0.31+cu118`` is the PyTorch index's own build, of that label's CUDA)."""
    name = str(canonicalize_name(package))
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
        package=str(canonicalize_name(package)),
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
