"""A locked package's core metadata, and what it says about torch.

Frameworks declare their torch requirement in two ways: directly (``peft``: ``torch>=1.13.0``)
or in an extra (``transformers[torch]``: ``torch>=2.5``, which plain ``transformers`` leaves
out). A resolver only fits the framework version to the planned torch when the extra is asked
for, so cudalock reads each framework's metadata — the PEP 658 ``.metadata`` file next to the
wheel uv locked, or the wheel itself when the index serves none — and asks for the extras that
declare the torch family.

The pure parts (:func:`torch_extras`, :func:`family_requirements`, :func:`marker_environment`)
take parsed metadata; :func:`fetch_metadata` is the edge that downloads it.
"""

from __future__ import annotations

import functools
import io
import json
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.pylock import Package
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from cudalock.errors import EnvironmentFailure, InputError
from cudalock.fsutil import bound_directory, cudalock_cache_dir, read_bounded, write_atomic
from cudalock.lock.http import request
from cudalock.platforms import platform_named
from cudalock.request import TORCH_FAMILY
from cudalock.urls import redact

if TYPE_CHECKING:
    import email.message

__all__ = [
    "METADATA_CACHE_ENTRIES",
    "METADATA_LIMIT",
    "Metadata",
    "cached_wheel_metadata",
    "describe",
    "family_requirements",
    "fetch_metadata",
    "marker_environment",
    "requirements_with",
    "stored_metadata",
    "torch_extras",
]

#: Core metadata is a few KiB. More is not what was asked for.
METADATA_LIMIT = 4 * 2**20

_PYTHON_OS = {
    "linux": ("Linux", "posix"),
    "windows": ("Windows", "nt"),
    "macos": ("Darwin", "posix"),
}


@dataclass(frozen=True)
class Metadata:
    """The parts of one distribution's core metadata the closure needs."""

    name: str
    version: str
    requires_dist: tuple[str, ...]
    provides_extra: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Metadata:
        from email.parser import HeaderParser  # the email package: only for fetched metadata

        message = HeaderParser().parsestr(text)
        return cls.of(message)

    @classmethod
    def of(cls, message: email.message.Message) -> Metadata:
        return cls(
            name=str(message.get("Name", "")),
            version=str(message.get("Version", "")),
            requires_dist=tuple(str(r) for r in message.get_all("Requires-Dist") or ()),
            provides_extra=tuple(
                str(canonicalize_name(e)) for e in message.get_all("Provides-Extra") or ()
            ),
        )


def marker_environment(python: str, platform: str) -> dict[str, str]:
    """The PEP 508 marker values of the target (CPython ``python`` on ``platform``)."""
    known = platform_named(platform)
    system, os_name = _PYTHON_OS.get(known.os, ("Linux", "posix"))
    version = python.rstrip("t")
    return {
        "python_version": version,
        "python_full_version": f"{version}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": known.sys_platform,
        "platform_machine": known.machine,
        "platform_system": system,
        "os_name": os_name,
        "platform_release": "",
        "platform_version": "",
        "implementation_version": f"{version}.0",
    }


@functools.lru_cache(maxsize=4096)
def _requirements(metadata: Metadata) -> list[Requirement]:
    return _parsed(metadata.requires_dist)


@functools.lru_cache(maxsize=4096)
def _family(metadata: Metadata) -> list[Requirement]:
    """The Requires-Dist lines that name a torch-family package. Every such line holds
    "torch", a cheap test that spares parsing the hundreds of lines of the packages (and of
    transformers' extras) that name none."""
    return [
        requirement
        for requirement in _parsed(
            line for line in metadata.requires_dist if "torch" in line.lower()
        )
        if canonicalize_name(requirement.name) in TORCH_FAMILY
    ]


def _parsed(lines: Iterable[str]) -> list[Requirement]:
    parsed = []
    for line in lines:
        try:
            parsed.append(Requirement(line))
        except InvalidRequirement:
            continue  # a malformed line is uv's to report; it cannot name torch for us
    return parsed


def _applies(requirement: Requirement, environment: Mapping[str, str], extra: str) -> bool:
    if requirement.marker is None:
        return extra == ""
    return requirement.marker.evaluate({**environment, "extra": extra})


