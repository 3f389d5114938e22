"""The wheels a new environment downloads most of, fetched while uv resolves the closure.

Before uv first runs, the lock knows what it will take from the variant index in an exact
version: the torch family and the CUDA wheels torch pins (:class:`RoutedWheels`), several GB of
a torch environment's downloads. ``bootstrap --create`` hands them to uv at once: ``uv pip
install --target`` of a throwaway directory, linked there by symlinks so nothing is copied,
leaves their wheels in uv's cache, the cache install.sh's uv then installs them from, checked
against the lock's hashes as every file is. It is a head start and nothing more: when it
fails, install.sh downloads them as it would have, and the run says so.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from cudalock import procs
from cudalock.envfiles.progress import Heartbeat, Live, Progress
from cudalock.errors import EnvironmentFailure
from cudalock.fsutil import append_log
from cudalock.lock.closure import Echo, RoutedWheels
from cudalock.lock.uv import INSTALL_ROUTING_VARIABLES
from cudalock.urls import redact

__all__ = ["WheelsAhead", "wheels_ahead_wanted"]

#: uv's output kept for the log (a line per wheel and a few more).
OUTPUT_LIMIT = 2**20
#: What the progress line calls the download (short: the line fits an 80-column terminal).
TITLE = "the torch and CUDA wheels"
#: What the output and the log call it.
DOWNLOAD = f"{TITLE}, downloading since the resolution began"


def wheels_ahead_wanted(environ: Mapping[str, str]) -> bool:
    """Whether a head start can help: not with uv's cache turned off (the wheels would land in
    a temporary cache install.sh never reads) or offline (nothing is downloaded at all)."""
    unset = ("", "0", "false", "no", "off")  # uv's spellings of a flag left off
    return all(environ.get(name, "").lower() in unset for name in ("UV_NO_CACHE", "UV_OFFLINE"))


class WheelsAhead:
    """Downloads :class:`RoutedWheels` into uv's cache in a thread (:meth:`start`, the
    ``on_routed`` of the closure's resolution); :meth:`wait` is called before install.sh runs,
    and :meth:`unless_waited` stops the download and removes what it made when the run fails
    first."""

    def __init__(
        self, uv: str, interpreter: str | None, environ: Mapping[str, str], *, timeout_s: float
    ) -> None:
        """``interpreter``: the one uv downloads with (None: one uv finds; the wheels are
        chosen for the given Python version and platform either way)."""
        self._uv, self._interpreter, self._timeout_s = uv, interpreter, timeout_s
        self._environ = {k: v for k, v in environ.items() if k not in INSTALL_ROUTING_VARIABLES}
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._lines: list[str] = []
        self._progress = Progress(title=TITLE)
        self._thread: threading.Thread | None = None
        self._scratch: Path | None = None
        self._command: list[str] = []
        #: Why the download failed, once it has.
        self._failure: str | None = None

    def start(self, wheels: RoutedWheels) -> None:
        if self._thread is not None:
            return
        self._scratch = Path(tempfile.mkdtemp(prefix="cudalock-wheels-ahead-"))
        self._command = [
            self._uv,
            "pip",
            "install",
            "--no-config",
            "--no-deps",
            # Only uv's cache is wanted: the directory gets symlinks into it, no copies.
            "--target",
            str(self._scratch / "target"),
            "--link-mode",
            "symlink",
            *(["--python", self._interpreter] if self._interpreter else []),
            "--python-version",
            wheels.python,
            "--python-platform",
            wheels.python_platform,
            *wheels.pins,
        ]
        # The index goes in the environment, not the command line, which others may read.
        env = self._environ | {"UV_DEFAULT_INDEX": wheels.index_url}
        self._progress.start_step("", time.monotonic(), len(wheels.pins))
        self._thread = threading.Thread(
            target=self._download, args=(env,), name="cudalock-wheels-ahead", daemon=True
        )
        self._thread.start()

    def _take(self, line: str) -> None:
        with self._lock:
            self._lines.append(redact(line.rstrip("\r")))
            self._progress.feed(line)

    def _download(self, env: dict[str, str]) -> None:
        try:
            done = procs.run(
                self._command,
                what="downloading the torch and CUDA wheels ahead",
                timeout=self._timeout_s,
                env=env,
                merge_stderr=True,
                on_line=self._take,
                output_limit=OUTPUT_LIMIT,
                keep_tail=True,
                cancel=self._cancel,
            )
        except (OSError, EnvironmentFailure) as err:
            self._failure = err.message if isinstance(err, EnvironmentFailure) else str(err)
            return
        if done.returncode != 0:
            errors = [line for line in self._lines if line.startswith(("error:", "ERROR:"))]
            status = (
                f"killed by {procs.signal_name(-done.returncode)}"
                if done.returncode < 0
                else f"exit status {done.returncode}"
            )
            self._failure = status + (f": {errors[0].removeprefix('error: ')}" if errors else "")

    def wait(self, log: Path, echo: Echo, live: Live | None = None) -> None:
        """Wait for the download, showing how far it is while it runs; write what uv said to
        ``log``; say a failure (install.sh then downloads the wheels itself)."""
        if self._thread is None:
            return
        if self._thread.is_alive():
            echo(f"environment: waiting for {DOWNLOAD}")
            with Heartbeat(self._progress, echo, live, lock=self._lock):
                self._thread.join()
        self._thread.join()
        with append_log(log) as handle:
            handle.write(f"\n### {DOWNLOAD}: {redact(' '.join(self._command))}\n")
            handle.writelines(line + "\n" for line in self._lines)
        if self._failure is not None:
            echo(
                f"  note: downloading the torch and CUDA wheels ahead failed ({self._failure}); "
                f"install.sh downloads them (log: {log})"
            )
        self._remove()

    def _remove(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    @contextlib.contextmanager
    def unless_waited(self) -> Iterator[None]:
        """Stop the download and remove its directory when the body raises (nothing is
        installed, or Ctrl-C), or when it ends without :meth:`wait` (no install)."""
        try:
            yield
        finally:
            if self._scratch is not None:
                self._cancel.set()
                if self._thread is not None:
                    self._thread.join()
                self._remove()
