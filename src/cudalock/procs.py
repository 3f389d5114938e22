"""Child processes: run one to the end without ever blocking on its output, and name the signal
that ended one for people.

:func:`run` is the one way cudalock runs another program (uv, pip, the audited interpreter,
nvidia-smi, dmesg, sacct). The child gets a session and process group of its own; its stdout
and stderr are read at the same time, each up to a limit, so a child that writes a lot never
blocks on a full pipe; the timeout covers the whole run; and when the run ends in any other way
than the child exiting by itself (a timeout, too much output, Ctrl-C in cudalock), the child and
everything it started are killed, so nothing is left behind.

"Everything it started" includes what left the child's process group (``setsid``, a daemon's
double fork): on Linux cudalock is the child subreaper of its own descendants, so an orphan is
re-parented to cudalock rather than to init, and every process of a run carries the run's mark
in its environment. At the end of a run that did not end cleanly (timed out, cancelled, or its
output pipes still held open after the child exited) cudalock kills, repeatedly until none is
left, the child's process group, every process with the run's mark, every orphan re-parented to
it since the run began, and all their descendants. The pipes are never waited on past that: a
holder that escaped all of it cannot keep the run from returning.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from cudalock.errors import EnvironmentFailure

__all__ = [
    "ChildCancelled",
    "ChildOutputTooLarge",
    "ChildTimedOut",
    "Completed",
    "exit_status",
    "run",
    "signal_name",
]

#: Output kept of each stream by default; more is an error (:class:`ChildOutputTooLarge`).
DEFAULT_OUTPUT_LIMIT = 64 * 2**20
#: The longest line handed to ``on_line``; the rest of a longer line is dropped.
MAX_LINE_BYTES = 64 * 2**10
_CHUNK = 64 * 2**10
#: The environment variable that marks every process of one run (inherited through setsid).
RUN_MARK = "CUDALOCK_RUN"
#: How long the pipes may stay open after the child exited before cudalock looks for who holds
#: them (a well-behaved child's pipes reach end-of-file at once).
_PIPE_GRACE_S = 0.2
#: Rounds of killing: a process that forks while it is being killed is caught by the next one.
_KILL_ROUNDS = 20

#: Pids of the children :func:`run` has running now (never taken for orphans).
_RUNNING: set[int] = set()
_RUNNING_LOCK = threading.Lock()
_SUBREAPER: list[bool] = []


def signal_name(number: int) -> str:
    """``9`` → ``SIGKILL``; a number no signal has → ``signal 99``."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_status(returncode: int) -> str:
    """How a child ended, for a message: ``exit status 2``, or ``killed by SIGKILL`` (< 0)."""
    return (
        f"killed by {signal_name(-returncode)}" if returncode < 0 else f"exit status {returncode}"
    )


class ChildTimedOut(EnvironmentFailure):
    """The child ran past its timeout and was killed, with every process it started.

    ``stdout`` and ``stderr`` hold what it wrote before that (within the output limit), for
    callers that report how far it got.
    """

    def __init__(
        self, message: str, *, hint: str | None = None, stdout: bytes = b"", stderr: bytes = b""
    ) -> None:
        super().__init__(message, hint=hint)
        self.stdout = stdout
        self.stderr = stderr


class ChildCancelled(EnvironmentFailure):
    """The caller asked the run to stop (its ``cancel`` event was set); the child was killed."""


class ChildOutputTooLarge(EnvironmentFailure):
    """The child wrote more than the limit to one stream and was killed."""