def requirements_with(
    metadata: Metadata, environment: Mapping[str, str], extras: Sequence[str] = ()
) -> list[Requirement]:
    """Every requirement that applies with ``extras`` requested on the target."""
    return [
        requirement
        for requirement in _requirements(metadata)
        if any(_applies(requirement, environment, extra) for extra in ("", *extras))
    ]


def describe(requirement: Requirement) -> str:
    """``torch>=2.6 (its 'torch' extra)`` for ``torch>=2.6; extra == "torch"``."""
    text = f"{requirement.name}{requirement.specifier}"
    extras = _EXTRA_NAMED.findall(str(requirement.marker or ""))
    if extras:
        text += f" (its {', '.join(repr(e) for e in extras)} extra)"
    return text


def family_requirements(
    metadata: Metadata, environment: Mapping[str, str], extras: Sequence[str] = ()
) -> list[Requirement]:
    """The torch-family requirements that apply with ``extras`` requested on the target."""
    return [
        requirement
        for requirement in _family(metadata)
        if any(_applies(requirement, environment, extra) for extra in ("", *extras))
    ]


def torch_extras(metadata: Metadata, environment: Mapping[str, str]) -> tuple[str, ...]:
    """The extras that declare the package's torch requirement.

    An extra counts when it is named after a torch-family package (transformers' and datasets'
    ``torch``, llamafactory 0.9.3's ``torch``) or holds nothing but torch-family packages. The
    ``all``/``dev``/``testing`` extras also name torch, but with dozens of other packages
    (TensorFlow, JAX, test tools), so they never count.
    """
    # Only the extras a family requirement's marker names can count.
    named = {
        str(canonicalize_name(extra))
        for r in _family(metadata)
        if r.marker is not None
        for extra in _EXTRA_NAMED.findall(str(r.marker))
    }
    candidates = tuple(extra for extra in metadata.provides_extra if extra in named)
    if not candidates:
        return ()
    # The same metadata is asked about for the prediction, each review and the diagnosis.
    return _torch_extras(metadata, candidates, tuple(sorted(environment.items())))


_EXTRA_NAMED = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")
#: An extra name no marker holds: a marker that does not spell an extra's name applies with
#: that extra exactly as it does with this one.
_UNNAMED_EXTRA = "\x00"


@functools.lru_cache(maxsize=1024)
def _torch_extras(
    metadata: Metadata, candidates: tuple[str, ...], items: tuple[tuple[str, str], ...]
) -> tuple[str, ...]:
    environment = dict(items)
    marked = [(r, str(r.marker)) for r in _requirements(metadata) if r.marker is not None]
    # transformers has hundreds of marked lines and a dozen candidate extras: each line is
    # evaluated once, and again only for the extras its marker spells (packaging writes extra
    # names normalized, as Provides-Extra is read here).
    unnamed = [_applies(r, environment, _UNNAMED_EXTRA) for r, _text in marked]
    chosen = []
    for extra in candidates:
        members = [
            r
            for (r, text), applies in zip(marked, unnamed, strict=True)
            if (_applies(r, environment, extra) if extra in text else applies)
        ]
        family = [r for r in members if canonicalize_name(r.name) in TORCH_FAMILY]
        if not family:
            continue
        if extra in TORCH_FAMILY or len(family) == len(members):
            chosen.append(extra)
    return tuple(chosen)


# --------------------------------------------------------------------------------------------
# Fetching


def _get(url: str, *, indexes: Sequence[str], timeout_s: float, retries: int, limit: int) -> bytes:
    """GET ``url``; a 404 raises ``FileNotFoundError``, anything else failing exit 3."""
    return request(url, indexes=indexes, timeout_s=timeout_s, retries=retries, limit=limit).body


def _ranged_metadata(
    url: str, *, indexes: Sequence[str], timeout_s: float, retries: int
) -> Metadata | None:
    """The METADATA of the wheel at ``url`` read by HTTP range requests (the zip's end, its
    central directory, the member: :mod:`cudalock.wheelzip`), not the whole wheel."""
    from cudalock.wheelzip import open_wheel  # HTTP: a warm lock reads no wheel

    archive, _remote = open_wheel(url, indexes=indexes, timeout_s=timeout_s, retries=retries)
    try:
        with archive:
            return Metadata.parse(_metadata_member(archive).decode("utf-8", "replace"))
    except (zipfile.BadZipFile, StopIteration, KeyError, OSError):
        raise EnvironmentFailure(f"{redact(url)} is not a wheel with core metadata") from None


