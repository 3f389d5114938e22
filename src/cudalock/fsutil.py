"""Files: inputs read with a size limit while reading, outputs written so that a failure leaves
nothing half-written and nothing is ever written through a link.

An input (a probe file, a report, a log, a spec, a config) must be a regular file: a FIFO, a
device or a directory is refused at once, so ``/dev/zero`` or a pipe nobody writes to cannot make
cudalock grow without bound or wait forever. It is read up to a limit (logs: their last part).

Every output goes to a temporary file in the destination directory, is flushed and fsynced, and
then renamed over the destination: readers see the old file or the new one, never a mix, and a
link planted at the destination is replaced, never followed. A group of files is checked for
clobbering before the first one is written, and all of its files are renamed into place together
(Ctrl-C or SIGTERM waits for the renames), so a command's outputs appear together or not at all.
Files follow the umask like any file the user writes; a file that holds a secret (an index
password) is readable by its owner alone. :func:`output_lock` keeps two cudalock runs from
writing into one directory at the same time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import time
from collections.abc import Collection, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import BinaryIO, TextIO

from cudalock.errors import CudalockError, EnvironmentFailure, InputError, UsageError
from cudalock.urls import holds_credentials

__all__ = [
    "LOCK_FILE",
    "PIPE_READ_SECONDS",
    "SECRET_MODE",
    "append_log",
    "bound_directory",
    "cache_disabled",
    "credentials_note",
    "cudalock_cache_dir",
    "current_umask",
    "file_mode",
    "name_too_long",
    "open_regular",
    "output_lock",
    "read_bounded",
    "read_head",
    "read_stream",
    "read_tail",
    "refuse_existing",
    "start_log",
    "write_atomic",
    "write_group",
    "write_outputs",
]


def read_bounded(path: Path, *, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``; :class:`InputError` (exit 2) when it is missing,
    unreadable, not a regular file, or larger than ``limit`` bytes (``what`` names it: "probe
    file")."""
    data = _read_regular(path, limit + 1, what)
    if len(data) > limit:
        raise InputError(
            f"{what} {str(path)!r} is larger than {_size(limit)}; expected a "
            f"{what} of at most that size"
        )
    return data


def read_head(path: Path, *, limit: int, what: str) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of the regular file ``path`` and whether it held more; errors
    as :func:`read_bounded`."""
    data = _read_regular(path, limit + 1, what)
    return data[:limit], len(data) > limit


def _read_regular(path: Path, most: int, what: str) -> bytes:
    """At most ``most`` bytes of the regular file ``path``, read with plain system calls: a
    fleet reads thousands of small probe files. Each read is sized by the file (a read of n
    bytes allocates n bytes first, and the limit is far larger than the usual file); what a
    file that grew, or one whose size says nothing (/proc), holds beyond that is read after."""
    fd, size = _open_fd(path, what)
    try:
        first = min(size + 1, most)
        chunks = [os.read(fd, first)]
        got = len(chunks[0])
        while got >= first and got < most:  # the file held more than its size said
            chunk = os.read(fd, min(_CHUNK, most - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as err:
        raise _unreadable(what, path, err) from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_stream(stream: BinaryIO, *, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of ``stream`` (stdin the user chose: a pipe, a file, a device)
    and whether more was there; the rest is left unread."""
    data = bytearray()
    while len(data) <= limit:
        chunk = stream.read(min(_CHUNK, limit + 1 - len(data)))
        if not chunk:
            break
        data += chunk
    return bytes(data[:limit]), len(data) > limit


_CHUNK = 1 << 20


#: How long a pipe the user names (``--log <(dmesg)``, a FIFO) may take to reach its end.
PIPE_READ_SECONDS = 60.0
# How long a FIFO with no writer yet is given for one to arrive.
_WRITER_GRACE_SECONDS = 0.5


def read_tail(path: Path, *, limit: int, what: str) -> tuple[bytes, bool]:
    """The last ``limit`` bytes of the log ``path`` and whether it held more; errors as
    :func:`read_bounded`. A cut at the start drops the partial first line.

    A pipe or FIFO the user names is read too, within the same size and
    :data:`PIPE_READ_SECONDS`; devices are refused (``/dev/urandom`` never ends), and so are the
    kernel's files under /proc (``/proc/kmsg`` blocks, and reading it takes its messages away).
    """
    pipe = _open_pipe(path)
    if pipe is not None:
        return _tail_of_pipe(pipe, path, limit=limit, what=what)
    _refuse_proc(path, what)
    with _open_regular(path, what) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= limit:
            return handle.read(limit + 1)[:limit], False
        handle.seek(size - limit)
        data = handle.read(limit)
    newline = data.find(b"\n")
    return (data[newline + 1 :] if newline >= 0 else b""), True