@dataclass(frozen=True)
class Completed:
    """A child that exited by itself: its status and what it wrote."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes
    #: With ``keep_tail``: whether stdout lost its beginning to the limit.
    stdout_cut: bool = False

    @property
    def signal(self) -> int | None:
        """The signal that ended the child, if one did."""
        return -self.returncode if self.returncode < 0 else None

    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class _Reader(threading.Thread):
    """Drains one pipe: keeps up to ``limit`` bytes (the first ones, or with ``keep_tail`` the
    last ones), hands complete lines to ``on_line``."""

    def __init__(
        self,
        pipe: IO[bytes] | None,
        limit: int,
        wake: threading.Event,
        on_line: Callable[[str], None] | None,
        keep_tail: bool = False,
    ) -> None:
        super().__init__(daemon=True)
        self.pipe = pipe
        self.limit = limit
        #: Set when this reader stops early, so the run stops waiting for the child.
        self.wake = wake
        #: Whether it stopped early: past its limit, or on a failing line handler.
        self.stopped = False
        self.on_line = on_line
        self.keep_tail = keep_tail
        self.cut = False
        self.data = bytearray()
        #: With keep_tail: the newest chunks, dropped whole from the left (no big copies).
        self.chunks: collections.deque[bytes] = collections.deque()
        self.chunks_size = 0
        self.error: BaseException | None = None

    def output(self) -> bytes:
        """What was kept: the first ``limit`` bytes, or with ``keep_tail`` the last ones."""
        if not self.keep_tail:
            return bytes(self.data)
        return b"".join(self.chunks)[-self.limit :] if self.chunks else b""

    def run(self) -> None:
        pending = bytearray()
        assert isinstance(self.pipe, io.BufferedReader)
        read = self.pipe.read1  # what is there now, without waiting for a full chunk
        try:
            while chunk := read(_CHUNK):
                if self.keep_tail:
                    self.chunks.append(chunk)
                    self.chunks_size += len(chunk)
                    while self.chunks_size - len(self.chunks[0]) >= self.limit:
                        self.chunks_size -= len(self.chunks.popleft())
                        self.cut = True
                    if self.chunks_size > self.limit:
                        self.cut = True
                elif len(self.data) + len(chunk) > self.limit:
                    self.stopped = True
                    self.wake.set()
                    return
                else:
                    self.data += chunk
                if self.on_line is not None:
                    pending += chunk
                    *lines, rest = pending.split(b"\n")
                    pending = bytearray(rest[:MAX_LINE_BYTES])
                    for line in lines:
                        self.on_line(line[:MAX_LINE_BYTES].decode("utf-8", "replace"))
            if self.on_line is not None and pending:
                self.on_line(bytes(pending).decode("utf-8", "replace"))
        except (OSError, ValueError):
            return  # the pipe was closed under us: the run is being torn down
        except BaseException as err:
            self.error = err
            self.stopped = True
            self.wake.set()


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    what: str,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    merge_stderr: bool = False,
    on_line: Callable[[str], None] | None = None,
    keep_tail: bool = False,
    cancel: threading.Event | None = None,
) -> Completed:
    """Run ``argv`` to the end and return what it wrote (``what`` names it in messages).

    ``merge_stderr`` sends stderr into stdout (``Completed.stderr`` is then empty); ``on_line``
    is called with each line of stdout as it arrives. ``keep_tail`` keeps the last
    ``output_limit`` bytes of stdout instead of failing past the limit (a log reader wants the
    newest part). Raises :class:`ChildTimedOut` past ``timeout`` seconds,
    :class:`ChildOutputTooLarge` past ``output_limit`` bytes on one stream,
    :class:`ChildCancelled` once ``cancel`` is set (the child killed in each case, with
    everything it started), and the ``OSError`` of a program that cannot be started, for the
    caller to word.
    """
    args = [os.fspath(arg) for arg in argv]
    _become_subreaper()
    mark = os.urandom(16).hex()
    child_env = dict(os.environ if env is None else env)
    child_env[RUN_MARK] = mark
    started = _clock_ticks_now()
    with _RUNNING_LOCK:
        process = subprocess.Popen(  # noqa: S603 - callers pass a fixed list, never a shell line
            args,
            cwd=cwd,
            env=child_env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            start_new_session=True,
        )
        _RUNNING.add(process.pid)
    tree = _Tree(process, mark, started)
    # Set by whatever ends the wait: the child's exit, or a reader that stops early.
    wake = threading.Event()
    readers = [_Reader(process.stdout, output_limit, wake, on_line, keep_tail)]
    if not merge_stderr:
        readers.append(_Reader(process.stderr, output_limit, wake, None))
    exited = False
    ended = threading.Event()

    def wait_for_exit() -> None:
        with contextlib.suppress(OSError):
            process.wait()
        ended.set()
        wake.set()

    try:
        for reader in readers:
            reader.start()
        if stdin is not None:
            threading.Thread(target=_feed, args=(process, stdin), daemon=True).start()
        threading.Thread(target=wait_for_exit, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ended.is_set():
            if _overflow(readers):
                break
            if cancel is not None and cancel.is_set():
                tree.kill()
                raise ChildCancelled(f"{what} was stopped before it finished")
            left = deadline - time.monotonic()
            if left <= 0:
                tree.kill()
                for reader in readers:
                    reader.join(timeout=1)
                raise ChildTimedOut(
                    f"{what} did not finish within {timeout:g} s; it was stopped, with every "
                    "process it started",
                    stdout=readers[0].output(),
                    stderr=readers[1].output() if len(readers) > 1 else b"",
                )
            # No polling: the wait ends the moment the child exits or a reader gives up; a
            # cancel from another thread is looked at every quarter second.
            wake.wait(timeout=min(left, 0.25) if cancel is not None else left)
        exited = ended.is_set()
        # Whatever the child left running in its group goes with it.
        _kill_group(process)
        grace = time.monotonic() + _PIPE_GRACE_S
        for reader in readers:
            reader.join(timeout=max(0.0, grace - time.monotonic()))
        if any(reader.is_alive() for reader in readers):
            # Something that left the group holds the pipes: find it and kill it, then read
            # what is left for a moment, and never wait longer than that.
            tree.kill()
            for reader in readers:
                reader.join(timeout=1)
        failed = next((r.error for r in readers if r.error is not None), None)
        if failed is not None:
            raise failed
        if _overflow(readers):
            raise ChildOutputTooLarge(
                f"{what} wrote more than {output_limit // 2**20} MiB of output; it was stopped"
            )
    finally:
        if not exited or process.returncode is None:
            tree.kill()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                process.wait(timeout=10)
        with _RUNNING_LOCK:
            _RUNNING.discard(process.pid)
        # A pipe whose reader is still blocked (held by a process nothing could find) is left
        # to that daemon thread; closing it under the reader would not wake it.
        stuck = {id(reader.pipe) for reader in readers if reader.is_alive()}
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None and id(pipe) not in stuck:
                with contextlib.suppress(OSError):
                    pipe.close()
    return Completed(
        tuple(args),
        process.returncode,
        readers[0].output(),
        readers[1].output() if len(readers) > 1 else b"",
        stdout_cut=readers[0].cut,
    )


def _overflow(readers: Sequence[_Reader]) -> bool:
    """Whether a reader stopped past its limit (or on a failing line handler)."""
    return any(reader.stopped for reader in readers)


def _feed(process: subprocess.Popen[bytes], data: bytes) -> None:
    assert process.stdin is not None
    with contextlib.suppress(OSError, ValueError):
        process.stdin.write(data)
        process.stdin.close()


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (the child and whatever it started that stayed)."""
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(process.pid, signal.SIGKILL)


