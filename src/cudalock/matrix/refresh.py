"""``cudalock matrix refresh``: update the matrix from PyPI and the PyTorch index.

What can be read from those sources, and only that, is refreshed:

- PyPI's JSON simple API (PEP 691) for ``torch``: the releases, their date (first
  ``upload-time``), ``requires-python`` and the CPython versions per platform (wheel tags);
  PEP 658 metadata of the Linux wheels: which CUDA the PyPI build depends on (``pypi_default``).
- PyPI for ``torchvision`` / ``torchaudio``: the release whose metadata pins ``torch==X``, for a
  new torch release and for one whose pairing is missing or unverified.
- The PyTorch index (PEP 503 pages ``<base>/<variant>/torch/``): which variants exist for which
  release and platform.
- PyPI for ``deepspeed`` (:mod:`cudalock.matrix.refresh_deepspeed`): new releases, their torch
  requirement and the CUDA allow-list of their op builder.
- PyPI for the packages ``cuda_builds.toml`` lists (:mod:`cudalock.matrix.refresh_cuda_builds`):
  the CUDA and torch their newer releases' wheels were built for, read from the wheels.

What only a person can check is written as unverified with a note, never as a fact: the arch
lists of a new build are copied from the same variant and platform of the nearest older release
and marked unverified (or left empty, which ``matrix check`` reports); a CUDA version the index
has and ``cuda.toml`` lacks gets a toolkit entry without a driver minimum, marked unverified.
Nothing is removed. Comments and layout are kept (tomlkit); the change is printed as a unified
diff per file.
"""

from __future__ import annotations

import datetime
import difflib
import email.parser
import html.parser
import re
import urllib.parse
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from cudalock.defaults import DEFAULT_PYPI_INDEX, DEFAULT_PYTORCH_INDEX
from cudalock.errors import EnvironmentFailure, InputError
from cudalock.fsutil import write_group
from cudalock.matrix.fetch import Fetcher
from cudalock.platforms import PLATFORMS, platform_of_wheel_tag
from cudalock.urls import strip_credentials, validate_index_url
from cudalock.versions import cuda_from_variant, python_key, variant_for_cuda

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


def unmarked_torch_requirements(metadata: str) -> Iterator[Requirement]:
    """Each Requires-Dist of a core-metadata text that names torch with no marker."""
    message = email.parser.Parser().parsestr(metadata, headersonly=True)
    for text in message.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == "torch" and requirement.marker is None:
            yield requirement


def torch_pin(metadata: str) -> str | None:
    """The exact torch version a torchvision/torchaudio wheel requires (``torch==2.1.0``)."""
    for requirement in unmarked_torch_requirements(metadata):
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
# Updating the documents (tomlkit)


@dataclass(frozen=True)
class RefreshResult:
    diff: str
    changes: tuple[str, ...]
    written: bool
    #: What was not read, and why ("xformers 0.0.35: no Linux x86_64 wheel on the index").
    unread: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        return f"{len(self.changes)} change(s): " + "; ".join(self.changes)


@dataclass
class Sources:
    """What the refresh read, gathered before anything is changed."""

    #: Where to read (credentials included, if given) ...
    pypi_url: str
    pytorch_index: str
    today: str
    releases: dict[str, PypiRelease]
    #: torch version → platform ("linux-x86_64"/"linux-aarch64") → variant of the PyPI wheel.
    defaults: dict[str, dict[str, str]]
    #: torch version → variant → platforms on the PyTorch index.
    index: dict[str, dict[str, set[str]]]
    #: torch version → {"torchvision": "0.16.0", "torchaudio": ...}: releases pinning it exactly.
    companions: dict[str, dict[str, str]]

    # ... and what the matrix records: the same URLs without credentials.
    @property
    def pypi_source(self) -> str:
        return strip_credentials(self.pypi_url)

    @property
    def index_source(self) -> str:
        return strip_credentials(self.pytorch_index)


