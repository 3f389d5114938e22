"""`cudalock doctor` and `cudalock memory` (placeholder until their implementation lands)."""

from __future__ import annotations

from cudalock.errors import UsageError


def doctor() -> None:
    """Not available yet."""
    raise UsageError("'doctor' is not available yet")


def memory() -> None:
    """Not available yet."""
    raise UsageError("'memory' is not available yet")
