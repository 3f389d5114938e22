"""Fixes as data: what a :class:`~cudalock.model.Fix` changes, applied to targets and a request.

The resolver suggests a fix only after resolving with its changes applied (see
``resolve.search``); :func:`apply_fix` is the same application, public so that anyone (the
tests first) can check that a suggested fix does what its text says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cudalock.matrix import Matrix
from cudalock.model import Change, Fix, Request, Target
from cudalock.resolve.fleet import raise_driver
from cudalock.resolve.request import parse_companion
from cudalock.versions import DriverVersion

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
        return tuple(targets), replace(request, compat="minor" if value == "minor" else "strict")
    if change.kind == "python":
        return tuple(targets), replace(request, python=value)
    if change.kind == "torch":
        return tuple(targets), replace(request, torch=value)
    if change.kind == "cuda":
        return tuple(targets), replace(request, cuda=value)
    others = tuple(p for p in request.with_packages if parse_companion(p).name != value)
    if change.kind == "with":
        return tuple(targets), replace(request, with_packages=(*others, value))
    return tuple(targets), replace(request, with_packages=others)  # "without"
