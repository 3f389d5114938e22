"""Fixtures of the matrix tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cudalock.matrix import default_matrix_dir


@pytest.fixture
def matrix_copy(tmp_path: Path) -> Path:
    """A copy of the shipped matrix, for a test to change (a refresh writes into it)."""
    target = tmp_path / "matrix"
    shutil.copytree(default_matrix_dir(), target)
    return target
