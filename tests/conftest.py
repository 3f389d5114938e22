"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.index import IndexServer
from tests.support.index import serve_indexes as _serve_indexes
from tests.support.known_matrix import write_known_matrix
from tests.support.realstack import serve_real_stack
from tests.support.slurm import (  # noqa: F401 - session fixtures for the Slurm tests
    finished_slurm_jobs,
    slurm_cluster,
)
from tests.support.wheels import StandIn

ServeIndexes = Callable[..., IndexServer]


@pytest.fixture(autouse=True)
def no_cudalock_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests see only the CUDALOCK_* variables they set: a developer's own (a mirror, a matrix
    directory, a driver override) would change what cudalock does."""
    import os

    for name in [name for name in os.environ if name.startswith("CUDALOCK_")]:
        monkeypatch.delenv(name)
    # Index pages are cached by URL, and a stand-in index's port can be another test's later.
    monkeypatch.setenv("CUDALOCK_NO_CACHE", "1")
    # install.sh keeps wheels built against torch; each test starts with none.
    monkeypatch.setenv("CUDALOCK_WHEEL_CACHE", str(tmp_path / "cudalock-wheel-cache"))


@pytest.fixture(autouse=True)
def no_cuda_toolkit_of_this_machine(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Tests see no CUDA toolkit but the ones they set up: the probe records this machine's
    toolkit and the resolver prefers the build it matches, so a developer's nvcc would change
    plans. A CUDA_HOME that is set wins over nvcc on PATH and /usr/local/cuda (as in torch's
    cpp_extension); an empty one hides them."""
    monkeypatch.setenv("CUDA_HOME", str(tmp_path_factory.getbasetemp() / "no-cuda-toolkit"))
    monkeypatch.delenv("CUDA_PATH", raising=False)


@pytest.fixture
def serve_indexes(tmp_path: Path) -> Iterator[ServeIndexes]:
    """Factory: ``serve_indexes(pytorch={"cu121": [...]}, pypi=[...]) -> IndexServer``.

    The server listens on 127.0.0.1 until the test ends; ``pytorch_url, pypi_url = server``.
    """
    with ExitStack() as stack:
        counter = iter(range(1_000_000))

        def start(
            pytorch: Mapping[str, Sequence[StandIn]] | None = None,
            pypi: Sequence[StandIn] = (),
            *,
            auth: tuple[str, str] | None = None,
        ) -> IndexServer:
            where = tmp_path / f"served-{next(counter)}"
            return stack.enter_context(_serve_indexes(where, pytorch, pypi, auth=auth))

        yield start


@pytest.fixture(scope="session")
def real_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """The recorded real fine-tuning closure (150+ packages) served on 127.0.0.1, once a session.

    ``pytorch_url, pypi_url = real_stack``; ``pytorch_url + "/cu124"`` is a CUDA variant's index.
    See ``tests/support/realstack.py``.
    """
    with serve_real_stack(tmp_path_factory.mktemp("real-stack")) as server:
        yield server


@pytest.fixture(scope="session")
def known_matrix_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped matrix up to the releases hand-derived expectations know, as ``--matrix DIR``
    (see tests/support/known_matrix.py)."""
    return write_known_matrix(tmp_path_factory.mktemp("known") / "compat_matrix")
