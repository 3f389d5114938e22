"""Finding and running uv, the resolution engine behind ``cudalock lock``.

cudalock never resolves dependencies itself: it hands uv a small input project and reads back
the ``pylock.toml`` uv writes. This module is the edge that starts the uv process, streams its
progress to the user (credentials redacted) and keeps the tail of what it said for errors.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudalock.errors import EnvironmentFailure
from cudalock.urls import redact

INSTALL_HINT = "reinstall cudalock (it depends on uv), or: pip install uv"

#: Environment variables that would let the user's uv settings re-route indexes behind
#: cudalock's back; cudalock chooses the indexes itself (mirrors go through its own flags).
_UV_ROUTING_VARIABLES = (
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_INDEX_STRATEGY",
    "UV_NO_INDEX",
    "UV_CONSTRAINT",
    "UV_OVERRIDE",
    "UV_EXCLUDE",
    "UV_TORCH_BACKEND",
    "UV_CONFIG_FILE",
    "UV_PYTHON",
    "UV_OFFLINE",
)


def find_uv() -> str:
    """The uv executable: the ``uv`` Python package's binary first, then ``uv`` on PATH."""
    try:
        import uv  # type: ignore[import-not-found,unused-ignore]

        found = str(uv.find_uv_bin())
        if os.access(found, os.X_OK):
            return found
    except (ImportError, FileNotFoundError, AttributeError):
        pass
    on_path = shutil.which("uv")
    if on_path:
        return on_path
    raise EnvironmentFailure(
        "cudalock lock needs uv to resolve the dependency closure, and uv was not found",
        hint=INSTALL_HINT,
    )


def uv_version(uv: str) -> str:
    """``uv --version`` as a bare version string ("0.13.9")."""
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argument list, no shell
            [uv, "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise EnvironmentFailure(f"cannot run {uv}: {err}", hint=INSTALL_HINT) from None
    words = done.stdout.split()
    if done.returncode != 0 or len(words) < 2:
        raise EnvironmentFailure(f"{uv} --version failed: {done.stderr.strip()}", hint=INSTALL_HINT)
    return words[1]


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
    timeout_s: float | None = None,
) -> UvRun:
    """Run uv with ``args``; every stderr line is passed (redacted) to ``echo`` as it arrives."""
    try:
        process = subprocess.Popen(  # noqa: S603 - a fixed argument list, no shell
            list(args),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,  # its own group: killed whole if cudalock is stopped
        )
    except OSError as err:
        raise EnvironmentFailure(
            f"cannot run {args[0]}: {err.strerror or err}", hint=INSTALL_HINT
        ) from None
    lines: list[str] = []
    assert process.stderr is not None and process.stdout is not None
    try:
        for raw in process.stderr:
            line = redact(raw.rstrip("\n"))
            lines.append(line)
            if echo is not None:
                echo(line)
        stdout = process.stdout.read()
        returncode = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise EnvironmentFailure(f"uv did not finish within {timeout_s:.0f} s") from None
    except BaseException:  # Ctrl-C or SIGTERM in cudalock: uv and its builds go with it
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    finally:
        process.stdout.close()
        process.stderr.close()
    return UvRun(returncode=returncode, stdout=redact(stdout), stderr="\n".join(lines))
