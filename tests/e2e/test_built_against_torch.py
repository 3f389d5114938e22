"""Packages built against one torch, end to end: the real CLI, real uv, a 127.0.0.1 index.

- torchao declares no torch requirement; uv alone takes torchao 0.18.0 (its C++ extensions need
  torch >= 2.11) for torch 2.7.1. The stand-in PyPI serves torchao 0.12.0, 0.13.0 and 0.18.0
  with the real file names and Requires-Dist (no torch), and the lock takes 0.12.0, the release
  compat_matrix/torch_pairings.toml records for torch 2.7.1, saying why and citing the source;
  ``audit`` of a real venv holding torchao 0.18.0 beside torch 2.7.1 reports the pair.
- an sdist whose setup.py imports torch (``kernelpkg``, a stand-in) fails to build in isolation;
  the lock finds it from its setup.py (a framework published as an sdist only) or from uv's
  failure (a package the closure pulls in), prepares its metadata beside the locked torch
  without build isolation, and lists it in requirements.last.txt, built after torch.
- axolotl 0.9.2's setup.py pins the *installed* torch (``version("torch")``, "2.6.0" when none
  is installed, as in an isolated build): the stand-in sdist carries those lines of its real
  setup.py, and ``--torch 2.5.1 --framework axolotl==0.9.2`` locks axolotl against torch 2.5.1
  instead of being refused for a torch 2.6.0 that only the isolated build saw; ``bootstrap
  --format venv --create`` installs torch first and then builds axolotl against it, so the
  installed axolotl requires the installed torch.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudalock.audit.inspection import start_inspection
from cudalock.audit.runner import audit_live
from cudalock.matrix import load_matrix
from cudalock.model import Gpu, Target
from cudalock.versions import DriverVersion
from tests.support.cli import (
    create_venv_against,
    lock_against,
    locked_packages,
    toolkit_home,
)
from tests.support.index import IndexServer, cached_offline_env, serve_indexes
from tests.support.venvs import EnvSpec, make_env, torch_with
from tests.support.wheels import StandIn, torch_standin

pytestmark = pytest.mark.slow

A100_CUDA_12_1 = ["--driver-version", "530.30.02", "--gpu", "A100", "--platform", "linux-x86_64"]
MANYLINUX = "cp311-cp311-manylinux_2_28_x86_64"
#: torchao's real Requires-Dist: its 'dev' extra only (torchao-0.12.0-py3-none-any.whl METADATA,
#: first lines); no torch.
TORCHAO_REQUIRES = ['pytest; extra == "dev"', 'packaging; extra == "dev"']

#: A stand-in sdist whose setup.py imports torch, as flash-attn's and many CUDA extensions' do.
KERNELPKG_SETUP = """import torch

requires_dist = ["torch==" + torch.__version__.split("+")[0], "einops"]
"""
#: The lines of axolotl 0.9.2's setup.py that pin torch (from its sdist on PyPI), as the
#: stand-in backend runs them: ``requires_dist`` is what the built metadata requires.
AXOLOTL_SETUP = """from importlib.metadata import PackageNotFoundError, version

_install_requires = ["einops"]
try:
    torch_version = version("torch")
except PackageNotFoundError:
    torch_version = "2.6.0"  # default to torch 2.6
_install_requires.append(f"torch=={torch_version}")
requires_dist = _install_requires
"""

PROBEPKG_SETUP = """from importlib.metadata import PackageNotFoundError, version

try:
    torch_version = version("torch")
except PackageNotFoundError:
    torch_version = "2.7.1"
