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

import email.message
import email.parser
import hashlib
import io
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.pylock import Package
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from cudalock import httpget
from cudalock.errors import EnvironmentFailure, UsageError
from cudalock.platforms import platform_named
from cudalock.request import TORCH_FAMILY
from cudalock.urls import redact

#: Core metadata is a few KiB; a framework wheel a few MiB. More is not what was asked for.
METADATA_LIMIT = 4 * 2**20
WHEEL_LIMIT = 256 * 2**20

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
        message = email.parser.HeaderParser().parsestr(text)
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


def _requirements(metadata: Metadata) -> list[Requirement]:
    parsed = []
    for line in metadata.requires_dist:
        try:
            parsed.append(Requirement(line))
        except InvalidRequirement:
            continue  # a malformed line is uv's to report; it cannot name torch for us
    return parsed


def _applies(requirement: Requirement, environment: Mapping[str, str], extra: str) -> bool:
    if requirement.marker is None:
        return extra == ""
    return requirement.marker.evaluate({**environment, "extra": extra})


def family_requirements(
    metadata: Metadata, environment: Mapping[str, str], extras: Sequence[str] = ()
) -> list[Requirement]:
    """The torch-family requirements that apply with ``extras`` requested on the target."""
    found = []
    for requirement in _requirements(metadata):
        if canonicalize_name(requirement.name) not in TORCH_FAMILY:
            continue
        if any(_applies(requirement, environment, extra) for extra in ("", *extras)):
            found.append(requirement)
    return found


def torch_extras(metadata: Metadata, environment: Mapping[str, str]) -> tuple[str, ...]:
    """The extras that declare the package's torch requirement.

    An extra counts when it is named after a torch-family package (transformers' and datasets'
    ``torch``, llamafactory 0.9.3's ``torch``) or holds nothing but torch-family packages. The
    ``all``/``dev``/``testing`` extras also name torch, but with dozens of other packages
    (TensorFlow, JAX, test tools), so they never count.
    """
    requirements = _requirements(metadata)
    chosen = []
    for extra in metadata.provides_extra:
        members = [
            r for r in requirements if r.marker is not None and _applies(r, environment, extra)
        ]
        family = [r for r in members if canonicalize_name(r.name) in TORCH_FAMILY]
        if not family:
            continue
        if extra in TORCH_FAMILY or len(family) == len(members):
            chosen.append(extra)
    return tuple(chosen)


# --------------------------------------------------------------------------------------------
# Fetching


def _credentials(indexes: Sequence[str]) -> dict[tuple[str, str | None, int | None], str]:
    """Basic authorisation per origin, from the index URLs that carry credentials: a wheel on the
    same host as an index is read with that index's credentials, any other host with none."""
    found: dict[tuple[str, str | None, int | None], str] = {}
    for index in indexes:
        authorization = httpget.basic_authorization(index)
        if authorization is not None:
            found.setdefault(httpget.origin(index), authorization)
    return found


def _get(url: str, *, indexes: Sequence[str], timeout_s: float, retries: int, limit: int) -> bytes:
    """GET ``url``; a 404 raises ``FileNotFoundError``, anything else exit 3."""
    try:
        return httpget.get(
            url,
            timeout=timeout_s,
            limit=limit,
            retries=retries,
            credentials=_credentials(indexes),
        ).body
    except httpget.NotFound:
        raise FileNotFoundError(url) from None
    except UsageError as err:
        raise EnvironmentFailure(f"uv locked {err.message}; cudalock reads only http(s)") from None


def fetch_metadata(
    package: Package, *, indexes: Sequence[str], timeout_s: float = 60, retries: int = 3
) -> Metadata | None:
    """The core metadata of a locked package: its wheel's PEP 658 file, or the wheel itself.

    None when the package has no wheel (an sdist would have to be built to say).
    """
    for wheel in package.wheels or ():
        if not wheel.url:
            continue
        try:
            data = _get(
                wheel.url + ".metadata",
                indexes=indexes,
                timeout_s=timeout_s,
                retries=retries,
                limit=METADATA_LIMIT,
            )
            return Metadata.parse(data.decode("utf-8", "replace"))
        except FileNotFoundError:
            pass  # the index serves no PEP 658 files: read the wheel
        try:
            data = _get(
                wheel.url, indexes=indexes, timeout_s=timeout_s, retries=retries, limit=WHEEL_LIMIT
            )
        except FileNotFoundError:
            continue
        expected = wheel.hashes.get("sha256")
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise EnvironmentFailure(
                f"{redact(wheel.url)} does not match the sha256 uv locked; refusing to read it"
            )
        return _wheel_metadata(data, wheel.url)
    return None


def _wheel_metadata(data: bytes, url: str) -> Metadata:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            name = next(
                n
                for n in archive.namelist()
                if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
            )
            text = archive.read(name).decode("utf-8", "replace")
    except (zipfile.BadZipFile, StopIteration, KeyError):
        raise EnvironmentFailure(f"{redact(url)} is not a wheel with core metadata") from None
    return Metadata.parse(text)