def _become_subreaper() -> None:
    """Make this process the child subreaper of its descendants (Linux; once per process), so a
    child's orphans come to it, where :class:`_Tree` finds them, instead of to init."""
    if _SUBREAPER or not sys.platform.startswith("linux"):
        return
    _SUBREAPER.append(True)
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        pr_set_child_subreaper = 36
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def _clock_ticks_now() -> int:
    """Now, in the unit of /proc/PID/stat's start time (clock ticks since boot); 0 off Linux."""
    try:
        with open("/proc/uptime", "rb") as handle:
            uptime = float(handle.read().split()[0])
        return max(0, int(uptime * os.sysconf("SC_CLK_TCK")) - 1)
    except (OSError, IndexError, ValueError):
        return 0


def _stat_fields(stat: bytes) -> list[int]:
    """The numeric fields of /proc/PID/stat after the name (state as 0): ppid is [1], pgrp [2],
    starttime [19]."""
    rest = stat[stat.rindex(b")") + 2 :].split()
    return [0, *(int(field) for field in rest[1:])]


@dataclass
class _Process:
    pid: int
    ppid: int
    pgrp: int
    start: int
    zombie: bool


class _Tree:
    """Every process one run started, wherever it went (see the module's docstring)."""

    def __init__(self, process: subprocess.Popen[bytes], mark: str, started: int) -> None:
        self.process = process
        self.mark = f"{RUN_MARK}={mark}".encode()
        self.started = started

    def kill(self) -> None:
        _kill_group(self.process)
        if not os.path.isdir("/proc/self"):
            return
        for _round in range(_KILL_ROUNDS):
            victims = self._members()
            if not victims:
                return
            for member in victims:
                with contextlib.suppress(OSError):
                    os.kill(member.pid, signal.SIGKILL)
            self._reap_orphans()
            time.sleep(0.005)
        self._reap_orphans()

    def _members(self) -> list[_Process]:
        table = _process_table()
        me = os.getpid()
        roots = {
            entry.pid
            for entry in table.values()
            if entry.pid != me
            and (
                entry.pgrp == self.process.pid
                or entry.pid == self.process.pid
                or self._adopted(entry, me)
                or (not entry.zombie and self._marked(entry.pid))
            )
        }
        children: dict[int, list[int]] = {}
        for entry in table.values():
            children.setdefault(entry.ppid, []).append(entry.pid)
        found: set[int] = set()
        pending = list(roots)
        while pending:
            pid = pending.pop()
            if pid in found or pid == me:
                continue
            found.add(pid)
            pending.extend(children.get(pid, ()))
        return [table[pid] for pid in found if not table[pid].zombie]

    def _adopted(self, entry: _Process, me: int) -> bool:
        """An orphan re-parented to cudalock since this run began (not one of its own runs)."""
        with _RUNNING_LOCK:
            running = entry.pid in _RUNNING
        return entry.ppid == me and not running and entry.start >= self.started

    def _marked(self, pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                return self.mark in handle.read().split(b"\0")
        except OSError:
            return False

    def _reap_orphans(self) -> None:
        """Collect the exit status of adopted orphans that died, so no zombie stays."""
        me = os.getpid()
        for entry in _process_table().values():
            if entry.zombie and self._adopted(entry, me) and entry.pid != self.process.pid:
                with contextlib.suppress(OSError):
                    os.waitpid(entry.pid, os.WNOHANG)


def _process_table() -> dict[int, _Process]:
    table: dict[int, _Process] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                raw = handle.read()
            fields = _stat_fields(raw)
            state = raw[raw.rindex(b")") + 2 : raw.rindex(b")") + 3]
        except (OSError, ValueError, IndexError):
            continue
        table[int(name)] = _Process(int(name), fields[1], fields[2], fields[19], state == b"Z")
    return table