#: The files a refresh may change, in the order their diffs are shown.
_FILES = ("matrix.toml", "cuda.toml", "torch.toml", "deepspeed.toml")
#: Refreshed where the matrix has it (the loader treats it as optional).
_OPTIONAL_FILES = ("cuda_builds.toml", "torch_pairings.toml")


def refresh_matrix(
    directory: Path,
    *,
    pypi_url: str = DEFAULT_PYPI_INDEX,
    pytorch_index: str = DEFAULT_PYTORCH_INDEX,
    allow_insecure: bool = False,
    write: bool = True,
    fetcher: Fetcher | None = None,
    today: datetime.date | None = None,
) -> RefreshResult:
    """Read the sources, update the matrix in ``directory`` (and its matrix_version); the diff.

    The index URLs follow the rule of every other index cudalock reads (https, or loopback, or
    ``allow_insecure``); credentials in them are used but never written into the matrix.
    """
    import tomlkit

    from cudalock.matrix.refresh_cuda_builds import apply_cuda_builds, gather_cuda_builds
    from cudalock.matrix.refresh_deepspeed import apply_deepspeed, gather_deepspeed
    from cudalock.matrix.refresh_pairings import apply_pairings, gather_pairings

    pypi_url = validate_index_url(pypi_url, flag="--pypi-url", allow_insecure=allow_insecure)
    pytorch_index = validate_index_url(
        pytorch_index, flag="--pytorch-index", allow_insecure=allow_insecure
    )
    old: dict[str, str] = {}
    docs: dict[str, Any] = {}
    files = (*_FILES, *(n for n in _OPTIONAL_FILES if (directory / n).exists()))
    for name in files:
        try:
            old[name] = (directory / name).read_text()
        except OSError as err:
            raise InputError(
                f"cannot read the matrix in {str(directory)!r}: {name}: {err.strerror}"
            ) from None
        try:
            docs[name] = tomlkit.parse(old[name])
        except tomlkit.exceptions.ParseError as err:
            raise InputError(f"{name} in {str(directory)!r} is not valid TOML: {err}") from None
    fetcher = fetcher or Fetcher()
    day = (today or datetime.date.today()).isoformat()

    sources = gather(
        docs["torch.toml"], _cuda_versions(docs["cuda.toml"]), fetcher, pypi_url, pytorch_index, day
    )
    deepspeed = gather_deepspeed(docs["deepspeed.toml"], fetcher, pypi_url)
    builds = (
        gather_cuda_builds(docs["cuda_builds.toml"], fetcher, pypi_url)
        if ("cuda_builds.toml" in docs)
        else None
    )
    pairings = (
        gather_pairings(docs["torch_pairings.toml"], fetcher, pypi_url)
        if ("torch_pairings.toml" in docs)
        else None
    )
    changes = apply(docs["torch.toml"], sources)
    changes += add_toolkits(docs["cuda.toml"], docs["torch.toml"], sources)
    changes += apply_deepspeed(docs["deepspeed.toml"], deepspeed, day)
    if builds is not None:
        changes += apply_cuda_builds(docs["cuda_builds.toml"], builds)
    if pairings is not None:
        changes += apply_pairings(docs["torch_pairings.toml"], pairings)
    if changes:
        docs["matrix.toml"]["matrix_version"] = day
    new = {name: _space_headers(tomlkit.dumps(docs[name])) for name in files}
    new["matrix.toml"] = tomlkit.dumps(docs["matrix.toml"])
    changed = [name for name in files if changes and new[name] != old[name]]
    diff = "".join(
        line
        for name in changed
        for line in difflib.unified_diff(
            old[name].splitlines(True), new[name].splitlines(True), f"a/{name}", f"b/{name}"
        )
    )
    if changed:
        _check_loads(directory, {name: new[name] for name in changed})
    if write and changed:
        write_group({directory / name: new[name] for name in changed}, force=True)
    return RefreshResult(
        diff=diff,
        changes=tuple(changes),
        written=write and bool(changed),
        unread=(*(builds.unread if builds else ()), *(pairings.unread if pairings else ())),
    )


