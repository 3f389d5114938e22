"""Files: inputs read with a size limit while reading, outputs written so that a failure leaves
nothing half-written.

An input (a probe file, a report, a log, a spec, a config) must be a regular file: a FIFO, a
device or a directory is refused at once, so ``/dev/zero`` or a pipe nobody writes to cannot make
cudalock grow without bound or wait forever. It is read up to a limit (logs: their last part).

Every output goes to a temporary file in the destination directory, is flushed and fsynced, and
then renamed over the destination: readers see the old file or the new one, never a mix. A group
of files is checked for clobbering before the first one is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from cudalock.errors import EnvironmentFailure, InputError, UsageError


def read_bounded(path: Path, *, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``; :class:`InputError` (exit 2) when it is missing,
    unreadable, not a regular file, or larger than ``limit`` bytes (``what`` names it: "probe
    file")."""
    with _open_regular(path, what) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise InputError(
            f"{what} {str(path)!r} is larger than {_size(limit)}; expected a "
            f"{what} of at most that size"
        )
    return data


def read_tail(path: Path, *, limit: int, what: str) -> tuple[bytes, bool]:
    """The last ``limit`` bytes of the regular file ``path`` and whether it held more; errors
    as :func:`read_bounded`. A cut at the start drops the partial first line."""
    with _open_regular(path, what) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= limit:
            return handle.read(limit + 1)[:limit], False
        handle.seek(size - limit)
        data = handle.read(limit)
    newline = data.find(b"\n")
    return (data[newline + 1 :] if newline >= 0 else b""), True


@contextlib.contextmanager
def _open_regular(path: Path, what: str) -> Iterator[BinaryIO]:
    shown = str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise InputError(f"{what} {shown!r} does not exist") from None
    except OSError as err:
        raise InputError(f"cannot read {what} {shown!r}: {err.strerror or err}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise InputError(f"{what} {shown!r} is {kind}; expected a file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        try:
            yield handle
        except OSError as err:
            raise InputError(f"cannot read {what} {shown!r}: {err.strerror or err}") from None


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit // 2**10} KiB"


def refuse_existing(paths: list[Path], *, force: bool) -> None:
    """Exit 2 naming the first existing file, unless ``force``."""
    if force:
        return
    for path in paths:
        if path.exists():
            raise UsageError(f"{path} already exists; pass --force to overwrite it")


def write_atomic(path: Path, content: str | bytes, *, mode: int | None = None) -> None:
    """Write ``content`` to ``path`` atomically (temp file + fsync + rename)."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as err:
        raise _failure(path, err) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise _failure(path, err) from None


def write_group(
    files: Mapping[Path, str | bytes], *, force: bool, modes: Mapping[Path, int] | None = None
) -> None:
    """Write several outputs: refuse clobbering first, then write each one atomically.

    If a later write fails, the files this call already replaced are restored to what they were,
    so a group is all-or-nothing as far as the file system allows.
    """
    refuse_existing(list(files), force=force)
    previous: dict[Path, bytes | None] = {}
    try:
        for path, content in files.items():
            previous[path] = path.read_bytes() if path.exists() else None
            write_atomic(path, content, mode=(modes or {}).get(path))
    except EnvironmentFailure:
        for path, old in previous.items():
            with contextlib.suppress(OSError, EnvironmentFailure):
                if old is None:
                    path.unlink(missing_ok=True)
                else:
                    write_atomic(path, old)
        raise


def _failure(path: Path, err: OSError) -> EnvironmentFailure:
    if err.errno == errno.ENOSPC:
        reason = "the disk is full"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        reason = "permission denied"
    else:
        reason = err.strerror or str(err)
    return EnvironmentFailure(
        f"cannot write {path}: {reason}; nothing was changed",
        hint="free space or choose another directory with -o",
    )
