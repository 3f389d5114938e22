"""The Request: what the user wants installed, parsed once into typed values.

The flags (and ``cudalock.toml``, which records them) arrive as strings in
:class:`RequestOptions`; :meth:`RequestOptions.to_request` / :func:`make_request` parse and check
them once, and everything below the command line works on the typed :class:`Request`: the torch
spec as PEP 440, the CUDA pin as a version (or ``"cpu"``), the compat policy as a Literal, the
companions and frameworks as values. Strings come back only at the edges (JSON, cudalock.toml,
messages: ``str()`` of each value is the text it was read from, normalised).

Flags win over the spec file, which wins over the defaults. ``--with`` adds to the default
torchvision (``--with none`` drops it); index URLs follow :mod:`cudalock.urls` (https, or
loopback). A bad value raises :class:`InputError` / :class:`UsageError` naming it and what is
expected (exit 2).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.version import InvalidVersion, Version

from cudalock.defaults import DEFAULT_PYTORCH_INDEX
from cudalock.errors import InputError, UsageError
from cudalock.packagenames import canonical_name
from cudalock.safetext import has_control
from cudalock.urls import strip_credentials, validate_index_url
from cudalock.versions import (
    CudaVersion,
    cuda_from_variant,
    format_cuda,
    parse_cuda_flag,
    parse_python_version,
)

if TYPE_CHECKING:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

__all__ = [
    "COMPANIONS",
    "COMPATS",
    "CPU_VARIANT",
    "TORCH_FAMILY",
    "Companion",
    "Compat",
    "CudaPin",
    "Framework",
    "FrameworkKind",
    "Request",
    "RequestOptions",
    "TorchSpec",
    "check_framework",
    "cuda_pin_text",
    "make_request",
    "parse_companion",
    "parse_compat",
    "parse_cuda_pin",
    "parse_framework",
    "parse_torch_spec",
    "recorded_request",
]

#: The driver-compatibility policies: ``strict`` (build CUDA ≤ driver CUDA) or ``minor``.
Compat = Literal["strict", "minor"]
COMPATS: tuple[Compat, ...] = ("strict", "minor")
FrameworkKind = Literal["requirement", "path", "url"]
_VCS_PREFIXES = ("git+", "hg+", "svn+", "bzr+")

#: The packages cudalock pairs with torch; anything else belongs to a framework's own install.
COMPANIONS = ("torchvision", "torchaudio", "deepspeed")
#: The packages the PyTorch index publishes under one local label (``+cu128``), installed
#: together from it.
TORCH_FAMILY = ("torch", "torchvision", "torchaudio")
CPU_VARIANT = "cpu"
#: ``--cuda``: a CUDA version, or the CPU build.
CudaPin = CudaVersion | Literal["cpu"]


def parse_compat(text: str, *, source: str = "--compat") -> Compat:
    """The one check of a compat policy's spelling (``source`` names where it came from)."""
    for compat in COMPATS:
        if text == compat:
            return compat
    raise UsageError(f"invalid {source} {text!r}: expected 'strict' or 'minor'")


# --------------------------------------------------------------------------------------------
# torch


@dataclass(frozen=True)
class TorchSpec:
    """``--torch``: the text as given (stripped) and the releases it admits.

    ``exact`` is the one release an ``==X.Y.Z`` names: the quiet searches that check a fix ask
    for one release each, so such a spec builds no SpecifierSet unless :attr:`specifier` is
    asked for.
    Empty text: any release.
    """

    text: str = ""
    exact: Version | None = field(default=None, compare=False)
    _specifier: SpecifierSet | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.text

    def __bool__(self) -> bool:
        return bool(self.text)

    @property
    def specifier(self) -> SpecifierSet | None:
        """The spec as PEP 440 (a bare ``2.1`` is ``==2.1.*``); None without ``--torch``."""
        if self.exact is not None:
            from packaging.specifiers import SpecifierSet

            return SpecifierSet(f"=={self.exact}")
        return self._specifier

    def admits(self, version: Version | str) -> bool:
        """Whether a torch release matches (every release does without --torch)."""
        if self.exact is not None:
            return (version if isinstance(version, Version) else Version(version)) == self.exact
        return self._specifier is None or self._specifier.contains(version, prereleases=True)


