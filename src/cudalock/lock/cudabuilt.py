"""The closure's CUDA-built packages (vllm, xformers, ...), read from the wheels uv locked.

A package counts as built against torch or CUDA when its wheel is platform-specific and its
metadata requires torch or an NVIDIA ``-cuNN`` library. Its wheel is then read by range
requests, only as far as needed: ``*/cpp_lib.json``, else the DT_NEEDED of its smallest
extensions (``libcudart.so.12``), else its ``nvidia-*-cuNN`` requirements; a PyTorch-index
build says its CUDA in its label. What the wheel cannot say, the matrix's ``cuda_builds.toml``
may (an offline lock reads no wheel).

:class:`BuildCheck` is the per-package check the closure runs on every resolution: a version
built for a CUDA this torch or the target's driver cannot run is excluded and uv resolves again,
so another version is chosen or the lock is refused naming the cause.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.pylock import Package
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from cudalock.errors import CudalockError, InputError, sentence
from cudalock.fsutil import read_bounded, write_atomic
from cudalock.lock.metadata import Metadata, fetch_metadata
from cudalock.matrix import Matrix
from cudalock.matrix.load import matrix_cache_dir
from cudalock.model import Plan
from cudalock.request import TORCH_FAMILY
from cudalock.resolve.compat import driver_verdict
from cudalock.resolve.cudabuilt import (
    BuiltFor,
    first_known,
    from_label,
    from_matrix,
    mismatch,
)
from cudalock.urls import redact
from cudalock.wheelbuild import read_wheel_build

__all__ = [
    "PARALLEL_READS",
    "BuildCheck",
    "Rejected",
    "built_against_torch_or_cuda",
]

#: Wheels read at the same time.
PARALLEL_READS = 8


def _applies(requirement: Requirement, environment: Mapping[str, str]) -> bool:
    return requirement.marker is None or requirement.marker.evaluate({**environment, "extra": ""})


def built_against_torch_or_cuda(metadata: Metadata, environment: Mapping[str, str]) -> bool:
    """Whether the package requires torch or an NVIDIA CUDA library (outside its extras)."""
    for line in metadata.requires_dist:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        name = canonicalize_name(requirement.name)
        cuda_library = name.startswith("nvidia-") and name.rsplit("-", 1)[-1].startswith("cu")
        if (name == "torch" or cuda_library) and _applies(requirement, environment):
            return True
    return False


def _binary_wheel(package: Package) -> tuple[str, str | None] | None:
    """(URL, sha256) of a platform-specific wheel of ``package`` (None: pure Python, or an
    sdist only)."""
    for wheel in package.wheels or ():
        if not wheel.url:
            continue
        filename = wheel.name or urllib.parse.unquote(wheel.url.rsplit("/", 1)[-1].split("#")[0])
        try:
            tags = parse_wheel_filename(filename)[3]
        except ValueError:
            continue
        if any(tag.platform != "any" for tag in tags):
            return wheel.url, wheel.hashes.get("sha256")
    return None


# --------------------------------------------------------------------------------------------
# What a wheel said, kept by its sha256: a file on an index never changes, so a second lock
# reads no wheel again (and an offline lock reads what an earlier one read).


def _cache_file(sha256: str | None) -> Path | None:
    if not sha256 or not re.fullmatch(r"[0-9a-f]{64}", sha256):
        return None
    # v2: wheels with one build per CUDA are read as such (v1 read their smallest extension).
    return matrix_cache_dir() / "cuda-builds" / "v2" / f"{sha256}.json"


def _cache_read(sha256: str | None) -> tuple[bool, BuiltFor | None]:
    """(known, what it said): known False when this wheel was never read."""
    path = _cache_file(sha256)
    if path is None:
        return False, None
    try:
        document = json.loads(read_bounded(path, limit=64 * 2**10, what="cache file"))
    except (InputError, OSError, ValueError):
        return False, None
    if document is None:
        return True, None
    try:
        return True, BuiltFor(
            package=str(document["package"]),
            version=str(document["version"]),
            cuda=str(document["cuda"]),
            torch=document["torch"] if isinstance(document["torch"], str) else None,
            evidence=str(document["evidence"]),
            choices=tuple(str(c) for c in document.get("choices") or ()),
        )
    except (KeyError, TypeError):
        return False, None


def _cache_write(sha256: str | None, built: BuiltFor | None) -> None:
    path = _cache_file(sha256)
    if path is None:
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, json.dumps(built.to_json() if built else None))
    except (OSError, CudalockError):
        pass  # a read-only home only costs reading the wheel again


@dataclass(frozen=True)
class Rejected:
    """A locked version excluded for the CUDA it was built for."""

    built: BuiltFor
    problem: str


@dataclass
class BuildCheck:
    """The CUDA check of one closure: what each locked version was built for, and what was
    excluded (``name!=version`` requirements for uv)."""

    plan: Plan
    matrix: Matrix
    environment: Mapping[str, str]
    indexes: Sequence[str]
    timeout_s: float
    retries: int
    offline: bool
    #: Reads each framework's metadata once with the closure (shared cache).
    metadata: dict[tuple[str, str], Metadata | None]
    builds: dict[tuple[str, str], BuiltFor | None] = field(default_factory=dict)
    rejected: dict[str, list[Rejected]] = field(default_factory=dict)
    #: What the check read, in words (with the closure's notes).
    notes: list[str] = field(default_factory=list)

    @property
    def exclusions(self) -> tuple[str, ...]:
        return tuple(
            f"{name}{','.join(f'!={r.built.version}' for r in rejected)}"
            for name, rejected in self.rejected.items()
        )

    def _known_build(self, package: Package) -> tuple[bool, BuiltFor | None]:
        """(known, what it was built for) without the network: from its version's label, the
        matrix or the local cache; known False when its wheel must be read."""
        name, version = str(canonicalize_name(package.name)), str(package.version)
        labelled = from_label(name, version)
        if labelled is not None:
            return True, labelled
        wheel = _binary_wheel(package)
        if wheel is None:
            return True, None
        _url, sha256 = wheel
        recorded = from_matrix(self.matrix, name, version)
        entry = self.matrix.package_build(name, version)
        # The matrix read this very file (its sources name the sha256): no need to again.
        if (
            recorded is not None
            and entry is not None
            and sha256
            and any(f"sha256:{sha256}" in source for source in entry.provenance.source)
        ):
            return True, recorded
        known, cached = _cache_read(sha256)
        if known:
            return True, first_known((cached, recorded))
        if self.offline:
            return True, recorded
        return False, None

    def _read_build(self, package: Package) -> BuiltFor | None:
        """What ``package``, not known without the network, was built for: its wheel read."""
        wheel = _binary_wheel(package)
        if wheel is None:
            return None
        url, sha256 = wheel
        read = self._read(package, url)
        _cache_write(sha256, read)
        name, version = str(canonicalize_name(package.name)), str(package.version)
        return first_known((read, from_matrix(self.matrix, name, version)))

    def _read(self, package: Package, url: str) -> BuiltFor | None:
        name, version = str(canonicalize_name(package.name)), str(package.version)
        metadata = self.metadata.get((name, version))
        if metadata is None:
            metadata = fetch_metadata(
                package, indexes=self.indexes, timeout_s=self.timeout_s, retries=self.retries
            )
            self.metadata[(name, version)] = metadata
        if metadata is None or not built_against_torch_or_cuda(metadata, self.environment):
            return None
        try:
            return read_wheel_build(
                name,
                version,
                metadata.requires_dist,
                url,
                indexes=self.indexes,
                timeout_s=self.timeout_s,
                retries=self.retries,
            )
        except FileNotFoundError:
            self.notes.append(
                f"{name} {version}: its wheel {redact(url)} is not on the index (HTTP 404), so "
                "the CUDA it was built for was not read"
            )
            return None

    def review(self, packages: Sequence[Package]) -> bool:
        """Check every locked package; True when a version was excluded (resolve again)."""
        todo = [
            p
            for p in packages
            if canonicalize_name(p.name) not in TORCH_FAMILY
            and not canonicalize_name(p.name).startswith("nvidia-")
            and p.version is not None
            and (str(canonicalize_name(p.name)), str(p.version)) not in self.builds
        ]
        # What is known without the network is looked up in this thread (a pool's hand-offs
        # cost more than a small file); only the wheels to read go to the pool.
        unread = []
        for package in todo:
            known, built = self._known_build(package)
            if known:
                self.builds[(str(canonicalize_name(package.name)), str(package.version))] = built
            else:
                unread.append(package)
        if unread:
            with ThreadPoolExecutor(max_workers=PARALLEL_READS) as pool:
                for package, built in zip(unread, pool.map(self._read_build, unread), strict=True):
                    key = (str(canonicalize_name(package.name)), str(package.version))
                    self.builds[key] = built
        torch = self.plan.torch_pin.version
        torch_cuda = self.plan.cuda
        changed = False
        for package in packages:
            built = self.builds.get((str(canonicalize_name(package.name)), str(package.version)))
            if built is None:
                continue
            problem = mismatch(
                built,
                torch_version=torch,
                torch_cuda=torch_cuda,
                matrix=self.matrix,
                targets=self.plan.targets,
                compat=self.plan.compat,
            )
            if problem is None:
                continue
            rejected = self.rejected.setdefault(built.package, [])
            if all(r.built.version != built.version for r in rejected):
                rejected.append(Rejected(built, problem))
                self.notes.append(f"{problem} ({built.evidence}); another version is chosen")
                changed = True
        return changed

    def _recorded_fit(self, name: str) -> tuple[str, str] | None:
        """(version, torch) of the newest release cuda_builds.toml records for ``name`` whose
        build runs beside a torch of that version this target runs (the CUDA build of the
        driver's major the policy allows): a next step from sourced facts, for uv to confirm."""
        for entry in reversed(self.matrix.package_builds):
            if entry.package != name or entry.torch is None:
                continue
            public = entry.torch.split("+", 1)[0]
            release = self.matrix.torch_release(public)
            built = from_matrix(self.matrix, name, entry.version)
            if release is None or built is None:
                continue
            for build in sorted(
                release.builds_for(self.plan.platform), key=lambda b: b.cuda or (0, 0), reverse=True
            ):
                if build.cuda is None or build.cuda[0] != built.cuda_major:
                    continue
                runs = all(
                    driver_verdict(self.matrix, build.cuda, t, self.plan.compat).allowed
                    for t in self.plan.targets
                    if t.has_driver
                )
                if runs and (
                    mismatch(
                        built,
                        torch_version=f"{public}+{build.variant}",
                        torch_cuda=build.cuda,
                        matrix=self.matrix,
                        targets=self.plan.targets,
                        compat=self.plan.compat,
                    )
                    is None
                ):
                    return entry.version, public
        return None

    def refusal(
        self, verify: Callable[[str, str, str], str | None] | None = None
    ) -> tuple[str, str] | None:
        """(problem, hint) for a closure that could not be resolved once versions were
        excluded; None when none were. ``verify(name, version, torch)`` resolves the next step
        from cuda_builds.toml with uv first: None when it resolves, else why not (then it is
        said, not named as the next step)."""
        if not self.rejected:
            return None
        problems = []
        hints = []
        for name, rejected in self.rejected.items():
            versions = ", ".join(r.built.version for r in rejected)
            problem = (
                f"{rejected[0].problem} ({rejected[0].built.evidence}), and no other {name} "
                f"release fits the plan (excluded: {versions})"
            )
            hint = f"drop {name}"
            other = self._recorded_fit(name)
            why = verify(name, *other) if other is not None and verify is not None else None
            if other is not None and why is None:
                hint += f", or give --framework '{name}=={other[0]}' --torch {other[1]}"
            elif other is not None:
                problem += (
                    f"; {name} {other[0]} with torch {other[1]} (recorded in cuda_builds.toml) "
                    f"was tried and does not resolve: {why}"
                )
            problems.append(problem)
            cuda = rejected[0].built.cuda_version
            if cuda is not None and self.plan.targets:
                driver = self.matrix.min_driver_for_cuda(cuda, self.plan.targets[0].platform)
                if driver is not None:
                    hint += (
                        f", or run it on a driver ≥ {driver}, which runs its CUDA "
                        f"{rejected[0].built.cuda} build"
                    )
            hints.append(hint)
        return "; ".join(problems), sentence("; ".join(hints))