requires_dist = [f"torch=={torch_version}"]
"""


def pytorch_standins() -> dict[str, list[StandIn]]:
    return {
        "cu118": [
            torch_standin("2.7.1+cu118", "11.8", tag=MANYLINUX),
            StandIn("torchvision", "0.22.1+cu118", ["torch==2.7.1"], tag=MANYLINUX),
        ],
        "cu121": [
            torch_standin("2.5.1+cu121", "12.1", tag="cp311-cp311-linux_x86_64"),
            StandIn(
                "torchvision", "0.20.1+cu121", ["torch==2.5.1"], tag="cp311-cp311-linux_x86_64"
            ),
        ],
    }


def pypi_standins() -> list[StandIn]:
    torchao = [
        StandIn(
            "torchao",
            version,
            TORCHAO_REQUIRES,
            provides_extra=["dev"],
            real_filename=filename,
        )
        for version, filename in (
            ("0.12.0", "torchao-0.12.0-py3-none-any.whl"),
            ("0.13.0", "torchao-0.13.0-py3-none-any.whl"),
            ("0.18.0", "torchao-0.18.0-py3-none-any.whl"),
        )
    ]
    return [
        *torchao,
        StandIn("einops", "0.8.1"),
        StandIn("kernelpkg", "1.0", kind="sdist", files={"setup.py": KERNELPKG_SETUP}),
        # A wheel that requires it: kernelpkg is found only when uv's isolated build fails.
        StandIn("usekernel", "1.0", ["kernelpkg"]),
        # And one that requires axolotl: its isolated build pins torch==2.6.0, so uv finds no
        # solution with torch 2.5.1, naming it.
        StandIn("useaxolotl", "1.0", ["axolotl==0.9.2"]),
        # An sdist whose setup.py reads torch's version with a fallback that happens to match
        # the plan's torch: uv's isolated build succeeds, and only its files tell.
        StandIn("probepkg", "1.0", kind="sdist", files={"setup.py": PROBEPKG_SETUP}),
        StandIn("useprobe", "1.0", ["probepkg"]),
        StandIn(
            "axolotl",
            "0.9.2",
            requires_python=">=3.10",
            kind="sdist",
            files={"setup.py": AXOLOTL_SETUP},
        ),
    ]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    with serve_indexes(
        tmp_path_factory.mktemp("built-against-torch"), pytorch_standins(), pypi_standins()
    ) as server:
        yield server


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    return cached_offline_env(tmp_path)


def lock(
    server: IndexServer, env: dict[str, str], out: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return lock_against(server, env, out, A100_CUDA_12_1, *args)


def test_torchao_is_the_release_built_for_the_plans_torch(
    index: IndexServer, env: dict[str, str], tmp_path: Path
) -> None:
    done = lock(index, env, tmp_path, "--torch", "2.7.1", "--framework", "torchao")
    assert done.returncode == 0, done.stderr
    versions = {name: found[0] for name, found in locked_packages(tmp_path).items()}
    assert versions["torch"] == "2.7.1+cu118"
    assert versions["torchao"] == "0.12.0"
    said = " ".join((done.stdout + done.stderr).split())
    assert (
        "torchao declares no torch requirement, but torchao 0.18.0 works with torch >= 2.11.0"
        in said
    )
    assert "asked for as torchao<0.13.0" in said
    assert "torchao-0.18.0-py3-none-any.whl" in said  # the source of the fact
    # The lock is current as written.
    check = lock(index, env, tmp_path, "--torch", "2.7.1", "--framework", "torchao", "--check")
    assert check.returncode == 0, check.stdout + check.stderr


def notes(out: Path) -> str:
    """The notes recorded in the lock (the plan's and the closure's), as one line."""
    text = (out / "pylock.toml").read_text(encoding="utf-8")
    return " ".join(re.findall(r"^notes = \[(.*)\]$", text, re.MULTILINE))


@pytest.mark.parametrize(
    ("framework", "found_by"),
    [
        ("kernelpkg==1.0", "kernelpkg-1.0.tar.gz: its setup.py reads the installed torch"),
        ("usekernel", "uv's isolated build of it failed with No module named 'torch'"),
    ],
)
def test_an_sdist_whose_setup_imports_torch_is_built_after_torch(
    index: IndexServer, env: dict[str, str], tmp_path: Path, framework: str, found_by: str
) -> None:
    done = lock(index, env, tmp_path, "--torch", "2.7.1", "--framework", framework)
    assert done.returncode == 0, done.stderr
    versions = {name: found[0] for name, found in locked_packages(tmp_path).items()}
    assert versions["kernelpkg"] == "1.0"
    # Its metadata was prepared beside torch 2.7.1: what its setup.py computed there.
    assert versions["einops"] == "0.8.1"
    assert f"kernelpkg reads the installed torch when built ({found_by}" in notes(tmp_path)
    first = (tmp_path / "requirements.lock.txt").read_text(encoding="utf-8")
    last = (tmp_path / "requirements.last.txt").read_text(encoding="utf-8")
    assert "kernelpkg==1.0" in last and "kernelpkg" not in first
    assert "torch==2.7.1+cu118" in first
    settings = (tmp_path / "uv-install.toml").read_text(encoding="utf-8")
    assert re.search(r'kernelpkg = \["torch==2.7.1\+cu118"', settings)
    check = lock(index, env, tmp_path, "--torch", "2.7.1", "--framework", framework, "--check")
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_sdist_built_in_isolation_for_a_torch_it_guessed_is_built_again_against_it(
    index: IndexServer, env: dict[str, str], tmp_path: Path
) -> None:
    done = lock(index, env, tmp_path, "--torch", "2.7.1", "--framework", "useprobe")
    assert done.returncode == 0, done.stderr
    assert "probepkg's build reads the installed torch" in done.stderr
    assert "probepkg reads the installed torch when built (probepkg-1.0.tar.gz" in notes(tmp_path)
    last = (tmp_path / "requirements.last.txt").read_text(encoding="utf-8")
    assert "probepkg==1.0" in last


@pytest.mark.parametrize("framework", ["axolotl==0.9.2", "useaxolotl"])
def test_axolotl_is_locked_against_the_torch_it_is_built_beside(
    index: IndexServer, env: dict[str, str], tmp_path: Path, framework: str
) -> None:
    done = lock(index, env, tmp_path, "--torch", "2.5.1", "--framework", framework)
    assert done.returncode == 0, done.stderr
    versions = {name: found[0] for name, found in locked_packages(tmp_path).items()}
    assert versions["torch"] == "2.5.1+cu121"
    assert versions["axolotl"] == "0.9.2"
    assert (
        'axolotl-0.9.2.tar.gz: its setup.py reads the installed torch (version(\\"torch\\"))'
        in (notes(tmp_path))
    )
    last = (tmp_path / "requirements.last.txt").read_text(encoding="utf-8")
    assert "axolotl==0.9.2" in last


def test_create_builds_axolotl_against_the_installed_torch(
    index: IndexServer, env: dict[str, str], tmp_path: Path
) -> None:
    # A toolkit of torch's CUDA: the plan builds something against a CUDA torch.
    env = {**env, "CUDA_HOME": str(toolkit_home(tmp_path, "12.1, V12.1.105"))}
    done = create_venv_against(
        index, env, tmp_path, A100_CUDA_12_1, "--torch", "2.5.1", "--framework", "axolotl==0.9.2"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pythons = list(tmp_path.glob("**/bin/python"))
    assert pythons, list(tmp_path.iterdir())
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({'torch': m.version('torch'), 'requires': m.requires('axolotl')}))"
    )
    shown = subprocess.run(
        [str(pythons[0]), "-c", code], capture_output=True, text=True, check=True
    )
    found = json.loads(shown.stdout)
    assert found["torch"] == "2.5.1+cu121"
    # Built in isolation, it would require torch==2.6.0; built last, the installed torch.
    assert "torch==2.5.1+cu121" in found["requires"]


def test_a_live_environment_with_torchao_built_for_another_torch_is_an_error(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # What a plain `pip install torchao` gives beside torch 2.7.1: 0.18.0, real file name.
    torchao = StandIn(
        "torchao", "0.18.0", TORCHAO_REQUIRES, real_filename="torchao-0.18.0-py3-none-any.whl"
    )
    python = make_env(
        tmp_path_factory.mktemp("torchao-live"),
        "cu118-torchao-0.18.0",
        EnvSpec(wheels=[torch_with("2.7.1+cu118", "11.8"), torchao]),
    )
    a100 = Gpu(name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0), index=0)
    target = Target(
        platform="linux-x86_64",
        driver_version=DriverVersion("530.30.02"),
        driver_cuda=(12, 1),
        gpus=(a100,),
        source="override",
    )
    with start_inspection(python=python) as inspection:
        findings = audit_live([target], load_matrix(), inspection).findings
    [found] = [f for f in findings if f.code == "torch-pairing-mismatch"]
    assert found.severity == "error"
    assert found.message.startswith(
        "torchao 0.18.0 works with torch >= 2.11.0; this torch is 2.7.1+cu118"
    )
    assert found.fix == ("pip install --no-deps 'torchao==0.12.0'",)
