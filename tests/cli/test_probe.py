"""`cudalock probe` through the real console script, in a subprocess.

This machine may or may not have a GPU; tests that need "no NVIDIA driver" skip where a
libnvidia-ml is present. Error cases must exit 2 with one line and no traceback.
"""

from __future__ import annotations

import ctypes.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cudalock.machine import target_from_json
from cudalock.matrix import default_matrix_dir
from tests.support.cli import cudalock as run_cudalock
from tests.support.index import offline_env

FIXTURES = Path(__file__).parents[1] / "fixtures" / "probe"
TEST_MATRIX = FIXTURES / "matrix"


def cudalock(
    *args: str, env: dict[str, str] | None = None, matrix: Path | None = TEST_MATRIX
) -> subprocess.CompletedProcess[str]:
    """``cudalock ARGS``, against the test matrix unless ``matrix`` says otherwise."""
    return run_cudalock(*args, *(["--matrix", str(matrix)] if matrix else []), env=env)


no_nvidia_here = pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA library"
)


@no_nvidia_here
def test_probe_json_on_a_machine_without_nvidia() -> None:
    result = cudalock("probe", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1
    assert document["driver_version"] is None and document["gpus"] == []
    assert document["source"] == "none"
    assert document["notes"][0] == "no NVIDIA driver found: this is a CPU-only target"
    assert document["host"]["os"] == "linux" or sys.platform != "linux"
    assert isinstance(document["host"]["memory_total_bytes"], int)
    assert list(document) == [
        "schema_version",
        "name",
        "platform",
        "driver_version",
        "driver_cuda",
        "gpus",
        "host",
        "source",
        "notes",
    ]


@no_nvidia_here
def test_probe_summary_on_a_machine_without_nvidia() -> None:
    result = cudalock("probe")
    assert result.returncode == 0, result.stderr
    assert "driver        no NVIDIA driver found (CPU-only target)" in result.stdout
    assert "GPUs          none" in result.stdout
    assert "(source: none)" in result.stdout
    assert "RAM " in result.stdout and "cgroup limit" in result.stdout


def test_probe_describes_a_machine_you_are_not_on() -> None:
    result = cudalock(
        "probe", "--json", "--driver-version", "535.104.05", "--compute-capability", "9.0"
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["driver_version"] == "535.104.05"
    assert document["driver_cuda"] == "12.2"
    assert [g["compute_capability"] for g in document["gpus"]] == ["9.0"]
    assert document["source"] == "override"


def test_environment_variables_override() -> None:
    result = cudalock(
        "probe",
        "--json",
        env=offline_env()
        | {"CUDALOCK_DRIVER_VERSION": "550.54.15", "CUDALOCK_DRIVER_CUDA": "12.3"},
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["driver_version"], document["driver_cuda"]) == ("550.54.15", "12.3")
    flags_win = cudalock(
        "probe",
        "--json",
        "--driver-cuda",
        "12.1",
        env=offline_env() | {"CUDALOCK_DRIVER_CUDA": "12.3"},
    )
    assert json.loads(flags_win.stdout)["driver_cuda"] == "12.1"


def test_probe_file_round_trip_through_the_cli(tmp_path: Path) -> None:
    written = cudalock(
        "probe", "--json", "--driver-version", "570.124.06", "--gpu", "H100", "--gpu", "L4"
    )
    assert written.returncode == 0, written.stderr
    probe_file = tmp_path / "node.json"
    probe_file.write_text(written.stdout)
    original = target_from_json(json.loads(written.stdout))
    read = cudalock("probe", "--json", "--probe", str(probe_file))
    assert read.returncode == 0, read.stderr
    again = target_from_json(json.loads(read.stdout))
    assert again.driver_version == original.driver_version
    assert again.driver_cuda == (12, 8)
    assert again.gpus == original.gpus
    assert again.host == original.host
    assert again.source == f"file:{probe_file}"


def test_two_probe_files_give_a_list(tmp_path: Path) -> None:
    for name, driver in (("a", "535.104.05"), ("b", "570.124.06")):
        out = cudalock("probe", "--json", "--driver-version", driver)
        (tmp_path / f"{name}.json").write_text(out.stdout)
    result = cudalock(
        "probe", "--json", "--probe", str(tmp_path / "a.json"), "--probe", str(tmp_path / "b.json")
    )
    assert result.returncode == 0, result.stderr
    documents = json.loads(result.stdout)
    assert [d["driver_cuda"] for d in documents] == ["12.2", "12.8"]


def test_summary_of_a_mixed_node(tmp_path: Path) -> None:
    document = {
        "schema_version": 1,
        "platform": "linux-x86_64",
        "driver_version": "550.54.15",
        "driver_cuda": "12.4",
        "source": "nvml",
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA A100-SXM4-80GB",
                "compute_capability": "8.0",
                "memory_total_bytes": 85899345920,
                "uuid": "GPU-a",
            },
            {
                "index": 1,
                "name": "Tesla T4",
                "compute_capability": "7.5",
                "memory_total_bytes": 16106127360,
                "uuid": "GPU-b",
            },
        ],
        "host": {
            "os": "linux",
            "arch": "x86_64",
            "glibc": "2.35",
            "memory_total_bytes": 549755813888,
            "cgroup_memory_limit_bytes": 8589934592,
            "hostname": "node-07",
        },
    }
    path = tmp_path / "node.json"
    path.write_text(json.dumps(document))
    result = cudalock("probe", "--probe", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"Target: node-07  (source: file:{path})"
    assert "  driver        550.54.15  (max CUDA 12.4)" in lines
    assert "  GPUs          0: NVIDIA A100-SXM4-80GB  CC 8.0  80.00GiB  GPU-a" in lines
    assert "                1: Tesla T4  CC 7.5  15.00GiB  GPU-b" in lines
    assert "  host          linux x86_64, glibc 2.35, hostname node-07" in lines
    assert "  RAM           512.00GiB" in lines
    assert "  cgroup limit  8.00GiB" in lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--driver-version", "abc"], "invalid NVIDIA driver version 'abc'"),
        (["--driver-cuda", "12.x"], "invalid CUDA version '12.x'"),
        (["--compute-capability", "9.x"], "invalid compute capability '9.x'"),
        (["--gpu", "H10"], "unknown GPU 'H10'"),
        (["--platform", "linux-riscv64"], "unknown platform 'linux-riscv64'"),
        (["--no-gpu", "--driver-cuda", "12.1"], "cannot be combined with --driver-cuda"),
        (["--probe", "/nonexistent/probe.json"], "probe file '/nonexistent/probe.json' does not"),
    ],
)
def test_bad_input_exits_2_without_traceback(args: list[str], message: str) -> None:
    result = cudalock("probe", "--json", *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("cudalock: error: ")
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "content",
    [
        "{oops",
        "[]",
        '{"schema_version": 9, "platform": "x-y"}',
        '{"schema_version": 1, "platform": "linux-x86_64", "gpus": [{"name": 3}]}',
    ],
)
def test_bad_probe_file_exits_2(tmp_path: Path, content: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(content)
    result = cudalock("probe", "--probe", str(path))
    assert result.returncode == 2
    assert f"probe file '{path}'" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_environment_variable_exits_2() -> None:
    result = cudalock("probe", env=offline_env() | {"CUDALOCK_DRIVER_VERSION": "latest"})
    assert result.returncode == 2
    assert "invalid NVIDIA driver version 'latest'" in result.stderr


@pytest.mark.skipif(
    not (default_matrix_dir() / "cuda.toml").exists(), reason="the shipped matrix is not there yet"
)
def test_shipped_matrix_end_to_end() -> None:
    result = cudalock(
        "probe",
        "--json",
        "--driver-version",
        "535.104.05",
        "--gpu",
        "H100",
        "--gpu",
        "T4",
        "--gpu",
        "L4",
        "--gpu",
        "RTX 5090",
        matrix=None,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    # CUDA 12.2 Update 2's minimum Linux driver is exactly 535.104.05 (release notes Table 3).
    assert document["driver_cuda"] == "12.2"
    # NVIDIA's CUDA GPUs page: H100 9.0, T4 7.5, L4 8.9, RTX 5090 12.0.
    assert [g["compute_capability"] for g in document["gpus"]] == ["9.0", "7.5", "8.9", "12.0"]


def test_probe_records_the_cuda_toolkit(tmp_path: Path) -> None:
    from tests.machine.test_toolkit import make_toolkit

    nvcc = make_toolkit(tmp_path / "cuda-12.1", version_json="12.1.1", nvcc_says="12.1")
    env = offline_env()
    env["CUDA_HOME"] = str(tmp_path / "cuda-12.1")
    result = cudalock("probe", "--json", env=env)
    assert result.returncode == 0, result.stderr
    host = json.loads(result.stdout)["host"]
    assert (host["cuda_toolkit"], host["cuda_toolkit_path"]) == ("12.1", str(nvcc))
    summary = cudalock("probe", env=env)
    assert f"  CUDA toolkit  CUDA 12.1  ({nvcc})" in summary.stdout.splitlines()
    # Target flags describe another machine: this one's toolkit is not recorded for it.
    other = json.loads(cudalock("probe", "--json", "--driver-version", "550.54.15", env=env).stdout)
    assert other["host"]["cuda_toolkit"] is None
    assert any("CUDA toolkit left out" in note for note in other["notes"])
    # A probe file keeps it, and refuses a toolkit version that is no CUDA version.
    path = tmp_path / "node.json"
    path.write_text(result.stdout)
    assert target_from_json(json.loads(result.stdout)).host.cuda_toolkit == "12.1"
    document = json.loads(result.stdout)
    document["host"]["cuda_toolkit"] = "twelve"
    path.write_text(json.dumps(document))
    refused = cudalock("probe", "--probe", str(path))
    assert refused.returncode == 2
    assert "'host.cuda_toolkit': invalid CUDA version 'twelve'" in refused.stderr