def fetch_metadata(
    package: Package,
    *,
    indexes: Sequence[str],
    timeout_s: float = 60,
    retries: int = 3,
    use_cache: bool = True,
) -> Metadata | None:
    """The core metadata of a locked package, from its first wheel (:func:`cached_wheel_metadata`).

    None when the package has no wheel (an sdist would have to be built to say).
    """
    for wheel in package.wheels or ():
        if not wheel.url:
            continue
        found = cached_wheel_metadata(
            wheel.url,
            wheel.hashes.get("sha256"),
            indexes=indexes,
            timeout_s=timeout_s,
            retries=retries,
            use_cache=use_cache,
        )
        if found is not None:
            return found
    return None


def stored_metadata(package: Package) -> Metadata | None:
    """The core metadata of a locked package as the local cache holds it (no network): read
    in the calling thread, so that only what is missing goes to a pool of fetches."""
    for wheel in package.wheels or ():
        found = _cached_metadata(wheel.hashes.get("sha256"))
        if found is not None:
            return found
    return None


def cached_wheel_metadata(
    url: str,
    sha256: str | None,
    *,
    indexes: Sequence[str],
    timeout_s: float = 60,
    retries: int = 3,
    use_cache: bool = True,
) -> Metadata | None:
    """The core metadata of the wheel at ``url``: its PEP 658 file, else its METADATA member
    read by range requests (vllm's wheels are 300+ MiB), cached by the wheel's sha256 (a
    published file never changes) unless ``use_cache`` is False (``CUDALOCK_NO_CACHE``). None
    when the index serves no such wheel (404)."""
    cached = _cached_metadata(sha256) if use_cache else None
    if cached is not None:
        return cached
    try:
        data = _get(
            url + ".metadata",
            indexes=indexes,
            timeout_s=timeout_s,
            retries=retries,
            limit=METADATA_LIMIT,
        )
        found: Metadata | None = Metadata.parse(data.decode("utf-8", "replace"))
    except FileNotFoundError:
        try:
            found = _ranged_metadata(url, indexes=indexes, timeout_s=timeout_s, retries=retries)
        except FileNotFoundError:
            return None
    if found is not None and use_cache:
        _store_metadata(sha256, found)
    return found


#: The metadata cache holds at most this many wheels' metadata (a few KiB each); past it, the
#: oldest entries go when a new one is written.
METADATA_CACHE_ENTRIES = 20_000


def _metadata_cache(digest: str | None) -> Path | None:
    if not digest or not re.fullmatch(r"[0-9a-f]{64}", digest):
        return None
    return cudalock_cache_dir() / "metadata" / f"{digest}.json"


def _cached_metadata(digest: str | None) -> Metadata | None:
    path = _metadata_cache(digest)
    if path is None:
        return None
    try:
        document = json.loads(read_bounded(path, limit=METADATA_LIMIT, what="cache file"))
        return Metadata(
            name=str(document["name"]),
            version=str(document["version"]),
            requires_dist=tuple(str(r) for r in document["requires_dist"]),
            provides_extra=tuple(str(e) for e in document["provides_extra"]),
        )
    except (OSError, ValueError, KeyError, TypeError, InputError):
        return None


def _store_metadata(digest: str | None, metadata: Metadata) -> None:
    path = _metadata_cache(digest)
    if path is None:
        return
    document = {
        "name": metadata.name,
        "version": metadata.version,
        "requires_dist": list(metadata.requires_dist),
        "provides_extra": list(metadata.provides_extra),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, json.dumps(document))
        _bound_once(path.parent)
    except (OSError, EnvironmentFailure):
        pass  # an unwritable cache only costs the next run a request


@functools.cache
def _bound_once(directory: Path) -> None:
    """Keep the cache at :data:`METADATA_CACHE_ENTRIES` (checked once a process, on its first
    write: a listing of the directory costs more than one entry)."""
    bound_directory(directory, METADATA_CACHE_ENTRIES, suffix=".json")


def _metadata_member(archive: zipfile.ZipFile) -> bytes:
    name = next(
        n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
    )
    return archive.read(name)


def _wheel_metadata(data: bytes, url: str) -> Metadata:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            text = _metadata_member(archive).decode("utf-8", "replace")
    except (zipfile.BadZipFile, StopIteration, KeyError):
        raise EnvironmentFailure(f"{redact(url)} is not a wheel with core metadata") from None
    return Metadata.parse(text)
