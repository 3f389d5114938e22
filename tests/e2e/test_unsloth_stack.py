"""unsloth 2026.10.9, end to end, against its recorded real closure
(``tests/fixtures/closures/unsloth-stack.json``: 101 packages with their real Requires-Dist, read
from PyPI) served on 127.0.0.1, the real CLI and real uv, on an A100 with driver 560.35.03
(CUDA 12.6), where torch 2.7.1 and 2.8.0 have cu126 builds:

- uv alone takes torchao 0.18.0 (its C++ extensions need torch >= 2.11) and PyPI's xformers (a
  CUDA 12.8 build) beside torch 2.7.1. unsloth_zoo requires torchao>=0.13.0, and every such
  release is built against torch 2.8.0 or newer (compat_matrix/torch_pairings.toml): on torch
  2.7.1 the lock is refused naming unsloth_zoo's requirement, the pairing and its source, with
  ``--torch '==2.8.0'`` as the next step, checked to run on this target;
- followed, it locks: torch 2.8.0+cu126, torchao 0.14.0 (the newest release built for torch
  2.8.0), xformers 0.0.32.post2+cu126 from the cu126 index, the triton torch pins, unsloth,
  unsloth_zoo and bitsandbytes from PyPI.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import lock_against, locked_packages
from tests.support.index import IndexServer, cached_offline_env
from tests.support.realstack import UNSLOTH_RECORDING, Recording, load_recording, serve_real_stack

pytestmark = pytest.mark.slow

A100_CUDA_12_6 = ["--driver-version", "560.35.03", "--gpu", "A100", "--platform", "linux-x86_64"]
UNSLOTH = "unsloth==2026.10.9"


@pytest.fixture(scope="module")
def recording() -> Recording:
    return load_recording(UNSLOTH_RECORDING)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, recording: Recording) -> Iterator[IndexServer]:
    # download.pytorch.org serves torch 2.8.0 for cu126 too; the recording has PyPI's cu128
    # build's metadata, served relabelled.
    cu126 = dataclasses.replace(recording.torch_build("2.8.0"), variant="cu126", cuda="12.6")
    with serve_real_stack(
        tmp_path_factory.mktemp("unsloth"), recording, extra_builds=[cu126]
    ) as server:
        yield server


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    return cached_offline_env(tmp_path)


def lock(
    server: IndexServer, env: dict[str, str], out: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return lock_against(server, env, out, A100_CUDA_12_6, *args)


def test_unsloth_on_torch_2_7_1_is_refused_naming_torchao_and_the_next_step_works(
    stack: IndexServer, env: dict[str, str], tmp_path: Path
) -> None:
    pytorch, pypi = stack
    out = tmp_path / "unsloth"
    out.mkdir()
    done = lock(stack, env, out, "--torch", "2.7.1", "--framework", UNSLOTH)
    assert done.returncode == 1, done.stderr
    said = " ".join(done.stderr.split())
    assert "unsloth-zoo requires torchao>=0.13.0" in said, said
    assert "no such torchao release works with torch 2.7.1+cu126" in said
    assert "0.13.0: torch 2.8.0" in said and "0.18.0: torch >= 2.11.0" in said
    assert "torchao-0.14.1-py3-none-any.whl" in said  # the source of 0.13.0's row
    hint = re.search(r"hint: Give --torch '([^']+)'", done.stderr)
    assert hint is not None, done.stderr
    assert hint[1] == "==2.8.0"
    assert "Traceback" not in done.stderr
    assert not list(out.iterdir())
    # The next step works when followed.
    done = lock(stack, env, out, "--torch", hint[1], "--framework", UNSLOTH)
    assert done.returncode == 0, done.stderr
    pins = locked_packages(out)
    assert pins["torch"] == ("2.8.0+cu126", f"{pytorch}/cu126")
    assert pins["torchao"] == ("0.14.0", pypi)
    assert pins["xformers"] == ("0.0.32.post2+cu126", f"{pytorch}/cu126")
    assert pins["triton"][0] == "3.4.0"  # the one torch 2.8.0 pins
    assert pins["unsloth"] == ("2026.10.9", pypi)
    assert pins["unsloth-zoo"] == ("2026.10.9", pypi)
    assert pins["bitsandbytes"][1] == pypi
    assert "torchao declares no torch requirement" in done.stderr
