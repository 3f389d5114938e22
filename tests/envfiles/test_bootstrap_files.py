"""bootstrap's files when the file system fails: a full disk and a read-only directory give
exit 3, say what failed, and leave the previous outputs exactly as they were.

Uses a small tmpfs mounted for the test (needs root and mount permission; skipped otherwise).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.index import offline_env
from tests.support.tmpfs import fill_device, mounted_tmpfs, remounted_read_only, snapshot

ARGS = [
    "--driver-version",
    "535.104.05",
    "--compute-capability",
    "8.0",
    "--torch",
    "==2.1.0",
    "--format",
    "venv",
    # No index: the closure is not resolved (exit 3), the environment files are still written.
    "--offline",
]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "64k") as mount_point:
        yield mount_point


def bootstrap(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cudalock", "bootstrap", "-o", str(out), *ARGS, *extra],
        capture_output=True,
        text=True,
        env=offline_env(),
        timeout=120,
        check=False,
    )


def test_full_disk_is_exit_3_and_the_previous_files_survive(small_disk: Path) -> None:
    out = small_disk / "out"
    first = bootstrap(out, "--python", "3.11")
    assert first.returncode == 3 and "could not resolve the closure" in first.stderr, first.stderr
    before = snapshot(out)
    assert "install.sh" in before
    # Fill the device, leaving less than the new files need.
    fill_device(small_disk / "filler")
    again = bootstrap(out, "--python", "3.10", "--force")
    assert again.returncode == 3, again.stderr
    assert "the disk is full; nothing was changed" in again.stderr
    assert "Traceback" not in again.stderr
    assert snapshot(out) == before  # no temp files, no half-written or mixed outputs


def test_read_only_directory_is_exit_3_and_writes_nothing(small_disk: Path) -> None:
    out = small_disk / "out"
    out.mkdir()
    with remounted_read_only(small_disk):
        done = bootstrap(out, "--python", "3.11")
    assert done.returncode == 3, done.stderr
    assert "permission denied" in done.stderr and "choose another directory with -o" in done.stderr
    assert list(out.iterdir()) == []
