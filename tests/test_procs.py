"""procs.run against real children: big outputs, hangs, floods, leftovers, signals."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from cudalock.procs import ChildCancelled, ChildOutputTooLarge, ChildTimedOut, run, signal_name

PYTHON = sys.executable


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it is gone.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[1].startswith("Z"))


def test_large_output_on_both_streams_does_not_block() -> None:
    code = "import sys; sys.stdout.write('o' * 3_000_000); sys.stderr.write('e' * 3_000_000)"
    done = run([PYTHON, "-c", code], what="the writer", timeout=60)
    assert done.returncode == 0
    assert len(done.stdout) == 3_000_000 and len(done.stderr) == 3_000_000


def test_the_timeout_covers_the_whole_run_and_kills_the_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(1000)"
    )
    started = time.monotonic()
    with pytest.raises(ChildTimedOut, match="the sleeper did not finish within 1 s"):
        run([PYTHON, "-c", code], what="the sleeper", timeout=1)
    assert time.monotonic() - started < 20
    assert not alive(int(pid_file.read_text()))


def test_a_child_that_leaves_a_process_behind_returns_and_the_leftover_is_killed(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"
    # The grandchild inherits stdout and would hold the pipe open for 1000 s.
    done = run(
        ["sh", "-c", f"sleep 1000 & echo $! > {pid_file}; echo started"],
        what="the launcher",
        timeout=30,
    )
    assert done.returncode == 0 and done.stdout_text() == "started\n"
    deadline = time.monotonic() + 10
    while alive(int(pid_file.read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(int(pid_file.read_text()))


def test_a_flood_is_cut_off_at_the_limit() -> None:
    started = time.monotonic()
    with pytest.raises(ChildOutputTooLarge, match="more than 1 MiB"):
        run(["yes"], what="yes", timeout=60, output_limit=2**20)
    assert time.monotonic() - started < 20


def test_lines_arrive_as_they_are_written_and_long_lines_are_capped() -> None:
    lines: list[str] = []
    code = "print('one'); print('x' * 200_000); print('three', end='')"
    done = run([PYTHON, "-c", code], what="the printer", timeout=60, on_line=lines.append)
    assert done.returncode == 0
    assert lines[0] == "one" and lines[2] == "three"
    assert lines[1] == "x" * 65536


def test_merged_output_keeps_the_order_of_one_stream() -> None:
    code = "import sys; print('out', flush=True); print('err', file=sys.stderr, flush=True)"
    done = run([PYTHON, "-c", code], what="both", timeout=60, merge_stderr=True)
    assert done.stdout_text() == "out\nerr\n" and done.stderr == b""


def test_stdin_is_fed() -> None:
    code = "import sys; print(sys.stdin.read().upper(), end='')"
    done = run([PYTHON, "-c", code], what="the echo", timeout=60, stdin=b"hello")
    assert done.stdout == b"HELLO"


def test_a_signal_death_is_reported_as_such() -> None:
    done = run([PYTHON, "-c", "import os; os.kill(os.getpid(), 11)"], what="x", timeout=60)
    assert done.signal == signal.SIGSEGV and signal_name(done.signal) == "SIGSEGV"
    assert signal_name(99) == "signal 99"


def test_a_failing_line_handler_stops_the_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
        "print('go', flush=True); time.sleep(1000)"
    )

    def refuse(line: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run([PYTHON, "-c", code], what="x", timeout=60, on_line=refuse)
    assert not alive(int(pid_file.read_text()))


def test_a_missing_program_is_an_oserror_for_the_caller_to_word() -> None:
    with pytest.raises(FileNotFoundError):
        run(["/nonexistent/program"], what="x", timeout=5)


def test_keep_tail_keeps_the_newest_output_within_the_limit() -> None:
    code = "import sys\nfor n in range(200_000): sys.stdout.write('line %d\\n' % n)"
    done = run(
        [PYTHON, "-c", code], what="the logger", timeout=60, output_limit=2**16, keep_tail=True
    )
    assert done.returncode == 0 and done.stdout_cut
    assert len(done.stdout) == 2**16 and done.stdout.endswith(b"line 199999\n")
    whole = run([PYTHON, "-c", "print('short')"], what="x", timeout=60, keep_tail=True)
    assert whole.stdout == b"short\n" and not whole.stdout_cut


def test_a_flood_with_keep_tail_is_bounded_by_the_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(ChildTimedOut) as raised:
        run(["yes"], what="yes", timeout=2, output_limit=2**20, keep_tail=True)
    assert time.monotonic() - started < 20
    assert len(raised.value.stdout) <= 2**20 and raised.value.stdout.startswith(b"y\n")


def test_a_timeout_hands_back_what_the_child_wrote_so_far() -> None:
    code = (
        "import sys, time; print('STAGE one', flush=True); "
        "print('oops', file=sys.stderr, flush=True); time.sleep(1000)"
    )
    with pytest.raises(ChildTimedOut) as raised:
        run([PYTHON, "-c", code], what="x", timeout=2)
    assert raised.value.stdout == b"STAGE one\n" and raised.value.stderr == b"oops\n"


def test_a_cancelled_run_kills_the_child(tmp_path: Path) -> None:
    import threading

    pid_file = tmp_path / "pid"
    code = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(1000)"
    )
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    with pytest.raises(ChildCancelled):
        run([PYTHON, "-c", code], what="x", timeout=60, cancel=cancel)
    assert not alive(int(pid_file.read_text()))


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_a_grandchild_in_a_session_of_its_own_cannot_hold_the_pipes(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    # setsid leaves the child's process group; the grandchild keeps stdout and stderr open.
    done_by = time.monotonic() + 10
    done = run(
        ["sh", "-c", f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 1000' & sleep 0.3; echo up"],
        what="the launcher",
        timeout=60,
    )
    assert time.monotonic() < done_by
    assert done.returncode == 0 and "up" in done.stdout_text()
    assert wait_gone(int(pid_file.read_text()))


def test_a_timeout_kills_a_daemon_that_left_the_session_and_cleared_its_environment(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"
    # A double fork with setsid and an empty environment: re-parented to cudalock, unmarked.
    daemon = f"echo $$ > {pid_file}; exec sleep 1000"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execve('/bin/sh', ['sh', '-c', {daemon!r}], {{}})\n"
        "    os._exit(0)\n"
        "time.sleep(1000)\n"
    )
    started = time.monotonic()
    with pytest.raises(ChildTimedOut):
        run([PYTHON, "-c", code], what="the forker", timeout=1.5)
    assert time.monotonic() - started < 10
    assert wait_gone(int(pid_file.read_text()))
