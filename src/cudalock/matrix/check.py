"""Cross-file rules of the compatibility matrix (``cudalock matrix check``).

:func:`cudalock.matrix.load.load_matrix` already rejects a matrix whose fields have the wrong type.
This module checks what a typed load cannot: value forms (versions, dates, specifiers,
platforms), ordering, duplicates and the references between files (every ``cuXYZ`` build names a
CUDA version of the CUDA table and only architectures that CUDA version can compile, every
``pypi_default`` names a build that exists on that platform, torchvision pairs are present and
move forward with torch). Pure: takes a :class:`Matrix`, returns :class:`Problem` values.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from cudalock.errors import InputError
from cudalock.matrix.load import load_matrix
from cudalock.matrix.model import (
    STATUSES,
    ArchSupport,
    Matrix,
    Provenance,
    TorchBuild,
    TorchRelease,
)
from cudalock.platforms import PLATFORMS as KNOWN_PLATFORMS
from cudalock.versions import (
    CudaVersion,
    cuda_from_variant,
    format_cc,
    format_cuda,
    parse_python_version,
)

#: Platform keys used in torch.toml (``python``, ``pypi_default``, build ``platforms``).
PLATFORMS = tuple(platform.name for platform in KNOWN_PLATFORMS)
_VARIANT_RE = re.compile(r"^(cpu|cu\d{2,4}|rocm\d+(\.\d+){1,2}|xpu)$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

_BUILD_FIELDS = {"variant", "cuda", "cudnn", "nccl", "sass", "ptx", "platforms"}
_RELEASE_FIELDS = {
    "version",
    "date",
    "requires_python",
    "python",
    "pypi_default",
    "torchvision",
    "torchaudio",
}
_TOOLKIT_FIELDS = {"version", "label", "driver_linux", "driver_windows"}
_GPU_FIELDS = {"name", "match", "compute_capability", "architecture"}
_DS_FIELDS = {"version", "date", "requires_python", "torch"}


@dataclass(frozen=True)
class Problem:
    """One problem: the file, the entry in it, and what is wrong."""

    file: str
    entry: str
    problem: str

    def __str__(self) -> str:
        return f"{self.file}: {self.entry}: {self.problem}"


def check_matrix_dir(directory: str | Path | None) -> list[Problem]:
    """Load a matrix directory and check it; :class:`InputError` when it cannot be loaded."""
    return check_matrix(load_matrix(directory))


def check_matrix(matrix: Matrix) -> list[Problem]:
    """Every problem of a loaded matrix, in file order; an empty list means the matrix is sound."""
    problems: list[Problem] = []
    problems += _check_head(matrix)
    problems += _check_cuda(matrix)
    problems += _check_torch(matrix)
    problems += _check_gpus(matrix)
    problems += _check_deepspeed(matrix)
    problems += _check_package_builds(matrix)
    problems += _check_torch_pairings(matrix)
    return problems


# --------------------------------------------------------------------------------------------


def _check_head(matrix: Matrix) -> list[Problem]:
    if not _DATE_RE.match(matrix.matrix_version) or not _valid_date(matrix.matrix_version):
        return [
            Problem(
                "matrix.toml",
                "top level",
                f"matrix_version {matrix.matrix_version!r} is not a date (YYYY-MM-DD)",
            )
        ]
    return []


def _check_provenance(file: str, entry: str, prov: Provenance, fields: set[str]) -> list[Problem]:
    problems = []
    if prov.status not in STATUSES:
        problems.append(
            Problem(file, entry, f"status {prov.status!r} is not one of {', '.join(STATUSES)}")
        )
    for name in prov.unverified_fields:
        if name not in fields:
            problems.append(
                Problem(
                    file, entry, f"unverified names {name!r}, which is not a field of this entry"
                )
            )
    if prov.unverified_fields and not prov.verified:
        problems.append(
            Problem(
                file, entry, "unverified = [...] on an entry whose status is already 'unverified'"
            )
        )
    return problems


def _ordered(file: str, label: str, keys: Sequence[tuple[str, object]]) -> list[Problem]:
    """Ascending and unique: ``keys`` are (shown name, sort key) in file order."""
    problems = []
    seen: set[object] = set()
    for position, (name, key) in enumerate(keys):
        if key in seen:
            problems.append(Problem(file, f"{label} {name}", "duplicate entry"))
            continue
        seen.add(key)
        if position and key < keys[position - 1][1]:  # type: ignore[operator]
            problems.append(
                Problem(
                    file,
                    f"{label} {name}",
                    f"out of order: comes after {keys[position - 1][0]} "
                    f"(entries must be sorted by version, oldest first)",
                )
            )
    return problems


def _check_cuda(matrix: Matrix) -> list[Problem]:
    file = "cuda.toml"
    problems: list[Problem] = []
    keys: list[tuple[str, object]] = []
    for tk in matrix.toolkits:
        entry = f"[[toolkit]] version = {tk.version!r}"
        problems += _check_provenance(file, entry, tk.provenance, _TOOLKIT_FIELDS)
        parts = tuple(int(p) for p in re.findall(r"\d+", tk.version))
        keys.append((repr(tk.version), parts))
        if tk.provenance.verified and tk.driver_linux is None and tk.driver_windows is None:
            problems.append(Problem(file, entry, "verified toolkit without any driver minimum"))
    problems += _ordered(file, "[[toolkit]] version =", keys)

    problems += _ordered(
        file, "[[major]] major =", [(str(m.major), m.major) for m in matrix.majors]
    )
    known_majors = {tk.cuda[0] for tk in matrix.toolkits}
    for m in matrix.majors:
        entry = f"[[major]] major = {m.major}"
        problems += _check_provenance(
            file, entry, m.provenance, {"major", "minor_compat_linux", "minor_compat_windows"}
        )
        if m.major < 11:
            problems.append(
                Problem(
                    file,
                    entry,
                    "minor-version compatibility starts with CUDA 11; earlier majors have no floor",
                )
            )
        if m.major not in known_majors:
            problems.append(Problem(file, entry, f"no [[toolkit]] of CUDA {m.major}.x"))

    problems += _ordered(
        file,
        "[[arch_support]] cuda =",
        [(repr(format_cuda(a.cuda)), a.cuda) for a in matrix.arch_support],
    )
    for a in matrix.arch_support:
        entry = f"[[arch_support]] cuda = {format_cuda(a.cuda)!r}"
        problems += _check_provenance(file, entry, a.provenance, {"cuda", "sass"})
        if not a.sass:
            problems.append(Problem(file, entry, "empty sass list"))
        if list(a.sass) != sorted(set(a.sass)):
            problems.append(Problem(file, entry, "sass must be sorted and without duplicates"))
    return problems


def arch_support_for(matrix: Matrix, cuda: CudaVersion) -> ArchSupport | None:
    """The arch_support entry in force for ``cuda``: the newest at or below it."""
    candidates = [a for a in matrix.arch_support if a.cuda <= cuda]
    return max(candidates, key=lambda a: a.cuda) if candidates else None


def _check_torch(matrix: Matrix) -> list[Problem]:
    file = "torch.toml"
    problems: list[Problem] = []
    keys: list[tuple[str, object]] = []
    known_cuda = {tk.cuda for tk in matrix.toolkits}
    previous_vision: tuple[str, Version] | None = None
    for release in matrix.torch_releases:
        entry = f"[[release]] version = {release.version!r}"
        version = _version(release.version)
        if version is None:
            problems.append(Problem(file, entry, "version is not a PEP 440 version"))
        else:
            keys.append((repr(release.version), version))
        problems += _check_provenance(file, entry, release.provenance, _RELEASE_FIELDS)
        problems += _check_release_values(file, entry, release)

        if release.torchvision is None:
            problems.append(Problem(file, entry, "no torchvision paired with this release"))
        else:
            vision = _version(release.torchvision)
            if vision is None:
                problems.append(
                    Problem(file, entry, f"torchvision {release.torchvision!r} is not a version")
                )
            elif previous_vision and vision <= previous_vision[1]:
                problems.append(
                    Problem(
                        file,
                        entry,
                        f"torchvision {release.torchvision} does not "
                        f"follow {previous_vision[0]}'s pairing",
                    )
                )
            if vision is not None:
                previous_vision = (
                    f"torch {release.version} (torchvision {release.torchvision})",
                    vision,
                )
        if release.torchaudio is not None and _version(release.torchaudio) is None:
            problems.append(
                Problem(file, entry, f"torchaudio {release.torchaudio!r} is not a version")
            )

        seen: set[tuple[str, str]] = set()
        for build in release.builds:
            platforms = ", ".join(build.platforms) or "no platform"
            where = f"{entry} build {build.variant!r} ({platforms})"
            problems += _check_provenance(file, where, build.provenance, _BUILD_FIELDS)
            for platform in build.platforms:
                if (build.variant, platform) in seen:
                    problems.append(
                        Problem(
                            file,
                            where,
                            f"duplicate build: {build.variant} on {platform} is listed twice",
                        )
                    )
                seen.add((build.variant, platform))
            problems += _check_build(matrix, file, where, release, build, known_cuda)

        for platform, variant in release.pypi_default.items():
            if platform not in PLATFORMS:
                continue  # reported by _check_release_values
            if not any(b.variant == variant and platform in b.platforms for b in release.builds):
                problems.append(
                    Problem(
                        file,
                        entry,
                        f"pypi_default {platform} = {variant!r} "
                        f"names no build of this release on "
                        f"{platform}",
                    )
                )
    problems += _ordered(file, "[[release]] version =", keys)
    return problems


def _check_release_values(file: str, entry: str, release: TorchRelease) -> list[Problem]:
    problems = []
    if not _DATE_RE.match(release.date) or not _valid_date(release.date):
        problems.append(Problem(file, entry, f"date {release.date!r} is not YYYY-MM-DD"))
    try:
        SpecifierSet(release.requires_python)
    except InvalidSpecifier:
        problems.append(
            Problem(
                file,
                entry,
                f"requires_python {release.requires_python!r} is not a version specifier",
            )
        )
    if not release.python:
        problems.append(Problem(file, entry, "no python table (CPython versions per platform)"))
    for platform, versions in release.python.items():
        if platform not in PLATFORMS:
            problems.append(
                Problem(
                    file,
                    entry,
                    f"python: unknown platform {platform!r} "
                    f"(expected one of {', '.join(PLATFORMS)})",
                )
            )
        for text in versions:
            try:
                parse_python_version(text)
            except InputError:
                problems.append(
                    Problem(
                        file,
                        entry,
                        f"python.{platform}: {text!r} is not a Python version like 3.11 or 3.13t",
                    )
                )
    for platform in release.pypi_default:
        if platform not in PLATFORMS:
            problems.append(Problem(file, entry, f"pypi_default: unknown platform {platform!r}"))
        elif platform not in release.python:
            problems.append(
                Problem(file, entry, f"pypi_default for {platform}, which has no python entry")
            )
    return problems


def _check_build(
    matrix: Matrix,
    file: str,
    where: str,
    release: TorchRelease,
    build: TorchBuild,
    known_cuda: set[CudaVersion],
) -> list[Problem]:
    problems = []
    if not _VARIANT_RE.match(build.variant):
        problems.append(
            Problem(file, where, f"variant {build.variant!r} is not cpu, cuXYZ, rocmX.Y or xpu")
        )
    if not build.platforms:
        problems.append(Problem(file, where, "no platforms"))
    for platform in build.platforms:
        if platform not in PLATFORMS:
            problems.append(Problem(file, where, f"unknown platform {platform!r}"))
        elif platform not in release.python:
            problems.append(
                Problem(file, where, f"platform {platform} has no python entry in this release")
            )
    from_name = cuda_from_variant(build.variant)
    if from_name is None:
        if build.cuda is not None:
            problems.append(
                Problem(file, where, f"a {build.kind} build must not name a CUDA version")
            )
        if build.sass or build.ptx:
            problems.append(
                Problem(
                    file,
                    where,
                    f"a {build.kind} build has no NVIDIA architectures (sass/ptx must be empty)",
                )
            )
        return problems
    if build.cuda is None:
        problems.append(Problem(file, where, "CUDA build without 'cuda'"))
        return problems
    if build.cuda != from_name:
        problems.append(
            Problem(
                file,
                where,
                f"cuda {format_cuda(build.cuda)} does not match variant {build.variant}",
            )
        )
    if build.cuda not in known_cuda:
        problems.append(
            Problem(
                file,
                where,
                f"CUDA {format_cuda(build.cuda)} is not in the CUDA table (cuda.toml [[toolkit]])",
            )
        )
    if not build.sass and not build.ptx:
        problems.append(Problem(file, where, "CUDA build without sass or ptx architectures"))
    support = arch_support_for(matrix, build.cuda)
    if support is None:
        problems.append(
            Problem(file, where, f"no [[arch_support]] entry covers CUDA {format_cuda(build.cuda)}")
        )
    else:
        allowed = set(support.sass)
        for kind, ccs in (("sass", build.sass), ("ptx", build.ptx)):
            bad = [format_cc(cc) for cc in ccs if cc not in allowed]
            if bad:
                problems.append(
                    Problem(
                        file,
                        where,
                        f"{kind} {', '.join(bad)} cannot be compiled by CUDA "
                        f"{format_cuda(build.cuda)} (cuda.toml [[arch_support]] cuda = "
                        f"{format_cuda(support.cuda)!r})",
                    )
                )
    if list(build.sass) != sorted(set(build.sass)):
        problems.append(Problem(file, where, "sass must be sorted and without duplicates"))
    return problems


def _check_gpus(matrix: Matrix) -> list[Problem]:
    file = "gpus.toml"
    problems: list[Problem] = []
    names: set[str] = set()
    needles: dict[str, str] = {}
    for gpu in matrix.gpus:
        entry = f"[[gpu]] name = {gpu.name!r}"
        problems += _check_provenance(file, entry, gpu.provenance, _GPU_FIELDS)
        if gpu.name.lower() in names:
            problems.append(Problem(file, entry, "duplicate entry"))
        names.add(gpu.name.lower())
        for needle in (*gpu.match, *gpu.aliases):
            owner = needles.get(needle.lower())
            if owner is not None and owner != gpu.name:
                problems.append(
                    Problem(file, entry, f"match {needle!r} is also a match of {owner!r}")
                )
            needles[needle.lower()] = gpu.name
            if not needle.strip():
                problems.append(Problem(file, entry, "empty match string"))
    return problems


def _check_deepspeed(matrix: Matrix) -> list[Problem]:
    file = "deepspeed.toml"
    problems: list[Problem] = []
    keys: list[tuple[str, object]] = []
    for release in matrix.deepspeed:
        entry = f"[[release]] version = {release.version!r}"
        problems += _check_provenance(file, entry, release.provenance, _DS_FIELDS)
        version = _version(release.version)
        if version is None:
            problems.append(Problem(file, entry, "version is not a PEP 440 version"))
        else:
            keys.append((repr(release.version), version))
        for label, spec in (("torch", release.torch), ("requires_python", release.requires_python)):
            if spec:
                try:
                    SpecifierSet(spec)
                except InvalidSpecifier:
                    problems.append(
                        Problem(file, entry, f"{label} {spec!r} is not a version specifier")
                    )
        if release.date is not None and (
            not _DATE_RE.match(release.date) or not _valid_date(release.date)
        ):
            problems.append(Problem(file, entry, f"date {release.date!r} is not YYYY-MM-DD"))
    problems += _ordered(file, "[[release]] version =", keys)
    for check in matrix.deepspeed_cuda_checks:
        entry = f"[[cuda_check]] deepspeed = {check.deepspeed!r}"
        problems += _check_provenance(
            file, entry, check.provenance, {"deepspeed", "minor_mismatch_ok"}
        )
        try:
            SpecifierSet(check.deepspeed)
        except InvalidSpecifier:
            problems.append(Problem(file, entry, "deepspeed is not a version specifier"))
        for major, versions in check.minor_mismatch_ok.items():
            wrong = [format_cuda(v) for v in versions if v[0] != major]
            if wrong:
                problems.append(
                    Problem(
                        file,
                        entry,
                        f"minor_mismatch_ok.{major} lists {', '.join(wrong)} of another major",
                    )
                )
    problems += _overlapping_rules(
        file,
        [c.deepspeed for c in matrix.deepspeed_cuda_checks],
        [r.version for r in matrix.deepspeed],
    )
    return problems


_PACKAGE_BUILD_FIELDS = {"package", "version", "cuda", "torch", "read_from"}
_TORCH_PAIRING_FIELDS = {"package", "version", "torch", "read_from"}


def _package_entry(
    file: str,
    entry: str,
    package: str,
    version: str,
    provenance: Provenance,
    fields: set[str],
    keys: list[tuple[str, object]],
) -> list[Problem]:
    """An entry of a per-package table: its provenance and canonical name; its sort key
    appended to ``keys`` (by package, then version)."""
    problems = _check_provenance(file, entry, provenance, fields)
    if canonicalize_name(package) != package:
        problems.append(Problem(file, entry, "package is not a canonical (PEP 503) name"))
    parsed = _version(version)
    if parsed is not None:
        keys.append((f"{package} {version}", (package, parsed)))
    return problems


def _check_package_builds(matrix: Matrix) -> list[Problem]:
    """cuda_builds.toml: canonical names, sorted by package then version, a CUDA major the
    matrix knows, and a torch label (when there is one) of the same CUDA major."""
    file = "cuda_builds.toml"
    problems: list[Problem] = []
    keys: list[tuple[str, object]] = []
    for build in matrix.package_builds:
        entry = f"[[build]] package = {build.package!r} version = {build.version!r}"
        problems += _package_entry(
            file,
            entry,
            build.package,
            build.version,
            build.provenance,
            _PACKAGE_BUILD_FIELDS,
            keys,
        )
        if matrix.cuda_major(build.cuda_major) is None:
            problems.append(Problem(file, entry, f"CUDA {build.cuda}: a major cuda.toml lacks"))
        if build.torch is not None:
            torch_version = _version(build.torch)
            label = build.torch.partition("+")[2]
            label_cuda = cuda_from_variant(label) if label else None
            if torch_version is None:
                problems.append(Problem(file, entry, f"torch {build.torch!r} is not a version"))
            elif label and label_cuda is None:
                problems.append(Problem(file, entry, f"torch {build.torch!r}: unknown label"))
            elif label_cuda is not None and label_cuda[0] != build.cuda_major:
                problems.append(
                    Problem(
                        file,
                        entry,
                        f"built for CUDA {build.cuda} against torch {build.torch}, "
                        "a build of another CUDA major",
                    )
                )
    problems += _ordered(file, "[[build]]", keys)
    return problems


def _check_torch_pairings(matrix: Matrix) -> list[Problem]:
    """torch_pairings.toml: canonical names, sorted by package then version."""
    file = "torch_pairings.toml"
    problems: list[Problem] = []
    keys: list[tuple[str, object]] = []
    for pairing in matrix.torch_pairings:
        entry = f"[[pairing]] package = {pairing.package!r} version = {pairing.version!r}"
        problems += _package_entry(
            file,
            entry,
            pairing.package,
            pairing.version,
            pairing.provenance,
            _TORCH_PAIRING_FIELDS,
            keys,
        )
    problems += _ordered(file, "[[pairing]]", keys)
    return problems


def _overlapping_rules(file: str, specs: Sequence[str], versions: Iterable[str]) -> list[Problem]:
    """Each DeepSpeed release must be governed by at most one cuda_check rule."""
    problems = []
    parsed = []
    for spec in specs:
        try:
            parsed.append((spec, SpecifierSet(spec)))
        except InvalidSpecifier:
            continue
    for version in versions:
        matching = [spec for spec, s in parsed if s.contains(version, prereleases=True)]
        if len(matching) > 1:
            problems.append(
                Problem(
                    file,
                    f"[[release]] version = {version!r}",
                    f"matched by several [[cuda_check]] rules: {', '.join(matching)}",
                )
            )
    return problems


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _valid_date(text: str) -> bool:

    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True
