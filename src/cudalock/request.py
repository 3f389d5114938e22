"""Building a :class:`Request` from flags and a spec file, validating every value.

Flags win over the spec file (``cudalock.toml``), which wins over the defaults. Each bad value
raises :class:`UsageError` naming it and what is expected.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from cudalock.errors import UsageError
from cudalock.model import Request
from cudalock.urls import validate_index_url
from cudalock.versions import format_cuda, parse_cuda_version, parse_python_version

COMPAT_POLICIES = ("strict", "minor")
_BARE_VERSION_RE = re.compile(r"^\d+(\.\d+)*([a-z]+\d*)?$")


def normalize_torch_spec(text: str) -> str:
    """``"2.1.0"`` → ``"==2.1.0"``; ``">=2.1,<2.4"`` kept; ``""`` means any release."""
    cleaned = text.strip()
    if not cleaned:
        return ""
    if cleaned.lower().startswith("torch"):
        cleaned = cleaned[len("torch"):].strip()
    if _BARE_VERSION_RE.match(cleaned):
        cleaned = f"=={cleaned}"
    try:
        SpecifierSet(cleaned)
    except InvalidSpecifier:
        raise UsageError(
            f"invalid --torch {text!r}: expected a version like 2.1.0 or a specifier like "
            "'>=2.1,<2.4'"
        ) from None
    return cleaned


def validate_with(packages: Sequence[str]) -> tuple[str, ...]:
    """Companion packages as requirement strings (``torchvision``, ``deepspeed>=0.15``)."""
    kept: list[str] = []
    for text in packages:
        if not text.strip():
            continue
        try:
            Requirement(text)
        except InvalidRequirement:
            raise UsageError(
                f"invalid --with {text!r}: expected a package name, optionally with a version "
                "specifier, like deepspeed>=0.15"
            ) from None
        kept.append(text.strip())
    return tuple(kept)


def merge_request(base: Request | None, *, allow_insecure_index: bool = False,
                  **given: Any) -> Request:
    """``base`` (or the defaults) with every non-None value of ``given`` applied, validated.

    ``given`` keys are :class:`Request` field names.
    """
    current = base if base is not None else Request()
    changes = {key: value for key, value in given.items() if value is not None}
    unknown = set(changes) - {f.name for f in dataclasses.fields(Request)}
    if unknown:
        raise TypeError(f"unknown Request fields {sorted(unknown)}")
    merged = dataclasses.replace(current, **changes)
    return validate_request(merged, allow_insecure_index=allow_insecure_index)


def validate_request(request: Request, *, allow_insecure_index: bool = False) -> Request:
    """Normalise and check every field; raise :class:`UsageError` on the first bad one."""
    python = parse_python_version(request.python) if request.python else None
    cuda = format_cuda(parse_cuda_version(request.cuda)) if request.cuda else None
    if request.compat not in COMPAT_POLICIES:
        raise UsageError(f"invalid --compat {request.compat!r}: expected strict or minor")
    framework = request.framework.strip() if request.framework else None
    if framework is not None and (not framework or "\n" in framework or "\0" in framework):
        raise UsageError(f"invalid --framework {request.framework!r}: expected a requirement, "
                         "a local path or a VCS URL on one line")
    return dataclasses.replace(
        request,
        torch=normalize_torch_spec(request.torch),
        python=python,
        cuda=cuda,
        with_packages=validate_with(request.with_packages),
        framework=framework,
        pytorch_index=validate_index_url(request.pytorch_index, flag="--pytorch-index",
                                         allow_insecure=allow_insecure_index),
        pypi_index=(
            validate_index_url(request.pypi_index, flag="--pypi-index",
                               allow_insecure=allow_insecure_index)
            if request.pypi_index else None
        ),
    )
