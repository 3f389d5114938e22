"""The releases on a PyPI project page (PEP 691 JSON) and the matrix tables that record them
(``package`` / ``version`` entries sorted by package, then version): what every refresh that
adds entries for newer releases reads alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from cudalock.matrix.fetch import Fetcher
from cudalock.urls import redact

__all__ = [
    "PARALLEL_READS",
    "file_sha256",
    "file_version",
    "linux_x86_64_wheel",
    "newest_recorded",
    "position_of",
    "read_newer_releases",
]

#: Wheels read at once.
PARALLEL_READS = 8

#: What one release's wheel said (a refresh's own facts).
Facts = TypeVar("Facts")
#: The file entry of a release's wheel to read, of the page's ``files``; None: it has none.
WheelChooser = Callable[[Sequence[Mapping[str, Any]], Version], Mapping[str, Any] | None]
#: Read one release's wheel: its facts, or None and why not.
WheelReader = Callable[[str, Version, Mapping[str, Any]], tuple[Facts | None, str]]


def file_version(entry: Mapping[str, Any]) -> Version | None:
    """The version a page's file entry is of (a wheel or an sdist); None when it is yanked or
    its name is not one."""
    filename = str(entry.get("filename", ""))
    if entry.get("yanked"):
        return None
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        if filename.endswith((".tar.gz", ".zip")):
            return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return None


def file_sha256(entry: Mapping[str, Any]) -> str | None:
    """The sha256 a page's file entry gives (PEP 691 ``hashes``); None when it gives none."""
    hashes = entry.get("hashes")
    return str(hashes["sha256"]) if isinstance(hashes, Mapping) and hashes.get("sha256") else None


def linux_x86_64_wheel(
    files: Sequence[Mapping[str, Any]], version: Version
) -> Mapping[str, Any] | None:
    """The file entry of ``version``'s Linux x86_64 wheel (the lowest glibc, then the name), or
    None when it has none (an sdist only, or other platforms)."""
    found = []
    for entry in files:
        filename = str(entry.get("filename", ""))
        if not filename.endswith(".whl") or entry.get("yanked"):
            continue
        try:
            _name, wheel_version, _build, tags = parse_wheel_filename(filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        platforms = {tag.platform for tag in tags}
        if wheel_version != version or not any(
            p.startswith(("manylinux", "linux")) and p.endswith("x86_64") for p in platforms
        ):
            continue
        found.append((sorted(platforms), filename, entry))
    return min(found, key=lambda f: (f[0], f[1]))[2] if found else None


def newest_recorded(entries: Any) -> dict[str, Version]:
    """The newest version recorded of each package, in a table's ``package`` / ``version``
    entries (``[[build]]``, ``[[pairing]]``)."""
    return {name: max(versions) for name, versions in _recorded_versions(entries).items()}


def _recorded_versions(entries: Any) -> dict[str, set[Version]]:
    """Every version recorded of each package, in a table's ``package`` / ``version`` entries."""
    recorded: dict[str, set[Version]] = {}
    for entry in entries:
        try:
            name, version = (
                str(canonicalize_name(str(entry["package"]))),
                Version(str(entry["version"])),
            )
        except (KeyError, InvalidVersion):
            continue
        recorded.setdefault(name, set()).add(version)
    return recorded


def position_of(entries: Any, package: str, version: str) -> int:
    """Where an entry of ``package`` ``version`` goes in a table sorted by package, then
    version: before the first entry that sorts after it."""
    key = (package, Version(version))
    for index, entry in enumerate(entries):
        try:
            other = (str(canonicalize_name(str(entry["package"]))), Version(str(entry["version"])))
        except (KeyError, InvalidVersion):
            continue
        if other > key:
            return index
    return len(entries)


def read_newer_releases(
    entries: Any,
    fetcher: Fetcher,
    pypi_url: str,
    choose: WheelChooser,
    read: WheelReader[Facts],
    *,
    no_wheel: str,
    fill_gaps: bool = False,
) -> tuple[list[Facts], list[str]]:
    """For each package a table's ``entries`` record, the releases on its PyPI project page
    newer than the newest recorded (pre-releases left out) — with ``fill_gaps``, also those
    between the oldest and the newest recorded that have no entry — the wheel ``choose``
    picks of each read by ``read`` (several at once). The facts read, and "name version: why"
    for each release that gave none (``no_wheel`` where ``choose`` found no wheel) and each
    project the index lacks."""
    unread: list[str] = []
    wanted: list[tuple[str, Version, Mapping[str, Any]]] = []
    recorded = _recorded_versions(entries)
    for name, newest in sorted(newest_recorded(entries).items()):
        since = min(recorded[name]) if fill_gaps else newest
        page_url = f"{pypi_url.rstrip('/')}/{name}/"
        page = fetcher.json(page_url)
        if page is None:
            unread.append(f"{name}: {redact(page_url)} has no such project (HTTP 404)")
            continue
        files = [f for f in page.get("files", []) if isinstance(f, dict)]
        versions = {v for v in map(file_version, files) if v is not None}
        for version in sorted(
            v for v in versions if v > since and v not in recorded[name] and not v.is_prerelease
        ):
            wheel = choose(files, version)
            if wheel is None:
                unread.append(f"{name} {version}: {no_wheel}")
                continue
            wanted.append((name, version, wheel))
    with ThreadPoolExecutor(max_workers=PARALLEL_READS) as pool:
        answers = list(pool.map(lambda w: read(*w), wanted))
    facts: list[Facts] = []
    for (name, version, _wheel), (found, problem) in zip(wanted, answers, strict=True):
        if found is not None:
            facts.append(found)
        else:
            unread.append(f"{name} {version}: {problem}")
    return facts, unread
