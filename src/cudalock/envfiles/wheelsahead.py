"""The wheels a new environment downloads, fetched before install.sh runs: the torch and CUDA
wheels while uv resolves the closure, the rest once it is resolved.

Before uv first runs, the lock knows what it will take from the variant index in an exact
version: the torch family and the CUDA wheels torch pins (:class:`RoutedWheels`), several GB of
a torch environment's downloads. ``bootstrap --create`` hands them to uv at once: ``uv pip
install --target`` of a throwaway directory (hard links into uv's cache where it is on the
cache's filesystem, else symlinks: nothing is copied) leaves their wheels in uv's cache, the
cache install.sh's uv then installs them from, checked against the lock's hashes as every file
is. A dry run first finds whether uv would download anything; with every wheel cached, nothing
more is done. Where the Python is still to be chosen, the closure is resolved for one Python
after another: each begins its own head start and stops the one before. Once the closure is
resolved, the rest of what install.sh's uv installs first (``pylock.first.toml``, the wheels the
head start is not fetching) follows the same way, while the torch wheels still download. It is
a head start and nothing more: when it fails, install.sh downloads them as it would have, and
the run says so.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudalock import procs
from cudalock.envfiles.progress import Heartbeat, Live, Progress
from cudalock.errors import EnvironmentFailure
from cudalock.fsutil import append_log
from cudalock.lock.closure import Echo, RoutedWheels
from cudalock.lock.uv import INSTALL_ROUTING_VARIABLES
from cudalock.packagenames import canonical_name
from cudalock.urls import redact

__all__ = ["WheelsAhead", "link_mode", "wheels_ahead_wanted"]

#: uv's output kept for the log (a line per wheel and a few more).
OUTPUT_LIMIT = 2**20
#: What the progress line calls the download (short: the line fits an 80-column terminal).
TITLE = "the torch and CUDA wheels"
#: What the output and the log call it.
DOWNLOAD = f"{TITLE}, downloading since the resolution began"
#: The other wheels of the lock, downloaded from when the closure is resolved.
REST_TITLE = "the other wheels"
REST_DOWNLOAD = f"{REST_TITLE}, downloading since the closure was resolved"


def wheels_ahead_wanted(environ: Mapping[str, str]) -> bool:
    """Whether a head start can help: not with uv's cache turned off (the wheels would land in
    a temporary cache install.sh never reads) or offline (nothing is downloaded at all)."""
    unset = ("", "0", "false", "no", "off")  # uv's spellings of a flag left off
    return all(environ.get(name, "").lower() in unset for name in ("UV_NO_CACHE", "UV_OFFLINE"))


def _why_replaced(started: RoutedWheels, wanted: RoutedWheels) -> str:
    """Why the download of ``started`` stops for ``wanted``: what the closure changed."""
    if started.python != wanted.python:
        return f"the closure is resolved for Python {wanted.python} instead"
    if started.python_platform != wanted.python_platform:
        return f"the closure is resolved for {wanted.python_platform} instead"
    if started.index_url != wanted.index_url:
        return "the closure takes the torch family from another index"
    return "the closure is resolved again, with other torch and CUDA pins"


class WheelsAhead:
    """Downloads into uv's cache, each in a thread: :class:`RoutedWheels` as soon as they are
    known (:meth:`start`, the ``on_routed`` of the closure's resolution), then the other
    wheels of the lock once the closure is resolved (:meth:`start_rest`). :meth:`wait` is
    called before install.sh runs, and :meth:`unless_waited` stops the downloads and removes
    what they made when the run fails first."""

    def __init__(
        self, uv: str, interpreter: str | None, environ: Mapping[str, str], *, timeout_s: float
    ) -> None:
        """``interpreter``: the one uv downloads with (None: one uv finds; the wheels are
        chosen for the given Python version and platform either way)."""
        self._uv, self._interpreter, self._timeout_s = uv, interpreter, timeout_s
        self._environ = {k: v for k, v in environ.items() if k not in INSTALL_ROUTING_VARIABLES}
        self._scratch: Path | None = None
        self._targets = itertools.count()
        self._link_lock = threading.Lock()
        self._link: str | None = None
        #: The torch and CUDA wheels being downloaded, and for what.
        self._head: tuple[RoutedWheels, _Download] | None = None
        self._rest: _Download | None = None
        #: Every download started, stopped ones too (their lines go in the log).
        self._downloads: list[_Download] = []

    def start(self, wheels: RoutedWheels) -> None:
        """Download ``wheels``; a download begun for other wheels (the closure is resolved
        again, for another Python) is stopped."""
        if self._head is not None:
            if self._head[0] == wheels:
                return
            self._stop_head(_why_replaced(self._head[0], wheels))
        batch = self._batch(wheels.index_url, wheels.pins, wheels.python, wheels.python_platform)
        download = _Download(
            TITLE, DOWNLOAD, [batch], len(wheels.pins), self._timeout_s, self._link_mode
        )
        self._head = (wheels, download)
        self._downloads.append(download)

    def _stop_head(self, reason: str) -> None:
        if self._head is not None:
            self._head[1].stop(reason)
            self._head = None

    def _batch(self, index_url: str, pins: Sequence[str], python: str, platform: str) -> _Batch:
        """``uv pip install --target`` of ``pins`` from ``index_url`` for ``python`` on
        ``platform``: only uv's cache is wanted, and the directory is removed once the wheels
        are there."""
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="cudalock-wheels-ahead-"))
        command = [
            self._uv,
            "pip",
            "install",
            "--no-config",
            "--no-deps",
            "--target",
            str(self._scratch / f"target-{next(self._targets)}"),
            *(["--python", self._interpreter] if self._interpreter else []),
            "--python-version",
            python,
            "--python-platform",
            platform,
            *pins,
        ]
        # The index goes in the environment, not the command line, which others may read.
        return _Batch(command, self._environ | {"UV_DEFAULT_INDEX": index_url})

    def start_rest(
        self,
        packages: Sequence[Mapping[str, Any]],
        index_for: Callable[[str], str],
        python: str,
        platform: str,
    ) -> None:
        """Download the wheels of the lock's ``packages`` (what install.sh's uv installs
        first, for ``python`` on ``platform``) that :meth:`start` is not downloading already:
        the rest of what install.sh downloads, fetched while the torch wheels still are. A head
        start for another Python is stopped. Each package comes from the index the lock takes
        it from (``index_for``, credentials and all), as install.sh's uv takes it, so uv caches
        the file install.sh installs; left to install.sh are packages without a wheel in the
        lock (it builds them) and those with a marker (uv is not asked to judge them here)."""
        if self._rest is not None:
            return
        if self._head is not None and (self._head[0].python, self._head[0].python_platform) != (
            python,
            platform,
        ):
            self._stop_head(f"the closure was resolved for Python {python}")
        ahead = self._head[0].pins if self._head is not None else ()
        routed = {canonical_name(pin.split("==", 1)[0]) for pin in ahead}
        by_index: dict[str, list[str]] = {}
        for package in packages:
            name, version = package.get("name"), package.get("version")
            if (
                isinstance(name, str)
                and isinstance(version, str)
                and package.get("wheels")
                and "marker" not in package
                and canonical_name(name) not in routed
            ):
                by_index.setdefault(index_for(name), []).append(f"{name}=={version}")
        batches = [self._batch(index, pins, python, platform) for index, pins in by_index.items()]
        if batches:
            total = sum(len(pins) for pins in by_index.values())
            # A cache that lacked the torch wheels seldom has the rest: the dry run (about
            # 0.1 s for a hundred wheels) would only delay the download. With torch's cached,
            # it keeps a warm run from linking a hundred packages for nothing.
            head = self._head[1] if self._head is not None else None
            dry_run = head is None or head.all_cached is not False
            self._rest = _Download(
                REST_TITLE,
                REST_DOWNLOAD,
                batches,
                total,
                self._timeout_s,
                self._link_mode,
                dry_run=dry_run,
            )
            self._downloads.append(self._rest)

    def wait(self, log: Path, echo: Echo, live: Live | None = None) -> None:
        """Wait for the downloads, showing how far each is while it runs; write what uv said
        to ``log``; say a failure (install.sh then downloads those wheels itself)."""
        for download in self._downloads:
            download.wait(echo, live)
        with append_log(log) as handle:
            for download in self._downloads:
                handle.write(f"\n### {download.what}\n")
                handle.writelines(line + "\n" for line in download.lines)
        for download in self._downloads:
            if download.failure is not None:
                echo(
                    f"  note: downloading {download.title} ahead failed ({download.failure}); "
                    f"install.sh downloads them (log: {log})"
                )
        self._downloads, self._head, self._rest = [], None, None
        self._remove()

    def _link_mode(self, env: Mapping[str, str]) -> str:
        """:func:`link_mode` of the scratch directory, where every target is: asked of uv
        once."""
        with self._link_lock:
            if self._link is None:
                assert self._scratch is not None  # made by the first batch
                self._link = link_mode(self._uv, self._scratch, env)
            return self._link

    def _remove(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    @contextlib.contextmanager
    def unless_waited(self) -> Iterator[None]:
        """Stop the downloads and remove their directory when the body raises (nothing is
        installed, or Ctrl-C), or when it ends without :meth:`wait` (no install)."""
        try:
            yield
        finally:
            if self._scratch is not None:
                for download in self._downloads:
                    download.stop("")
                self._remove()


@dataclass(frozen=True)
class _Batch:
    """One ``uv pip install --target`` of pins from one index (in ``env``)."""

    command: list[str]
    env: dict[str, str]


class _Download:
    """:class:`_Batch` runs, one after the other in a thread, for what they leave in uv's
    cache: a dry run of each first (unless ``dry_run`` is False), and with every wheel cached
    already nothing more."""

    def __init__(
        self,
        title: str,
        what: str,
        batches: Sequence[_Batch],
        total: int,
        timeout_s: float,
        link_mode: Callable[[Mapping[str, str]], str],
        *,
        dry_run: bool = True,
    ) -> None:
        #: What the progress line and a failure call it; what the output and the log call it.
        self.title, self.what = title, what
        self._timeout_s, self._dry_run, self._link_mode = timeout_s, dry_run, link_mode
        #: Whether the dry run found every wheel cached (None: not known).
        self.all_cached: bool | None = None
        self._cancel = threading.Event()
        self.lock = threading.Lock()
        self.lines: list[str] = []
        self.progress = Progress(title=title)
        self.progress.start_step("", time.monotonic(), total)
        #: Why the download failed, once it has.
        self.failure: str | None = None
        self.thread = threading.Thread(
            target=self._download, args=(batches,), name="cudalock-wheels-ahead", daemon=True
        )
        self.thread.start()

    def _take(self, line: str) -> None:
        with self.lock:
            self.lines.append(redact(line.rstrip("\r")))
            self.progress.feed(line)

    def _download(self, batches: Sequence[_Batch]) -> None:
        for batch in batches:
            if self._cancel.is_set() or not self._fetch(batch.command, batch.env):
                return

    def _fetch(self, command: list[str], env: dict[str, str]) -> bool:
        """One batch; False when it failed (said in :attr:`failure`) or was stopped."""
        # A dry run first: with every wheel in uv's cache, linking a real torch's ~15,000 files
        # into a directory that is then removed would be all the work, seconds of it.
        dry: int | None = 0
        if self._dry_run:
            said = len(self.lines)
            dry = self._run([*command, "--dry-run"], env)
            with self.lock:
                answer = self.lines[said:]
                cached = dry == 0 and not any(line.startswith("Would download") for line in answer)
                self.all_cached = cached
                if cached:
                    self.lines.append("every wheel is in uv's cache already: nothing to download")
            if cached:
                return True
        if dry == 0 and not self._cancel.is_set():
            done = self._run([*command, "--link-mode", self._link_mode(env)], env)
        else:
            done = dry  # what the dry run could not do, the download cannot either
        if done == 0:
            return True
        if done is not None and not self._cancel.is_set():
            errors = [line for line in self.lines if line.startswith(("error:", "ERROR:"))]
            detail = f": {errors[-1].removeprefix('error: ')}" if errors else ""
            self.failure = procs.exit_status(done) + detail
        return False

    def _run(self, command: list[str], env: dict[str, str]) -> int | None:
        """Run one uv command, its lines taken as they come; its exit status, or None when it
        could not run or was stopped (said in :attr:`failure`)."""
        with self.lock:
            self.lines.append(f"$ {redact(' '.join(command))}")
        try:
            return procs.run(
                command,
                what=f"downloading {self.title} ahead",
                timeout=self._timeout_s,
                env=env,
                merge_stderr=True,
                on_line=self._take,
                output_limit=OUTPUT_LIMIT,
                keep_tail=True,
                cancel=self._cancel,
            ).returncode
        except (OSError, EnvironmentFailure) as err:
            self.failure = err.message if isinstance(err, EnvironmentFailure) else str(err)
            return None

    def stop(self, reason: str) -> None:
        """Stop the download (a head start no longer wanted: ``reason`` says why in the log;
        "": the run ends)."""
        self._cancel.set()
        self.thread.join()
        if reason:
            with self.lock:
                self.lines.append(f"stopped: {reason}")
                self.failure = None  # stopped, not failed

    def wait(self, echo: Echo, live: Live | None) -> None:
        if self.thread.is_alive():
            echo(f"environment: waiting for {self.what}")
            with Heartbeat(self.progress, echo, live, lock=self.lock):
                self.thread.join()
        self.thread.join()


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
