"""The Request: what the user wants installed, read from flags and ``cudalock.toml``, validated.

Flags win over the spec file, which wins over the defaults. ``--with`` adds to the default
torchvision (``--with none`` drops it); index URLs follow :mod:`cudalock.urls` (https, or
loopback). A bad value raises :class:`InputError` / :class:`UsageError` naming it and what is
expected (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from packaging.version import InvalidVersion, Version

from cudalock.errors import InputError, UsageError
from cudalock.model import Request
from cudalock.safetext import has_control
from cudalock.urls import DEFAULT_PYTORCH_INDEX, strip_credentials, validate_index_url
from cudalock.versions import format_cuda, parse_cuda_version, parse_python_version

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

__all__ = [
    "COMPANIONS",
    "CPU_VARIANT",
    "Companion",
    "FrameworkKind",
    "RequestOptions",
    "check_framework",
    "check_frameworks",
    "classify_framework",
    "make_request",
    "parse_companion",
    "parse_torch_spec",
]

FrameworkKind = Literal["requirement", "path", "url"]
_VCS_PREFIXES = ("git+", "hg+", "svn+", "bzr+")

#: The packages cudalock pairs with torch; anything else belongs to a framework's own install.
COMPANIONS = ("torchvision", "torchaudio", "deepspeed")
CPU_VARIANT = "cpu"


def parse_torch_spec(text: str) -> SpecifierSet | None:
    """``">=2.1,<2.5"`` as PEP 440; a bare ``"2.1"`` means ``==2.1.*``, ``"2.1.0"`` ``==2.1.0``;
    None for no constraint."""
    cleaned = text.strip()
    if not cleaned:
        return None
    # Compiling the specifier grammar is a visible part of a plain 'cudalock resolve'.
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        bare = Version(cleaned)
    except InvalidVersion:
        bare = None
    if bare is not None:
        cleaned = f"=={bare}" if len(bare.release) >= 3 else f"=={bare}.*"
    try:
        return SpecifierSet(cleaned)
    except InvalidSpecifier:
        raise InputError(
            f"invalid torch version spec {text!r}: expected PEP 440 like '>=2.1,<2.5' or '2.4.1'"
        ) from None


@dataclass(frozen=True)
class Companion:
    """A companion package request: ``deepspeed>=0.15`` → name and PEP 440 specifier."""

    name: str
    #: None: any version.
    specifier: SpecifierSet | None = None

    def __str__(self) -> str:
        return f"{self.name}{self.specifier or ''}"


# A name and an optional specifier: the names are fixed, so markers, extras and URLs never occur.
_COMPANION_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*?)\s*$")


def parse_companion(text: str) -> Companion:
    """``"torchvision"``, ``"deepspeed>=0.15"``, ``"xformers"`` → a :class:`Companion`: one
    cudalock pairs with torch itself (:data:`COMPANIONS`), or a package of the variant index."""
    invalid = InputError(
        f"invalid package {text!r}: expected a name with an optional PEP 440 "
        "spec, like 'deepspeed>=0.15'"
    )
    match = _COMPANION_RE.match(text)
    if match is None:
        raise invalid
    specifier: SpecifierSet | None = None
    if match.group(2):
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            specifier = SpecifierSet(match.group(2))
        except InvalidSpecifier:
            raise invalid from None
    name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
    if name == "torch":
        raise InputError("'torch' is not a companion package: choose its version with --torch")
    # Any other name is a package the plan's variant index builds (xformers, torchao, ...):
    # whether it does is read from that index when the closure is resolved.
    return Companion(name, specifier)


def make_request(
    *,
    torch: str | None = None,
    python: str | None = None,
    cuda: str | None = None,
    compat: str = "strict",
    with_packages: Sequence[str] | None = None,
    pytorch_index: str | None = None,
    pypi_index: str | None = None,
    frameworks: Sequence[str] = (),
    allow_insecure_index: bool = False,
) -> Request:
    """A validated :class:`Request` (InputError/UsageError: exit 2).

    ``with_packages`` None means the default (torchvision); ``"none"`` in it drops the default,
    other entries add to it (an explicit ``torchvision>=...`` replaces the default one).
    """
    parse_torch_spec(torch or "")
    if python is not None:
        python = parse_python_version(python)
    if cuda is not None:
        cuda = cuda.strip().lower()
        if cuda != CPU_VARIANT:
            cuda = format_cuda(parse_cuda_version(cuda))
    if compat not in ("strict", "minor"):
        raise UsageError(f"invalid --compat {compat!r}: expected 'strict' or 'minor'")
    packages: dict[str, str] = {}
    given = list(with_packages) if with_packages is not None else []
    if not any(p.strip().lower() == "none" for p in given):
        packages["torchvision"] = "torchvision"
    chosen: dict[str, Companion] = {}
    for text in given:
        if text.strip().lower() == "none":
            continue
        requirement = parse_companion(text)
        earlier = chosen.get(requirement.name)
        if earlier is not None:
            # --with 'deepspeed<0.15' --with 'deepspeed>=0.10' means both: the intersection.
            requirement = Companion(
                requirement.name, _intersection(earlier.specifier, requirement.specifier)
            )
        chosen[requirement.name] = requirement
        packages[requirement.name] = str(requirement)
    return Request(
        torch=(torch or "").strip(),
        python=python,
        cuda=cuda,
        compat="minor" if compat == "minor" else "strict",
        with_packages=tuple(packages.values()),
        frameworks=check_frameworks(frameworks),
        pytorch_index=validate_index_url(
            pytorch_index or DEFAULT_PYTORCH_INDEX,
            flag="--pytorch-index",
            allow_insecure=allow_insecure_index,
        ),
        pypi_index=(
            validate_index_url(pypi_index, flag="--pypi-index", allow_insecure=allow_insecure_index)
            if pypi_index
            else None
        ),
    )


def _intersection(first: SpecifierSet | None, second: SpecifierSet | None) -> SpecifierSet | None:
    if first is None or second is None:
        return first or second
    return first & second


@dataclass(frozen=True)
class RequestOptions:
    """The Request flags as given (None: not given, so ``cudalock.toml`` can fill it)."""

    torch: str | None = None
    python: str | None = None
    cuda: str | None = None
    compat: str | None = None
    #: As given: entries add to the default torchvision; "none" drops it.
    with_packages: tuple[str, ...] | None = None
    #: ``--framework``, repeatable; given, the list replaces the recorded one.
    frameworks: tuple[str, ...] | None = None
    pytorch_index: str | None = None
    pypi_index: str | None = None
    allow_insecure_index: bool = False

    def to_request(self, base: Request | None = None) -> Request:
        """``base`` (e.g. from ``cudalock.toml``, else the defaults) overridden by the flags
        given, validated."""
        current = base if base is not None else Request()
        # The base list is complete as recorded: "none" first keeps a dropped torchvision out.
        with_packages = (
            self.with_packages
            if self.with_packages is not None
            else ("none", *current.with_packages)
        )

        def pick(given: str | None, recorded: str | None) -> str | None:
            return given if given is not None else recorded

        return make_request(
            torch=pick(self.torch, current.torch),
            python=pick(self.python, current.python),
            cuda=pick(self.cuda, current.cuda),
            compat=pick(self.compat, current.compat) or "strict",
            with_packages=list(with_packages),
            frameworks=self.frameworks if self.frameworks is not None else current.frameworks,
            pytorch_index=pick(self.pytorch_index, current.pytorch_index),
            pypi_index=pick(self.pypi_index, current.pypi_index),
            allow_insecure_index=self.allow_insecure_index,
        )


def check_frameworks(texts: Sequence[str]) -> tuple[str, ...]:
    """The frameworks checked one by one, each once, in the order given."""
    checked: list[str] = []
    for text in texts:
        cleaned = check_framework(text)
        if cleaned not in checked:
            checked.append(cleaned)
    return tuple(checked)


def check_framework(text: str) -> str:
    """A framework requirement, path or VCS URL on one line (shell quoting happens later)."""
    cleaned = text.strip()
    if not cleaned or has_control(cleaned):
        raise UsageError(
            f"invalid --framework {text!r}: expected a requirement "
            "(llamafactory==0.9.5), a local path or a VCS URL, on one line"
        )
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        name = re.sub(r"[-_.]+", "-", Requirement(cleaned).name).lower()
    except InvalidRequirement:
        return cleaned  # a path or a URL: classified when it is installed
    if name == "torch" or name in COMPANIONS:
        flag = "--torch" if name == "torch" else f"--with {name}"
        raise InputError(
            f"--framework {cleaned!r} names {name}, which cudalock pairs with torch itself: "
            f"choose it with {flag}"
        )
    return cleaned


def recorded_request(request: Request) -> Request:
    """``request`` as files people commit record it (cudalock.toml, pylock.toml): the
    user:password part of every URL removed, from the indexes and from VCS frameworks
    (``git+https://user:TOKEN@host/...``) alike."""
    return replace(
        request,
        frameworks=tuple(strip_credentials(framework) for framework in request.frameworks),
        pytorch_index=strip_credentials(request.pytorch_index),
        pypi_index=strip_credentials(request.pypi_index) if request.pypi_index else None,
    )


def classify_framework(text: str) -> FrameworkKind:
    """A requirement (``llamafactory==0.9.5``, ``name @ https://…``), a URL, or a local path."""
    from packaging.requirements import InvalidRequirement, Requirement

    if text.startswith(_VCS_PREFIXES) or re.match(r"^[a-z][a-z0-9+.-]*://", text):
        return "url"
    if text.startswith((".", "/", "~")) or "/" in text or "\\" in text:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            return "path"
        return "requirement" if requirement.url else "path"
    try:
        Requirement(text)
    except InvalidRequirement:
        return "path"
    return "requirement"
