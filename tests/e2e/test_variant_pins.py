"""What the variant's torch pins exactly comes from the variant index, label or none.

A torch nightly pins the Triton build of its own index: torch 2.1.0 nightlies required
``pytorch-triton==2.1.0+e6216047b8`` (the pip list of a real nightly environment,
tests/fixtures/corpus/control-pip3-lines-nightly-v100), a version with a label of its own, not
the variant's, and served on the PyTorch index only (PyPI's ``pytorch-triton`` is a 0.0.1
placeholder). The matrix plans releases, not nightlies, so the stand-in torch here is the
release 2.1.0+cu121 carrying that pin; routed by the variant's label alone, uv would look for it
on PyPI and find no solution. Real uv, the real cudalock CLI, indexes on 127.0.0.1.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import cudalock
from tests.support.index import IndexServer, offline_env, serve_indexes
from tests.support.wheels import StandIn, torch_standin

pytestmark = pytest.mark.slow

LINUX = "manylinux_2_17_x86_64.manylinux2014_x86_64"
PYTORCH_TRITON = (
    'pytorch-triton==2.1.0+e6216047b8; platform_system == "Linux" and platform_machine == "x86_64"'
)
TARGET = ["--driver-version", "535.104.05", "--compute-capability", "8.0"]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    cu121 = [
        torch_standin(
            "2.1.0+cu121", "12.1", [PYTORCH_TRITON, "filelock"], tag="cp311-cp311-linux_x86_64"
        ),
        StandIn(
            "torchvision",
            "0.16.0+cu121",
            requires_dist=["torch==2.1.0"],
            tag="cp311-cp311-linux_x86_64",
        ),
        StandIn(
            "pytorch-triton",
            "2.1.0+e6216047b8",
            requires_dist=["filelock"],
            tag=f"cp311-cp311-{LINUX}",
        ),
    ]
    pypi = [
        StandIn("pytorch-triton", "0.0.1"),
        StandIn("filelock", "3.13.0"),
    ]
    with serve_indexes(
        tmp_path_factory.mktemp("index"), pytorch={"cu121": cu121}, pypi=pypi
    ) as server:
        yield server


def test_a_pin_with_a_label_of_its_own_is_routed_with_the_torch(
    index: IndexServer, tmp_path: Path
) -> None:
    out = tmp_path / "lock"
    done = cudalock(
        "lock",
        "-o",
        str(out),
        *TARGET,
        "--platform",
        "linux-x86_64",
        "--torch",
        "2.1.0",
        "--python",
        "3.11",
        "--pytorch-index",
        index.pytorch_url,
        "--pypi-index",
        index.pypi_url,
        env=offline_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    text = (out / "pylock.toml").read_text(encoding="utf-8")
    block = next(b for b in text.split("[[packages]]") if 'name = "pytorch-triton"' in b)
    assert 'version = "2.1.0+e6216047b8"' in block
    assert re.search(rf'index = "{re.escape(index.pytorch_url)}/cu121/?"', block), block
    assert (
        "pytorch-triton==2.1.0+e6216047b8 from "
        f"{index.pytorch_url}/cu121: torch 2.1.0+cu121 pins it exactly"
    ) in done.stderr
    # Predicted from torch's metadata on the variant index: uv ran once.
    assert done.stderr.count("  uv: Resolved") == 1, done.stderr
