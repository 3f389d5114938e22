"""Resolve: the torch stack a Target (or a fleet) can run, chosen from the matrix, and why.

``resolve(matrix, targets, request) -> Plan`` is pure: no I/O, no globals.
The Request it takes is :mod:`cudalock.request`; :func:`make_request` and
:func:`parse_torch_spec` are re-exported here for library use beside :func:`resolve`.
"""

from cudalock.request import make_request, parse_torch_spec
from cudalock.resolve.fixes import apply_fix
from cudalock.resolve.search import nearest, resolve

__all__ = [
    "apply_fix",
    "make_request",
    "nearest",
    "parse_torch_spec",
    "resolve",
]
