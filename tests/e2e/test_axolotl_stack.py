"""axolotl 0.9.2, end to end, against its recorded real closure
(``tests/fixtures/closures/axolotl-stack.json``: 226 packages with their real Requires-Dist, read
from PyPI; axolotl's own, an sdist's, from its real build beside torch 2.5.1 and 2.6.0; those of
sdists with a PKG-INFO older than 2.2, from their real builds) served on 127.0.0.1, the real CLI
and real uv, on an A100 with driver 550.54.15 (CUDA 12.4), where torch 2.5.1 and 2.6.0 have
cu124 builds, or 530.30.02 (CUDA 12.1), where torch 2.5.1's cu121 build is the one that runs.

axolotl's setup.py requires ``torch==<installed>`` ("2.6.0" in an isolated build, where none is)
and picks xformers and autoawq by that torch. ``--torch 2.5.1 --framework axolotl==0.9.2`` locks
the closure its build writes beside torch 2.5.1: torch 2.5.1+cu124 (cu121 on the older driver),
the xformers built for it from that variant's index (not 0.0.29.post2, which pins torch 2.6.0),
no autoawq (its setup.py drops it for torch 2.5), and axolotl in ``requirements.last.txt``,
built after torch, so the installed axolotl requires the installed torch. The locked closure is
the one real uv resolved against real PyPI for that request. Without ``--torch`` the plan is
torch 2.6.0+cu124, with xformers 0.0.29.post2 and autoawq, as axolotl's setup.py asks beside
torch 2.6. ``bootstrap --create`` installs the 2.5.1 closure into a real venv, axolotl built
last, and audits it clean.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import create_venv_against, lock_against, locked_packages, toolkit_home
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
A100_CUDA_12_1 = ["--driver-version", "530.30.02", "--gpu", "A100", "--platform", "linux-x86_64"]
AXOLOTL = "axolotl==0.9.2"


@pytest.fixture(scope="module")
def recording() -> Recording:
    return load_recording(AXOLOTL_RECORDING)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, recording: Recording) -> Iterator[IndexServer]:
    # download.pytorch.org serves torch 2.5.1 for cu121 too; the recording has PyPI's cu124
    # build's metadata, served relabelled.
    cu121 = dataclasses.replace(recording.torch_build("2.5.1"), variant="cu121", cuda="12.1")
    with serve_real_stack(
        tmp_path_factory.mktemp("axolotl"), recording, extra_builds=[cu121]
    ) as server:
        yield server


def lock(
    server: IndexServer, out: Path, *args: str, target: list[str] = A100_CUDA_12_4
) -> subprocess.CompletedProcess[str]:
    """``cudalock lock`` on ``target``, uv's cache in ``out``'s parent."""
    return lock_against(server, cached_offline_env(out.parent), out, target, *args)


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


@pytest.mark.parametrize(
    ("target", "variant"), [(A100_CUDA_12_4, "cu124"), (A100_CUDA_12_1, "cu121")]
)
def test_axolotl_on_torch_2_5_1_is_locked_and_built_last_against_it(
    stack: IndexServer, tmp_path: Path, recording: Recording, target: list[str], variant: str
) -> None:
    pytorch, pypi = stack
    out = tmp_path / "axolotl"
    out.mkdir()
    done = lock(stack, out, "--torch", "2.5.1", "--framework", AXOLOTL, target=target)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    pins = locked_packages(out)
    assert pins["torch"] == (f"2.5.1+{variant}", f"{pytorch}/{variant}")
    assert pins["torchvision"][0] == f"0.20.1+{variant}"
    # The xformers built for torch 2.5.1, from the variant's index.
    assert pins["xformers"] == (f"0.0.29.post1+{variant}", f"{pytorch}/{variant}")
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


def test_create_installs_axolotl_built_against_the_installed_torch(
    stack: IndexServer, tmp_path: Path
) -> None:
    # A toolkit of torch's CUDA: the plan builds something against a CUDA torch.
    env = {
        **cached_offline_env(tmp_path),
        "CUDA_HOME": str(toolkit_home(tmp_path, "12.4, V12.4.131")),
    }
    done = create_venv_against(
        stack, env, tmp_path, A100_CUDA_12_4, "--torch", "2.5.1", "--framework", AXOLOTL
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "audit: no errors" in done.stdout + done.stderr
    python = tmp_path / "out" / ".venv" / "bin" / "python"
    code = (
        "import importlib.metadata as m, json; print(json.dumps({'torch': m.version('torch'), "
        "'xformers': m.version('xformers'), 'requires': m.requires('axolotl')}))"
    )
    shown = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    found = json.loads(shown.stdout)
    assert found["torch"] == "2.5.1+cu124"
    assert found["xformers"] == "0.0.29.post1+cu124"
    # Built in isolation it would require torch==2.6.0; built last, the installed torch.
    assert "torch==2.5.1+cu124" in found["requires"]
    assert "xformers>=0.0.28.post3" in found["requires"]