def _check_loads(directory: Path, changed: Mapping[str, str]) -> None:
    """The refreshed matrix, loaded as every command would load it, before it replaces the
    old one: values from an index that the loader's grammar refuses (after which every command
    would exit 2) stop the refresh with nothing written."""
    import shutil
    import tempfile

    from cudalock.matrix.load import load_matrix

    with tempfile.TemporaryDirectory(prefix="cudalock-refresh-") as scratch:
        trial = Path(scratch) / "matrix"
        shutil.copytree(directory, trial, symlinks=True)
        for name, text in changed.items():
            (trial / name).write_text(text, encoding="utf-8")
        try:
            load_matrix(trial)
        except InputError as err:
            raise EnvironmentFailure(
                "the index answered values the matrix loader refuses, so nothing was written: "
                + err.message.replace(str(trial), str(directory))
            ) from None


def _space_headers(text: str) -> str:
    """A blank line before every table header that lacks one (tables added by tomlkit)."""
    lines = text.splitlines(True)
    out: list[str] = []
    for line in lines:
        if line.startswith("[") and out and out[-1].strip():
            out.append("\n")
        out.append(line)
    return "".join(out)


def _cuda_versions(cuda_doc: Any) -> list[tuple[int, int]]:
    found = set()
    for toolkit in cuda_doc.get("toolkit", []):
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

    companions = _companions(fetcher, pypi_url, new_versions, doc)

    index: dict[str, dict[str, set[str]]] = defaultdict(dict)
    # A CUDA version first seen as a new release's PyPI build is read on the index too.
    first_seen = {v for found in defaults.values() for v in found.values() if v != "cpu"}
    for variant in sorted(set(_variants_to_read(known, cuda_versions)) | first_seen):
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
    """torchvision/torchaudio releases pinning exactly a torch version that needs its pair:
    a new release, or one whose pair is missing or unverified."""
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for project in ("torchvision", "torchaudio"):
        known = _releases(doc)
        settled = {str(r[project]) for r in known if r.get(project) and _verified(r, project)}
        wanted = set(new_versions) | {
            str(r["version"]) for r in known if not r.get(project) or not _verified(r, project)
        }
        if not wanted:
            continue
        page = fetcher.json(f"{pypi_url}/{project}/")
        if page is None:
            continue
        # Releases older than every pair the matrix holds cannot pair with a torch it lacks.
        floor = min((Version(v) for v in settled), default=Version("0"))
        first_file: dict[str, str] = {}
        for entry in page.get("files", []):
            wheel = read_wheel_name(str(entry.get("filename", "")))
            has_metadata = entry.get("core-metadata") or entry.get("dist-info-metadata")
            if (
                wheel is None
                or wheel.version.local
                or wheel.version.is_prerelease
                or wheel.version < floor
                or not has_metadata
                or not isinstance(entry.get("url"), str)
            ):
                continue
            first_file.setdefault(str(wheel.version), str(entry["url"]) + ".metadata")
        for version in sorted(first_file, key=Version):
            if version in settled:
                continue
            metadata = fetcher.get(first_file[version], "*/*")
            pinned = torch_pin(metadata) if metadata else None
            if pinned in wanted:
                found[pinned][project] = version  # the newest pinning release wins
    return dict(found)


def _verified(release: Any, name: str) -> bool:
    """Whether a release's ``name`` field is verified (its status, and not listed unverified)."""
    return str(release.get("status")) == "verified" and name not in [
        str(f) for f in release.get("unverified", [])
    ]


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
            changes += _update_companions(release, sources)
        changes += _add_index_builds(release, version, sources, releases)
    for version in sorted(set(sources.companions) - all_versions, key=Version):
        if version in by_version:
            changes += _update_companions(by_version[version], sources)
    return changes


