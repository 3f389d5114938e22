"""Finding and running uv, the resolution engine behind ``cudalock lock``.

cudalock never resolves dependencies itself: it hands uv a small input project and reads back
the ``pylock.toml`` uv writes. This module is the edge that starts the uv process, streams its
progress to the user (credentials redacted) and keeps the tail of what it said for errors.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudalock import procs
from cudalock.errors import EnvironmentFailure
from cudalock.urls import redact

__all__ = [
    "INSTALL_HINT",
    "INSTALL_ROUTING_VARIABLES",
    "RUN_TIMEOUT_S",
    "UvRun",
    "find_uv",
    "run_uv",
    "uv_environment",
    "uv_version",
    "uv_version_later",
]

INSTALL_HINT = "Reinstall cudalock (it depends on uv), or install uv itself (pip install uv)."
#: How long one uv run may take in all; the network limits are uv's own (--timeout, --retries).
RUN_TIMEOUT_S = 30 * 60

#: Environment variables by which the user's uv and pip settings would add package sources or
#: requirements behind cudalock's back, at lock time or at install time (install.sh unsets them);
#: cudalock chooses the indexes itself (mirrors go through its own flags).
INSTALL_ROUTING_VARIABLES = (
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_INDEX_STRATEGY",
    "UV_NO_INDEX",
    "UV_CONSTRAINT",
    "UV_BUILD_CONSTRAINT",
    "UV_OVERRIDE",
    "UV_EXCLUDE",
    "UV_TORCH_BACKEND",
    "UV_CONFIG_FILE",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "PIP_NO_INDEX",
    "PIP_CONSTRAINT",
    "PIP_REQUIREMENT",
)
#: At lock time also the Python and offline mode, which cudalock sets itself.
_UV_ROUTING_VARIABLES = (*INSTALL_ROUTING_VARIABLES, "UV_PYTHON", "UV_OFFLINE")


def find_uv() -> str:
    """The uv executable: the ``uv`` Python package's binary first, then ``uv`` on PATH."""
    bundled = _bundled_uv()
    if bundled is not None:
        return bundled
    on_path = shutil.which("uv")
    if on_path:
        return on_path
    raise EnvironmentFailure(
        "cudalock lock needs uv to resolve the dependency closure, and uv was not found",
        hint=INSTALL_HINT,
    )


def _bundled_uv() -> str | None:
    """The binary of the ``uv`` Python package installed beside cudalock, if there is one."""
    try:
        import uv  # type: ignore[import-not-found,unused-ignore]

        found = str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError, AttributeError):
        return None
    return found if os.access(found, os.X_OK) else None


def uv_version(uv: str) -> str:
    """uv's version ("0.13.9"), as ``uv --version`` prints it: that process takes about 6 ms,
    less than importing importlib.metadata to read the ``uv`` package's version."""
    try:
        done = procs.run([uv, "--version"], what="uv --version", timeout=60)
    except (OSError, EnvironmentFailure) as err:
        raise EnvironmentFailure(f"cannot run {uv}: {err}", hint=INSTALL_HINT) from None
    words = done.stdout_text().split()
    if done.returncode != 0 or len(words) < 2:
        raise EnvironmentFailure(
            f"{uv} --version failed: {done.stderr_text().strip()}", hint=INSTALL_HINT
        )
    return words[1]


def uv_version_later(uv: str) -> Callable[[], str]:
    """:func:`uv_version`, asked at once in a thread (beside the work before uv first runs):
    the function returned waits for the answer, raising what :func:`uv_version` raised."""
    answer: list[str] = []
    failure: list[EnvironmentFailure] = []

    def ask() -> None:
        try:
            answer.append(uv_version(uv))
        except EnvironmentFailure as err:
            failure.append(err)

    thread = threading.Thread(target=ask, name="cudalock-uv-version", daemon=True)
    thread.start()

    def wait() -> str:
        thread.join()
        if failure:
            raise failure[0]
        return answer[0]

    return wait


def uv_environment(
    base: Mapping[str, str], *, timeout_s: int, retries: int, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment uv runs with: the caller's, less index routing, plus our limits."""
    env = {k: v for k, v in base.items() if k not in _UV_ROUTING_VARIABLES}
    env["UV_HTTP_TIMEOUT"] = str(timeout_s)
    env["UV_HTTP_RETRIES"] = str(retries)
    # uv must not download a Python just to cross-resolve for another Python version.
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class UvRun:
    """How one uv invocation ended."""

    returncode: int
    stdout: str
    #: Everything uv wrote on stderr, already redacted.
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_uv(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    echo: Callable[[str], None] | None = None,
    timeout_s: float = RUN_TIMEOUT_S,
) -> UvRun:
    """Run uv with ``args``; what it says on stderr is passed (redacted) to ``echo``.

    stdout and stderr are drained together, so a lock larger than a pipe buffer (uv prints it
    on stdout too) can never block uv, and ``timeout_s`` covers the whole run: past it, uv and
    whatever it started are stopped (exit 3).
    """
    try:
        done = procs.run(
            args,
            what=f"uv {' '.join(args[1:3])}".strip(),
            timeout=timeout_s,
            cwd=cwd,
            env=env,
        )
    except OSError as err:
        raise EnvironmentFailure(
            f"cannot run {args[0]}: {err.strerror or err}", hint=INSTALL_HINT
        ) from None
    lines = [redact(line) for line in done.stderr_text().splitlines()]
    if echo is not None:
        for line in lines:
            echo(line)
    return UvRun(
        returncode=done.returncode, stdout=redact(done.stdout_text()), stderr="\n".join(lines)
    )
