"""Text from outside (probe files, reports, logs, flags) made safe to print and to write.

A terminal obeys the control sequences in what it prints: ``ESC [2J`` clears the screen,
``OSC 0`` sets the window title, ``OSC 52`` writes the clipboard, and a carriage return or a
bidirectional override makes a line read as something it is not. :func:`printable` escapes every
such character, so what reaches the terminal (or a comment in a generated file) is plain text;
:func:`has_control` lets readers refuse values where no legitimate one has them (host and GPU
names, matrix entries).
"""

from __future__ import annotations

import re

__all__ = ["has_control", "printable"]

#: DEL, C1 controls, line/paragraph separators, zero-width and bidi marks and overrides, and
#: lone surrogates (bytes that were not UTF-8).
_OTHER_CONTROLS = "\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff"
_UNPRINTABLE_RE = re.compile(f"[\x00-\x1f{_OTHER_CONTROLS}]")
#: The same, but newline and tab are text.
_UNPRINTABLE_KEEPING_LINES_RE = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHER_CONTROLS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, *, keep_lines: bool = True) -> str:
    """``text`` with every control character written as an escape (``\\x1b``, ``\\u202e``);
    newlines and tabs stay unless ``keep_lines`` is false."""
    pattern = _UNPRINTABLE_KEEPING_LINES_RE if keep_lines else _UNPRINTABLE_RE
    return pattern.sub(_escape, text)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (newline and tab included)."""
    # Every character the pattern matches is one str.isprintable() rejects (categories Cc,
    # Cf, Cs, Zl, Zp, Cn), and the usual value is printable: answered without the pattern.
    return not text.isprintable() and _UNPRINTABLE_RE.search(text) is not None
