"""Fixes as data: what a :class:`~cudalock.model.Fix` changes, applied to targets and a request.

The resolver suggests a fix only after resolving with its changes applied (see
``resolve.search``); :func:`apply_fix` is the same application, public so that anyone (the
tests first) can check that a suggested fix does what its text says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cudalock.matrix import Matrix
from cudalock.model import Change, Fix, Target
from cudalock.request import (
    Companion,
    Request,
    parse_compat,
    parse_cuda_pin,
    parse_torch_spec,
)
from cudalock.resolve.fleet import raise_driver
from cudalock.versions import DriverVersion, parse_python_version

__all__ = ["apply_change", "apply_fix"]


def apply_fix(
    matrix: Matrix, targets: Sequence[Target], request: Request, fix: Fix
) -> tuple[tuple[Target, ...], Request]:
    """The targets and the request with every change of ``fix`` made."""
    changed_targets, changed_request = tuple(targets), request
    for change in fix.changes:
        changed_targets, changed_request = apply_change(
            matrix, changed_targets, changed_request, change
        )
    return changed_targets, changed_request


def apply_change(
    matrix: Matrix, targets: Sequence[Target], request: Request, change: Change
) -> tuple[tuple[Target, ...], Request]:
    value = change.value
    if change.kind == "driver":
        driver = DriverVersion(value)
        return tuple(raise_driver(matrix, t, driver) for t in targets), request
    if change.kind == "compat":
        return tuple(targets), replace(request, compat=parse_compat(value))
    if change.kind == "python":
        return tuple(targets), replace(request, python=parse_python_version(value))
    if change.kind == "torch":
        return tuple(targets), replace(request, torch=parse_torch_spec(value))
    if change.kind == "cuda":
        return tuple(targets), replace(request, cuda=parse_cuda_pin(value))
    others = tuple(c for c in request.with_packages if c.name != value)
    if change.kind == "with":
        return tuple(targets), replace(request, with_packages=(*others, Companion(value)))
    return tuple(targets), replace(request, with_packages=others)  # "without"
