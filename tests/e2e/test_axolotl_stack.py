"""axolotl 0.9.2, end to end, against its recorded real closure
(``tests/fixtures/closures/axolotl-stack.json``: 226 packages with their real Requires-Dist, read
from PyPI; axolotl's own, an sdist's, from its real build beside torch 2.5.1 and 2.6.0; those of
sdists with a PKG-INFO older than 2.2, from their real builds) served on
127.0.0.1, the real CLI and real uv, on an A100 with driver 550.54.15 (CUDA 12.4), where torch
2.5.1 and 2.6.0 have cu124 builds.

axolotl's setup.py requires ``torch==<installed>`` ("2.6.0" in an isolated build, where none is)
and picks xformers and autoawq by that torch. ``--torch 2.5.1 --framework axolotl==0.9.2`` locks
the closure its build writes beside torch 2.5.1: torch 2.5.1+cu124, the xformers built for it
from the cu124 index (not 0.0.29.post2, which pins torch 2.6.0), no autoawq (its setup.py drops
it for torch 2.5), and axolotl in ``requirements.last.txt``, built after torch, so the installed
axolotl requires the installed torch. The locked closure is the one real uv resolved against
real PyPI for that request. Without ``--torch`` the plan is torch 2.6.0+cu124, with
xformers 0.0.29.post2 and autoawq, as axolotl's setup.py asks beside torch 2.6.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import lock_against, locked_packages
from tests.support.index import IndexServer, cached_offline_env
from tests.support.realstack import (
    AXOLOTL_RECORDING,
    Recording,
    load_recording,
    pinned_requirements,
    serve_real_stack,
)

pytestmark = pytest.mark.slow

A100_CUDA_12_4 = ["--driver-version", "550.54.15", "--gpu", "A100", "--platform", "linux-x86_64"]
AXOLOTL = "axolotl==0.9.2"


@pytest.fixture(scope="module")
def recording() -> Recording:
    return load_recording(AXOLOTL_RECORDING)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, recording: Recording) -> Iterator[IndexServer]:
    with serve_real_stack(tmp_path_factory.mktemp("axolotl"), recording) as server:
        yield server


def lock(server: IndexServer, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``cudalock lock`` on the A100 with driver 550.54.15, uv's cache in ``out``'s parent."""
    return lock_against(server, cached_offline_env(out.parent), out, A100_CUDA_12_4, *args)


def test_the_recording_holds_what_axolotls_build_writes_for_each_torch(
    recording: Recording,
) -> None:
    built = recording.release("axolotl", "0.9.2").built_against_torch
    assert "torch==2.5.1" in built["2.5.1"] and "xformers>=0.0.28.post3" in built["2.5.1"]
    assert "torch==2.6.0" in built["2.6.0"] and "xformers==0.0.29.post2" in built["2.6.0"]
    assert not any(r.startswith("autoawq") for r in built["2.5.1"])
    # What real uv resolved with it, against real PyPI.
    resolved = recording.scenario(AXOLOTL, "torch==2.5.1", python="3.11").resolved
    assert resolved["xformers"] == "0.0.29.post1"
    assert len(resolved) > 200


def test_axolotl_on_torch_2_5_1_is_locked_and_built_last_against_it(
    stack: IndexServer, tmp_path: Path, recording: Recording
) -> None:
    pytorch, pypi = stack
    out = tmp_path / "axolotl"
    out.mkdir()
    done = lock(stack, out, "--torch", "2.5.1", "--framework", AXOLOTL)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    pins = locked_packages(out)
    assert pins["torch"] == ("2.5.1+cu124", f"{pytorch}/cu124")
    assert pins["torchvision"][0] == "0.20.1+cu124"
    # The xformers built for torch 2.5.1, from the variant's index.
    assert pins["xformers"] == ("0.0.29.post1+cu124", f"{pytorch}/cu124")
    assert pins["triton"][0] == "3.1.0"  # the one torch 2.5.1 pins
    assert "autoawq" not in pins  # axolotl's setup.py drops it for torch 2.5
    for name in ("transformers", "peft", "trl", "accelerate", "datasets", "bitsandbytes"):
        assert pins[name][1] == pypi, name
    # The whole closure is what real uv resolved against real PyPI with axolotl's real
    # Requires-Dist for torch 2.5.1 (and torchvision, which the plan adds).
    resolved = recording.scenario(AXOLOTL, "torch==2.5.1", python="3.11").resolved
    locked = {name: version.split("+")[0] for name, (version, _index) in pins.items()}
    assert locked == {**resolved, "torchvision": "0.20.1"}
    # axolotl itself is built after torch, against it, not in isolation (torch==2.6.0 there).
    last = pinned_requirements((out / "requirements.last.txt").read_text(encoding="utf-8"))
    assert last == {"axolotl": "0.9.2"}
    text = (out / "pylock.toml").read_text(encoding="utf-8")
    assert "axolotl-0.9.2.tar.gz: its setup.py reads the installed torch" in text
    assert pins["axolotl"][0] == "0.9.2"


def test_without_torch_the_plan_is_the_newest_torch_axolotl_accepts(
    stack: IndexServer, tmp_path: Path, recording: Recording
) -> None:
    pytorch, pypi = stack
    out = tmp_path / "axolotl"
    out.mkdir()
    done = lock(stack, out, "--framework", AXOLOTL)
    assert done.returncode == 0, done.stderr
    pins = locked_packages(out)
    assert pins["torch"] == ("2.6.0+cu124", f"{pytorch}/cu124")
    # Its setup.py's choices for torch 2.6: xformers 0.0.29.post2 (pins torch 2.6.0), autoawq.
    assert pins["xformers"] == ("0.0.29.post2+cu124", f"{pytorch}/cu124")
    assert pins["autoawq"] == ("0.2.7.post3", pypi)
    resolved = recording.scenario(AXOLOTL, "torch==2.6.0", python="3.11").resolved
    locked = {name: version.split("+")[0] for name, (version, _index) in pins.items()}
    assert locked == {**resolved, "torchvision": "0.21.0"}
    last = pinned_requirements((out / "requirements.last.txt").read_text(encoding="utf-8"))
    assert last == {"axolotl": "0.9.2"}