def _open_pipe(path: Path) -> int | None:
    """A non-blocking descriptor of ``path`` when it is a FIFO or pipe (None otherwise)."""
    try:
        if not stat.S_ISFIFO(os.stat(path).st_mode):
            return None
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None  # the regular path says what is wrong with it


def _tail_of_pipe(fd: int, path: Path, *, limit: int, what: str) -> tuple[bytes, bool]:
    import collections
    import select

    kept: collections.deque[bytes] = collections.deque()
    size, cut, waited_for_writer = 0, False, False
    deadline = time.monotonic() + PIPE_READ_SECONDS
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise InputError(
                    f"{what} {str(path)!r} is a pipe that did not end within "
                    f"{PIPE_READ_SECONDS:g} s; write it to a file and pass that"
                )
            try:
                # Read first: with no writer at all a FIFO is at its end at once (select would
                # wait for one); with a writer and nothing written yet, wait for data.
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                select.select([fd], [], [], left)
                continue
            if not chunk:
                if waited_for_writer:
                    break
                # A writer blocked in its open (`command > fifo`) is woken by ours but may not
                # count as one yet: give it a moment before taking the end as the end.
                waited_for_writer = True
                select.select([fd], [], [], min(left, _WRITER_GRACE_SECONDS))
                continue
            waited_for_writer = True
            kept.append(chunk)
            size += len(chunk)
            while size - len(kept[0]) >= limit:
                size -= len(kept.popleft())
                cut = True
    except OSError as err:
        raise _unreadable(what, path, err) from None
    finally:
        os.close(fd)
    data = b"".join(kept)
    if len(data) > limit:
        data, cut = data[-limit:], True
    if not cut:
        return data, False
    newline = data.find(b"\n")
    return (data[newline + 1 :] if newline >= 0 else b""), True


def _refuse_proc(path: Path, what: str) -> None:
    """Refuse a file of the kernel's /proc file system (by device, whatever its name)."""
    try:
        on_proc = os.stat(path).st_dev == os.stat("/proc").st_dev
    except OSError:
        return
    if on_proc:
        raise InputError(
            f"{what} {str(path)!r} is a kernel interface under /proc, not a file (reading "
            "/proc/kmsg blocks and takes its messages away); pass a file, such as the output of "
            "'dmesg -T' or 'journalctl -k'"
        )


@contextlib.contextmanager
def open_regular(path: Path, *, what: str) -> Iterator[BinaryIO]:
    """``path`` opened for reading if it is a regular file (errors as :func:`read_bounded`), for
    readers that take a file apart piece by piece."""
    with _open_regular(path, what) as handle:
        yield handle


@contextlib.contextmanager
def _open_regular(path: Path, what: str) -> Iterator[BinaryIO]:
    fd, _size = _open_fd(path, what)
    try:
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        try:
            yield handle
        except OSError as err:
            raise _unreadable(what, path, err) from None


def _unreadable(what: str, path: Path, err: OSError) -> InputError:
    return InputError(f"cannot read {what} {str(path)!r}: {err.strerror or err}")


def _open_fd(path: Path, what: str) -> tuple[int, int]:
    """A blocking descriptor of the regular file ``path``, and its size."""
    shown = str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise InputError(f"{what} {shown!r} does not exist") from None
    except OSError as err:
        raise _unreadable(what, path, err) from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            kind = "a directory" if stat.S_ISDIR(status.st_mode) else "not a regular file"
            raise InputError(f"{what} {shown!r} is {kind}; expected a file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, status.st_size


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit // 2**10} KiB"


def refuse_existing(paths: list[Path], *, force: bool) -> None:
    """Exit 2 naming the first existing file (or link), unless ``force``."""
    if force:
        return
    for path in paths:
        if os.path.lexists(path):
            raise UsageError(f"{path} already exists; pass --force to overwrite it")


#: The mode of a file that holds a secret (an index password): its owner's alone.
SECRET_MODE = 0o600


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back; nothing else runs then)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def file_mode(*, executable: bool = False, secret: bool = False) -> int:
    """The mode a new output gets: what ``open()`` would give under the umask, or owner-only
    when it holds a secret."""
    if secret:
        return SECRET_MODE | (0o100 if executable else 0)
    return (0o777 if executable else 0o666) & ~current_umask()


