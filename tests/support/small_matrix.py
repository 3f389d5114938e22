"""A small hand-built compatibility matrix for the resolver's unit tests.

Every value is copied from the shipped matrix's sourced entries (cuda.toml, torch.toml),
trimmed to a handful of releases so that expected plans can be derived by hand.
``small_matrix(**changes)`` lets a test swap one document to probe one rule.
"""

from __future__ import annotations

import copy
from typing import Any

from cudalock.matrix import Matrix
from cudalock.matrix.load import build_matrix

NVIDIA_NOTES = "https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/index.html"
MVC = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"
PYPI = "https://pypi.org/simple/torch/"
LINUX = "linux-x86_64"
WINDOWS = "windows-x86_64"
MACOS = "macos-arm64"
AARCH64 = "linux-aarch64"


def _toolkit(
    version: str, linux: str, windows: str | None, status: str = "verified"
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "version": version,
        "driver_linux": linux,
        "source": NVIDIA_NOTES,
        "status": status,
    }
    if windows:
        entry["driver_windows"] = windows
    return entry


TOOLKITS = [
    # cuda_driver_table.json, Table 3 (Linux x86_64, Windows).
    _toolkit("11.8.0", "520.61.05", "520.06"),
    _toolkit("12.0.0", "525.60.13", "527.41"),
    _toolkit("12.1.0", "530.30.02", "531.14"),
    _toolkit("12.2.0", "535.54.03", "536.25"),
    _toolkit("12.2.2", "535.104.05", "537.13"),
    _toolkit("12.4.0", "550.54.14", "551.61"),
    _toolkit("12.6.0", "560.28.03", "560.76"),
    _toolkit("12.8.0", "570.26", "570.65"),
    _toolkit("12.9.0", "575.51.03", "576.02"),
    _toolkit("13.0.0", "580.65.06", None),
    _toolkit("13.2.0", "595.45.04", None),
]

MAJORS = [
    {
        "major": 11,
        "minor_compat_linux": "450.80.02",
        "minor_compat_windows": "452.39",
        "source": MVC,
        "status": "verified",
    },
    {
        "major": 12,
        "minor_compat_linux": "525.60.13",
        "minor_compat_windows": "527.41",
        "source": MVC,
        "status": "verified",
    },
    {"major": 13, "minor_compat_linux": "580", "source": MVC, "status": "verified"},
]

OLD_SASS = ["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"]  # PyPI cu121/cu124/cu126 wheels
SASS_128 = ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]  # 2.11 cu128: Volta dropped
SASS_13X = ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]  # cu130/cu132, plus PTX 12.0


def _build(
    variant: str,
    cuda: str | None,
    sass: list[str],
    ptx: list[str] | None = None,
    platforms: tuple[str, ...] = (LINUX, WINDOWS),
    status: str = "verified",
    cudnn: str | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "variant": variant,
        "sass": sass,
        "ptx": ptx or [],
        "platforms": list(platforms),
        "source": PYPI,
        "status": status,
    }
    if cuda:
        entry["cuda"] = cuda
    if cudnn:
        entry["cudnn"] = cudnn
    return entry


def _cpu() -> dict[str, Any]:
    return _build("cpu", None, [], platforms=(LINUX, WINDOWS, AARCH64, MACOS))


PY_38_312 = ["3.8", "3.9", "3.10", "3.11", "3.12"]
PY_39_313 = ["3.9", "3.10", "3.11", "3.12", "3.13"]
PY_310_314 = ["3.10", "3.11", "3.12", "3.13", "3.13t", "3.14", "3.14t"]
PY_310_314_NO313T = ["3.10", "3.11", "3.12", "3.13", "3.14", "3.14t"]
PY_311_315 = ["3.11", "3.12", "3.13", "3.14", "3.14t", "3.15", "3.15t"]


