"""Memory and time stay bounded for every input that has no natural end: huge logs, a log line of
20 MB, a kernel log of ten million lines, an interpreter that floods its output or never exits.

The command runs under ``RLIMIT_AS`` = 1 GiB (past it, Python raises MemoryError and the test
fails on the exit status), and its peak resident memory is read from ``wait4``.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cudalock.audit.inspection import inspect_environment
from cudalock.doctor.run import MAX_LOG_BYTES
from cudalock.errors import EnvironmentFailure
from tests.support.cli import CUDALOCK
from tests.support.index import offline_env

pytestmark = pytest.mark.slow

GIB = 2**30


@dataclass(frozen=True)
class Bounded:
    returncode: int
    stdout: str
    stderr: str
    peak_bytes: int
    seconds: float


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (GIB, GIB))


def run_bounded(*args: str | os.PathLike[str], env: dict[str, str], timeout: float) -> Bounded:
    """``cudalock ARGS`` under a 1 GiB address-space limit: its status, output, peak RSS."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        process = subprocess.Popen(
            [str(CUDALOCK), *map(str, args)],
            stdout=out,
            stderr=err,
            env=env,
            preexec_fn=_limit_address_space,  # only setrlimit between fork and exec
        )
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > timeout:
                os.kill(process.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.05)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        return Bounded(
            process.returncode,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            usage.ru_maxrss * 1024,
            seconds,
        )


def write_log(path: Path, line: str, size: int) -> None:
    """``size`` bytes of ``line`` repeated (written a MiB at a time)."""
    block = line * (2**20 // len(line))
    with path.open("w") as handle:
        for _ in range(size // len(block) + 1):
            handle.write(block)


@pytest.mark.parametrize(
    "line",
    [
        "step 1234567 lr 0.0001 ok\n",
        # Every line a candidate event (training progress) and a shape word on each.
        "{'loss': 0.1234, 'grad_norm': 1.5, 'learning_rate': 1e-05, 'epoch': 0.01} zero\n",
        "node1:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n",
    ],
)
def test_a_ten_million_line_log_is_read_in_bounded_memory_and_time(
    tmp_path: Path, line: str
) -> None:
    log = tmp_path / "train.log"
    write_log(log, line, 4 * MAX_LOG_BYTES)  # four times what is read, ~10 million lines
    with log.open("a") as handle:
        handle.write("exitcode  : -9 (pid: 4242)\n")
    done = run_bounded(
        "doctor", "--exit-code", "1", "--log", log, "--json", env=offline_env(), timeout=120
    )
    assert done.returncode in (0, 1), done.stderr
    assert "4242" in done.stdout  # the newest lines were read
    assert done.peak_bytes < GIB / 2, done.peak_bytes
    assert done.seconds < 60, done.seconds


def test_a_20_mb_world_info_line_is_cut_not_parsed(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    hosts = ", ".join(f"'node{n}': [0, 1, 2, 3, 4, 5, 6, 7]" for n in range(600_000))
    log.write_text(f"[launch.py] WORLD INFO DICT: {{{hosts}}}\nexitcode  : -9 (pid: 7)\n")
    assert log.stat().st_size > 20 * 2**20
    done = run_bounded("doctor", "--exit-code", "-9", "--log", log, env=offline_env(), timeout=60)
    assert done.returncode in (0, 1), done.stderr
    assert done.peak_bytes < GIB / 4, done.peak_bytes


def test_a_ten_million_line_kernel_log_is_kept_to_its_tail(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    noisy = bin_dir / "dmesg"
    noisy.write_text(
        "#!/bin/sh\n"
        "yes '[12345.678901] usb 1-1: new high-speed USB device number 2 using xhci_hcd'"
        " | head -n 10000000\n"
        "echo '[12346.000000] Out of memory: Killed process 4242 (python) total-vm:1234kB,"
        " anon-rss:5678kB, file-rss:0kB'\n"
    )
    noisy.chmod(0o755)
    (bin_dir / "journalctl").symlink_to(noisy)
    env = {**offline_env(), "PATH": f"{bin_dir}{os.pathsep}{offline_env()['PATH']}"}
    # This machine's kernel log counts for a run on this host.
    here = socket.gethostname()
    done = run_bounded(
        "doctor", "--exit-code", "-9", "--json", "--params", "7B", "--host-memory", "64G",
        "--gpus-per-node", "1", "--host", here, env=env, timeout=180,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    assert '"pid": 4242' in done.stdout  # the newest line, after 10 million others
    assert done.peak_bytes < GIB / 2, done.peak_bytes


def test_an_interpreter_flooding_its_output_is_stopped(tmp_path: Path) -> None:
    flood = tmp_path / "python"
    flood.write_text("#!/bin/sh\nexec yes\n")
    flood.chmod(0o755)
    done = run_bounded("audit", "--python", flood, env=offline_env(), timeout=60)
    assert done.returncode == 3, done.stderr
    assert "wrote more than 32 MiB" in done.stderr and "Traceback" not in done.stderr
    assert done.peak_bytes < GIB / 4, done.peak_bytes
    assert done.seconds < 30


@pytest.mark.parametrize(
    "body",
    [
        # A wrapper that leaves a child holding the output pipe open.
        "sleep 1000 &\nexec sleep 1000\n",
        # A sitecustomize-like start-up that starts a child that never exits, then hangs.
        'python3 -c \'import subprocess, time; subprocess.Popen(["sleep", "1000"]); '
        "time.sleep(1000)'\n",
    ],
)
def test_a_hanging_interpreter_is_stopped_with_everything_it_started(
    tmp_path: Path, body: str
) -> None:
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\n{body}")
    python.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(EnvironmentFailure, match=r"did not finish .* within 2 s; it was stopped"):
        inspect_environment(python=python, timeout=2)
    assert time.monotonic() - started < 10
    group = int((tmp_path / "pid").read_text())
    time.sleep(0.2)
    assert not [
        entry.name
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _group_of(entry) == group
    ]


def _group_of(entry: Path) -> int | None:
    try:
        fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
    except OSError:
        return None
    return int(fields[2]) if fields[0] != "Z" else None
