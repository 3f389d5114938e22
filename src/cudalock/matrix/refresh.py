"""``cudalock matrix refresh``: update torch.toml from PyPI and the PyTorch index.

What can be read from those sources, and only that, is refreshed:

- PyPI's JSON simple API (PEP 691) for ``torch``: the releases, their date (first
  ``upload-time``), ``requires-python`` and the CPython versions per platform (wheel tags);
  PEP 658 metadata of the Linux wheels: which CUDA the PyPI build depends on (``pypi_default``).
- PyPI for ``torchvision`` / ``torchaudio``: the release whose metadata pins ``torch==X``.
- The PyTorch index (PEP 503 pages ``<base>/<variant>/torch/``): which variants exist for which
  release and platform.

Architecture lists, cuDNN and NCCL cannot be read there: a new build copies the arch list of
the same variant and platform from the nearest older release and marks it unverified, or leaves
it empty (``matrix check`` then says so). Nothing is removed. Comments and layout of the file are
kept (tomlkit); the change is printed as a unified diff.
"""

from __future__ import annotations

import datetime
import difflib
import email.parser
import html.parser
import re
import urllib.parse
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from cudalock.errors import EnvironmentFailure, InputError
from cudalock.fsutil import write_atomic
from cudalock.platforms import PLATFORMS, platform_of_wheel_tag
from cudalock.urls import DEFAULT_PYPI_INDEX, DEFAULT_PYTORCH_INDEX
from cudalock.versions import cuda_from_variant, python_key, variant_for_cuda

PEP691_JSON = "application/vnd.pypi.simple.v1+json"
_PLATFORM_ORDER = tuple(platform.name for platform in PLATFORMS)


# --------------------------------------------------------------------------------------------
# Reading wheel names (pure)


@dataclass(frozen=True)
class WheelName:
    project: str
    version: Version
    #: (platform key, CPython version such as "3.13" or "3.13t") pairs this file provides.
    targets: frozenset[tuple[str, str]]


def read_wheel_name(filename: str) -> WheelName | None:
    """Parse a wheel file name; None for sdists and names that are not wheels."""
    try:
        project, version, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    targets = set()
    for tag in tags:
        platform = platform_of_wheel_tag(tag.platform)
        match = re.fullmatch(r"cp(\d)(\d+)", tag.interpreter)
        if platform is None or match is None:
            continue
        python = f"{match.group(1)}.{match.group(2)}"
        if tag.abi.endswith("t"):
            python += "t"
        targets.add((platform, python))
    return WheelName(str(project), version, frozenset(targets))


# --------------------------------------------------------------------------------------------
# What the sources say (plain data)


@dataclass
class PypiRelease:
    version: str
    date: str | None = None
    requires_python: str | None = None
    python: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    #: platform → URL of the PEP 658 metadata of one wheel for that platform.
    metadata_url: dict[str, str] = field(default_factory=dict)


def pypi_releases(document: Mapping[str, Any], minimum: Version) -> dict[str, PypiRelease]:
    """Final releases ≥ ``minimum`` from a PEP 691 project page of torch."""
    releases: dict[str, PypiRelease] = {}
    requires: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for entry in document.get("files", []):
        if not isinstance(entry, Mapping) or entry.get("yanked"):
            continue
        wheel = read_wheel_name(str(entry.get("filename", "")))
        if wheel is None or wheel.version.is_prerelease or wheel.version.is_devrelease:
            continue
        if wheel.version < minimum or wheel.version.local:
            continue
        key = str(wheel.version)
        release = releases.setdefault(key, PypiRelease(key))
        uploaded = entry.get("upload-time")
        if isinstance(uploaded, str) and re.match(r"\d{4}-\d{2}-\d{2}", uploaded):
            day = uploaded[:10]
            release.date = day if release.date is None else min(release.date, day)
        if isinstance(entry.get("requires-python"), str):
            requires[key][entry["requires-python"]] += 1
        has_metadata = entry.get("core-metadata") or entry.get("dist-info-metadata")
        for platform, python in wheel.targets:
            release.python[platform].add(python)
            if has_metadata and isinstance(entry.get("url"), str):
                release.metadata_url.setdefault(platform, str(entry["url"]) + ".metadata")
    for key, counts in requires.items():
        releases[key].requires_python = max(counts, key=lambda text: counts[text])
    return releases


