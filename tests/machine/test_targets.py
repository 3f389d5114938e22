"""Targets from override flags, probe files and the live probe.

Expected CUDA versions come by hand from the small test matrix (NVIDIA's release notes, Table 3):
535.104.05 → 12.2 (12.2 GA needs 535.54.03, 12.4.1 needs 550.54.15); Windows 537.13 → 12.2.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cudalock.errors import InputError, UsageError
from cudalock.machine import TargetOptions, read_probe_file, target_from_json, targets_from_options
from cudalock.matrix import Matrix, load_matrix
from cudalock.model import Gpu, Host, Target
from cudalock.versions import DriverVersion

FIXTURES = Path(__file__).parents[1] / "fixtures" / "probe"

GPU_BOX = Target(
    platform="linux-x86_64",
    driver_version=DriverVersion("550.54.15"),
    driver_cuda=(12, 4),
    gpus=(
        Gpu("NVIDIA A100-SXM4-80GB", (8, 0), 0, "GPU-a", 80 << 30),
        Gpu("Tesla T4", (7, 5), 1, "GPU-b", 15 << 30),
    ),
    host=Host(
        os="linux",
        arch="x86_64",
        glibc="2.35",
        memory_total_bytes=512 << 30,
        cgroup_memory_limit_bytes=None,
        hostname="node-07",
    ),
    source="nvml",
    notes=("CUDA_VISIBLE_DEVICES='0': CUDA programs see 1 of 2 GPUs",),
)
CPU_BOX = Target(
    platform="linux-x86_64",
    host=Host(os="linux", arch="x86_64", glibc="2.36", hostname="laptop"),
    notes=("no NVIDIA driver found: this is a CPU-only target",),
)


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(FIXTURES / "matrix")


def targets(matrix: Matrix, live: Target = GPU_BOX, **options: Any) -> list[Target]:
    calls: list[int] = []

    def probe() -> Target:
        calls.append(1)
        return live

    result = targets_from_options(TargetOptions(**options), matrix, probe=probe)
    assert len(calls) == (0 if options.get("probe_files") else 1)
    return result


def one(matrix: Matrix, live: Target = GPU_BOX, **options: Any) -> Target:
    (target,) = targets(matrix, live, **options)
    return target


# --------------------------------------------------------------------------------------------
# Overrides on the live probe


def test_no_flags_is_the_live_probe(matrix: Matrix) -> None:
    assert one(matrix) is GPU_BOX


def test_empty_driver_values_count_as_not_given(matrix: Matrix) -> None:
    assert one(matrix, driver_version="", driver_cuda=" ") is GPU_BOX


def test_driver_version_alone_derives_cuda(matrix: Matrix) -> None:
    target = one(matrix, driver_version="535.104.05")
    assert target.driver_version == DriverVersion("535.104.05")
    assert target.driver_cuda == (12, 2)
    assert target.gpus == GPU_BOX.gpus  # replaced field by field: the GPUs stay
    # The flags describe another machine: this one's RAM and name are not recorded for it.
    assert target.host == Host(os="linux", arch="x86_64", glibc="2.35")
    assert any(
        "this machine's RAM and hostname left out: the Target flags describe another machine" in n
        for n in target.notes
    )
    assert target.source == "override"
    assert target.name == "given by flags"
    assert "maximum CUDA 12.2 for driver 535.104.05 from the matrix's driver table" in target.notes


def test_driver_cuda_alone(matrix: Matrix) -> None:
    target = one(matrix, driver_cuda="12.1")
    assert target.driver_version is None  # the driver's two fields go together
    assert target.driver_cuda == (12, 1)
    assert target.has_driver


def test_driver_version_and_cuda_given(matrix: Matrix) -> None:
    target = one(matrix, driver_version="535.104.05", driver_cuda="12.4")
    assert target.driver_cuda == (12, 4)
    assert any("above the 12.2 the matrix lists" in n for n in target.notes)


def test_unverified_matrix_rows_do_not_raise_max_cuda(matrix: Matrix) -> None:
    # 610.43.02 meets the unverified CUDA 13.3 row; only verified 13.0.2 (580.95.05) counts.
    assert one(matrix, driver_version="610.43.02").driver_cuda == (13, 0)


def test_driver_older_than_the_table(matrix: Matrix) -> None:
    target = one(matrix, driver_version="450.80.02")
    assert target.driver_cuda is None
    assert any("older than every CUDA release in the matrix" in n for n in target.notes)


def test_compute_capabilities_replace_gpus(matrix: Matrix) -> None:
    target = one(
        matrix, CPU_BOX, driver_version="535.104.05", compute_capabilities=("8.6", "sm_90")
    )
    assert target.compute_capabilities == ((8, 6), (9, 0))
    assert target.host == Host(os="linux", arch="x86_64", glibc="2.36")
    # Driver and GPUs both given: the live probe's "no driver" note no longer applies.
    assert not any("no NVIDIA driver" in n for n in target.notes)


def test_gpu_names_from_the_matrix(matrix: Matrix) -> None:
    target = one(
        matrix, driver_cuda="12.4", gpu_names=("H100", "Tesla T4"), compute_capabilities=("8.6",)
    )
    assert [(g.name, g.compute_capability) for g in target.gpus] == [
        ("GPU with compute capability 8.6", (8, 6)),
        ("NVIDIA H100", (9, 0)),
        ("Tesla T4", (7, 5)),
    ]


def test_unknown_gpu_name_suggests_nearest(matrix: Matrix) -> None:
    with pytest.raises(UsageError) as caught:
        one(matrix, gpu_names=("H10",))
    assert "unknown GPU 'H10'" in caught.value.message
    assert "'H100'" in caught.value.message
    assert caught.value.hint and "--compute-capability" in caught.value.hint


def test_gpus_without_driver_are_noted(matrix: Matrix) -> None:
    target = one(matrix, CPU_BOX, compute_capabilities=("9.0",))
    assert target.compute_capabilities == ((9, 0),)
    assert any("GPUs given but no driver" in n for n in target.notes)


def test_no_gpu(matrix: Matrix) -> None:
    target = one(matrix, no_gpu=True)
    assert not target.has_driver and target.gpus == ()
    assert target.source == "override"
    assert target.host == GPU_BOX.host


def test_no_gpu_conflicts(matrix: Matrix) -> None:
    with pytest.raises(UsageError, match=r"--no-gpu .* cannot be combined with --driver-version"):
        one(matrix, no_gpu=True, driver_version="535.104.05")


def test_platform_override_uses_that_platforms_driver_table(matrix: Matrix) -> None:
    target = one(matrix, platform="windows-x86_64", driver_version="537.13")
    assert target.platform == "windows-x86_64"
    assert target.driver_cuda == (12, 2)  # CUDA 12.2 Update 2's Windows driver is 537.13
    assert target.host == Host(os="windows", arch="x86_64")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"driver_version": "abc"}, "'abc'"),
        ({"driver_version": "535.104.05.1"}, "'535.104.05.1'"),
        ({"driver_cuda": "12.x"}, "'12.x'"),
        ({"compute_capabilities": ("9.x",)}, "'9.x'"),
        ({"compute_capabilities": ("sm_",)}, "'sm_'"),
        ({"platform": "linux-riscv64"}, "'linux-riscv64'"),
    ],
)
def test_bad_override_values(matrix: Matrix, options: dict[str, Any], named: str) -> None:
    with pytest.raises(InputError) as caught:
        one(matrix, **options)
    assert named in caught.value.message


# --------------------------------------------------------------------------------------------
# Probe files


def write(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_probe_file_round_trip(tmp_path: Path, matrix: Matrix) -> None:
    path = write(tmp_path / "node07.json", GPU_BOX.to_json())
    (target,) = targets(matrix, probe_files=(path,))
    assert target.name == "node-07"  # the recorded hostname
    assert target.source == f"file:{path}"
    assert target.notes[0] == f"read from {path} (probed there via nvml)"
    assert (
        replace(target, name=GPU_BOX.name, source=GPU_BOX.source, notes=target.notes[1:]) == GPU_BOX
    )


def test_probe_file_without_hostname_is_named_after_file(tmp_path: Path) -> None:
    path = write(tmp_path / "builder.json", {"schema_version": 1, "platform": "linux-aarch64"})
    target = read_probe_file(path)
    assert target.name == "builder"
    assert target.platform == "linux-aarch64"
    assert not target.has_driver


def test_fleet_with_overrides_applied_to_each(tmp_path: Path, matrix: Matrix) -> None:
    first = write(tmp_path / "a.json", GPU_BOX.to_json())
    second = write(tmp_path / "b.json", CPU_BOX.to_json())
    third = write(tmp_path / "c.json", GPU_BOX.to_json())
    fleet = targets(matrix, probe_files=(first, second, third), driver_version="535.104.05")
    assert [t.name for t in fleet] == ["node-07 (a.json)", "laptop", "node-07 (c.json)"]
    assert all(t.driver_cuda == (12, 2) and t.source == "override" for t in fleet)
    assert fleet[0].gpus == GPU_BOX.gpus


def good_document() -> dict[str, Any]:
    return GPU_BOX.to_json()


def mutated(**changes: Any) -> dict[str, Any]:
    document = good_document()
    for key, value in changes.items():
        if value is KeyError:
            del document[key]
        else:
            document[key] = value
    return document


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "is not valid JSON"),
        ("[]", "must be a JSON object, got a list"),
        (json.dumps(mutated(schema_version=2)), "schema_version 2 is not supported"),
        (json.dumps(mutated(schema_version="1")), "'schema_version' must be the integer 1"),
        (json.dumps(mutated(schema_version=KeyError)), "'schema_version' must be the integer 1"),
        (json.dumps(mutated(platform=KeyError)), "'platform' is missing"),
        (json.dumps(mutated(platform="Linux x86")), "is not a platform"),
        (json.dumps(mutated(driver_version=535)), "'driver_version' must be a string or null"),
        (json.dumps(mutated(driver_version="535.x")), "invalid NVIDIA driver version '535.x'"),
        (json.dumps(mutated(driver_cuda="twelve")), "invalid CUDA version 'twelve'"),
        (json.dumps(mutated(gpus={"name": "x"})), "'gpus' must be a list"),
        (
            json.dumps(mutated(gpus=[{"name": "x", "compute_capability": "9.x"}])),
            "gpus[0]: invalid compute capability '9.x'",
        ),
        (json.dumps(mutated(gpus=[{"compute_capability": "9.0"}])), "'gpus[0].name' is missing"),
        (
            json.dumps(mutated(gpus=[{"name": "x", "memory_total_bytes": -1}])),
            "'gpus[0].memory_total_bytes' must be a non-negative integer",
        ),
        (json.dumps(mutated(gpus=[{"name": "x", "index": True}])), "'gpus[0].index' must be"),
        (json.dumps(mutated(host=[])), "host must be a JSON object"),
        (json.dumps(mutated(host={"ram": 1})), "host has unknown field(s) 'ram'"),
        (json.dumps(mutated(driver_verison="535.104.05")), "unknown field(s) 'driver_verison'"),
        (json.dumps(mutated(notes="x")), "'notes' must be a list of strings"),
    ],
)
def test_bad_probe_files(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_probe_file(path)
    assert caught.value.message.startswith(f"probe file {str(path)!r}")
    assert problem in caught.value.message


def test_missing_probe_file(tmp_path: Path, matrix: Matrix) -> None:
    with pytest.raises(InputError, match="does not exist"):
        targets(matrix, probe_files=(tmp_path / "absent.json",))


def test_probe_file_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        read_probe_file(tmp_path)


def test_probe_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(InputError, match="cannot be read"):
        read_probe_file(path)


def test_target_from_json_name_argument() -> None:
    assert target_from_json(good_document(), "fleet-a").name == "fleet-a"
    assert target_from_json(good_document()).name == GPU_BOX.name
