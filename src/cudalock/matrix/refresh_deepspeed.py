"""``cudalock matrix refresh`` for deepspeed.toml: new DeepSpeed releases from PyPI.

For each release newer than the matrix's newest, from PyPI's JSON simple API (PEP 691): the date
(first ``upload-time``) and ``requires-python``; from the release's metadata (PEP 658 of a wheel,
else the sdist's ``PKG-INFO``) the torch requirement (``Requires-Dist: torch>=2.0.0``); and from
the sdist's ``op_builder/builder.py`` the ``cuda_minor_mismatch_ok`` allow-list, compared with
the ``[[cuda_check]]`` rule that governs the release. The same list: the release names the sdist
as its evidence. Another list: an open-ended rule is closed below the release and a new rule
starts with it; anything else is written down as unverified for a person to settle.

The sdist is read in memory (tarfile, no extraction), and ``builder.py`` only parsed (``ast``):
nothing from a download is executed.
"""

from __future__ import annotations

import ast
import io
import re
import tarfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from cudalock.matrix.fetch import Fetcher
from cudalock.matrix.refresh import unmarked_torch_requirements
from cudalock.matrix.releases import file_version
from cudalock.urls import strip_credentials

__all__ = [
    "MAX_SDIST_BYTES",
    "MAX_SDIST_MEMBERS",
    "DeepSpeedFacts",
    "SdistFacts",
    "apply_deepspeed",
    "cuda_rule",
    "gather_deepspeed",
    "read_sdist",
    "torch_requirement",
]

#: The largest member read from an sdist (PKG-INFO, builder.py are a few tens of KiB).
_MAX_MEMBER = 4 * 1024 * 1024
#: A DeepSpeed sdist holds about a thousand files and 10 MiB; far more is not one.
MAX_SDIST_MEMBERS = 10_000
MAX_SDIST_BYTES = 256 * 2**20


@dataclass
class DeepSpeedFacts:
    """What PyPI says about one DeepSpeed release."""

    version: str
    date: str | None = None
    requires_python: str | None = None
    #: The torch specifier ("" = plain ``torch``); None when no metadata could be read.
    torch: str | None = None
    #: ``cuda_minor_mismatch_ok`` of its op builder; None when not read.
    cuda_rule: dict[int, list[str]] | None = None
    #: Where each fact was read: (URL, what in it).
    sources: list[tuple[str, str]] = field(default_factory=list)


def gather_deepspeed(deepspeed_doc: Any, fetcher: Fetcher, pypi_url: str) -> list[DeepSpeedFacts]:
    """The DeepSpeed releases on PyPI newer than the newest in deepspeed.toml, oldest first."""
    known = [str(r["version"]) for r in deepspeed_doc.get("release", [])]
    newest = max((Version(v) for v in known), default=None)
    page = fetcher.json(f"{pypi_url}/deepspeed/")
    if page is None or newest is None:
        return []
    files: dict[str, list[Mapping[str, Any]]] = {}
    for entry in page.get("files", []):
        if not isinstance(entry, Mapping):
            continue
        version = file_version(entry)
        if version is None or version.is_prerelease or version.is_devrelease or version.local:
            continue
        if version > newest:
            files.setdefault(str(version), []).append(entry)
    page_source = strip_credentials(f"{pypi_url}/deepspeed/")
    return [
        _facts(version, entries, fetcher, page_source)
        for version, entries in sorted(files.items(), key=lambda item: Version(item[0]))
    ]