def cudalock_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/cudalock``, else ``~/.cache/cudalock``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cudalock"


def cache_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """``CUDALOCK_NO_CACHE`` set (to anything but empty or 0) turns cudalock's caches off: index
    pages, wheels' metadata, the parsed matrix (not built wheels: CUDALOCK_NO_WHEEL_CACHE)."""
    value = (environ if environ is not None else os.environ).get("CUDALOCK_NO_CACHE", "")
    return value not in ("", "0")


def bound_directory(directory: Path, entries: int, *, suffix: str) -> None:
    """Keep at most ``entries`` files ending in ``suffix`` in the cache ``directory``: the
    oldest written go first. Entries of a content-keyed cache never change, so the oldest
    written is the one least likely to be asked for again; one removed is only read again."""
    try:
        with os.scandir(directory) as listing:
            found = [
                (entry.stat().st_mtime, entry.path)
                for entry in listing
                if entry.name.endswith(suffix) and entry.is_file(follow_symlinks=False)
            ]
    except OSError:
        return
    found.sort()
    for _mtime, path in found[: max(0, len(found) - entries)]:
        with contextlib.suppress(OSError):
            os.unlink(path)


def write_atomic(
    path: Path,
    content: str | bytes,
    *,
    mode: int | None = None,
    executable: bool = False,
    secret: bool = False,
) -> None:
    """Write ``content`` to ``path`` atomically (temp file + fsync + rename, never through a
    link). ``mode`` None: :func:`file_mode`."""
    write_group(
        {path: content},
        force=True,
        modes={path: mode} if mode is not None else None,
        executable=[path] if executable else (),
        secret=[path] if secret else (),
    )


def write_group(
    files: Mapping[Path, str | bytes],
    *,
    force: bool,
    modes: Mapping[Path, int] | None = None,
    executable: Collection[Path] = (),
    secret: Collection[Path] = (),
) -> None:
    """Write several outputs: refuse clobbering first, write every file beside its destination,
    then rename them all into place.

    If a rename fails, the files this call already replaced are restored to what they were, so
    a group is all-or-nothing as far as the file system allows; a signal arriving meanwhile is
    handled once the renames are done, and temporary files never outlive the call.
    """
    refuse_existing(list(files), force=force)
    data = {path: _encoded(path, content) for path, content in files.items()}
    temps: dict[Path, str] = {}
    try:
        for path, content in data.items():
            mode = (modes or {}).get(path)
            if mode is None:
                mode = file_mode(executable=path in executable, secret=path in secret)
            # temps[path] is set before the file is created: Ctrl-C or SIGTERM may interrupt
            # at any point, and the ``finally`` below must know every temporary file there is.
            _write_temp(path, content, mode, names=temps)
        with _signals_deferred():
            _rename_all(temps)
    finally:
        for temp in temps.values():
            with contextlib.suppress(OSError):
                os.unlink(temp)


def write_outputs(files: Mapping[Path, str], *, executable: Collection[Path] = ()) -> list[Path]:
    """A command's outputs, written as one group over what is there (:func:`write_group`):
    they follow the umask, and a file that holds a credential (a password or token in a URL)
    is its owner's alone. Returns those files, for the command to say so
    (:func:`credentials_note`)."""
    secret = [path for path, text in files.items() if holds_credentials(text)]
    write_group(files, force=True, executable=executable, secret=secret)
    return secret


def credentials_note(secret: Collection[Path]) -> str:
    names = ", ".join(sorted(path.name for path in secret))
    return f"{names}: hold(s) credentials from a URL; written readable by you alone"


def _encoded(path: Path, content: str | bytes) -> bytes:
    if isinstance(content, bytes):
        return content
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(
            f"cannot write {path}: a value in it is not valid text (a byte that is not UTF-8 "
            "in an argument?); nothing was written"
        ) from None