def parse_torch_spec(text: str) -> TorchSpec:
    """``">=2.1,<2.5"`` as PEP 440; a bare ``"2.1"`` means ``==2.1.*``, ``"2.1.0"`` ``==2.1.0``;
    empty (false) for no constraint."""
    cleaned = text.strip()
    if not cleaned:
        return TorchSpec()
    exact = _exact_version(cleaned)
    if exact is not None:
        return TorchSpec(cleaned, exact=exact)
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        bare = Version(cleaned)
    except InvalidVersion:
        bare = None
    if bare is not None:
        if len(bare.release) >= 3:
            return TorchSpec(cleaned, exact=bare)
        spec = f"=={bare}.*"
    else:
        spec = cleaned
    try:
        return TorchSpec(cleaned, _specifier=SpecifierSet(spec))
    except InvalidSpecifier:
        raise InputError(
            f"invalid torch version spec {text!r}: expected PEP 440 like '>=2.1,<2.5' or '2.4.1'"
        ) from None


#: ``2.9.1+cu128`` (``==2.9.1+cpu``), as pip prints a build: one release and its variant.
_LABELLED_RE = re.compile(r"^\s*(?:==\s*)?(\d+(?:\.\d+){1,3})\+(cu\d{2,4}|cpu)\s*$", re.ASCII)


def split_torch_label(text: str) -> tuple[str, CudaPin | None]:
    """``--torch`` as pasted from pip (``2.9.1+cu128``): the release (``==2.9.1``) and the CUDA
    its local label names (``(12, 8)``, ``"cpu"``); other specs unchanged, with no CUDA."""
    match = _LABELLED_RE.match(text)
    if match is None:
        return text, None
    version, variant = match.groups()
    if variant == CPU_VARIANT:
        return f"=={version}", "cpu"
    cuda = cuda_from_variant(variant)
    if cuda is None:
        return text, None
    return f"=={version}", cuda


def _torch_and_cuda(torch: str, cuda: str | None) -> tuple[TorchSpec, CudaPin | None]:
    """``--torch`` and ``--cuda`` together: a labelled ``--torch`` names its build's CUDA, and a
    ``--cuda`` that names another is refused (UsageError)."""
    spec, labelled = split_torch_label(torch)
    pinned = parse_cuda_pin(cuda) if cuda is not None else None
    if labelled is not None and pinned is not None and pinned != labelled:
        raise UsageError(
            f"--torch {torch.strip()} names the {cuda_pin_text(labelled)} build, but --cuda "
            f"{cuda_pin_text(pinned)} asks for another: give one of them"
        )
    return parse_torch_spec(spec), pinned if pinned is not None else labelled


def _exact_version(spec: str) -> Version | None:
    """The version ``==X.Y.Z`` names, else None (a range, a wildcard, or anything else)."""
    if not spec.startswith("==") or "*" in spec or "," in spec or ";" in spec:
        return None
    try:
        return Version(spec[2:].strip())
    except InvalidVersion:
        return None


# --------------------------------------------------------------------------------------------
# CUDA


def parse_cuda_pin(text: str) -> CudaPin:
    """``--cuda``: ``"12.8"`` → ``(12, 8)``, ``"cpu"`` → ``"cpu"``."""
    cleaned = text.strip().lower()
    return "cpu" if cleaned == CPU_VARIANT else parse_cuda_flag(cleaned, "--cuda")


def cuda_pin_text(pin: CudaPin | None) -> str | None:
    """The pin as people write it (``"12.8"``, ``"cpu"``), None for no pin."""
    if pin is None or isinstance(pin, str):
        return pin
    return format_cuda(pin)


# --------------------------------------------------------------------------------------------
# Companions


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
    name = canonical_name(match.group(1))
    if name == "torch":
        raise InputError("'torch' is not a companion package: choose its version with --torch")
    # Any other name is a package the plan's variant index builds (xformers, torchao, ...):
    # whether it does is read from that index when the closure is resolved.
    return Companion(name, specifier)


