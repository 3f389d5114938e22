"""`cudalock probe` (placeholder until its implementation lands)."""

from __future__ import annotations

from cudalock.cli.options import TargetOptions, target_options
from cudalock.errors import UsageError


@target_options
def probe(target_opts: TargetOptions) -> None:
    """Not available yet."""
    raise UsageError("'probe' is not available yet")
