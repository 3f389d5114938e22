"""sdists whose build reads the installed torch, found in the closure and built against the
locked torch: the generic case of flash-attn and DeepSpeed.

An sdist whose ``setup.py`` imports torch (or reads the installed torch's version, as axolotl
0.9.2's does to pin ``torch==<installed>``, "2.6.0" when there is none) cannot have its metadata
prepared in an isolated build: the build fails with ``No module named 'torch'``, or, worse,
succeeds with metadata for a torch that is not the plan's. Such a package is found

- before uv runs, for a framework published as an sdist only: its ``pyproject.toml`` build
  requirements name torch, or its ``setup.py`` imports torch or reads torch's version;
- from uv's failure: uv names the package whose isolated build needed torch.

uv then prepares its metadata without build isolation (``--no-build-isolation-package``) in a
scratch environment that holds the locked torch (from the plan's index) and the sdist's own
build requirements, and the package is installed last, against the installed torch
(``requirements.last.txt``), like flash-attn and DeepSpeed.
"""

from __future__ import annotations

import io
import re
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from cudalock.errors import EnvironmentFailure
from cudalock.tomlfile import tomllib

__all__ = [
    "DEFAULT_BUILD_REQUIRES",
    "SdistBuild",
    "TorchBuildNeeded",
    "needs_torch_to_build",
    "read_sdist",
]

#: Where a ``setup.py`` reads the installed torch: an import, or its version from the
#: installed distributions (``importlib.metadata.version("torch")``, pkg_resources).
_SETUP_READS_TORCH = re.compile(
    r"^\s*(?:import\s+torch\b|from\s+torch(?:\.\w+)*\s+import\b)"
    r"|\b(?:version|get_distribution|require|find_spec|distribution)\(\s*[\"']torch[\"']\s*\)",
    re.MULTILINE,
)
#: An sdist's files read for this: small text files at its top level.
_READ_LIMIT = 1 << 20


class TorchBuildNeeded(EnvironmentFailure):
    """uv's isolated build of ``package`` failed because the build needs torch."""

    def __init__(self, package: str, version: str | None, detail: str) -> None:
        super().__init__(
            f"uv had to build {package} from source to read its dependencies, and its build "
            f"needs torch ({detail})"
        )
        self.package = package
        self.version = version


@dataclass(frozen=True)
class SdistBuild:
    """How an sdist builds: whether (and why) its build reads the installed torch, and what
    else it builds with."""

    #: Why its build reads the installed torch; None when nothing in its files says so.
    reason: str | None
    #: ``[build-system] requires`` of its pyproject.toml, torch left out (setuptools' default
    #: when it has none).
    build_requires: tuple[str, ...]


#: What a project without ``[build-system] requires`` builds with (PEP 517's fallback).
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0",)


def needs_torch_to_build(stderr: str) -> tuple[str, str | None] | None:
    """(canonical name, version) of the package whose isolated build uv says needed torch."""
    hint = re.search(
        r"`([A-Za-z0-9][A-Za-z0-9._-]*)@([^`]*)` depends on `torch`, but doesn't declare it",
        stderr,
    )
    if hint:
        return str(canonicalize_name(hint[1])), hint[2] or None
    if re.search(r"No module named '?torch\b", stderr):
        failed = re.search(
            r"Failed to (?:build|prepare metadata for) `([A-Za-z0-9._-]+)(?:==([^`\s]+))?", stderr
        )
        if failed:
            return str(canonicalize_name(failed[1])), failed[2]
    return None


def _top_level_files(data: bytes, filename: str, names: Sequence[str]) -> dict[str, str]:
    """``names`` at the top of the sdist (``NAME-VERSION/setup.py``), as text."""
    found: dict[str, str] = {}
    if filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                parts = info.filename.split("/")
                if len(parts) == 2 and parts[1] in names and info.file_size <= _READ_LIMIT:
                    found[parts[1]] = archive.read(info).decode("utf-8", "replace")
        return found
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive:
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] in names and member.isfile():
                if member.size > _READ_LIMIT:
                    continue
                extracted = archive.extractfile(member)
                if extracted is not None:
                    found[parts[1]] = extracted.read().decode("utf-8", "replace")
    return found


def read_sdist(data: bytes, filename: str) -> SdistBuild:
    """How the sdist ``data`` (named ``filename``) builds, read from its top-level files."""
    try:
        files = _top_level_files(data, filename, ("pyproject.toml", "setup.py"))
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError):
        return SdistBuild(None, DEFAULT_BUILD_REQUIRES)
    requires: list[str] = list(DEFAULT_BUILD_REQUIRES)
    reason = None
    if "pyproject.toml" in files:
        try:
            system = tomllib.loads(files["pyproject.toml"]).get("build-system", {})
        except tomllib.TOMLDecodeError:
            system = {}
        listed = system.get("requires") if isinstance(system, dict) else None
        if isinstance(listed, list):
            requires = []
            for text in listed:
                try:
                    requirement = Requirement(str(text))
                except InvalidRequirement:
                    continue
                if canonicalize_name(requirement.name) == "torch":
                    reason = f"its build-system requires {text}"
                else:
                    requires.append(str(requirement))
    setup = files.get("setup.py", "")
    match = _SETUP_READS_TORCH.search(setup)
    if reason is None and match:
        reason = f"its setup.py reads the installed torch ({match[0].strip()})"
    return SdistBuild(reason, tuple(requires))