def _write_temp(
    path: Path, data: bytes, mode: int, *, names: MutableMapping[Path, str] | None = None
) -> str:
    """A fsynced temporary file with ``data`` beside ``path`` (O_EXCL, never a link).

    ``names[path]`` is set to the temporary file's name before a file of that name is
    created, for the caller's cleanup (mkstemp creates the file before it hands back the name).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = _create_temp(path, names)
    except OSError as err:
        raise _failure(path, err) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(err, OSError):
            raise _failure(path, err) from None
        raise
    return temp


_TEMP_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def _create_temp(path: Path, names: MutableMapping[Path, str] | None) -> tuple[int, str]:
    """A new file ``.NAME.XXXXXXXX.tmp`` beside ``path``, readable by its owner only, and its
    name (recorded in ``names`` first)."""
    for _attempt in range(100):
        temp = str(path.parent / f".{path.name}.{os.urandom(4).hex()}.tmp")
        if names is not None:
            names[path] = temp
        try:
            return os.open(temp, _TEMP_FLAGS, 0o600), temp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", str(path.parent))


def _rename_all(temps: Mapping[Path, str]) -> None:
    """Rename each temporary file over its destination; on a failure put the old files back."""
    previous: dict[Path, bytes | None] = {}
    try:
        for path, temp in temps.items():
            previous[path] = _old_content(path)
            try:
                os.replace(temp, path)
            except OSError as err:
                raise _failure(path, err) from None
    except BaseException:
        for path, old in previous.items():
            with contextlib.suppress(OSError, EnvironmentFailure):
                if path in temps and os.path.lexists(temps[path]):
                    continue  # not replaced yet
                if old is None:
                    os.unlink(path)
                else:
                    restored = _write_temp(path, old, file_mode())
                    os.replace(restored, path)
        raise
    for directory in {path.parent for path in temps}:
        _fsync_directory(directory)


def _old_content(path: Path) -> bytes | None:
    """What a regular file at ``path`` holds now (None: nothing there, or not a regular file)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _fsync_directory(directory: Path) -> None:
    # The renames themselves reach the disk only with the directory.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM arriving inside are handled when it ends (main thread only: Python
    runs signal handlers there, and only there can they be replaced)."""
    import threading  # only for commands that write

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def later(signum: int, frame: object) -> None:
        pending.append(signum)

    previous = {sig: signal.signal(sig, later) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for number in pending:
            signal.raise_signal(number)


def start_log(path: Path, header: str) -> None:
    """A fresh log at ``path`` holding ``header``: written beside and renamed over whatever was
    there, so a link planted at ``path`` is replaced, never followed."""
    write_atomic(path, header)


@contextlib.contextmanager
def append_log(path: Path) -> Iterator[TextIO]:
    """``path`` opened to append text, but only if it is a regular file of its own (not a link,
    not a second name of another file): what :func:`start_log` made."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise EnvironmentFailure(
            f"cannot write the log {path}: {_reason(err)}",
            hint="The log was replaced while cudalock ran (a link?): run again.",
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise EnvironmentFailure(
            f"cannot write the log {path}: it was replaced by a link or another file's name "
            "while cudalock ran; nothing was written to it"
        )
    with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as handle:
        yield handle


def _reason(err: OSError) -> str:
    if err.errno == errno.ELOOP:
        return "it is a symbolic link, which cudalock does not write through"
    return err.strerror or str(err)


def name_too_long(path: str | os.PathLike[str] | None) -> UsageError:
    """The usage error for a path past the system's limits (ENAMETOOLONG)."""
    shown = os.fspath(path) if path is not None else "a path"
    if len(shown) > 120:
        shown = shown[:60] + "…" + shown[-40:]
    return UsageError(
        f"{shown!r}: a name in it is longer than the system allows "
        f"({_NAME_MAX} bytes a name, {_PATH_MAX} bytes a path)"
    )


_NAME_MAX = 255
_PATH_MAX = 4096


def _failure(path: Path, err: OSError, *, inside: bool = False) -> CudalockError:
    if err.errno == errno.ENAMETOOLONG:
        return name_too_long(path)
    if err.errno == errno.ENOSPC:
        reason = "the disk is full"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        reason = "permission denied"
    else:
        reason = err.strerror or str(err)
    return EnvironmentFailure(
        f"cannot write {'in ' if inside else ''}{path}: {reason}; nothing was changed",
        hint="Free space, or choose another directory with -o.",
    )


# --------------------------------------------------------------------------------------------
# One writer per output directory