def _release(
    version: str,
    date: str,
    python: list[str],
    torchvision: str,
    torchaudio: str | None,
    builds: list[dict[str, Any]],
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "version": version,
        "date": date,
        "requires_python": ">=3.8",
        "python": {LINUX: python, WINDOWS: python, MACOS: python, AARCH64: python},
        "pypi_default": {LINUX: "cu121", WINDOWS: "cpu", MACOS: "cpu"},
        "torchvision": torchvision,
        "build": builds,
        "source": PYPI,
        "status": "verified",
    }
    if torchaudio:
        entry["torchaudio"] = torchaudio
    return entry


RELEASES = [
    _release(
        "2.1.0",
        "2023-10-04",
        ["3.8", "3.9", "3.10", "3.11"],
        "0.16.0",
        "2.1.0",
        [
            _build("cu118", "11.8", OLD_SASS, cudnn="8.7.0.84"),
            _build("cu121", "12.1", OLD_SASS, cudnn="8.9.2.26"),
            _build("rocm5.6", None, [], platforms=(LINUX,)),
            _cpu(),
        ],
    ),
    _release(
        "2.4.1",
        "2024-09-04",
        PY_38_312,
        "0.19.1",
        "2.4.1",
        [
            _build("cu118", "11.8", OLD_SASS),
            _build("cu121", "12.1", OLD_SASS),
            _build("cu124", "12.4", OLD_SASS),
            _cpu(),
        ],
    ),
    _release(
        "2.5.1",
        "2024-10-29",
        PY_39_313,
        "0.20.1",
        "2.5.1",
        [
            _build("cu118", "11.8", OLD_SASS),
            _build("cu121", "12.1", OLD_SASS),
            _build("cu124", "12.4", OLD_SASS),
            _cpu(),
        ],
    ),
    _release(
        "2.11.0",
        "2026-03-23",
        PY_310_314,
        "0.26.0",
        "2.11.0",
        [
            _build("cu126", "12.6", OLD_SASS, cudnn="9.10.2.21"),
            _build("cu128", "12.8", SASS_128, cudnn="9.17.1.4"),
            _build("cu130", "13.0", SASS_13X, ["12.0"]),
            _build("cu128", "12.8", ["8.0", "9.0", "10.0", "12.0"], platforms=(AARCH64,)),
            _cpu(),
        ],
    ),
    _release(
        "2.14.1",
        "2026-09-30",
        PY_310_314_NO313T,
        "0.29.1",
        None,
        [
            _build("cu126", "12.6", OLD_SASS),
            _build("cu130", "13.0", SASS_13X, ["12.0"]),
            _build("cu132", "13.2", SASS_13X, ["12.0"]),
            _cpu(),
        ],
    ),
    _release(
        "2.15.0",
        "2026-10-28",
        PY_311_315,
        "0.29.2",
        None,
        [
            _build("cu130", "13.0", SASS_13X, ["12.0"], status="unverified"),
            _build("cu132", "13.2", SASS_13X, ["12.0"]),
            _cpu(),
        ],
    ),
]

DEEPSPEED = [
    {
        "version": "0.14.4",
        "requires_python": ">=3.8",
        "torch": ">=1.9",
        "source": "x",
        "status": "verified",
    },
    {
        "version": "0.16.9",
        "requires_python": ">=3.9",
        "torch": ">=2.0",
        "source": "x",
        "status": "verified",
    },
    {
        "version": "0.19.8",
        "requires_python": ">=3.10",
        "torch": ">=2.4",
        "source": "x",
        "status": "verified",
        "unverified": ["torch"],
    },
]


def raw_documents() -> dict[str, dict[str, Any]]:
    return copy.deepcopy(
        {
            "matrix.toml": {"schema_version": 1, "matrix_version": "2026-11-29-small"},
            "cuda.toml": {"toolkit": TOOLKITS, "major": MAJORS, "arch_support": []},
            "torch.toml": {"release": RELEASES},
            "gpus.toml": {"gpu": []},
            "deepspeed.toml": {"release": DEEPSPEED},
        }
    )


def small_matrix(**documents: dict[str, Any]) -> Matrix:
    """The small matrix; ``torch_toml={...}`` etc. replace one document."""
    raw = raw_documents()
    for key, document in documents.items():
        raw[key.replace("_toml", ".toml")] = document
    return build_matrix(raw)
