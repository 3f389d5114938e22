"""A Ctrl-C or SIGTERM that Python drops (raised inside a ``__del__`` or a weakref callback)
still stops the run: real signals, in a real interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = """
import os, signal, sys, time
from cudalock.cli import main as cli
from cudalock.errors import Terminated

def terminate(signum, frame):
    stopped = Terminated()
    stopped.signum = signum
    raise stopped

signal.signal(signal.SIGTERM, terminate)
if sys.argv[1] == "hooked":
    sys.unraisablehook = cli._stop_signals_are_not_lost

class Dropped:
    def __del__(self):
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))
        time.sleep(0.2)  # the signal's exception is raised in here, where Python drops it

try:
    Dropped()
    for _ in range(200):
        time.sleep(0.01)
    print("ran to its end")
except (KeyboardInterrupt, Terminated) as stopped:
    print("stopped by", type(stopped).__name__)
"""


@pytest.mark.parametrize(
    ("signal_name", "raised"), [("SIGINT", "KeyboardInterrupt"), ("SIGTERM", "Terminated")]
)
def test_a_dropped_stop_signal_is_raised_again(signal_name: str, raised: str) -> None:
    def run(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _SCRIPT, mode, signal_name],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    # Without the hook Python says it ignored the exception and runs on: the case it mends.
    plain = run("plain")
    assert plain.stdout.strip() == "ran to its end" and "Exception ignored" in plain.stderr
    hooked = run("hooked")
    assert hooked.stdout.strip() == f"stopped by {raised}", hooked.stderr
    assert "Exception ignored" not in hooked.stderr
