"""The prepared /proc and /sys trees of ``tests/fixtures/probe/trees``, as the probe sees them.

The driver names a GPU's directory after its PCI bus id (``0000:18:00.0``). A ``:`` in a file
name is refused by sdist and wheel builders and by some file systems, so the fixtures spell it
``_``; :func:`prepared_trees` copies them once per test run with the real names restored.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

FIXTURE_TREES = Path(__file__).resolve().parents[1] / "fixtures" / "probe" / "trees"


@cache
def prepared_trees() -> Path:
    """A copy of the fixture trees in which each ``gpus/<bus id>`` directory has its real name."""
    root = Path(tempfile.mkdtemp(prefix="cudalock-probe-trees-"))
    atexit.register(shutil.rmtree, root, True)
    copy = root / "trees"
    shutil.copytree(FIXTURE_TREES, copy, symlinks=True)
    for gpus in copy.glob("*/proc/driver/nvidia/gpus"):
        for bus in list(gpus.iterdir()):
            bus.rename(gpus / bus.name.replace("_", ":"))
    return copy
