"""The wheels a new environment downloads most of, fetched while uv resolves the closure.

Before uv first runs, the lock knows what it will take from the variant index in an exact
version: the torch family and the CUDA wheels torch pins (:class:`RoutedWheels`), several GB of
a torch environment's downloads. ``bootstrap --create`` hands them to uv at once: ``uv pip
install --target`` of a throwaway directory (hard links into uv's cache where it is on the
cache's filesystem, else symlinks: nothing is copied) leaves their wheels in uv's cache, the
cache install.sh's uv then installs them from, checked against the lock's hashes as every file
is. A dry run first finds whether uv would download anything; with every wheel cached, nothing
more is done. It is a head start and nothing more: when it fails, install.sh downloads them as
it would have, and the run says so.
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

__all__ = ["WheelsAhead", "link_mode", "wheels_ahead_wanted"]

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
            # Only uv's cache is wanted: the directory is removed once the wheels are there.
            "--target",
            str(self._scratch / "target"),
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
        # A dry run first: with every wheel in uv's cache, linking a real torch's ~15,000 files
        # into a directory that is then removed would be all the work, seconds of it.
        dry = self._run([*self._command, "--dry-run"], env)
        with self._lock:
            cached = dry == 0 and not any(line.startswith("Would download") for line in self._lines)
            if cached:
                self._lines.append("every wheel is in uv's cache already: nothing to download")
        if cached or self._cancel.is_set():
            return
        assert self._scratch is not None  # made by start()
        mode = link_mode(self._uv, self._scratch, env)
        done = self._run([*self._command, "--link-mode", mode], env)
        if done is None or done == 0:
            return
        errors = [line for line in self._lines if line.startswith(("error:", "ERROR:"))]
        detail = f": {errors[-1].removeprefix('error: ')}" if errors else ""
        self._failure = procs.exit_status(done) + detail

    def _run(self, command: list[str], env: dict[str, str]) -> int | None:
        """Run one uv command, its lines taken as they come; its exit status, or None when it
        could not run or was stopped (said in :attr:`_failure`)."""
        with self._lock:
            self._lines.append(f"$ {redact(' '.join(command))}")
        try:
            return procs.run(
                command,
                what="downloading the torch and CUDA wheels ahead",
                timeout=self._timeout_s,
                env=env,
                merge_stderr=True,
                on_line=self._take,
                output_limit=OUTPUT_LIMIT,
                keep_tail=True,
                cancel=self._cancel,
            ).returncode
        except (OSError, EnvironmentFailure) as err:
            self._failure = err.message if isinstance(err, EnvironmentFailure) else str(err)
            return None

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
            handle.write(f"\n### {DOWNLOAD}\n")
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


def link_mode(uv: str, directory: Path, env: Mapping[str, str]) -> str:
    """Hard links where ``directory`` is on the filesystem of uv's cache (cheap to make and to
    remove: a real torch's take about a second, symlinks several), else symlinks (a hard link
    to another filesystem is a copy)."""
    try:
        done = procs.run(
            [uv, "cache", "dir", "--no-config"], what="uv cache dir", timeout=60, env=env
        )
    except (OSError, EnvironmentFailure):
        return "symlink"
    cache = Path(done.stdout_text().strip() or ".").absolute()
    while not cache.exists() and cache != cache.parent:
        cache = cache.parent  # a cache not made yet goes where its parent is
    try:
        same = cache.stat().st_dev == directory.stat().st_dev
    except OSError:
        return "symlink"
    return "hardlink" if done.returncode == 0 and same else "symlink"
