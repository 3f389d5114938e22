"""Bytes for people: one way to write a size in GiB, everywhere cudalock shows one.

Two decimals and no space (``13.04GiB``), the way DeepSpeed's memory estimator prints
``x / 2**30``, so a figure cudalock shows can be compared with DeepSpeed's own at a glance.
"""

from __future__ import annotations

__all__ = ["GIB", "format_gib"]

GIB = 2**30


def format_gib(num_bytes: float, width: int = 0) -> str:
    """Bytes as GiB with two decimals, right-aligned to ``width`` characters of number."""
    return f"{num_bytes / GIB:{width}.2f}GiB"
