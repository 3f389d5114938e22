"""Child processes: how a signal that ended one is named for people."""

from __future__ import annotations

import signal

__all__ = ["signal_name"]


def signal_name(number: int) -> str:
    """``9`` → ``SIGKILL``; a number no signal has → ``signal 99``."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
