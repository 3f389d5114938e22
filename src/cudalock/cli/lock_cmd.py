"""`cudalock lock` (placeholder until its implementation lands)."""

from __future__ import annotations

from cudalock.cli.options import TargetOptions, target_options
from cudalock.errors import UsageError


@target_options
def lock(target_opts: TargetOptions) -> None:
    """Not available yet."""
    raise UsageError("'lock' is not available yet")
