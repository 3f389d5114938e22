"""``matrix refresh`` for ``torch_pairings.toml``: which torch the newer releases of the packages
it lists (torchao) accept, read from the version check in each release's own ``__init__.py``.

For every package the table lists, the PyPI project page (PEP 691 JSON) names the releases newer
than the newest one recorded. Of each, one wheel's ``<package>/__init__.py`` is read by HTTP
range requests (:mod:`cudalock.wheelzip`) and parsed, never run (:mod:`ast`). torchao's check
comes in two forms, both read:

- ``min_torch_version = _parse_version("2.11.0")`` (0.17.0 on): torch ``>=2.11.0``;
- ``torchao_pytorch_compatible_versions = [(_parse_version("0.16.0"),
  _parse_version("2.10.0")), ...]`` (0.13.0 to 0.16.0): the torch releases paired with this
  release (``==2.10.0``); the development builds the list also names are left out, as the
  table records releases.

Each entry records the torch specifiers, read_from and its source: the wheel's URL and sha256
and the lines quoted as they stand. A release whose check cannot be read (no wheel, no check of
either form, a failed read) gets no entry — a pairing is never guessed — and is said in
:attr:`PairingsRefresh.unread`.
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from cudalock.errors import EnvironmentFailure
from cudalock.matrix.fetch import Fetcher
from cudalock.matrix.releases import (
    file_sha256,
    linux_x86_64_wheel,
    position_of,
    read_newer_releases,
)
from cudalock.urls import redact, strip_credentials
from cudalock.wheelzip import open_wheel

__all__ = [
    "PairingFacts",
    "PairingsRefresh",
    "apply_pairings",
    "gather_pairings",
    "read_version_check",
]

#: The names torchao's check assigns.
MINIMUM = "min_torch_version"
PAIRS = "torchao_pytorch_compatible_versions"


@dataclass(frozen=True)
class VersionCheck:
    """What one release's version check says: the torch it accepts (PEP 440 specifiers, any
    one of which is enough), the name of what says so, and those lines as they stand."""

    torch: tuple[str, ...]
    read_from: str
    quoted: tuple[str, ...]


@dataclass(frozen=True)
class PairingFacts:
    package: str
    version: str
    check: VersionCheck
    #: The wheel read: its URL (no credentials) and sha256.
    url: str
    sha256: str | None


@dataclass
class PairingsRefresh:
    facts: list[PairingFacts] = field(default_factory=list)
    #: "torchao 0.19.0: ..." for each newer release that got no entry, and why.
    unread: list[str] = field(default_factory=list)


def read_version_check(source: str, version: str) -> VersionCheck | None:
    """The torch that release ``version`` accepts, from its ``__init__.py`` ``source``: the
    pairs naming this release, else the minimum; None when it has neither (or does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    minimum: VersionCheck | None = None
    pairs: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if not isinstance(target, ast.Name):
            continue
        if target.id == MINIMUM and minimum is None:
            floor = _version_argument(node.value)
            if floor is not None:
                quote = ast.get_source_segment(source, node) or f'{MINIMUM} = "{floor}"'
                minimum = VersionCheck((f">={floor}",), MINIMUM, (quote,))
        elif target.id == PAIRS and isinstance(node.value, ast.List):
            for item in node.value.elts:
                pair = _pair(item)
                if pair is not None and _same(pair[0], version):
                    pairs.append((pair[1], ast.get_source_segment(source, item) or str(pair)))
    released = [(torch, quote) for torch, quote in pairs if _is_release(torch)]
    if released:
        specifiers = tuple(dict.fromkeys(f"=={torch}" for torch, _ in released))
        return VersionCheck(specifiers, PAIRS, tuple(quote for _, quote in released))
    return minimum


def _version_argument(node: ast.expr) -> str | None:
    """``"2.11.0"`` of ``_parse_version("2.11.0")`` (any one-argument call of a string)."""
    if (
        isinstance(node, ast.Call)
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


def _pair(node: ast.expr) -> tuple[str, str] | None:
    if not isinstance(node, ast.Tuple) or len(node.elts) != 2:
        return None
    package, torch = (_version_argument(element) for element in node.elts)
    return (package, torch) if package is not None and torch is not None else None


def _same(text: str, version: str) -> bool:
    try:
        return Version(text) == Version(version)
    except InvalidVersion:
        return False


def _is_release(text: str) -> bool:
    try:
        return not Version(text).is_prerelease
    except InvalidVersion:
        return False


def _any_wheel(files: Sequence[Mapping[str, Any]], version: Version) -> Mapping[str, Any] | None:
    """The pure-Python wheel of ``version``, else its Linux x86_64 one: its ``__init__.py`` is
    the same in every wheel of a release."""
    for entry in files:
        filename = str(entry.get("filename", ""))
        if entry.get("yanked") or not filename.endswith("-py3-none-any.whl"):
            continue
        try:
            if parse_wheel_filename(filename)[1] == version:
                return entry
        except (InvalidWheelFilename, InvalidVersion):
            continue
    return linux_x86_64_wheel(files, version)


def gather_pairings(doc: Any, fetcher: Fetcher, pypi_url: str) -> PairingsRefresh:
    """Read the version checks of the listed packages' releases newer than the recorded ones."""
    indexes = (pypi_url,)
    facts, unread = read_newer_releases(
        doc.get("pairing", []),
        fetcher,
        pypi_url,
        _any_wheel,
        lambda name, version, wheel: _read(name, version, wheel, indexes, fetcher),
        no_wheel="no wheel on the index",
    )
    return PairingsRefresh(facts, unread)


def _read(
    name: str, version: Version, wheel: Mapping[str, Any], indexes: Sequence[str], fetcher: Fetcher
) -> tuple[PairingFacts | None, str]:
    url = str(wheel.get("url", ""))
    sha256 = file_sha256(wheel)
    member = f"{_module(name)}/__init__.py"
    try:
        archive, _remote = open_wheel(
            url, indexes=indexes, timeout_s=fetcher.timeout, retries=fetcher.retries
        )
        with archive:
            source = archive.read(member).decode("utf-8", "replace")
    except FileNotFoundError:
        return None, f"its wheel {redact(url)} is not on the index (HTTP 404)"
    except KeyError:
        return None, f"its wheel {wheel.get('filename')} has no {member}"
    except (zipfile.BadZipFile, OSError):
        return None, f"{redact(url)} is not a readable wheel"
    except EnvironmentFailure as err:
        return None, f"its wheel could not be read: {err.message}"
    check = read_version_check(source, str(version))
    if check is None:
        return None, (
            f"its {member} has no torch version check cudalock reads ({MINIMUM}, or {PAIRS} "
            "naming this release)"
        )
    return PairingFacts(name, str(version), check, strip_credentials(url), sha256), ""


def _module(name: str) -> str:
    """The import name of a distribution that names its package after itself (torchao)."""
    return name.replace("-", "_")


def apply_pairings(doc: Any, gathered: PairingsRefresh) -> list[str]:
    """Add an entry per release read, in the table's order (package, then version)."""
    import tomlkit

    changes = []
    pairings = doc["pairing"]
    for facts in sorted(gathered.facts, key=lambda f: (f.package, Version(f.version))):
        member = f"{_module(facts.package)}/__init__.py"
        table = tomlkit.table()
        table["package"] = facts.package
        table["version"] = facts.version
        table["torch"] = list(facts.check.torch)
        table["read_from"] = f"{member} {facts.check.read_from}"
        digest = f" (sha256:{facts.sha256})" if facts.sha256 else ""
        table["source"] = f"{facts.url}{digest}: {member}, " + "; ".join(facts.check.quoted)
        table["status"] = "verified"
        pairings.insert(position_of(pairings, facts.package, facts.version), table)
        changes.append(
            f"torch_pairings: {facts.package} {facts.version} accepts torch "
            f"{' or '.join(facts.check.torch)} ({table['read_from']})"
        )
    return changes