def cuda_variant_from_metadata(metadata: str, machine: str) -> str:
    """The variant a PyPI wheel is built for, from its Requires-Dist: ``cu130`` or ``cpu``.

    The CUDA runtime pin (``nvidia-cuda-runtime-cu12==12.4.127``, ``nvidia-cuda-runtime==13.0.96``
    or ``cuda-toolkit[...]==13.0.2``) whose marker applies on Linux ``machine`` names the CUDA.
    """
    message = email.parser.Parser().parsestr(metadata, headersonly=True)
    environment = {key: str(value) for key, value in default_environment().items()}
    environment.update(
        platform_system="Linux", sys_platform="linux", platform_machine=machine, os_name="posix"
    )
    for text in message.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if not re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?|cuda-toolkit", requirement.name):
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        pins = [s.version for s in requirement.specifier if s.operator == "=="]
        cuda = _major_minor(pins[0]) if pins else None
        if cuda:
            return variant_for_cuda(cuda)
    return "cpu"


def _major_minor(version: str) -> tuple[int, int] | None:
    """``12.4.127`` → ``(12, 4)``: the CUDA release a runtime pin or toolkit version names."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def torch_pin(metadata: str) -> str | None:
    """The exact torch version a torchvision/torchaudio wheel requires (``torch==2.1.0``)."""
    message = email.parser.Parser().parsestr(metadata, headersonly=True)
    for text in message.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.name != "torch" or requirement.marker is not None:
            continue
        pins = [s.version for s in requirement.specifier if s.operator == "=="]
        if len(pins) == 1 and "+" not in pins[0] and "*" not in pins[0]:
            return pins[0]
    return None


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href") if tag == "a" else None
        if href:
            path = urllib.parse.urlsplit(href).path
            self.files.append(urllib.parse.unquote(path.rsplit("/", 1)[-1]))


def index_platforms(page: str, variant: str) -> dict[str, set[str]]:
    """From a PEP 503 page of ``<base>/<variant>/torch/``: release → platforms with wheels."""
    parser = _Links()
    parser.feed(page)
    found: dict[str, set[str]] = defaultdict(set)
    for filename in parser.files:
        wheel = read_wheel_name(filename)
        if wheel is None or wheel.version.is_prerelease or wheel.version.is_devrelease:
            continue
        if wheel.version.local not in (variant, None):
            continue  # e.g. a cu121 page that also lists other labels
        for platform, _python in wheel.targets:
            found[wheel.version.public].add(platform)
    return found


# --------------------------------------------------------------------------------------------
# Network edge


class Fetcher:
    """GETs with timeouts and retries; 404 is an answer (None), anything else failing is exit 3."""

    def __init__(self, *, timeout: float = 30.0, retries: int = 3) -> None:
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        self.session = requests.Session()
        retry = Retry(
            total=retries,
            connect=retries,
            read=retries,
            backoff_factor=0.3,
            status_forcelist=(429, 500, 502, 503, 504),
            allowed_methods=("GET",),
        )
        adapter = HTTPAdapter(max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.timeout = timeout

    def get(self, url: str, accept: str) -> str | None:
        import requests

        try:
            response = self.session.get(
                url, headers={"Accept": accept}, timeout=(min(self.timeout, 10.0), self.timeout)
            )
        except requests.RequestException as err:
            raise EnvironmentFailure(f"cannot read {url}: {_reason(err)}") from None
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise EnvironmentFailure(f"cannot read {url}: HTTP {response.status_code}")
        return response.text

    def json(self, url: str) -> Mapping[str, Any] | None:
        import json

        text = self.get(url, PEP691_JSON)
        if text is None:
            return None
        try:
            document = json.loads(text)
        except ValueError:
            raise EnvironmentFailure(f"{url} did not answer PEP 691 JSON") from None
        if not isinstance(document, Mapping):
            raise EnvironmentFailure(f"{url} did not answer PEP 691 JSON")
        return document


def _reason(err: Exception) -> str:
    text = str(err)
    return text if len(text) < 200 else text[:200] + "…"


# --------------------------------------------------------------------------------------------
# Updating the documents (tomlkit)


@dataclass(frozen=True)
class RefreshResult:
    diff: str
    changes: tuple[str, ...]
    written: bool

    @property
    def summary(self) -> str:
        return f"{len(self.changes)} change(s): " + "; ".join(self.changes)


@dataclass
class Sources:
    """What the refresh read, gathered before anything is changed."""

    pypi_url: str
    pytorch_index: str
    today: str
    releases: dict[str, PypiRelease]
    #: torch version → platform ("linux-x86_64"/"linux-aarch64") → variant of the PyPI wheel.
    defaults: dict[str, dict[str, str]]
    #: torch version → variant → platforms on the PyTorch index.
    index: dict[str, dict[str, set[str]]]
    #: torch version → {"torchvision": "0.16.0", "torchaudio": ...}.
    companions: dict[str, dict[str, str]]


def refresh_matrix(
    directory: Path,
    *,
    pypi_url: str = DEFAULT_PYPI_INDEX,
    pytorch_index: str = DEFAULT_PYTORCH_INDEX,
    write: bool = True,
    fetcher: Fetcher | None = None,
    today: datetime.date | None = None,
) -> RefreshResult:
    """Read the sources, update torch.toml (and matrix_version) in ``directory``; the diff."""
    import tomlkit

    torch_path, head_path = directory / "torch.toml", directory / "matrix.toml"
    try:
        old_text, old_head = torch_path.read_text(), head_path.read_text()
    except OSError as err:
        raise InputError(f"cannot read the matrix in {str(directory)!r}: {err.strerror}") from None
    try:
        doc = tomlkit.parse(old_text)
        head = tomlkit.parse(old_head)
    except tomlkit.exceptions.ParseError as err:
        raise InputError(f"matrix file in {str(directory)!r} is not valid TOML: {err}") from None
    cuda_doc = _read_cuda_versions(directory / "cuda.toml")

    sources = gather(
        doc,
        cuda_doc,
        fetcher or Fetcher(),
        pypi_url.rstrip("/"),
        pytorch_index.rstrip("/"),
        (today or datetime.date.today()).isoformat(),
    )
    changes = apply(doc, sources)
    if changes:
        head["matrix_version"] = sources.today
    new_text, new_head = _space_headers(tomlkit.dumps(doc)), tomlkit.dumps(head)
    diff = (
        "".join(
            list(
                difflib.unified_diff(
                    old_head.splitlines(True),
                    new_head.splitlines(True),
                    "a/matrix.toml",
                    "b/matrix.toml",
                )
            )
            + list(
                difflib.unified_diff(
                    old_text.splitlines(True),
                    new_text.splitlines(True),
                    "a/torch.toml",
                    "b/torch.toml",
                )
            )
        )
        if changes
        else ""
    )
    if write and changes:
        write_atomic(torch_path, new_text)
        write_atomic(head_path, new_head)
    return RefreshResult(diff=diff, changes=tuple(changes), written=write and bool(changes))


def _space_headers(text: str) -> str:
    """A blank line before every table header that lacks one (tables added by tomlkit)."""
    lines = text.splitlines(True)
    out: list[str] = []
    for line in lines:
        if line.startswith("[") and out and out[-1].strip():
            out.append("\n")
        out.append(line)
    return "".join(out)


def _read_cuda_versions(path: Path) -> list[tuple[int, int]]:
    import tomlkit

    try:
        data = tomlkit.parse(path.read_text()).unwrap()
    except (OSError, tomlkit.exceptions.ParseError):
        return []
    found = set()
    for toolkit in data.get("toolkit", []):
        cuda = _major_minor(str(toolkit.get("version", "")))
        if cuda:
            found.add(cuda)
    return sorted(found)


def _releases(doc: Any) -> list[Any]:
    return list(doc.get("release", []))


def gather(
    doc: Any,
    cuda_versions: list[tuple[int, int]],
    fetcher: Fetcher,
    pypi_url: str,
    pytorch_index: str,
    today: str,
) -> Sources:
    """Everything the refresh needs from the network, read before the documents change."""
    known = _releases(doc)
    minimum = min((Version(str(r["version"])) for r in known), default=Version("0"))
    page = fetcher.json(f"{pypi_url}/torch/")
    if page is None:
        raise EnvironmentFailure(
            f"{pypi_url}/torch/ does not exist (is --pypi-url a PEP 691 simple index?)"
        )
    releases = pypi_releases(page, minimum)
    known_versions = {str(r["version"]) for r in known}
    new_versions = sorted((v for v in releases if v not in known_versions), key=Version)

    defaults: dict[str, dict[str, str]] = {}
    for version in new_versions:
        found = {}
        for platform, machine in (("linux-x86_64", "x86_64"), ("linux-aarch64", "aarch64")):
            url = releases[version].metadata_url.get(platform)
            metadata = fetcher.get(url, "*/*") if url else None
            if metadata is not None:
                found[platform] = cuda_variant_from_metadata(metadata, machine)
        defaults[version] = found

    companions = _companions(fetcher, pypi_url, new_versions, doc) if new_versions else {}

    index: dict[str, dict[str, set[str]]] = defaultdict(dict)
    for variant in _variants_to_read(known, cuda_versions):
        text = fetcher.get(f"{pytorch_index}/{variant}/torch/", "text/html")
        if text is None:
            continue
        for version, platforms in index_platforms(text, variant).items():
            if Version(version) >= minimum:
                index[version][variant] = platforms
    return Sources(pypi_url, pytorch_index, today, releases, defaults, dict(index), companions)


def _variants_to_read(known: Iterable[Any], cuda_versions: list[tuple[int, int]]) -> list[str]:
    """The variants the matrix knows, plus cuXY of CUDA toolkits newer than the newest known."""
    variants = {str(b["variant"]) for r in known for b in r.get("build", [])}
    cudas = [c for c in (cuda_from_variant(v) for v in variants) if c is not None]
    newest = max(cudas, default=(0, 0))
    variants |= {variant_for_cuda(c) for c in cuda_versions if c > newest}
    return sorted(variants)


def _companions(
    fetcher: Fetcher, pypi_url: str, new_versions: list[str], doc: Any
) -> dict[str, dict[str, str]]:
    """torchvision/torchaudio releases pinning exactly one of the new torch versions."""
    wanted = set(new_versions)
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for project in ("torchvision", "torchaudio"):
        already = {str(r.get(project)) for r in _releases(doc) if r.get(project)}
        page = fetcher.json(f"{pypi_url}/{project}/")
        if page is None:
            continue
        first_file: dict[str, str] = {}
        for entry in page.get("files", []):
            wheel = read_wheel_name(str(entry.get("filename", "")))
            has_metadata = entry.get("core-metadata") or entry.get("dist-info-metadata")
            if (
                wheel is None
                or wheel.version.local
                or wheel.version.is_prerelease
                or not has_metadata
                or not isinstance(entry.get("url"), str)
            ):
                continue
            first_file.setdefault(str(wheel.version), str(entry["url"]) + ".metadata")
        for version in sorted(first_file, key=Version):
            if version in already:
                continue
            metadata = fetcher.get(first_file[version], "*/*")
            pinned = torch_pin(metadata) if metadata else None
            if pinned in wanted:
                found[pinned][project] = version  # the newest pinning release wins
    return dict(found)


def apply(doc: Any, sources: Sources) -> list[str]:
    """Update the torch.toml document in place; return one line per change."""
    import tomlkit

    changes: list[str] = []
    releases = doc.get("release")
    if releases is None:
        releases = tomlkit.aot()
        doc["release"] = releases
    by_version = {str(r["version"]): r for r in releases}
    all_versions = set(sources.releases) | set(sources.index)
    for version in sorted(all_versions, key=Version):
        release = by_version.get(version)
        if release is None:
            facts = sources.releases.get(version)
            if facts is None:
                continue  # on the index but not on PyPI: not a torch release of its own
            release = _new_release(facts, sources, releases)
            position = sum(1 for r in releases if Version(str(r["version"])) < Version(version))
            releases.insert(position, release)
            by_version[version] = release
            changes.append(f"torch {version}: new release")
        else:
            changes += _update_release(release, sources.releases.get(version), sources)
        changes += _add_index_builds(release, version, sources, releases)
    return changes


def _source_note(url: str, what: str, sources: Sources) -> str:
    return f"{url} ({what}; read by cudalock matrix refresh on {sources.today})"


def _new_release(facts: PypiRelease, sources: Sources, releases: Any) -> Any:
    import tomlkit

    release = tomlkit.table()
    release["version"] = facts.version
    release["date"] = facts.date or "unknown"
    release["requires_python"] = facts.requires_python or ""
    companions = sources.companions.get(facts.version, {})
    for project in ("torchvision", "torchaudio"):
        if project in companions:
            release[project] = companions[project]
    source = [
        _source_note(
            f"{sources.pypi_url}/torch/",
            "PEP 691 JSON: upload-time, requires-python, wheel tags",
            sources,
        )
    ]
    defaults = sources.defaults.get(facts.version, {})
    if defaults:
        source.append(
            _source_note(
                f"{sources.pypi_url}/torch/",
                "PEP 658 metadata of the Linux wheels: Requires-Dist CUDA runtime pin",
                sources,
            )
        )
    for project, version in companions.items():
        source.append(
            _source_note(
                f"{sources.pypi_url}/{project}/",
                f"{project} {version} Requires-Dist torch=={facts.version}",
                sources,
            )
        )
    release["source"] = _multiline(source)
    release["status"] = "verified"
    missing = [
        name
        for name, value in (("date", facts.date), ("requires_python", facts.requires_python))
        if not value
    ]
    if missing:
        release["unverified"] = missing
    if "torchaudio" not in companions:
        release["note"] = (
            "refresh: no torchaudio release pins this torch version; check whether one exists"
        )
    python = tomlkit.table()
    for platform in _PLATFORM_ORDER:
        if platform in facts.python:
            python[platform] = sorted(facts.python[platform], key=python_key)
    release["python"] = python
    default = tomlkit.table()
    for platform in _PLATFORM_ORDER:
        if platform not in facts.python:
            continue
        default[platform] = defaults.get(platform, "cpu") if platform.startswith("linux") else "cpu"
    release["pypi_default"] = default
    builds = tomlkit.aot()
    # The PyPI wheels themselves: the CPU build where PyPI serves CPU, the CUDA default on Linux.
    cpu_platforms = [p for p in _PLATFORM_ORDER if default.get(p) == "cpu"]
    if cpu_platforms:
        builds.append(_build_table("cpu", cpu_platforms, None, source[:1], sources))
    for platform in ("linux-x86_64", "linux-aarch64"):
        variant = default.get(platform)
        if variant and variant != "cpu":
            archs = _nearest_archs(releases, facts.version, variant, platform)
            builds.append(_build_table(variant, [platform], archs, source[:2], sources))
    release["build"] = builds
    return release


def _update_release(release: Any, facts: PypiRelease | None, sources: Sources) -> list[str]:
    if facts is None:
        return []
    version = str(release["version"])
    changes = []
    python = release.get("python")
    for platform in _PLATFORM_ORDER:
        seen = facts.python.get(platform)
        if not seen or python is None:
            continue
        listed = [str(v) for v in python.get(platform, [])]
        added = sorted(set(seen) - set(listed), key=python_key)
        if added:
            python[platform] = sorted(set(listed) | set(seen), key=python_key)
            changes.append(f"torch {version}: python.{platform} += {', '.join(added)}")
    if facts.requires_python and str(release.get("requires_python")) != facts.requires_python:
        changes.append(
            f"torch {version}: requires_python {release.get('requires_python')} -> "
            f"{facts.requires_python}"
        )
        release["requires_python"] = facts.requires_python
    if facts.date and str(release.get("date")) != facts.date:
        changes.append(f"torch {version}: date {release.get('date')} -> {facts.date}")
        release["date"] = facts.date
    return changes


def _add_index_builds(release: Any, version: str, sources: Sources, releases: Any) -> list[str]:
    """A build entry for every (variant, platform) the index has and the release lacks."""
    changes = []
    on_index = sources.index.get(version, {})
    python = release.get("python", {})
    for variant in sorted(on_index):
        covered = {
            str(p)
            for b in release.get("build", [])
            if str(b["variant"]) == variant
            for p in b.get("platforms", [])
        }
        for platform in _PLATFORM_ORDER:
            if platform not in on_index[variant] or platform in covered:
                continue
            if platform not in python:
                continue  # no PyPI wheel tags for this platform: nothing to say about Python
            source = [
                _source_note(f"{sources.pytorch_index}/{variant}/torch/", "PEP 503 page", sources)
            ]
            table = _build_table(
                variant,
                [platform],
                _nearest_archs(releases, version, variant, platform),
                source,
                sources,
            )
            if "build" not in release:
                import tomlkit

                release["build"] = tomlkit.aot()
            release["build"].append(table)
            changes.append(f"torch {version}: new build {variant} on {platform}")
    return changes


def _nearest_archs(
    releases: Any, version: str, variant: str, platform: str
) -> tuple[str, list[str], list[str]] | None:
    """(torch version, sass, ptx) of the same variant/platform in the nearest older release."""
    older = sorted(
        (r for r in releases if Version(str(r["version"])) < Version(version)),
        key=lambda r: Version(str(r["version"])),
        reverse=True,
    )
    for release in older:
        for build in release.get("build", []):
            if str(build["variant"]) == variant and platform in [
                str(p) for p in build.get("platforms", [])
            ]:
                return (
                    str(release["version"]),
                    [str(s) for s in build.get("sass", [])],
                    [str(s) for s in build.get("ptx", [])],
                )
    return None


def _build_table(
    variant: str,
    platforms: list[str],
    archs: tuple[str, list[str], list[str]] | None,
    source: list[str],
    sources: Sources,
) -> Any:
    import tomlkit

    table = tomlkit.table()
    table["variant"] = variant
    cuda = cuda_from_variant(variant)
    if cuda is not None:
        table["cuda"] = f"{cuda[0]}.{cuda[1]}"
    sass, ptx = (archs[1], archs[2]) if archs else ([], [])
    table["sass"] = sass
    table["ptx"] = ptx
    table["platforms"] = platforms
    table["source"] = _multiline(source)
    table["status"] = "verified"
    if cuda is not None:
        table["unverified"] = ["sass", "ptx"]
        table["note"] = (
            f"refresh: arch lists copied from torch {archs[0]} {variant}; verify them"
            if archs
            else "refresh: arch lists unknown; fill in sass/ptx from the build scripts"
        )
    return table


def _multiline(items: list[str]) -> Any:
    import tomlkit

    array = tomlkit.array()
    array.extend(items)
    return array.multiline(True)
