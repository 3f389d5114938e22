"""`cudalock matrix show`: filters by torch / CUDA / GPU / platform over the shipped matrix.

Expected rows are derived by hand from the research facts: the cu128 build of torch 2.11 is
the last cu128 (removed in 2.12) and has sm_120; cu126 keeps sm_60 through 2.14 and is gone in
2.15; CUDA 13 builds start at sm_75. The rows come from the shipped matrix up to the releases
those facts know (tests/support/known_matrix.py), so a newer release changes none of them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cudalock.errors import UsageError
from cudalock.machine import gpu_model_named
from cudalock.matrix import GpuModel
from cudalock.matrix.show import Row, render_table, rows_as_json, select_rows
from cudalock.request import TorchSpec, parse_torch_spec
from tests.support.known_matrix import known_matrix

MATRIX = known_matrix()


def find_gpu(name: str) -> GpuModel:
    return gpu_model_named(name, MATRIX)


def variants(rows: list[Row]) -> set[tuple[str, str]]:
    return {(r.release.version, r.build.variant) for r in rows}


def torch_filter(text: str) -> TorchSpec:
    spec = parse_torch_spec(text)
    assert spec
    return spec


def test_torch_filter_forms() -> None:
    # matrix show reads --torch exactly as resolve does.
    assert torch_filter("2.11").admits("2.11.0") and not torch_filter("2.11").admits("2.1.0")
    assert torch_filter("2.1.0").admits("2.1.0") and not torch_filter("2.1.0").admits("2.1.1")
    assert torch_filter(">=2.14").admits("2.15.0")
    with pytest.raises(UsageError, match="'banana'"):
        torch_filter("banana")


def test_rtx_5090_on_cuda_12_8_is_covered_only_by_2_11_cu128_and_older_cu128() -> None:
    gpu = find_gpu("NVIDIA GeForce RTX 5090")
    assert gpu.compute_capability == (12, 0)
    rows = select_rows(MATRIX, cuda=(12, 8), gpu_cc=gpu.compute_capability, platform="linux-x86_64")
    assert variants(rows) == {
        ("2.7.0", "cu128"),
        ("2.7.1", "cu128"),
        ("2.8.0", "cu128"),
        ("2.9.0", "cu128"),
        ("2.9.1", "cu128"),
        ("2.10.0", "cu128"),
        ("2.11.0", "cu128"),
    }
    assert rows[0].release.version == "2.11.0"  # newest first


def test_pascal_is_covered_by_cu126_through_2_14_and_never_by_cuda_13() -> None:
    gpu = find_gpu("GTX 1080 Ti")
    rows = select_rows(
        MATRIX, torch=torch_filter(">=2.11"), gpu_cc=gpu.compute_capability, platform="linux-x86_64"
    )
    assert {v for _, v in variants(rows)} == {"cu126"}
    assert max(r.release.version for r in rows) == "2.14.1"


def test_cpu_and_rocm_builds_never_cover_a_gpu() -> None:
    rows = select_rows(MATRIX, gpu_cc=(8, 0))
    assert all(r.build.kind == "cuda" for r in rows)


def test_table_and_json_carry_driver_minimum_and_status() -> None:
    rows = select_rows(MATRIX, torch=torch_filter("2.1.0"), platform="linux-x86_64")
    text = render_table(rows)
    line = next(li for li in text.splitlines() if li.startswith("2.1.0") and " cu121 " in li)
    # CUDA 12.1 GA needs Linux driver 530.30.02 (NVIDIA Table 3); PyPI serves cu121 on Linux.
    assert ">= 530.30.02" in line and "linux" in line
    doc = {r["variant"]: r for r in rows_as_json(rows)}
    assert doc["cu121"]["driver_linux_min"] == "530.30.02"
    assert doc["cu121"]["pypi_default_on"] == ["linux-x86_64"]
    assert doc["cu118"]["unverified"] == ["sass", "ptx"]


def test_cli_show_gpu_json_and_unknown_gpu() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cudalock",
            "matrix",
            "show",
            "--gpu",
            "RTX 5090",
            "--torch",
            "2.12",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["gpu"]["compute_capability"] == "12.0"
    assert {b["variant"] for b in doc["builds"]} >= {"cu130", "cu132"}
    assert "cu126" not in {b["variant"] for b in doc["builds"]}
    done = subprocess.run(
        [sys.executable, "-m", "cudalock", "matrix", "show", "--gpu", "Voodoo 5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "unknown GPU 'Voodoo 5'" in done.stderr
    assert "Traceback" not in done.stderr
