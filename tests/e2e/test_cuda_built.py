"""CUDA-built packages from PyPI in the closure, end to end: real cudalock, uv, venvs, and a
127.0.0.1 index whose xformers stand-ins carry the real wheels' build facts (cpp_lib.json, an
extension needing libcudart.so.12) and Requires-Dist (compat_matrix/cuda_builds.toml).

Expected plans, from the shipped matrix: driver 525.125.06 runs CUDA 12.0, so torch 2.5.1
(cu118/cu121/cu124) is the cu118 build; driver 530.30.02 runs CUDA 12.1: the cu121 build.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudalock.lock.pylock import parse_lock
from tests.support.cli import cudalock
from tests.support.index import IndexServer, offline_env, serve_indexes
from tests.support.wheels import StandIn, cuda_extension_standin, torch_standin, xformers_cpp_lib

pytestmark = pytest.mark.slow

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
CP = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def pytorch_index() -> dict[str, list[StandIn]]:
    return {
        variant: [
            torch_standin(f"2.5.1+{variant}", cuda),
            StandIn("torchvision", f"0.20.1+{variant}", requires_dist=["torch==2.5.1"]),
        ]
        for variant, cuda in (("cu118", "11.8"), ("cu121", "12.1"))
    }


def xformers(version: str, torch_pin: str, cuda: int, built_against: str, tag: str) -> StandIn:
    # Requires-Dist as the real wheels declare them (numpy, torch==X).
    return cuda_extension_standin(
        "xformers",
        version,
        requires_dist=["numpy", f"torch=={torch_pin}"],
        cpp_lib=xformers_cpp_lib(cuda, built_against),
        tag=tag,
    )


PYPI = [
    xformers("0.0.28.post3", "2.5.1", 1201, "2.5.1+cu121", f"{CP}-{CP}-manylinux_2_28_x86_64"),
    xformers("0.0.29.post1", "2.5.1", 1201, "2.5.1+cu121", f"{CP}-{CP}-manylinux_2_28_x86_64"),
    xformers("0.0.31", "2.7.1", 1208, "2.7.1+cu126", "cp39-abi3-manylinux_2_28_x86_64"),
    StandIn("numpy", "2.1.3"),
    torch_standin("2.7.1", "12.6"),
]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    with serve_indexes(
        tmp_path_factory.mktemp("index"), pytorch=pytorch_index(), pypi=PYPI
    ) as server:
        yield server


def args(index: IndexServer, driver: str, framework: str = "xformers") -> list[str]:
    pytorch, pypi = index
    return [
        "--driver-version",
        driver,
        "--compute-capability",
        "8.0",
        "--torch",
        "2.5.1",
        "--python",
        PY,
        "--framework",
        framework,
        "--pytorch-index",
        pytorch,
        "--pypi-index",
        pypi,
    ]


def test_a_cuda_12_1_xformers_is_never_created_beside_a_cu118_torch(
    index: IndexServer, tmp_path: Path
) -> None:
    out = tmp_path / "env"
    env = offline_env() | {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = cudalock(
        "bootstrap",
        "-o",
        str(out),
        "--format",
        "venv",
        *args(index, "525.125.06"),
        "--create",
        env=env,
        timeout=600,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "audit: no errors" not in text
    assert (
        "xformers 0.0.29.post1 is built for CUDA 12.1 against torch 2.5.1+cu121; "
        "this torch is 2.5.1+cu118" in text
    )
    assert "no other xformers release fits the plan (excluded: 0.0.29.post1, 0.0.28.post3)" in text
    # The next step is what the CUDA 12.1 build needs: a driver that runs CUDA 12.1.
    assert "Drop xformers, or run it on a driver ≥ 530.30.02" in text
    assert not (out / ".venv").exists()


def test_on_a_cuda_12_1_driver_the_cuda_12_1_xformers_is_locked(
    index: IndexServer, tmp_path: Path
) -> None:
    # A cache of its own: what a wheel said is kept by its sha256 (the stand-ins' bytes are
    # the same from run to run).
    env = offline_env() | {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = tmp_path / "out"
    done = cudalock("lock", "-o", str(out), *args(index, "530.30.02"), env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lock, _data = parse_lock((out / "pylock.toml").read_text(), source="pylock.toml")
    versions = {str(p.name): str(p.version) for p in lock.packages}
    assert versions["torch"] == "2.5.1+cu121"
    assert versions["xformers"] == "0.0.29.post1"
    assert "is built for CUDA" not in done.stderr
    # Read by range requests: the extension's dynamic section and cpp_lib.json, not the wheel.
    wheel = index.file_path(PYPI[1].filename)
    statuses = {status for _m, path, status in index.requests if path == wheel}
    assert statuses == {206}, statuses
    # A second lock reads what the first one read, not the wheel.
    asked = len(index.requests)
    again = cudalock("lock", "-o", str(out), *args(index, "530.30.02"), env=env, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [r for r in index.requests[asked:] if r[1] == wheel] == []


# --------------------------------------------------------------------------------------------
# flash-attn: an sdist whose setup.py imports torch, built last against the installed torch

FLASH_ATTN = StandIn(
    "flash-attn",
    "2.8.3",
    kind="sdist",
    files={
        # As flash-attn's setup.py: torch first (no torch, no build), then the metadata.
        "setup.py": (
            "import os\nimport torch\n"
            "if os.environ.get('STANDIN_BACKEND_HOOK') == 'build_wheel':\n"
            "    with open('flash_attn/built_against.txt', 'w') as out:\n"
            "        out.write(torch.__version__)\n"
            "requires_dist = ['torch', 'einops']\n"
        ),
        "flash_attn/__init__.py": "__version__ = '2.8.3'\n",
    },
)
#: What flash-attn's setup.py imports, locked with it (real versions from PyPI).
BUILD_TOOLS = [
    StandIn("setuptools", "80.9.0"),
    StandIn("wheel", "0.45.1"),
    StandIn("packaging", "25.0"),
    StandIn("psutil", "7.0.0"),
    StandIn("ninja", "1.11.1.4"),
    StandIn("einops", "0.8.1"),
]


@pytest.fixture(scope="module")
def flash_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    with serve_indexes(
        tmp_path_factory.mktemp("flash-index"),
        pytorch=pytorch_index(),
        pypi=[FLASH_ATTN, *BUILD_TOOLS],
    ) as server:
        yield server


def test_flash_attn_is_planned_last_and_built_against_the_installed_torch(
    flash_index: IndexServer, tmp_path: Path
) -> None:
    out = tmp_path / "env"
    env = offline_env() | {
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        # Its releases, stood in by the local index: no prebuilt wheel is published there.
        "CUDALOCK_FLASH_ATTN_RELEASES": f"{flash_index.base_url}/releases",
    }
    done = cudalock(
        "bootstrap",
        "-o",
        str(out),
        "--format",
        "venv",
        *args(flash_index, "530.30.02", "flash-attn"),
        "--create",
        env=env,
        timeout=600,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    last = (out / "requirements.last.txt").read_text()
    assert "flash-attn==2.8.3" in last
    assert "flash-attn" not in (out / "requirements.lock.txt").read_text()
    assert "flash-attn 2.8.3 is built last against torch 2.5.1+cu121" in text
    assert (
        "publishes no flash_attn-2.8.3+cu12torch2.5cxx11abiTRUE-"
        f"{CP}-{CP}-linux_x86_64.whl nor flash_attn-2.8.3+cu12torch2.5cxx11abiFALSE-" in text
    )
    assert "it compiles from source: that needs an nvcc of CUDA 12.1 (CUDA_HOME)" in text
    site = next((out / ".venv").glob("lib/python3*/site-packages"))
    assert (site / "flash_attn" / "built_against.txt").read_text() == "2.5.1+cu121"


# --------------------------------------------------------------------------------------------
# vllm 0.10.1.1: its extensions need libcudart.so.12; on a CUDA 12.1 driver torch 2.7.1 is cu118

#: The torch-family lines of vllm 0.10.1.1's real Requires-Dist (the rest does not decide here).
VLLM = cuda_extension_standin(
    "vllm",
    "0.10.1.1",
    requires_dist=["torch==2.7.1", "torchaudio==2.7.1", "torchvision==0.22.1"],
    extension="vllm/_flashmla_C.abi3.so",
    tag="cp38-abi3-manylinux1_x86_64",
)


@pytest.fixture(scope="module")
def vllm_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    cu118 = [
        torch_standin("2.7.1+cu118", "11.8"),
        StandIn("torchvision", "0.22.1+cu118", requires_dist=["torch==2.7.1"]),
        StandIn("torchaudio", "2.7.1+cu118", requires_dist=["torch==2.7.1"]),
    ]
    # PyPI's own builds of the family (CUDA 12.6), as on the real index.
    pypi = [
        VLLM,
        torch_standin("2.7.1", "12.6"),
        StandIn("torchvision", "0.22.1", requires_dist=["torch==2.7.1"]),
        StandIn("torchaudio", "2.7.1", requires_dist=["torch==2.7.1"]),
    ]
    with serve_indexes(
        tmp_path_factory.mktemp("vllm-index"), pytorch={"cu118": cu118}, pypi=pypi
    ) as server:
        yield server


def test_a_cuda_12_vllm_is_refused_beside_a_cu118_torch(
    vllm_index: IndexServer, tmp_path: Path
) -> None:
    pytorch, pypi = vllm_index
    env = offline_env() | {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = cudalock(
        "lock",
        "-o",
        str(tmp_path / "out"),
        "--driver-version",
        "530.30.02",
        "--compute-capability",
        "8.0",
        "--torch",
        "2.7.1",
        "--python",
        PY,
        "--framework",
        "vllm==0.10.1.1",
        "--pytorch-index",
        pytorch,
        "--pypi-index",
        pypi,
        env=env,
        timeout=600,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    # Asked for by its version, refused before the closure from cuda_builds.toml's sourced
    # facts: this index has no other vllm for torch 2.7.1, and the driver its build needs.
    assert (
        "torch 2.7.1+cu118 runs here, but vllm 0.10.1.1 is built for CUDA 12 against torch "
        "2.7.1; this torch is 2.7.1+cu118 (cuda_builds.toml (vllm/_flashmla_C.abi3.so DT_NEEDED))"
    ) in text
    assert "no release of vllm fits this target and request" in text
    assert "hint: Run vllm 0.10.1.1 on a driver ≥ 560.28.03." in text
    assert not (tmp_path / "out" / "pylock.toml").exists()


def test_a_next_step_from_cuda_builds_toml_that_does_not_resolve_is_said_not_named(
    vllm_index: IndexServer, tmp_path: Path
) -> None:
    """A range leaves the CUDA build to the closure, which reads the wheel. Its next step from
    cuda_builds.toml (vllm 0.7.3 with torch 2.5.1) is resolved with uv first: this index has
    neither, so it is said as tried, and not given as the hint."""
    pytorch, pypi = vllm_index
    env = offline_env() | {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = cudalock(
        "lock",
        "-o",
        str(tmp_path / "out"),
        "--driver-version",
        "530.30.02",
        "--compute-capability",
        "8.0",
        "--torch",
        "2.7.1",
        "--python",
        PY,
        "--framework",
        "vllm>=0.10",
        "--pytorch-index",
        pytorch,
        "--pypi-index",
        pypi,
        env=env,
        timeout=600,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "vllm 0.10.1.1 is built for CUDA 12; this torch is 2.7.1+cu118" in text
    assert "(vllm/_flashmla_C.abi3.so needs libcudart.so.12)" in text
    assert (
        "vllm 0.7.3 with torch 2.5.1 (recorded in cuda_builds.toml) was tried and does not "
        "resolve: "
    ) in text
    assert "--framework 'vllm==0.7.3'" not in text
    assert "hint: Drop vllm" in text
    assert not (tmp_path / "out" / "pylock.toml").exists()
