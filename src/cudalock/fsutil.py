"""Writing files so that a failure leaves nothing half-written.

Every output goes to a temporary file in the destination directory, is flushed and fsynced, and
then renamed over the destination: readers see the old file or the new one, never a mix. A group
of files is checked for clobbering before the first one is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from cudalock.errors import EnvironmentFailure, UsageError


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
