"""The errors cudalock reports to people, each with the exit status it maps to.

0 success, 1 problems found / nothing satisfies, 2 usage error or bad input, 3 the environment
failed (network, permissions, disk). The CLI turns these into one-line messages, no traceback.
"""

from __future__ import annotations

__all__ = [
    "EXIT_ENVIRONMENT",
    "EXIT_OK",
    "EXIT_PROBLEMS",
    "EXIT_USAGE",
    "CudalockError",
    "EnvironmentFailure",
    "InputError",
    "Terminated",
    "Unsatisfiable",
    "UsageError",
    "sentence",
]

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3


def sentence(text: str) -> str:
    """A hint put together from fragments (alternatives joined, a fix's words) as the sentence
    every hint is: its first letter a capital, a full stop at the end."""
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else text + "."


class CudalockError(Exception):
    """Base class: ``str(err)`` is the message shown to the user."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(CudalockError):
    """A bad flag, a bad value or a bad input file (exit 2)."""

    exit_code = EXIT_USAGE


class InputError(UsageError):
    """An input file (probe JSON, report, matrix, spec) that cannot be used (exit 2)."""


class Unsatisfiable(CudalockError):
    """Nothing in the matrix satisfies the request on the target (exit 1).

    ``rejected`` holds the nearest candidates (:class:`cudalock.model.Rejection`), each with the
    reason it was rejected and what would fix it.
    """

    exit_code = EXIT_PROBLEMS

    def __init__(
        self, message: str, *, rejected: tuple[object, ...] = (), hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.rejected = rejected


class EnvironmentFailure(CudalockError):
    """The machine or the network failed us: I/O, permissions, downloads (exit 3)."""

    exit_code = EXIT_ENVIRONMENT


class Terminated(BaseException):
    #: The signal that ended the run (SIGTERM or SIGHUP); the exit status is 128 + it.
    signum: int = 15

    """SIGTERM arrived: raised in the main thread so that every ``finally`` runs (temporary files
    removed, children killed), as for Ctrl-C. Not an Exception: nothing may swallow it."""
