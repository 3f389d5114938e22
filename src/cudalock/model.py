"""The value types that flow between cudalock's parts: Target, Plan, Finding.

Target (the machine), Plan (what resolve chose, and why) and Finding (what audit and doctor
report). Plain frozen dataclasses, serialisable to JSON. The Request (what the user asked for)
is :mod:`cudalock.request`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cudalock.errors import sentence
from cudalock.request import Compat
from cudalock.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    format_cc,
    format_cuda,
)

PlatformName = str
Severity = Literal["error", "warning", "info"]

#: Version of the probe/target JSON schema written by ``cudalock probe --json``.
TARGET_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Gpu:
    """One GPU as the driver reports it."""

    name: str
    compute_capability: ComputeCapability | None
    index: int | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "compute_capability": (
                format_cc(self.compute_capability) if self.compute_capability else None
            ),
            "memory_total_bytes": self.memory_total_bytes,
        }


@dataclass(frozen=True)
class Host:
    """The host side of a Target: what environments and memory checks need to know."""

    os: str | None = None
    arch: str | None = None
    glibc: str | None = None
    memory_total_bytes: int | None = None
    cgroup_memory_limit_bytes: int | None = None
    hostname: str | None = None
    #: The CUDA toolkit extensions would be built with (nvcc on PATH or under CUDA_HOME), as
    #: ``X.Y``; the resolver prefers the torch build it matches when the stack compiles CUDA.
    cuda_toolkit: str | None = None
    #: Where that toolkit was found: the nvcc path.
    cuda_toolkit_path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "os": self.os,
            "arch": self.arch,
            "glibc": self.glibc,
            "memory_total_bytes": self.memory_total_bytes,
            "cgroup_memory_limit_bytes": self.cgroup_memory_limit_bytes,
            "hostname": self.hostname,
            "cuda_toolkit": self.cuda_toolkit,
            "cuda_toolkit_path": self.cuda_toolkit_path,
        }


@dataclass(frozen=True)
class Target:
    """The machine an environment is for.

    ``driver_version`` None means no NVIDIA driver (a CPU-only target). ``driver_cuda`` is the
    highest CUDA version the driver supports (NVML's ``nvmlSystemGetCudaDriverVersion``), or what
    the matrix's CUDA table says for the driver version when NVML did not answer.
    """

    platform: PlatformName
    driver_version: DriverVersion | None = None
    driver_cuda: CudaVersion | None = None
    gpus: tuple[Gpu, ...] = ()
    host: Host = field(default_factory=Host)
    name: str = "this machine"
    #: Which source answered: "nvml", "procfs", "nvidia-smi", "override", "file:PATH", "none".
    source: str = "none"
    #: What went wrong while probing, in words (driver not loaded, NVML mismatch, ...).
    notes: tuple[str, ...] = ()

    @property
    def has_driver(self) -> bool:
        return self.driver_version is not None or self.driver_cuda is not None

    @property
    def compute_capabilities(self) -> tuple[ComputeCapability, ...]:
        seen: list[ComputeCapability] = []
        for gpu in self.gpus:
            if gpu.compute_capability and gpu.compute_capability not in seen:
                seen.append(gpu.compute_capability)
        return tuple(sorted(seen))

    def describe(self) -> str:
        """The driver and the GPUs in words: "driver 570 (CUDA 12.8); 2 × GeForce RTX 5090
        (12.0)", as audit and doctor name the machine they judged on."""
        driver = (
            f"driver {self.driver_version or '?'} (CUDA "
            f"{format_cuda(self.driver_cuda) if self.driver_cuda else '?'})"
            if self.has_driver
            else "no NVIDIA driver known"
        )
        described = [
            g.name + (f" ({format_cc(g.compute_capability)})" if g.compute_capability else "")
            for g in self.gpus
        ]
        gpus = (
            ", ".join(
                f"{described.count(d)} × {d}" if described.count(d) > 1 else d
                for d in dict.fromkeys(described)
            )
            or "no GPUs"
        )
        return f"{driver}; {gpus}"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": TARGET_SCHEMA_VERSION,
            "name": self.name,
            "platform": self.platform,
            "driver_version": str(self.driver_version) if self.driver_version else None,
            "driver_cuda": format_cuda(self.driver_cuda) if self.driver_cuda else None,
            "gpus": [gpu.to_json() for gpu in self.gpus],
            "host": self.host.to_json(),
            "source": self.source,
            "notes": list(self.notes),
        }


def flag_assumptions(targets: Sequence[Target]) -> list[str]:
    """What was derived rather than read for the targets the Target flags describe (a driver
    branch's CUDA, a driver's CUDA from the table, the host details dropped), each said once:
    what resolve, audit and doctor state as assumed."""
    said: list[str] = []
    for target in targets:
        if target.source != "override":
            continue
        said.extend(note for note in target.notes if note not in said)
    return said