def _companions(given: Sequence[str] | None) -> tuple[Companion, ...]:
    """``--with`` entries over the default torchvision (``none`` drops it)."""
    entries = list(given) if given is not None else []
    chosen: dict[str, Companion] = {}
    if not any(p.strip().lower() == "none" for p in entries):
        chosen["torchvision"] = Companion("torchvision")
    explicit: set[str] = set()
    for text in entries:
        if text.strip().lower() == "none":
            continue
        requirement = parse_companion(text)
        earlier = chosen.get(requirement.name)
        if earlier is not None and requirement.name in explicit:
            # --with 'deepspeed<0.15' --with 'deepspeed>=0.10' means both: the intersection.
            requirement = Companion(
                requirement.name, _intersection(earlier.specifier, requirement.specifier)
            )
        explicit.add(requirement.name)
        chosen[requirement.name] = requirement
    return tuple(chosen.values())


def _intersection(first: SpecifierSet | None, second: SpecifierSet | None) -> SpecifierSet | None:
    if first is None or second is None:
        return first or second
    return first & second


# --------------------------------------------------------------------------------------------
# Frameworks


@dataclass(frozen=True)
class Framework:
    """A ``--framework``: a requirement (``llamafactory==0.9.5``, ``name @ URL``), a VCS or
    other URL, or a local project directory.

    ``text`` is what uv, pip and the files are given (an absolute path for a directory);
    ``requirement`` is the parsed requirement of a ``requirement``, ``path`` the absolute
    directory of a ``path``.
    """

    text: str
    kind: FrameworkKind
    requirement: Requirement | None = field(default=None, compare=False, repr=False)
    path: Path | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.text


def check_framework(text: str) -> str:
    """A framework requirement, path or VCS URL on one line (shell quoting happens later)."""
    cleaned = text.strip()
    if not cleaned or has_control(cleaned):
        raise UsageError(
            f"invalid --framework {text!r}: expected a requirement "
            "(llamafactory==0.9.5), a local path or a VCS URL, on one line"
        )
    refuse_expansion(cleaned, "--framework")
    return cleaned


def refuse_expansion(text: str, what: str) -> None:
    """``${NAME}`` in a value cudalock hands to uv or pip is refused: both expand it from the
    environment in requirements files, which would send a secret to whatever host the value
    names (and print it in their errors)."""
    if "${" in text:
        raise UsageError(
            f"{what} {text!r} holds '${{': uv and pip would replace it with an environment "
            "variable's value; write the value itself (for index credentials, use uv's "
            "UV_INDEX_<NAME>_USERNAME/_PASSWORD or a netrc file)"
        )


def parse_framework(text: str, cwd: Path | None = None) -> Framework:
    """One framework, classified; a relative path counts from ``cwd`` (default: the current
    directory). Naming torch or a companion is an :class:`InputError`."""
    from packaging.requirements import InvalidRequirement, Requirement

    cleaned = check_framework(text)
    if cleaned.startswith(_VCS_PREFIXES) or re.match(r"^[a-z][a-z0-9+.-]*://", cleaned):
        return Framework(cleaned, "url")
    try:
        requirement: Requirement | None = Requirement(cleaned)
    except InvalidRequirement:
        requirement = None
    looks_like_path = cleaned.startswith((".", "/", "~")) or "/" in cleaned or "\\" in cleaned
    if requirement is None or (looks_like_path and not requirement.url):
        path = Path(os.path.expanduser(cleaned))
        path = Path(os.path.normpath(path if path.is_absolute() else (cwd or Path.cwd()) / path))
        return Framework(str(path), "path", path=path)
    name = canonical_name(requirement.name)
    if name == "torch" or name in COMPANIONS:
        flag = "--torch" if name == "torch" else f"--with {name}"
        raise InputError(
            f"--framework {cleaned!r} names {name}, which cudalock pairs with torch itself: "
            f"choose it with {flag}"
        )
    return Framework(cleaned, "requirement", requirement=requirement)


def _frameworks(texts: Sequence[str], cwd: Path | None) -> tuple[Framework, ...]:
    """The frameworks parsed one by one, each once, in the order given."""
    parsed: list[Framework] = []
    for text in texts:
        framework = parse_framework(text, cwd)
        if framework not in parsed:
            parsed.append(framework)
    return tuple(parsed)


# --------------------------------------------------------------------------------------------
# The Request