def _facts(
    version: str, entries: list[Mapping[str, Any]], fetcher: Fetcher, page_source: str
) -> DeepSpeedFacts:
    facts = DeepSpeedFacts(version)
    days = [
        str(e["upload-time"])[:10]
        for e in entries
        if isinstance(e.get("upload-time"), str)
        and re.match(r"\d{4}-\d{2}-\d{2}", e["upload-time"])
    ]
    facts.date = min(days) if days else None
    requires = Counter(
        str(e["requires-python"]) for e in entries if isinstance(e.get("requires-python"), str)
    )
    facts.requires_python = requires.most_common(1)[0][0] if requires else None
    facts.sources.append((page_source, "PEP 691 JSON: upload-time, requires-python"))
    wheel = next(
        (
            e
            for e in entries
            if str(e.get("filename", "")).endswith(".whl")
            and (e.get("core-metadata") or e.get("dist-info-metadata"))
            and isinstance(e.get("url"), str)
        ),
        None,
    )
    if wheel is not None:
        metadata = fetcher.get(str(wheel["url"]) + ".metadata")
        if metadata is not None:
            facts.torch = torch_requirement(metadata)
            facts.sources.append(
                (f"{strip_credentials(str(wheel['url']))}.metadata", "PEP 658: Requires-Dist torch")
            )
    sdist = next(
        (
            e
            for e in entries
            if str(e.get("filename", "")).endswith(".tar.gz") and isinstance(e.get("url"), str)
        ),
        None,
    )
    if sdist is not None:
        data = fetcher.get_bytes(str(sdist["url"]))
        if data is not None:
            read = read_sdist(data)
            where = strip_credentials(str(sdist["url"]))
            digest = (sdist.get("hashes") or {}).get("sha256")
            named = str(sdist["filename"]) + (f" sha256:{digest}" if digest else "")
            if facts.torch is None and read.torch is not None:
                facts.torch = read.torch
                facts.sources.append((where, f"{named}: PKG-INFO Requires-Dist torch"))
            if read.cuda_rule is not None:
                facts.cuda_rule = read.cuda_rule
                facts.sources.append(
                    (where, f"{named}: op_builder/builder.py cuda_minor_mismatch_ok")
                )
    return facts


def torch_requirement(metadata: str) -> str | None:
    """The torch specifier of a Requires-Dist without marker: ``>=2.0.0``, "" for plain torch,
    None when the metadata names no torch."""
    requirement = next(unmarked_torch_requirements(metadata), None)
    return None if requirement is None else str(requirement.specifier)


@dataclass(frozen=True)
class SdistFacts:
    torch: str | None
    cuda_rule: dict[int, list[str]] | None


def read_sdist(data: bytes) -> SdistFacts:
    """The torch requirement (top-level PKG-INFO) and the op builder's CUDA allow-list."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            return _read_members(archive)
    except (tarfile.TarError, OSError, EOFError):
        return SdistFacts(None, None)


def _read_members(archive: tarfile.TarFile) -> SdistFacts:
    """Member by member, within :data:`MAX_SDIST_MEMBERS` members and
    :data:`MAX_SDIST_BYTES` of content: a tar of millions of empty headers, or of members that
    claim gigabytes, is given up on, never listed whole."""
    # The shallowest of each: the sdist's own PKG-INFO, not an egg-info copy.
    pkg_info: tuple[int, str] | None = None
    builder: tuple[int, str] | None = None
    content = 0
    for count, member in enumerate(archive, start=1):
        # tarfile keeps every member it has read; nothing here needs them again.
        archive.members.clear()  # type: ignore[attr-defined]
        content += max(0, member.size)
        if count > MAX_SDIST_MEMBERS or content > MAX_SDIST_BYTES:
            raise tarfile.TarError("past the member budget")
        if not member.isfile() or member.size > _MAX_MEMBER:
            continue
        depth = member.name.count("/")
        if member.name.endswith("/PKG-INFO") and (pkg_info is None or depth < pkg_info[0]):
            pkg_info = (depth, _text(archive, member))
        elif member.name.endswith("/op_builder/builder.py") and (
            builder is None or depth < builder[0]
        ):
            builder = (depth, _text(archive, member))
    torch = torch_requirement(pkg_info[1]) if pkg_info is not None else None
    rule = cuda_rule(builder[1]) if builder is not None else None
    return SdistFacts(torch, rule)


def _text(archive: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    handle = archive.extractfile(member)
    return handle.read().decode("utf-8", "replace") if handle else ""


def cuda_rule(source: str) -> dict[int, list[str]] | None:
    """``cuda_minor_mismatch_ok = {11: ["11.0", ...], ...}`` from builder.py, parsed as data."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # Not Python, a NUL byte, or nested past the parser's stack: no rule read from it.
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "cuda_minor_mismatch_ok" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return None
            if isinstance(value, dict) and all(
                isinstance(k, int) and isinstance(v, list) and all(isinstance(s, str) for s in v)
                for k, v in value.items()
            ):
                return {int(k): [str(s) for s in v] for k, v in sorted(value.items())}
            return None
    return None


