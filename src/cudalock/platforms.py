"""The platforms cudalock knows, each named once with every spelling other tools use for it.

A platform name (``linux-x86_64``) is what probe files, the matrix, plans and locks carry; the
table says how the same platform is written as a wheel tag, a uv ``--python-platform``, a PEP 508
marker and a conda subdir, and what ``platform.system()`` / ``platform.machine()`` /
``sys.platform`` report on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cudalock.errors import InputError

__all__ = [
    "PLATFORMS",
    "Platform",
    "normalise_arch",
    "os_name",
    "platform_for",
    "platform_named",
    "platform_of_wheel_tag",
]


@dataclass(frozen=True)
class Platform:
    """One operating system and processor that torch publishes wheels for."""

    name: str
    #: ``platform.system()`` lowered, as cudalock names it: linux, windows, macos.
    os: str
    #: The processor as cudalock names it (``aarch64`` is ``arm64`` on macOS, as Apple says).
    arch: str
    #: ``sys.platform`` and ``platform.machine()`` on it: the values PEP 508 markers compare.
    sys_platform: str
    machine: str
    #: The wheel platform tags of it: their prefixes and their processor suffix.
    wheel_tag_prefixes: tuple[str, ...]
    wheel_tag_arch: str
    #: uv's ``--python-platform``; on Linux the glibc (``_2_28``) is appended.
    uv_platform: str
    conda_subdir: str

    @property
    def marker(self) -> str:
        """The PEP 508 environment marker that is true on this platform alone."""
        return f"sys_platform == '{self.sys_platform}' and platform_machine == '{self.machine}'"

    @property
    def uses_glibc(self) -> bool:
        return self.os == "linux"


PLATFORMS: tuple[Platform, ...] = (
    Platform(
        "linux-x86_64",
        "linux",
        "x86_64",
        "linux",
        "x86_64",
        ("manylinux", "musllinux", "linux"),
        "x86_64",
        "x86_64-manylinux",
        "linux-64",
    ),
    Platform(
        "linux-aarch64",
        "linux",
        "aarch64",
        "linux",
        "aarch64",
        ("manylinux", "musllinux", "linux"),
        "aarch64",
        "aarch64-manylinux",
        "linux-aarch64",
    ),
    Platform(
        "windows-x86_64",
        "windows",
        "x86_64",
        "win32",
        "AMD64",
        ("win",),
        "amd64",
        "x86_64-pc-windows-msvc",
        "win-64",
    ),
    Platform(
        "macos-arm64",
        "macos",
        "arm64",
        "darwin",
        "arm64",
        ("macosx",),
        "arm64",
        "aarch64-apple-darwin",
        "osx-arm64",
    ),
    Platform(
        "macos-x86_64",
        "macos",
        "x86_64",
        "darwin",
        "x86_64",
        ("macosx",),
        "x86_64",
        "x86_64-apple-darwin",
        "osx-64",
    ),
)
_BY_NAME = {platform.name: platform for platform in PLATFORMS}
#: Platform names a probe file may carry beyond the table (a probe on an unusual machine
#: writes its own ``os-arch``; it round-trips, and nothing resolves for it).
_NAME_SHAPE = re.compile(r"^[a-z0-9]+-[a-z0-9_]+$")


def platform_named(name: str, *, what: str = "platform") -> Platform:
    """The table's entry for ``name``, or :class:`InputError` listing the names it knows."""
    platform = _BY_NAME.get(name.strip())
    if platform is None:
        names = ", ".join(_BY_NAME)
        raise InputError(f"unknown {what} {name!r}: expected one of {names}")
    return platform


def is_platform_shaped(name: str) -> bool:
    """Whether ``name`` has the ``os-arch`` shape of a platform name (known or not)."""
    return bool(_NAME_SHAPE.match(name))


def os_name(system: str) -> str:
    """``platform.system()`` (or ``sys.platform``) as cudalock names it: linux, windows, macos."""
    lowered = system.lower()
    return {"darwin": "macos", "win32": "windows"}.get(lowered, lowered or "unknown")


def normalise_arch(machine: str) -> str:
    """``platform.machine()`` as cudalock names it: x86_64 or aarch64 (others lowered)."""
    lowered = machine.lower()
    if lowered in ("amd64", "x86_64", "x64"):
        return "x86_64"
    if lowered in ("arm64", "aarch64", "armv8", "armv8l"):
        return "aarch64"
    return lowered or "unknown"


def platform_for(system: str, machine: str) -> str:
    """The platform name for ``platform.system()`` and ``platform.machine()`` (or
    ``sys.platform``); combinations outside the table keep the ``os-arch`` shape."""
    system_name = os_name(system)
    arch = normalise_arch(machine)
    for platform in PLATFORMS:
        if platform.os == system_name and normalise_arch(platform.arch) == arch:
            return platform.name
    return f"{system_name}-{arch}"


def platform_of_wheel_tag(tag: str) -> str | None:
    """A wheel's platform tag (``manylinux_2_28_x86_64``, ``win_amd64``) → platform name;
    None for tags of platforms the table does not hold (``any``, 32-bit, ...)."""
    for platform in PLATFORMS:
        if tag.startswith(platform.wheel_tag_prefixes) and tag.endswith(
            "_" + platform.wheel_tag_arch
        ):
            return platform.name
    return None
