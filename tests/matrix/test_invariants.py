"""The shipped matrix keeps every rule of tests/support/invariants.py.

These hold however the data grows; tests/matrix/test_refresh.py applies the same rules to a
matrix refreshed with a release the shipped one does not have.
"""

from __future__ import annotations

import dataclasses

import pytest

from cudalock.matrix import load_matrix
from tests.support.invariants import INVARIANTS, violations


@pytest.mark.parametrize("name", sorted(INVARIANTS))
def test_shipped_matrix_keeps(name: str) -> None:
    assert INVARIANTS[name](load_matrix()) == []


def test_the_invariants_can_fail() -> None:
    # A release dated after the matrix, and a GPU older than every build.
    matrix = load_matrix()
    newest = matrix.torch_releases[-1]
    gpu = dataclasses.replace(matrix.gpus[0], name="Fermi GPU", compute_capability=(2, 0))
    broken = dataclasses.replace(
        matrix,
        torch_releases=(
            *matrix.torch_releases[:-1],
            dataclasses.replace(newest, date="2999-01-01"),
        ),
        gpus=(*matrix.gpus, gpu),
    )
    found = violations(broken)
    assert set(found) >= {"matrix_version_is_not_older_than_its_data", "every_gpu_has_a_build"}
    assert found["every_gpu_has_a_build"] == ["Fermi GPU (2.0): no build has kernels for it"]
