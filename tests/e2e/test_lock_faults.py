"""Issue 10 for ``cudalock lock``: transient index errors are retried, and a lock that cannot be
written (read-only or full file system) exits 3 leaving the previous lock byte for byte.

The other network faults (refused, timeout, 5xx, truncated body, tampered wheel) are in
tests/e2e/test_lock.py. The file-system cases mount a small tmpfs (root and mount permission needed;
skipped otherwise), because root ignores permission bits and a chmod'ed directory proves nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_lock import lock, serve_lock_indexes
from tests.support.index import IndexServer
from tests.support.tmpfs import fill_device, mounted_tmpfs, remounted_read_only, snapshot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    yield from serve_lock_indexes(tmp_path_factory)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uv-cache")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "256k") as mount_point:
        yield mount_point


def test_transient_5xx_is_retried_then_locks(
    index: IndexServer, tmp_path: Path, cache: Path
) -> None:
    # Without retries the same two failures end the run with exit 3 ...
    (tmp_path / "a").mkdir()
    fault = index.fail("/pypi/simple/*", status=503, times=2)
    try:
        without = lock(index, tmp_path / "a", "--retries", "0", cache=tmp_path / "cold-a")
    finally:
        index.clear_faults()
    assert without.returncode == 3, without.stderr
    assert "503" in without.stderr and "Traceback" not in without.stderr
    assert fault.hits >= 1
    # ... with retries the run rides over them and writes the lock.
    fault = index.fail("/pypi/simple/*", status=503, times=2)
    (tmp_path / "b").mkdir()
    try:
        done = lock(index, tmp_path / "b", "--retries", "3", cache=tmp_path / "cold-b")
    finally:
        index.clear_faults()
    assert done.returncode == 0, done.stderr
    assert fault.hits == 2
    assert (tmp_path / "b" / "pylock.toml").is_file()


def test_read_only_output_exits_3_and_keeps_the_previous_lock(
    index: IndexServer, small_disk: Path, cache: Path
) -> None:
    out = small_disk / "out"
    out.mkdir()
    first = lock(index, out, cache=cache)
    assert first.returncode == 0, first.stderr
    before = snapshot(out)
    with remounted_read_only(small_disk):
        again = lock(index, out, "--python", "3.10", cache=cache)
    assert again.returncode == 3, again.stderr
    assert "Traceback" not in again.stderr
    # Found when the run takes the directory, before uv runs.
    assert f"cannot write in {out}: permission denied" in again.stderr
    assert snapshot(out) == before


def test_full_disk_exits_3_and_keeps_the_previous_lock(
    index: IndexServer, small_disk: Path, cache: Path
) -> None:
    out = small_disk / "out"
    out.mkdir()
    first = lock(index, out, cache=cache)
    assert first.returncode == 0, first.stderr
    before = snapshot(out)
    fill_device(small_disk / "filler")
    again = lock(index, out, "--python", "3.10", cache=cache)
    assert again.returncode == 3, again.stderr
    assert "Traceback" not in again.stderr
    assert "the disk is full" in again.stderr
    assert snapshot(out) == before  # same files, same bytes, no temp files left behind
