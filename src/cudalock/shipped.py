"""Where the data cudalock ships with lives: inside the wheel, or in the source tree."""

from __future__ import annotations

from pathlib import Path

__all__ = ["shipped_dir"]


def shipped_dir(name: str) -> Path:
    """``compat_matrix`` or ``templates``: the wheel's ``cudalock/_data/NAME``, else the
    repository's top-level ``NAME`` (an editable install or a source checkout)."""
    packaged = Path(__file__).parent / "_data" / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / name
