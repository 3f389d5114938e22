"""Small helpers the command modules share (standard library only: the hot commands use them).

Everything a command prints goes through :func:`echo`, :func:`live_line` or :func:`emit_json`,
and these are the one layer that hides the credentials of URLs (``https://***@host/``): the
core's messages, plans and JSON quote URLs as given, and the files that need a credential
(install.sh) get it.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


def echo(text: str, *, err: bool = False) -> None:
    """Print one message and a newline on stdout (stderr with ``err``), flushed at once.

    Control characters are escaped: the text may quote probe files, reports and logs, whose
    escape sequences must not reach the terminal. URL credentials are hidden.
    """
    from cudalock.safetext import printable
    from cudalock.urls import redact

    stream = sys.stderr if err else sys.stdout
    stream.write(printable(redact(text)) + "\n")
    stream.flush()


def live_line(*, err: bool = False) -> Callable[[str], None] | None:
    """On a terminal, a function that redraws one status line in place (``""`` clears it);
    None elsewhere: a log gets whole lines only."""
    stream = sys.stderr if err else sys.stdout
    if not stream.isatty():
        return None
    import shutil

    from cudalock.safetext import printable
    from cudalock.urls import redact

    def draw(text: str) -> None:
        width = shutil.get_terminal_size().columns
        shown = printable(redact(text))[: max(width - 1, 10)]
        stream.write("\r\x1b[K" + shown if shown else "\r\x1b[K")
        stream.flush()

    return draw


def emit_json(document: Any) -> None:
    """Print one JSON document on stdout (sorted keys are not used: field order is documented).

    ``ensure_ascii`` (the default, said here because it matters) writes every control and
    non-ASCII character as a ``\\u`` escape, so no value can reach the terminal raw. URL
    credentials in every string are hidden.
    """
    from cudalock.urls import redact_json

    sys.stdout.write(json.dumps(redact_json(document), indent=2, ensure_ascii=True) + "\n")
