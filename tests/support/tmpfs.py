"""A small tmpfs for file-system failure tests: full disk and read-only mounts.

Root ignores permission bits, so a chmod'ed directory proves nothing; a real mount does. Needs
root and mount permission; tests using it are skipped otherwise.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``64k``) mounted at ``mount_point`` (created) for the block."""
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


@contextmanager
def remounted_read_only(mount_point: Path) -> Iterator[None]:
    subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)
    try:
        yield
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(mount_point)], check=True)


def fill_device(filler: Path) -> None:
    """Write ``filler`` until the device holding it is full (ENOSPC)."""
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(descriptor, b"\0" * 1024):
            pass
    except OSError:
        pass  # ENOSPC: the device is full
    finally:
        os.close(descriptor)


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every entry of ``directory`` by name: a file's bytes, None for anything else."""
    return {p.name: p.read_bytes() if p.is_file() else None for p in directory.iterdir()}
