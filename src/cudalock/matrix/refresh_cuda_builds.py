"""``matrix refresh`` for ``cuda_builds.toml``: the CUDA of the PyPI wheels of the packages it
lists (vllm, xformers, ...), read from the wheels themselves.

For every package the table lists, the PyPI project page (PEP 691 JSON) names the releases newer
than the oldest one recorded that have no entry: the newer ones, and those a refresh passed over
between recorded ones (a release with no entry is one whose CUDA the resolver cannot judge, so it
would be chosen unchecked). Of each, the Linux x86_64 wheel is read by HTTP range requests
(:mod:`cudalock.wheelzip`: the zip's central directory and the members asked for, never the
300 MiB wheel): its METADATA, then what it says it was built for — ``cpp_lib.json``, one
extension per CUDA, the ``libcudart.so.N`` an extension needs, a ``nvidia-*-cuNN`` requirement —
with the readings the lock makes (:mod:`cudalock.wheelbuild`). The torch it was built against
is cpp_lib.json's, else the ``torch==X`` its Requires-Dist pins.

Each entry records version, cuda, torch, read_from and its source: the wheel's URL and sha256
and what in it says so. A release that cannot be read (no Linux x86_64 wheel, a wheel that says
nothing, a failed read) gets no entry — a CUDA is never guessed — and is said in
:attr:`CudaBuildsRefresh.unread`.
"""

from __future__ import annotations

import email.parser
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (
    canonicalize_name,
)
from packaging.version import Version

from cudalock.errors import EnvironmentFailure
from cudalock.matrix.fetch import Fetcher
from cudalock.matrix.releases import (
    file_sha256,
    linux_x86_64_wheel,
    position_of,
    read_newer_releases,
)
from cudalock.urls import redact, strip_credentials
from cudalock.wheelbuild import BuiltFor, read_wheel_build
from cudalock.wheelzip import open_wheel

__all__ = [
    "CudaBuildFacts",
    "CudaBuildsRefresh",
    "apply_cuda_builds",
    "gather_cuda_builds",
    "torch_pinned",
]


@dataclass(frozen=True)
class CudaBuildFacts:
    """What one release's wheel said."""

    package: str
    version: str
    built: BuiltFor
    torch: str | None
    #: The wheel read: its URL (no credentials) and sha256.
    url: str
    sha256: str | None


@dataclass
class CudaBuildsRefresh:
    facts: list[CudaBuildFacts] = field(default_factory=list)
    #: "xformers 0.0.35: ..." for each newer release that got no entry, and why.
    unread: list[str] = field(default_factory=list)


def torch_pinned(requires_dist: Sequence[str]) -> str | None:
    """The ``torch==X`` a wheel's Requires-Dist pins outside its extras ("2.7.1"); None."""
    for line in requires_dist:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) != "torch":
            continue
        if requirement.marker is not None and "extra" in str(requirement.marker):
            continue
        pins = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
        if pins:
            return pins[0]
    return None


def gather_cuda_builds(doc: Any, fetcher: Fetcher, pypi_url: str) -> CudaBuildsRefresh:
    """Read the wheels of the listed packages' releases since the oldest recorded that have no
    entry."""
    indexes = (pypi_url,)
    facts, unread = read_newer_releases(
        doc.get("build", []),
        fetcher,
        pypi_url,
        linux_x86_64_wheel,
        lambda name, version, wheel: _read(name, version, wheel, indexes, fetcher),
        no_wheel="no Linux x86_64 wheel on the index",
        fill_gaps=True,
    )
    return CudaBuildsRefresh(facts, unread)


def _read(
    name: str, version: Version, wheel: Mapping[str, Any], indexes: Sequence[str], fetcher: Fetcher
) -> tuple[CudaBuildFacts | None, str]:
    url = str(wheel.get("url", ""))
    sha256 = file_sha256(wheel)
    try:
        requires_dist = _requires_dist(url, indexes, fetcher)
        built = read_wheel_build(
            name,
            str(version),
            requires_dist,
            url,
            indexes=indexes,
            timeout_s=fetcher.timeout,
            retries=fetcher.retries,
        )
    except FileNotFoundError:
        return None, f"its wheel {redact(url)} is not on the index (HTTP 404)"
    except EnvironmentFailure as err:
        return None, f"its wheel could not be read: {err.message}"
    if built is None:
        return None, (
            f"its wheel {wheel.get('filename')} says no CUDA (no cpp_lib.json, no extension "
            "that needs a CUDA library, no nvidia-*-cuNN requirement)"
        )
    facts = CudaBuildFacts(
        package=name,
        version=str(version),
        built=built,
        torch=built.torch or torch_pinned(requires_dist),
        url=strip_credentials(url),
        sha256=sha256,
    )
    return facts, ""


def _requires_dist(url: str, indexes: Sequence[str], fetcher: Fetcher) -> list[str]:
    """The wheel's Requires-Dist, from its METADATA member (read by range requests)."""
    archive, _remote = open_wheel(
        url, indexes=indexes, timeout_s=fetcher.timeout, retries=fetcher.retries
    )
    with archive:
        try:
            name = next(
                n
                for n in archive.namelist()
                if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
            )
            text = archive.read(name).decode("utf-8", "replace")
        except (StopIteration, KeyError, zipfile.BadZipFile, OSError):
            raise EnvironmentFailure(f"{redact(url)} is not a wheel with core metadata") from None
    message = email.parser.HeaderParser().parsestr(text)
    return [str(r) for r in message.get_all("Requires-Dist") or ()]


def apply_cuda_builds(doc: Any, gathered: CudaBuildsRefresh) -> list[str]:
    """Add an entry per release read, in the table's order (package, then version)."""
    import tomlkit

    changes = []
    builds = doc["build"]
    for facts in sorted(gathered.facts, key=lambda f: (f.package, Version(f.version))):
        table = tomlkit.table()
        table["package"] = facts.package
        table["version"] = facts.version
        table["cuda"] = facts.built.cuda
        if facts.torch:
            table["torch"] = facts.torch
        table["read_from"] = facts.built.evidence
        digest = f" (sha256:{facts.sha256})" if facts.sha256 else ""
        said = facts.built.evidence
        if facts.torch and not facts.built.torch:
            said += f"; METADATA Requires-Dist torch=={facts.torch}"
        table["source"] = f"{facts.url}{digest}: {said}"
        table["status"] = "verified"
        builds.insert(position_of(builds, facts.package, facts.version), table)
        torch = f" against torch {facts.torch}" if facts.torch else ""
        changes.append(
            f"cuda_builds: {facts.package} {facts.version} is built for CUDA "
            f"{facts.built.cuda}{torch} ({facts.built.evidence})"
        )
    return changes
