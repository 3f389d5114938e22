"""Resolve: the torch stack a Target (or a fleet) can run, chosen from the matrix, and why.

``resolve(matrix, targets, request) -> Plan`` is pure: no I/O, no globals.
"""

from cudalock.resolve.fixes import apply_fix
from cudalock.resolve.request import (
    COMPANIONS,
    CPU_VARIANT,
    FrameworkKind,
    RequestOptions,
    classify_framework,
    make_request,
    parse_companion,
    parse_torch_spec,
    recorded_request,
)
from cudalock.resolve.search import nearest, resolve

__all__ = [
    "COMPANIONS",
    "CPU_VARIANT",
    "FrameworkKind",
    "RequestOptions",
    "apply_fix",
    "classify_framework",
    "make_request",
    "nearest",
    "parse_companion",
    "parse_torch_spec",
    "recorded_request",
    "resolve",
]
