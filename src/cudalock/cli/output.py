"""Small helpers the command modules share (standard library only: the hot commands use them)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cudalock.machine.overrides import TargetOptions
    from cudalock.matrix import Matrix


def echo(text: str, *, err: bool = False) -> None:
    """Print one message and a newline on stdout (stderr with ``err``), flushed at once.

    Control characters are escaped: the text may quote probe files, reports and logs, whose
    escape sequences must not reach the terminal.
    """
    from cudalock.safetext import printable

    stream = sys.stderr if err else sys.stdout
    stream.write(printable(text) + "\n")
    stream.flush()


def emit_json(document: Any) -> None:
    """Print one JSON document on stdout (sorted keys are not used: field order is documented).

    ``ensure_ascii`` (the default, said here because it matters) writes every control and
    non-ASCII character as a ``\\u`` escape, so no value can reach the terminal raw.
    """
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=True) + "\n")


def load_matrix_for(options: TargetOptions) -> Matrix:
    from cudalock.matrix.load import load_matrix

    return load_matrix(options.matrix_dir)