def _update_companions(release: Any, sources: Sources) -> list[str]:
    """Set or confirm a release's torchvision/torchaudio from a release pinning it exactly."""
    version = str(release["version"])
    changes = []
    for project, paired in sources.companions.get(version, {}).items():
        listed = release.get(project)
        pending = project in [str(f) for f in release.get("unverified", [])]
        if listed is not None and str(listed) == paired and not pending:
            continue  # already read (a person's "verified" status is theirs to give)
        if listed is None:
            changes.append(f"torch {version}: {project} {paired}")
        elif str(listed) != paired:
            changes.append(f"torch {version}: {project} {listed} -> {paired}")
        else:
            changes.append(f"torch {version}: {project} {paired} confirmed")
        release[project] = paired
        source = _source_note(
            f"{sources.pypi_source}/{project}/",
            f"{project} {paired} Requires-Dist torch=={version}",
            sources,
        )
        existing = release.get("source")
        if isinstance(existing, str):
            release["source"] = _multiline([existing, source])
        elif existing is not None:
            existing.append(source)
        unverified = [str(f) for f in release.get("unverified", []) if str(f) != project]
        if "unverified" in release:
            if unverified:
                release["unverified"] = unverified
            else:
                del release["unverified"]
    return changes


def add_toolkits(cuda_doc: Any, torch_doc: Any, sources: Sources) -> list[str]:
    """A ``[[toolkit]]`` for each CUDA version a build names and cuda.toml lacks.

    Its driver minimum is not machine-readable (NVIDIA publishes it in a table of the release
    notes): the entry says the version exists, carries no driver, and is marked unverified, so
    the resolver cannot choose its builds until a person fills the driver in.
    """
    import tomlkit

    known = set(_cuda_versions(cuda_doc))
    wanted: dict[tuple[int, int], set[str]] = defaultdict(set)
    for release in _releases(torch_doc):
        for build in release.get("build", []):
            cuda = cuda_from_variant(str(build["variant"]))
            if cuda is not None and cuda not in known:
                wanted[cuda].add(str(build["variant"]))
    toolkits = cuda_doc.get("toolkit")
    if toolkits is None:
        return []
    changes = []
    for cuda in sorted(wanted):
        version = f"{cuda[0]}.{cuda[1]}"
        table = tomlkit.table()
        table["version"] = version
        table["label"] = f"CUDA {version}"
        table["source"] = _multiline(
            [
                _source_note(f"{sources.index_source}/{variant}/torch/", "PEP 503 page", sources)
                for variant in sorted(wanted[cuda])
            ]
        )
        table["status"] = "unverified"
        table["note"] = (
            f"refresh: builds for CUDA {version} appeared on the PyTorch index; its driver "
            "minimums are not machine-readable: fill in driver_linux / driver_windows from "
            "Table 3 of NVIDIA's release notes and verify this entry"
        )
        position = sum(1 for tk in toolkits if _version_key(str(tk["version"])) < (*cuda, 0))
        toolkits.insert(position, table)
        changes.append(f"CUDA {version}: new toolkit, driver minimum unknown")
    return changes


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


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
            f"{sources.pypi_source}/torch/",
            "PEP 691 JSON: upload-time, requires-python, wheel tags",
            sources,
        )
    ]
    defaults = sources.defaults.get(facts.version, {})
    if defaults:
        source.append(
            _source_note(
                f"{sources.pypi_source}/torch/",
                "PEP 658 metadata of the Linux wheels: Requires-Dist CUDA runtime pin",
                sources,
            )
        )
    for project, version in companions.items():
        source.append(
            _source_note(
                f"{sources.pypi_source}/{project}/",
                f"{project} {version} Requires-Dist torch=={facts.version}",
                sources,
            )
        )
    release["source"] = _multiline(source)
    # Read from an index, not checked by a person: a new release stays unverified until it is.
    release["status"] = "unverified"
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
                _source_note(f"{sources.index_source}/{variant}/torch/", "PEP 503 page", sources)
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


__all__ = [
    "Fetcher",
    "RefreshResult",
    "add_toolkits",
    "cuda_variant_from_metadata",
    "index_platforms",
    "read_wheel_name",
    "refresh_matrix",
    "torch_pin",
]
