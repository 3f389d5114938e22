"""Small helpers the command modules share (standard library only: the hot commands use them)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cudalock.matrix import Matrix
    from cudalock.target.overrides import TargetOptions


def echo(text: str, *, err: bool = False) -> None:
    """Print one message and a newline on stdout (stderr with ``err``), flushed at once."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def emit_json(document: Any) -> None:
    """Print one JSON document on stdout (sorted keys are not used: field order is documented)."""
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


def load_matrix_for(options: TargetOptions) -> Matrix:
    from cudalock.matrix.load import load_matrix

    return load_matrix(options.matrix_dir)
