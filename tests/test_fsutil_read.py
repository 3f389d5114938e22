"""Bounded reads: regular files only, never more than the limit, never blocking."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudalock.errors import InputError
from cudalock.fsutil import read_bounded, read_head, read_tail


def test_a_regular_file_within_the_limit_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "probe.json"
    path.write_bytes(b"{}")
    assert read_bounded(path, limit=2, what="probe file") == b"{}"


def test_a_larger_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b"x" * 2049)
    with pytest.raises(InputError, match="larger than 2 KiB"):
        read_bounded(path, limit=2048, what="probe file")


def test_a_file_whose_size_says_nothing_is_read_whole() -> None:
    # /proc files report size 0: the read goes on past the size until the end or the limit.
    status = Path("/proc/self/status")
    whole = read_bounded(status, limit=1 << 20, what="status")
    assert whole.startswith(b"Name:") and b"VmRSS:" in whole
    head, more = read_head(Path("/proc/self/status"), limit=10, what="status")
    assert head == whole[:10] and more


def test_a_file_at_and_past_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "probe.json"
    path.write_bytes(b"x" * 4096)
    assert read_bounded(path, limit=4096, what="probe file") == b"x" * 4096
    assert read_head(path, limit=4095, what="probe file") == (b"x" * 4095, True)
    assert read_head(path, limit=4096, what="probe file") == (b"x" * 4096, False)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_devices_are_refused_at_once(device: str) -> None:
    with pytest.raises(InputError, match="not a regular file"):
        read_bounded(Path(device), limit=1 << 20, what="probe file")


def test_a_fifo_nobody_writes_to_is_not_waited_for(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # A spec or probe file must be a file; a log may be a pipe, read within bounds.
    with pytest.raises(InputError, match="not a regular file"):
        read_bounded(fifo, limit=1 << 20, what="spec")
    assert read_tail(fifo, limit=1 << 20, what="log") == (b"", False)


def test_a_directory_and_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        read_bounded(tmp_path, limit=10, what="spec")
    with pytest.raises(InputError, match="does not exist"):
        read_bounded(tmp_path / "missing", limit=10, what="spec")


def test_the_tail_keeps_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(b"".join(b"line %d\n" % n for n in range(1000)))
    data, cut = read_tail(path, limit=100, what="log")
    assert cut and data.endswith(b"line 999\n") and data.startswith(b"line ")
    assert len(data) <= 100
    whole, cut = read_tail(path, limit=1 << 20, what="log")
    assert not cut and whole == path.read_bytes()


@pytest.mark.parametrize("writer_late_by", [0.0, 0.2], ids=["writer-waiting", "writer-late"])
def test_a_fifo_log_is_read_to_its_end_keeping_the_tail(
    tmp_path: Path, writer_late_by: float
) -> None:
    import threading
    import time

    from cudalock.fsutil import read_tail

    fifo = tmp_path / "log"
    os.mkfifo(fifo)

    def write() -> None:
        # As `command > fifo`: the open waits for the reader (or, started a moment after it,
        # finds it there), and then the writing starts.
        time.sleep(writer_late_by)
        end = os.open(fifo, os.O_WRONLY)
        for number in range(2000):
            os.write(end, f"line {number}\n".encode())
        os.close(end)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    data, cut = read_tail(fifo, limit=1000, what="log file")
    writer.join(timeout=10)
    assert cut and data.endswith(b"line 1999\n") and len(data) <= 1000
    assert data.startswith(b"line ")  # the partial first line is dropped


def test_a_fifo_that_never_ends_is_refused_after_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from cudalock import fsutil

    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # held open, never written
    monkeypatch.setattr(fsutil, "PIPE_READ_SECONDS", 1.0)
    started = time.monotonic()
    try:
        with pytest.raises(InputError, match="did not end within 1 s"):
            fsutil.read_tail(fifo, limit=1000, what="log file")
    finally:
        os.close(writer)
    assert time.monotonic() - started < 5