@dataclass(frozen=True)
class PackagePin:
    """One exactly pinned package and the index it must come from (None: the default index)."""

    name: str
    version: str
    index_url: str | None = None

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "index_url": self.index_url}


#: What a fix changes: the drivers of the targets, or one Request setting.
ChangeKind = Literal["driver", "compat", "python", "torch", "cuda", "with", "without"]


@dataclass(frozen=True)
class Change:
    """One change to the target or the request, as data.

    ``driver``: raise every target's driver to at least ``value``; ``compat``, ``python``,
    ``torch``, ``cuda``: set that request option to ``value`` (``torch`` a PEP 440 spec);
    ``with``: request the companion ``value`` without a version spec; ``without``: drop the
    companion ``value``.
    """

    kind: ChangeKind
    value: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value}


@dataclass(frozen=True)
class Fix:
    """Changes that, made together, let the candidate ``torch``+``variant`` fit the request as
    changed; ``text`` says it for people."""

    changes: tuple[Change, ...]
    torch: str
    variant: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "changes": [c.to_json() for c in self.changes],
            "torch": self.torch,
            "variant": self.variant,
            "text": self.text,
        }


@dataclass(frozen=True)
class Rejection:
    """A candidate build that was not chosen, why, and what would make a candidate fit.

    Each of ``fixes`` is an alternative; a fix either makes this candidate fit (a driver
    upgrade, another Python) or, when nothing can (the build lacks kernels for a GPU), names the
    other build that would.
    """

    torch: str
    variant: str
    reason: str
    fixes: tuple[Fix, ...] = ()

    @property
    def fix(self) -> str | None:
        """The fixes in words, alternatives joined by "or", as a sentence (None: nothing would
        help)."""
        return sentence(" or ".join(f.text for f in self.fixes)) or None

    def to_json(self) -> dict[str, Any]:
        return {
            "torch": self.torch,
            "variant": self.variant,
            "reason": self.reason,
            "fix": self.fix,
            "fixes": [f.to_json() for f in self.fixes],
        }


@dataclass(frozen=True)
class Alternative:
    """The best candidate that would also have run but the choice policy did not take, and why
    (``torch 2.7.1+cu118 is newer, but CUDA 11.8 on this CUDA 12.1 node ...``)."""

    torch: str
    variant: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"torch": self.torch, "variant": self.variant, "reason": self.reason}


@dataclass(frozen=True)
class Plan:
    """What resolve chose: every package pinned, with the evidence for the choice."""

    matrix_version: str
    python: str
    platform: PlatformName
    compat: Compat
    torch_version: str
    variant: str
    cuda: CudaVersion | None
    cudnn: str | None
    index_url: str
    packages: tuple[PackagePin, ...]
    targets: tuple[Target, ...]
    rejected: tuple[Rejection, ...] = ()
    #: Torch-family packages the matrix pairs with this build that were not asked for: the
    #: closure takes them from the same index, with the same label, when something requires them.
    paired: tuple[PackagePin, ...] = ()
    #: Sentences explaining the choice (which node constrained what, compat caveats, ...).
    explanation: tuple[str, ...] = ()
    #: Facts the choice rests on that the matrix marks unverified.
    unverified: tuple[str, ...] = ()
    #: The best candidate the choice policy passed over (None: nothing else would run).
    alternative: Alternative | None = None
    #: Why this Python, in a sentence (asked for; torch's newest; the newest the whole stack
    #: installs on, which bootstrap and lock prove with the closure).
    python_reason: str = ""
    #: The node whose driver the plan was made for: the fleet's lowest, as resolve reduced the
    #: targets (None: no target has a driver). cudalock.toml records this one's driver.
    driver_node: Target | None = None

    @property
    def torch_pin(self) -> PackagePin:
        return next(p for p in self.packages if p.name == "torch")

    def pin(self, name: str) -> PackagePin | None:
        return next((p for p in self.packages if p.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "matrix_version": self.matrix_version,
            "python": self.python,
            "platform": self.platform,
            "compat": self.compat,
            "torch": {
                "version": self.torch_version,
                "variant": self.variant,
                "cuda": format_cuda(self.cuda) if self.cuda else None,
                "cudnn": self.cudnn,
                "index_url": self.index_url,
            },
            "packages": [p.to_json() for p in self.packages],
            "paired": [p.to_json() for p in self.paired],
            "target": self.targets[0].to_json() if len(self.targets) == 1 else None,
            "targets": [t.to_json() for t in self.targets],
            "rejected": [r.to_json() for r in self.rejected],
            "explanation": list(self.explanation),
            "unverified": list(self.unverified),
            "alternative": self.alternative.to_json() if self.alternative else None,
            "python_reason": self.python_reason,
        }


@dataclass(frozen=True)
class Finding:
    """One problem (or note) found by audit or doctor. ``code`` is part of the interface."""

    code: str
    severity: Severity
    message: str
    evidence: tuple[str, ...] = ()
    fix: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "evidence": list(self.evidence),
            "fix": list(self.fix),
        }