@dataclass(frozen=True)
class Request:
    """What the user asked for, parsed. An empty ``torch`` means "any release"."""

    torch: TorchSpec = TorchSpec()
    #: ``"3.11"``, ``"3.13t"``; None: the newest the release ships.
    python: str | None = None
    cuda: CudaPin | None = None
    compat: Compat = "strict"
    #: The companion packages: torchvision unless dropped, and every ``--with``.
    with_packages: tuple[Companion, ...] = (Companion("torchvision"),)
    frameworks: tuple[Framework, ...] = ()
    pytorch_index: str = DEFAULT_PYTORCH_INDEX
    pypi_index: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "torch": str(self.torch),
            "python": self.python,
            "cuda": cuda_pin_text(self.cuda),
            "compat": self.compat,
            "with": [str(c) for c in self.with_packages],
            "frameworks": [str(f) for f in self.frameworks],
            "pytorch_index": self.pytorch_index,
            "pypi_index": self.pypi_index,
        }


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
    cwd: Path | None = None,
) -> Request:
    """A :class:`Request` parsed from strings as flags give them (InputError/UsageError: exit 2).

    ``with_packages`` None means the default (torchvision); ``"none"`` in it drops the default,
    other entries add to it (an explicit ``torchvision>=...`` replaces the default one).
    Relative framework paths count from ``cwd`` (default: the current directory).
    """
    torch_spec, cuda_pin = _torch_and_cuda(torch or "", cuda)
    return Request(
        torch=torch_spec,
        python=parse_python_version(python) if python is not None else None,
        cuda=cuda_pin,
        compat=parse_compat(compat),
        with_packages=_companions(with_packages),
        frameworks=_frameworks(frameworks, cwd),
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


@dataclass(frozen=True)
class RequestOptions:
    """The Request as strings: the flags as given, or what ``cudalock.toml`` records (None: not
    given, so the next source, then the default, fills it)."""

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

    def over(self, base: RequestOptions | None) -> RequestOptions:
        """These options, each one not given taken from ``base``."""
        if base is None:
            return self

        def pick(given: Any, recorded: Any) -> Any:
            return given if given is not None else recorded

        return RequestOptions(
            torch=pick(self.torch, base.torch),
            python=pick(self.python, base.python),
            cuda=pick(self.cuda, base.cuda),
            compat=pick(self.compat, base.compat),
            with_packages=pick(self.with_packages, base.with_packages),
            frameworks=pick(self.frameworks, base.frameworks),
            pytorch_index=pick(self.pytorch_index, base.pytorch_index),
            pypi_index=pick(self.pypi_index, base.pypi_index),
            allow_insecure_index=self.allow_insecure_index or base.allow_insecure_index,
        )

    def to_request(self, base: RequestOptions | None = None, *, cwd: Path | None = None) -> Request:
        """The options laid over ``base`` (e.g. what ``cudalock.toml`` records), parsed."""
        merged = self.over(base)
        return make_request(
            torch=merged.torch,
            python=merged.python,
            cuda=merged.cuda,
            compat=merged.compat or "strict",
            with_packages=merged.with_packages,
            frameworks=merged.frameworks or (),
            pytorch_index=merged.pytorch_index,
            pypi_index=merged.pypi_index,
            allow_insecure_index=merged.allow_insecure_index,
            cwd=cwd,
        )

    @classmethod
    def of(cls, request: Request) -> RequestOptions:
        """``request`` as strings again: what ``cudalock.toml`` records."""
        return cls(
            torch=str(request.torch) or None,
            python=request.python,
            cuda=cuda_pin_text(request.cuda),
            compat=request.compat,
            # The list is complete: "none" first keeps a dropped torchvision out.
            with_packages=("none", *(str(c) for c in request.with_packages)),
            frameworks=tuple(str(f) for f in request.frameworks),
            pytorch_index=request.pytorch_index,
            pypi_index=request.pypi_index,
        )


def recorded_request(request: Request) -> Request:
    """``request`` as files people commit record it (cudalock.toml, pylock.toml): the
    user:password part of every URL removed, from the indexes and from VCS frameworks
    (``git+https://user:TOKEN@host/...``) alike."""
    return replace(
        request,
        frameworks=tuple(_without_credentials(f) for f in request.frameworks),
        pytorch_index=strip_credentials(request.pytorch_index),
        pypi_index=strip_credentials(request.pypi_index) if request.pypi_index else None,
    )


def _without_credentials(framework: Framework) -> Framework:
    text = strip_credentials(framework.text)
    return framework if text == framework.text else parse_framework(text)
