"""Rules every compatibility matrix must keep, however many releases it holds.

Each invariant takes a :class:`Matrix` and returns its violations in words (an empty list: the
rule holds). ``tests/matrix/test_invariants.py`` applies them to the shipped matrix, and
``tests/matrix/test_refresh.py`` to a copy refreshed with one more torch and DeepSpeed release:
they check what must stay true as the data grows, never counts or the newest version.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from cudalock.matrix import Matrix, Provenance
from cudalock.matrix.check import check_matrix
from cudalock.resolve.compat import missing_archs
from cudalock.versions import format_cc, format_cuda

Invariant = Callable[[Matrix], list[str]]

#: A source is a URL or ``owner/repo@commit:path``, optionally followed by words on what in it.
_SOURCE_RE = re.compile(r"^(https?://\S+|[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:\S+)( .+)?$", re.DOTALL)


def _entries(matrix: Matrix) -> Iterator[tuple[str, Provenance]]:
    for tk in matrix.toolkits:
        yield f"cuda.toml toolkit {tk.version}", tk.provenance
    for major in matrix.majors:
        yield f"cuda.toml major {major.major}", major.provenance
    for arch in matrix.arch_support:
        yield f"cuda.toml arch_support {format_cuda(arch.cuda)}", arch.provenance
    for gpu in matrix.gpus:
        yield f"gpus.toml {gpu.name}", gpu.provenance
    for ds in matrix.deepspeed:
        yield f"deepspeed.toml release {ds.version}", ds.provenance
    for rule in matrix.deepspeed_cuda_checks:
        yield f"deepspeed.toml cuda_check {rule.deepspeed}", rule.provenance
    for release in matrix.torch_releases:
        yield f"torch.toml release {release.version}", release.provenance
        for build in release.builds:
            where = f"torch.toml release {release.version} build {build.variant}"
            yield f"{where} ({', '.join(build.platforms)})", build.provenance


def passes_matrix_check(matrix: Matrix) -> list[str]:
    """`cudalock matrix check` finds nothing: schema, order, cross references, arch lists."""
    return [str(problem) for problem in check_matrix(matrix)]


def every_entry_is_sourced(matrix: Matrix) -> list[str]:
    """Every entry names at least one source, each a URL or repo@commit:path."""
    problems = []
    for entry, provenance in _entries(matrix):
        if not provenance.source:
            problems.append(f"{entry}: no source")
        for source in provenance.source:
            if not _SOURCE_RE.match(source):
                problems.append(f"{entry}: source {source!r} is not a URL or repo@commit:path")
    return problems


def matrix_version_is_not_older_than_its_data(matrix: Matrix) -> list[str]:
    """The matrix is dated no earlier than the newest release it describes."""
    dates = [(r.date, f"torch {r.version}") for r in matrix.torch_releases]
    dates += [(d.date, f"DeepSpeed {d.version}") for d in matrix.deepspeed if d.date]
    return [
        f"matrix_version {matrix.matrix_version} is older than {what} ({date})"
        for date, what in dates
        if date > matrix.matrix_version
    ]


def python_lists_fit_requires_python(matrix: Matrix) -> list[str]:
    """Every CPython listed for a release is one its requires_python admits, and every platform
    with Python wheels has a build."""
    problems = []
    for release in matrix.torch_releases:
        admitted = SpecifierSet(release.requires_python)
        for platform, versions in release.python.items():
            outside = [v for v in versions if not admitted.contains(Version(v.rstrip("t")))]
            if outside:
                problems.append(
                    f"torch {release.version} lists Python {', '.join(outside)} on {platform}, "
                    f"outside requires_python {release.requires_python}"
                )
            if not versions:
                problems.append(f"torch {release.version}: empty Python list for {platform}")
            if not release.builds_for(platform):
                problems.append(
                    f"torch {release.version}: Python wheels but no build on {platform}"
                )
    return problems


def linux_cuda_builds_have_a_driver_minimum(matrix: Matrix) -> list[str]:
    """The resolver can judge every Linux CUDA build: its CUDA has a driver minimum."""
    problems = []
    for release in matrix.torch_releases:
        for build in release.builds:
            if build.cuda is None:
                continue
            for platform in build.platforms:
                if platform.startswith("linux") and not matrix.min_driver_for_cuda(
                    build.cuda, platform
                ):
                    problems.append(
                        f"torch {release.version}+{build.variant} on {platform}: CUDA "
                        f"{format_cuda(build.cuda)} has no Linux driver minimum in cuda.toml"
                    )
    return problems


def every_gpu_has_a_build(matrix: Matrix) -> list[str]:
    """Each GPU model in gpus.toml is covered by the kernels of at least one CUDA build."""
    builds = [b for r in matrix.torch_releases for b in r.builds if b.kind == "cuda"]
    return [
        f"{gpu.name} ({format_cc(gpu.compute_capability)}): no build has kernels for it"
        for gpu in matrix.gpus
        if all(missing_archs(build, (gpu.compute_capability,)) for build in builds)
    ]


def every_deepspeed_release_has_one_cuda_rule(matrix: Matrix) -> list[str]:
    """audit judges DeepSpeed's nvcc check by exactly one [[cuda_check]] rule per release."""
    problems = []
    for release in matrix.deepspeed:
        rules = [
            rule.deepspeed
            for rule in matrix.deepspeed_cuda_checks
            if SpecifierSet(rule.deepspeed).contains(release.version, prereleases=True)
        ]
        if len(rules) != 1:
            problems.append(
                f"DeepSpeed {release.version} is governed by {len(rules)} cuda_check rules"
            )
    return problems


def unverified_entries_say_why(matrix: Matrix) -> list[str]:
    """A torch release or DeepSpeed entry on weaker evidence carries a note saying what is
    unknown (builds and arch tables explain themselves through their sources)."""
    problems = []
    for release in matrix.torch_releases:
        provenance = release.provenance
        if (not provenance.verified or provenance.unverified_fields) and not provenance.note:
            problems.append(f"torch {release.version}: unverified without a note")
    for ds in matrix.deepspeed:
        provenance = ds.provenance
        if (not provenance.verified or provenance.unverified_fields) and not provenance.note:
            problems.append(f"DeepSpeed {ds.version}: unverified without a note")
    return problems


INVARIANTS: dict[str, Invariant] = {
    invariant.__name__: invariant
    for invariant in (
        passes_matrix_check,
        every_entry_is_sourced,
        matrix_version_is_not_older_than_its_data,
        python_lists_fit_requires_python,
        linux_cuda_builds_have_a_driver_minimum,
        every_gpu_has_a_build,
        every_deepspeed_release_has_one_cuda_rule,
        unverified_entries_say_why,
    )
}


def violations(matrix: Matrix) -> dict[str, list[str]]:
    """Every invariant that fails on ``matrix``, with its violations."""
    found = {name: invariant(matrix) for name, invariant in INVARIANTS.items()}
    return {name: problems for name, problems in found.items() if problems}