#: The lock file in an output directory while a command writes there (removed afterwards).
LOCK_FILE = ".cudalock.lock"


@contextlib.contextmanager
def output_lock(directory: Path, *, command: str, flag: str = "-o") -> Iterator[None]:
    """Hold ``directory`` for one command: a second cudalock writing there meanwhile exits 3
    naming this one. The directory is created if needed, and removed again if it is still
    empty at the end (a run that failed leaves nothing behind).

    ``flag`` names the option in the message when ``directory`` is not a directory (exit 2).
    """
    created = _make_directories(directory, flag)
    path = directory / LOCK_FILE
    try:
        fd = _acquire(path, directory)
        try:
            with contextlib.suppress(OSError):  # who holds it is only for the message
                os.ftruncate(fd, 0)
                os.write(fd, _holder(command).encode("utf-8", "replace"))
            yield
        finally:
            # Removed while still held: a run waiting on this inode sees it gone and retries.
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_ino == os.stat(path, follow_symlinks=False).st_ino:
                    os.unlink(path)
            os.close(fd)
    finally:
        # Innermost first, each only when empty: what the run wrote stays, and so does every
        # directory that was there before (a failed '-o new/a/b' leaves no 'new').
        for made in reversed(created):
            try:
                made.rmdir()
            except OSError:
                break


def _make_directories(directory: Path, flag: str) -> list[Path]:
    """Create ``directory`` and its missing parents; the ones this call created, outermost
    first."""
    try:
        if directory.is_dir():
            return []
        if os.path.lexists(directory):
            raise UsageError(f"{flag} {str(directory)!r} is not a directory")
    except OSError as err:
        raise _failure(directory, err) from None
    missing = []
    for candidate in (directory, *directory.parents):
        if os.path.lexists(candidate):
            break
        missing.append(candidate)
    created: list[Path] = []
    try:
        for candidate in reversed(missing):
            try:
                candidate.mkdir()
            except FileExistsError:
                if not candidate.is_dir():
                    raise NotADirectoryError(str(candidate)) from None
                continue
            created.append(candidate)
    except NotADirectoryError:
        _remove_made(created)
        raise UsageError(
            f"{flag} {str(directory)!r} cannot be created: Not a directory (a part of its path "
            "is a file)"
        ) from None
    except OSError as err:
        _remove_made(created)
        raise _failure(directory, err) from None
    return created


def _remove_made(created: list[Path]) -> None:
    for made in reversed(created):
        with contextlib.suppress(OSError):
            made.rmdir()


def _acquire(path: Path, directory: Path) -> int:
    for _attempt in range(50):
        try:
            fd = os.open(
                path,
                os.O_RDWR
                | os.O_CREAT
                | os.O_NOFOLLOW
                | getattr(os, "O_NONBLOCK", 0)  # a planted FIFO must not block the open
                | getattr(os, "O_CLOEXEC", 0),
                0o666 & ~current_umask(),
            )
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise EnvironmentFailure(
                    f"cannot lock {directory}: {path}: {_reason(err)}"
                ) from None
            raise _failure(directory.absolute(), err, inside=True) from None
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                raise EnvironmentFailure(f"cannot lock {directory}: {path} is not a regular file")
            if opened.st_nlink != 1:
                # A second name of another file (a planted hard link): writing the holder line
                # would change that file.
                raise EnvironmentFailure(
                    f"cannot lock {directory}: {path} is a hard link to another file, which "
                    "cudalock does not write into",
                )
            _flock(fd, directory, path)
            # The holder before us may have removed the file after we opened it: then this
            # lock is on a name nobody else will find, and we try again.
            if os.fstat(fd).st_ino == os.stat(path, follow_symlinks=False).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise EnvironmentFailure(f"cannot lock {directory}: {path} keeps changing")


def _flock(fd: int, directory: Path, path: Path) -> None:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        raise EnvironmentFailure(
            f"{directory} is in use by another cudalock run ({holder}); nothing was written",
            hint=f"Wait for it to finish, or choose another directory (the lock is {path}).",
        ) from None


def _read_holder(fd: int) -> str:
    # The holder writes its name just after it takes the lock: wait a moment for it.
    for _attempt in range(20):
        holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        if holder:
            return holder
        time.sleep(0.005)
    return "another process"


def _holder(command: str) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    return f"pid {os.getpid()}, '{command}', started {started}\n"
