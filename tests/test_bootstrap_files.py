"""bootstrap's files when the file system fails: a full disk and a read-only directory give
exit 3, say what failed, and leave the previous outputs exactly as they were.

Uses a small tmpfs mounted for the test (needs root and mount permission; skipped otherwise).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.index import offline_env

ARGS = ["--driver-version", "535.104.05", "--compute-capability", "8.0", "--torch", "==2.1.0",
        "--format", "venv"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs",
                              str(mount_point)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def bootstrap(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudalock", "bootstrap", "-o", str(out),
                           *ARGS, *extra], capture_output=True, text=True, env=offline_env(),
                          timeout=120, check=False)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_full_disk_is_exit_3_and_the_previous_files_survive(small_disk: Path) -> None:
    out = small_disk / "out"
    first = bootstrap(out, "--python", "3.11")
    assert first.returncode == 0, first.stderr
    before = _snapshot(out)
    # Fill the device, leaving less than the new files need.
    descriptor = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(descriptor, b"\0" * 1024):
            pass
    except OSError:
        pass  # ENOSPC: the device is full
    finally:
        os.close(descriptor)
    again = bootstrap(out, "--python", "3.10", "--force")
    assert again.returncode == 3, again.stderr
    assert "the disk is full; nothing was changed" in again.stderr
    assert "Traceback" not in again.stderr
    assert _snapshot(out) == before  # no temp files, no half-written or mixed outputs


def test_read_only_directory_is_exit_3_and_writes_nothing(small_disk: Path) -> None:
    out = small_disk / "out"
    out.mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        done = bootstrap(out, "--python", "3.11")
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    assert done.returncode == 3, done.stderr
    assert "permission denied" in done.stderr and "choose another directory with -o" in \
        done.stderr
    assert list(out.iterdir()) == []