# --------------------------------------------------------------------------------------------
# Updating deepspeed.toml


def apply_deepspeed(doc: Any, releases: list[DeepSpeedFacts], today: str) -> list[str]:
    """Add the new releases (and split a cuda_check rule they change); one line per change."""
    import tomlkit

    table_releases = doc.get("release")
    rules = doc.get("cuda_check")
    if table_releases is None:
        return []
    changes = []
    for facts in releases:
        table = tomlkit.table()
        table["version"] = facts.version
        if facts.date:
            table["date"] = facts.date
        table["torch"] = facts.torch if facts.torch is not None else ""
        if facts.requires_python:
            table["requires_python"] = facts.requires_python
        sources = [
            f"{url} ({what}; read by cudalock matrix refresh on {today})"
            for url, what in facts.sources
        ]
        notes = []
        unverified = []
        if facts.torch is None:
            unverified.append("torch")
            notes.append('refresh: no metadata naming torch could be read; torch = "" is a guess')
        if not facts.date:
            unverified.append("date")
        changes.append(f"DeepSpeed {facts.version}: new release")
        if rules is not None:
            rule_note = _rule_change(rules, facts, sources, changes)
            if rule_note:
                notes.append(rule_note)
        table["source"] = _multiline(sources)
        table["status"] = "verified"
        if unverified:
            table["unverified"] = unverified
        if notes:
            table["note"] = " ".join(notes)
        table_releases.append(table)
    return changes


def _rule_change(
    rules: Any, facts: DeepSpeedFacts, sources: list[str], changes: list[str]
) -> str | None:
    """Compare the release's allow-list with its governing rule; split an open rule it changes.

    Returns a note for the release when a person has to settle the rule.
    """
    import tomlkit

    if facts.cuda_rule is None:
        return (
            "refresh: op_builder/builder.py was not read; the [[cuda_check]] rule covering this "
            "release was not compared with it"
        )
    governing = []
    for rule in rules:
        specifier = _specifier(str(rule["deepspeed"]))
        if specifier is not None and specifier.contains(facts.version, prereleases=True):
            governing.append((rule, specifier))
    if len(governing) == 1 and _allow_list(governing[0][0]) == facts.cuda_rule:
        return None  # the release's sdist, in its sources, is the evidence
    if len(governing) > 1 or (
        governing and any(s.operator not in (">=", ">", "!=") for s in governing[0][1])
    ):
        return (
            "refresh: op_builder/builder.py cuda_minor_mismatch_ok differs from the "
            "[[cuda_check]] rule that covers this release, which is bounded: split it by hand"
        )
    if governing:
        # An open-ended rule: it now stops below this release.
        old = governing[0][0]
        old["deepspeed"] = f"{old['deepspeed']},<{facts.version}"
        changes.append(f"DeepSpeed cuda_check {old['deepspeed']}: ends below {facts.version}")
    rule = tomlkit.table()
    rule["deepspeed"] = f">={facts.version}"
    rule["source"] = _multiline([s for s in sources if "builder.py" in s])
    rule["status"] = "verified"
    allowed = tomlkit.table()
    for major, versions in facts.cuda_rule.items():
        allowed[str(major)] = versions
    rule["minor_mismatch_ok"] = allowed
    rules.append(rule)
    changes.append(f"DeepSpeed cuda_check >={facts.version}: new rule")
    return None


def _allow_list(rule: Any) -> dict[int, list[str]]:
    allowed = rule["minor_mismatch_ok"]
    return {int(k): [str(v) for v in allowed[k]] for k in sorted(allowed, key=int)}


def _specifier(text: str) -> SpecifierSet | None:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None


def _multiline(items: list[str]) -> Any:
    import tomlkit

    array = tomlkit.array()
    array.extend(items)
    return array.multiline(True)
