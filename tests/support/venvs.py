"""Real virtual environments holding stand-in wheels, built once per test session.

``python -m venv --without-pip`` makes the environment (fast), and the test runner's own pip
installs the stand-in wheels into it with ``pip --python ENV install --no-deps --no-index``:
real pip writing real dist-info directories, no network.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.index import offline_env
from tests.support.wheels import StandIn, build_wheel, torch_version_file

_BUILT: dict[str, Path] = {}


@dataclass(frozen=True)
class EnvSpec:
    """What goes into one environment."""

    wheels: Sequence[StandIn]
    #: Installed afterwards with ``pip install --target SITE --upgrade``: pip replaces the package
    #: directory but leaves the earlier dist-info behind (two torch dist-infos).
    over_target: Sequence[StandIn] = field(default_factory=tuple)


def site_packages(python: Path) -> Path:
    root = python.parent.parent
    found = sorted(root.glob("lib/python3*/site-packages"))
    assert found, f"no site-packages under {root}"
    return found[0]


def pip_install(python: Path, wheels: Sequence[Path], *extra: str) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--no-deps",
        "--no-index",
        "--quiet",
        *extra,
        *(str(w) for w in wheels),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=offline_env(), check=False)
    assert result.returncode == 0, result.stderr + result.stdout


def make_env(root: Path, key: str, spec: EnvSpec) -> Path:
    """The interpreter of a venv holding ``spec`` (created on first use, then reused)."""
    if key in _BUILT:
        return _BUILT[key]
    where = root / key
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    wheel_dir = root / f"{key}-wheels"
    pip_install(python, [build_wheel(w, wheel_dir) for w in spec.wheels])
    if spec.over_target:
        pip_install(
            python,
            [build_wheel(w, wheel_dir / "over") for w in spec.over_target],
            "--target",
            str(site_packages(python)),
            "--upgrade",
        )
    _BUILT[key] = python
    return python


def torch_with(
    version: str, cuda: str | None, dist_version: str | None = None, init: str = ""
) -> StandIn:
    """A torch stand-in; ``dist_version`` differs from ``version`` for PyPI wheels (no label)."""
    return StandIn(
        name="torch",
        version=dist_version or version,
        files={"torch/__init__.py": init, "torch/version.py": torch_version_file(version, cuda)},
    )


def deepspeed_with(
    version: str, torch_version: str, cuda: str, installed_ops: Sequence[str] = ()
) -> StandIn:
    """A DeepSpeed stand-in with the build info setup.py writes (``torch_info``)."""
    ops = {name: name in installed_ops for name in ("async_io", "fused_adam", "cpu_adam")}
    return StandIn(
        name="deepspeed",
        version=version,
        files={
            "deepspeed/__init__.py": "raise SystemExit('never import deepspeed here')\n",
            "deepspeed/git_version_info_installed.py": (
                f"version='{version}'\ngit_hash='unknown'\ngit_branch='unknown'\n"
                f"installed_ops={ops!r}\naccelerator_name='cuda'\n"
                f"torch_info={{'version': '{torch_version}', 'bf16_support': False, "
                f"'cuda_version': '{cuda}', 'nccl_version': '0.0', 'hip_version': '0.0'}}\n"
            ),
        },
    )


#: The environments the audit and inspect tests share (built on first use, once a session).
SPECS: dict[str, EnvSpec] = {
    # PyPI's torch 2.11.0: "+cu130" only in torch/version.py, not in the dist-info.
    "pypi-2.11.0": EnvSpec(
        wheels=[
            torch_with(
                "2.11.0+cu130",
                "13.0",
                dist_version="2.11.0",
                init="raise SystemExit('inspect must never import torch')\n",
            ),
            StandIn("torchvision", "0.26.0"),
            StandIn("cuda-toolkit", "13.0.2"),
            StandIn("nvidia-cudnn-cu13", "9.19.0.56"),
        ]
    ),
    "cu128-2.9.1": EnvSpec(
        wheels=[
            torch_with("2.9.1+cu128", "12.8", dist_version="2.9.1"),
            StandIn("nvidia-cuda-runtime-cu12", "12.8.90"),
        ]
    ),
    "cpu-2.3.1": EnvSpec(wheels=[torch_with("2.3.1+cpu", None)]),
    "cu121-tv-cu118": EnvSpec(
        wheels=[
            torch_with("2.1.0+cu121", "12.1"),
            StandIn("torchvision", "0.16.0+cu118"),
        ]
    ),
    "duplicate-torch": EnvSpec(
        wheels=[torch_with("2.1.0+cu121", "12.1")],
        over_target=[torch_with("2.0.1+cu118", "11.8")],
    ),
    "deepspeed-no-torch": EnvSpec(
        wheels=[
            torch_with("2.1.0+cu121", "12.1"),
            deepspeed_with("0.12.3", "0.0", "0.0"),
        ]
    ),
    "nvjitlink-12.4": EnvSpec(
        wheels=[
            torch_with("2.5.1+cu124", "12.4", dist_version="2.5.1"),
            StandIn("nvidia-nvjitlink-cu12", "12.4.127"),
            StandIn("nvidia-cusparse-cu12", "12.3.1.170"),
        ]
    ),
    "segfault-torch": EnvSpec(
        wheels=[
            torch_with(
                "2.9.1+cu128",
                "12.8",
                init="import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
            )
        ]
    ),
    "hanging-torch": EnvSpec(
        wheels=[torch_with("2.9.1+cu128", "12.8", init="import time\ntime.sleep(600)\n")]
    ),
    "failing-torch": EnvSpec(
        wheels=[
            torch_with(
                "2.9.1+cu128",
                "12.8",
                init="raise ImportError('libcudnn.so.9: cannot open shared object file')\n",
            )
        ]
    ),
    "working-cpu-torch": EnvSpec(
        wheels=[
            torch_with(
                "2.9.1+cpu",
                None,
                init=(
                    "__version__ = '2.9.1+cpu'\n"
                    "class _Cuda:\n"
                    "    @staticmethod\n"
                    "    def is_available():\n"
                    "        return False\n"
                    "cuda = _Cuda()\n"
                    "from torch import version\n"
                ),
            )
        ]
    ),
}


def standin_env(factory: pytest.TempPathFactory, key: str) -> Path:
    """The interpreter of the shared environment ``key`` (see SPECS)."""
    return make_env(factory.getbasetemp() / "standin-envs", key, SPECS[key])


def hide_cuda_toolkit(monkeypatch: pytest.MonkeyPatch, empty_home: Path) -> None:
    """The audited environments see no CUDA toolkit or library path but the ones a test sets.

    A CUDA_HOME that is set wins over nvcc on PATH and /usr/local/cuda, as in torch's
    cpp_extension; pointing it at an empty directory hides this machine's toolkit.
    """
    monkeypatch.setenv("CUDA_HOME", str(empty_home))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
