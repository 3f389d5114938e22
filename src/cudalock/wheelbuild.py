"""What a CUDA-built wheel says it was built for, read from the wheel itself.

vllm, xformers, bitsandbytes and prebuilt flash-attn wheels ship kernels compiled for one CUDA
(and one torch). The wheel says which, in this order of trust:

- ``xformers/cpp_lib.json``: ``{"version": {"cuda": 1208, "torch": "2.7.1+cu126"}}``;
- one extension per CUDA (bitsandbytes' ``libbitsandbytes_cuda118.so`` … ``_cuda128.so``);
- the CUDA runtime its extensions need (ELF ``DT_NEEDED``): ``libcudart.so.12`` is CUDA 12.x;
- a ``nvidia-*-cuNN`` requirement: CUDA NN, the minor from a pinned ``nvidia-cuda-runtime``.

The readings are pure (:func:`from_cpp_lib` and kin); :func:`read_wheel_build` is the edge that
reads a wheel on an index by HTTP range requests (:mod:`cudalock.wheelzip`). Both ``lock`` and
``matrix refresh`` (``cuda_builds.toml``) read wheels this way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cudalock.errors import EnvironmentFailure
from cudalock.packagenames import canonical_name
from cudalock.sharedlibs import NotElf, cuda_majors, needed_libraries
from cudalock.versions import CudaVersion, cuda_from_variant, format_cuda, parse_cuda_version

__all__ = [
    "EXTENSION_LIMIT",
    "MAX_EXTENSIONS",
    "BuiltFor",
    "from_cpp_lib",
    "from_needed",
    "from_per_cuda_extensions",
    "from_requirements",
    "read_wheel_build",
]

#: NVIDIA's CUDA wheels carry the major in their name (nvidia-cublas-cu12).
_NVIDIA_CU_RE = re.compile(r"^nvidia-[a-z0-9-]+-cu(\d{2})$")
#: These are versioned like the CUDA toolkit they belong to (12.4.127 is CUDA 12.4).
_TOOLKIT_VERSIONED = ("nvidia-cuda-runtime", "nvidia-cuda-nvrtc")
#: Extensions read per wheel, smallest first: one that needs a CUDA library settles it.
MAX_EXTENSIONS = 4
#: An extension is decompressed only up to its dynamic section, at most this far.
EXTENSION_LIMIT = 128 * 2**20


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
        package=canonical_name(package),
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
                package=canonical_name(package),
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
        package=canonical_name(package),
        version=version,
        cuda=format_cuda(last),
        torch=None,
        evidence=f"{found[first]} … {found[last]}: one build per CUDA version",
        choices=versions,
    )


def from_requirements(package: str, version: str, requires_dist: Sequence[str]) -> BuiltFor | None:
    """A ``nvidia-*-cuNN`` requirement (outside extras): CUDA NN; the minor where the toolkit-
    versioned runtime is pinned (``nvidia-cuda-runtime-cu12==12.4.127`` is CUDA 12.4)."""
    # Only the lock and the matrix refresh read Requires-Dist; the audit need not load the
    # requirement parser.
    from packaging.requirements import InvalidRequirement, Requirement

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
        name = canonical_name(requirement.name)
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
        package=canonical_name(package),
        version=version,
        cuda=minor or str(major),
        torch=None,
        evidence=evidence,
    )


def read_wheel_build(
    name: str,
    version: str,
    requires_dist: Sequence[str],
    url: str,
    *,
    indexes: Sequence[str] = (),
    timeout_s: float = 60,
    retries: int = 3,
) -> BuiltFor | None:
    """What the wheel at ``url`` of ``name`` ``version`` (whose Requires-Dist is
    ``requires_dist``) says it was built for, reading as little of it as it can. None when it
    says nothing; ``FileNotFoundError`` for a 404, EnvironmentFailure for a failed read."""
    # HTTP (http.client, urllib) and zipfile only when a wheel is read: a warm lock reads none.
    import zipfile

    from cudalock.wheelzip import MemberReader, open_wheel

    archive, _remote = open_wheel(url, indexes=indexes, timeout_s=timeout_s, retries=retries)
    with archive:
        infos = archive.infolist()
        for info in infos:
            if info.filename.count("/") == 1 and info.filename.endswith("/cpp_lib.json"):
                text = archive.read(info).decode("utf-8", "replace")
                found = from_cpp_lib(name, version, text, info.filename)
                if found is not None:
                    return found
        per_cuda = from_per_cuda_extensions(name, version, [i.filename for i in infos])
        if per_cuda is not None:
            return per_cuda
        extensions = sorted(
            (
                i
                for i in infos
                if i.filename.endswith(".so") or ".so." in i.filename.rsplit("/", 1)[-1]
            ),
            key=lambda i: (i.file_size, i.filename),
        )
        needed = []
        for info in extensions[:MAX_EXTENSIONS]:
            reader = MemberReader(archive, info.filename, EXTENSION_LIMIT)
            try:
                needed.append((info.filename, needed_libraries(reader)))
            except (NotElf, EnvironmentFailure, zipfile.BadZipFile):
                continue
            finally:
                reader.close()
            found = from_needed(name, version, needed[-1:])
            if found is not None:
                return found
    return from_requirements(name, version, requires_dist)
