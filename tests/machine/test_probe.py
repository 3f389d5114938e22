"""The machine probe, fed recorded NVML answers and prepared /proc and /sys trees.

Expected values are derived by hand from the fixtures and the small test matrix
(tests/fixtures/probe/matrix, rows copied from NVIDIA's CUDA release notes Table 3): e.g. driver
535.104.05 is at or above CUDA 12.2 GA's 535.54.03 and below CUDA 12.4.1's 550.54.15, so its
maximum CUDA is 12.2.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from cudalock.machine.driver import (
    _on_path,
    parse_nvidia_smi_csv,
    parse_proc_driver_version,
    parse_proc_gpu_information,
    parse_sys_driver_version,
)
from cudalock.machine.host import (
    glibc_version,
    hostname,
    parse_cgroup_limit,
    parse_meminfo_total,
    parse_proc_self_cgroup,
    probe_host,
    read_cgroup_memory,
    system_and_machine,
)
from cudalock.machine.probe import cuda_visible_devices, probe_machine
from cudalock.matrix import Matrix, default_matrix_dir, load_matrix
from cudalock.model import Gpu, Target
from cudalock.platforms import platform_for
from cudalock.versions import DriverVersion
from tests.support.fake_nvml import FakeNvml, record
from tests.support.probe_trees import prepared_trees

FIXTURES = Path(__file__).parents[1] / "fixtures" / "probe"
TREES = prepared_trees()
MEMINFO_BYTES = 65843068 * 1024  # MemTotal in every prepared tree's meminfo, in kB
GIB = 1 << 30


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(FIXTURES / "matrix")


def run_probe(
    matrix: Matrix,
    recording: str | None = "library_not_found",
    tree: str = "no_driver_cgroup_v2_max",
    environ: dict[str, str] | None = None,
    smi: str | None = None,
) -> tuple[Target, FakeNvml]:
    fake = FakeNvml.load(FIXTURES / "nvml" / f"{recording}.json")
    target = probe_machine(
        proc_root=TREES / tree / "proc",
        sys_root=TREES / tree / "sys",
        nvml=fake,
        # No CUDA toolkit of this machine: the one the tests set up (conftest), if any.
        environ=environ or {"CUDA_HOME": os.environ.get("CUDA_HOME", "/nonexistent")},
        run_nvidia_smi=lambda: smi,
        matrix=matrix,
    )
    assert fake.unrecorded == [], "the probe asked NVML something the recording lacks"
    return target, fake


def notes_text(target: Target) -> str:
    return "\n".join(target.notes)


# --------------------------------------------------------------------------------------------
# NVML answers


def test_without_hardware_the_probe_reads_the_host_and_asks_nvml_nothing(matrix: Matrix) -> None:
    fake = FakeNvml.load(FIXTURES / "nvml" / "single_a100.json")
    tree = TREES / "no_driver_cgroup_v2_max"
    target = probe_machine(
        proc_root=tree / "proc", sys_root=tree / "sys", nvml=fake, matrix=matrix, hardware=False
    )
    assert fake.calls == []
    assert (target.driver_version, target.gpus) == (None, ())
    full, _ = run_probe(matrix, "single_a100")
    assert (target.platform, target.host) == (full.platform, full.host)


def test_single_gpu_reads_driver_cuda_and_device(matrix: Matrix) -> None:
    target, fake = run_probe(matrix, "single_a100")
    assert target.source == "nvml"
    assert target.driver_version == DriverVersion("535.104.05")
    assert target.driver_cuda == (12, 2)  # NVML's 12020
    assert target.gpus == (
        Gpu(
            name="NVIDIA A100-SXM4-80GB",
            compute_capability=(8, 0),
            index=0,
            uuid="GPU-a1000000-8f4e-2a7d-9b1e-5c6d7e8f9a0b",
            memory_total_bytes=80 * GIB,
        ),
    )
    assert target.notes == ()
    assert fake.calls[0] == "nvmlInit" and fake.calls[-1] == "nvmlShutdown"
    assert fake.initialised == 0
    # v2 answered, so the v1 fallback is never asked.
    assert "nvmlSystemGetCudaDriverVersion" not in fake.calls


def test_mixed_node_keeps_every_gpu_and_architecture(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "mixed_a100_t4")
    assert target.driver_cuda == (12, 4)
    assert [(g.index, g.name, g.compute_capability) for g in target.gpus] == [
        (0, "NVIDIA A100-SXM4-80GB", (8, 0)),
        (1, "NVIDIA A100-SXM4-80GB", (8, 0)),
        (2, "Tesla T4", (7, 5)),
    ]
    assert target.compute_capabilities == ((7, 5), (8, 0))
    assert target.gpus[2].memory_total_bytes == 15 * GIB


def test_h100_l4_node(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "mixed_h100_l4")
    assert str(target.driver_version) == "570.124.06"
    assert target.driver_cuda == (12, 8)
    assert target.compute_capabilities == ((8, 9), (9, 0))


def test_no_nvidia_library_is_a_cpu_target_not_an_error(matrix: Matrix) -> None:
    target, fake = run_probe(matrix, "library_not_found")
    assert not target.has_driver
    assert target.gpus == ()
    assert target.source == "none"
    assert target.notes[0] == "no NVIDIA driver found: this is a CPU-only target"
    assert "NVML error 12" in notes_text(target)
    assert "container started without GPU access" in notes_text(target)
    assert "nvmlShutdown" not in fake.calls  # nothing to shut down after a failed init


def test_driver_not_loaded(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "driver_not_loaded")
    assert not target.has_driver
    assert "NVIDIA driver not loaded" in notes_text(target)
    assert "NVML error 9" in notes_text(target)


def test_version_mismatch_says_reboot_and_reads_loaded_module(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "version_mismatch", tree="proprietary_535_cgroup_v2")
    assert target.source == "procfs"
    assert target.driver_version == DriverVersion("535.104.05")
    assert target.driver_cuda == (12, 2)  # from the matrix: NVML could not say
    text = notes_text(target)
    assert "NVML error 18" in text
    assert "upgraded without a reboot" in text
    assert "Reboot" in text
    assert "no longer matches the running kernel module, 535.104.05" in text
    assert "maximum CUDA 12.2 taken from the matrix" in text
    assert sum("error 18" in note for note in target.notes) == 1


def test_version_mismatch_without_module_files(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "version_mismatch")
    assert not target.has_driver
    assert "upgraded without a reboot" in notes_text(target)


def test_no_permission_falls_back_to_proc_with_gpus_from_matrix(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "no_permission", tree="open_570_cgroup_v1_container")
    assert "NVML error 4" in notes_text(target)
    assert target.source == "procfs"
    assert str(target.driver_version) == "570.124.06"
    assert target.driver_cuda == (12, 8)  # CUDA 12.8.1 needs exactly 570.124.06
    assert [(g.index, g.name, g.compute_capability, g.uuid) for g in target.gpus] == [
        (0, "NVIDIA H100 80GB HBM3", (9, 0), "GPU-h1000000-aaaa-bbbb-cccc-ddddeeeeffff"),
        (1, "NVIDIA L4", (8, 9), "GPU-14000000-aaaa-bbbb-cccc-ddddeeeeffff"),
    ]


def test_old_driver_without_v2_call_uses_v1(matrix: Matrix) -> None:
    target, fake = run_probe(matrix, "old_binding_v2_missing")
    assert target.driver_cuda == (11, 4)  # v1's 11040
    assert fake.calls.index("nvmlSystemGetCudaDriverVersion_v2") < fake.calls.index(
        "nvmlSystemGetCudaDriverVersion"
    )
    assert target.notes == ()


def test_cuda_version_from_matrix_when_nvml_cannot_say(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "cuda_version_unknown")
    assert target.source == "nvml"
    assert target.driver_cuda == (12, 2)
    text = notes_text(target)
    assert "NVML could not tell the driver's CUDA version" in text
    assert "NVML error 12" in text and "NVML error 999" in text
    assert "maximum CUDA 12.2 taken from the matrix's CUDA driver table" in text


def test_lost_gpu_is_noted_and_the_rest_reported(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "gpu_lost")
    assert [g.name for g in target.gpus] == ["Tesla T4"]
    assert "NVML could not tell GPU 1: GPU is lost (NVML error 15)" in target.notes


def test_broken_binding_never_raises(matrix: Matrix) -> None:
    class Broken:
        NVMLError = pynvml.NVMLError

        def nvmlInit(self) -> None:
            raise RuntimeError("symbol lookup error")

    target = probe_machine(
        proc_root=TREES / "no_driver_cgroup_v2_max" / "proc",
        sys_root=TREES / "no_driver_cgroup_v2_max" / "sys",
        nvml=Broken(),  # type: ignore[arg-type]
        environ={},
        run_nvidia_smi=lambda: None,
        matrix=matrix,
    )
    assert not target.has_driver
    assert "NVML could not start: RuntimeError: symbol lookup error" in target.notes


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA library"
)
def test_real_pynvml_on_a_machine_without_nvidia(matrix: Matrix) -> None:
    """No fake: nvidia-ml-py itself fails to load libnvidia-ml here (NVML error 12)."""
    tree = TREES / "no_driver_cgroup_v2_max"
    target = probe_machine(
        proc_root=tree / "proc",
        sys_root=tree / "sys",
        environ={},
        run_nvidia_smi=lambda: None,
        matrix=matrix,
    )
    assert not target.has_driver
    assert "NVML error 12" in notes_text(target)
    # The default path checks for the library before importing pynvml; handing it the real
    # pynvml module must report exactly the same Target.
    through_pynvml = probe_machine(
        proc_root=tree / "proc",
        sys_root=tree / "sys",
        environ={},
        run_nvidia_smi=lambda: None,
        matrix=matrix,
        nvml=pynvml,
    )
    assert through_pynvml == target


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA library"
)
def test_probe_without_nvidia_library_does_not_import_pynvml() -> None:
    code = (
        "import sys; from cudalock.machine.probe import probe_machine; probe_machine(); "
        "print('pynvml' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "False"


def test_recorder_round_trips_a_recording() -> None:
    """The recorder asks what the probe asks and writes what the fake replays."""
    original = json.loads((FIXTURES / "nvml" / "mixed_a100_t4.json").read_text())
    recorded = record(FakeNvml(original))
    assert recorded["system"] == original["system"]
    assert recorded["devices"] == original["devices"]
    failed = record(FakeNvml(json.loads((FIXTURES / "nvml" / "version_mismatch.json").read_text())))
    assert failed["system"] == {"nvmlInit": {"nvml_error": 18}}


def test_fake_raises_pynvmls_own_exception_classes() -> None:
    fake = FakeNvml.load(FIXTURES / "nvml" / "version_mismatch.json")
    with pytest.raises(pynvml.NVMLError_LibRmVersionMismatch):
        fake.nvmlInit()


# --------------------------------------------------------------------------------------------
# Kernel module files and nvidia-smi


def test_sysfs_version_when_proc_is_absent(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, tree="sysfs_only_580_v1_unlimited")
    assert target.source == "procfs"
    assert str(target.driver_version) == "580.95.05"
    assert target.driver_cuda == (13, 0)
    assert any("/sys/module/nvidia/version" in n for n in target.notes)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 "
            "UTC 2023",
            "535.104.05",
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Wed Feb 26 01:07:29 UTC 2025",
            "570.124.06",
        ),
        ("NVRM version: NVIDIA UNIX Open Kernel Module  570.86.15  Release Build", "570.86.15"),
        ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.135  Tue Nov 12 2024", "550.135"),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build",
            "580.95.05",
        ),
    ],
)
def test_proc_version_formats(line: str, expected: str) -> None:
    text = line + "\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    assert parse_proc_driver_version(text) == DriverVersion(expected)


@pytest.mark.parametrize("text", ["", "GCC version: 12.2.0\n", "NVRM version: garbage\n"])
def test_proc_version_unreadable(text: str) -> None:
    assert parse_proc_driver_version(text) is None


def test_sys_version() -> None:
    assert parse_sys_driver_version("580.95.05\n") == DriverVersion("580.95.05")
    assert parse_sys_driver_version("") is None
    assert parse_sys_driver_version("not-a-version\n") is None


def test_proc_gpu_information() -> None:
    text = (
        TREES
        / "proprietary_535_cgroup_v2"
        / "proc"
        / "driver"
        / "nvidia"
        / "gpus"
        / "0000:00:1e.0"
        / "information"
    ).read_text()
    assert parse_proc_gpu_information(text) == (
        "Tesla T4",
        "GPU-7e4a0000-1111-2222-3333-444455556666",
        0,
    )


def test_nvidia_smi_when_nvml_and_module_files_fail(matrix: Matrix) -> None:
    output = (FIXTURES / "smi" / "query_with_compute_cap.csv").read_text()
    target, _ = run_probe(matrix, smi=output)
    assert target.source == "nvidia-smi"
    assert str(target.driver_version) == "535.104.05"
    assert target.driver_cuda == (12, 2)
    assert [(g.index, g.name, g.compute_capability, g.memory_total_bytes) for g in target.gpus] == [
        (0, "NVIDIA A100-SXM4-80GB", (8, 0), 81920 * 1024 * 1024),
        (1, "Tesla T4", (7, 5), 15360 * 1024 * 1024),
    ]


def test_old_nvidia_smi_without_compute_cap_uses_gpu_table(matrix: Matrix) -> None:
    output = (FIXTURES / "smi" / "query_old_no_compute_cap.csv").read_text()
    target, _ = run_probe(matrix, smi=output)
    assert target.driver_cuda == (11, 4)  # 470.82.01 = CUDA 11.4 Update 4's driver
    assert target.gpus[0].compute_capability == (7, 0)  # "V100" in the GPU table
    assert target.gpus[0].memory_total_bytes == 16160 * 1024 * 1024


def test_nvidia_smi_error_output_is_ignored(matrix: Matrix) -> None:
    target, _ = run_probe(
        matrix, smi="Failed to initialize NVML: Driver/library version mismatch\n"
    )
    assert not target.has_driver


def test_nvidia_smi_crash_is_a_note(matrix: Matrix) -> None:
    def explode() -> str:
        raise OSError("exec format error")

    target = probe_machine(
        proc_root=TREES / "no_driver_cgroup_v2_max" / "proc",
        sys_root=TREES / "no_driver_cgroup_v2_max" / "sys",
        nvml=FakeNvml.load(FIXTURES / "nvml" / "library_not_found.json"),
        environ={},
        run_nvidia_smi=explode,
        matrix=matrix,
    )
    assert "nvidia-smi failed: OSError: exec format error" in target.notes


def test_nvidia_smi_na_values() -> None:
    rows = parse_nvidia_smi_csv(
        "index, name, uuid, driver_version, compute_cap, memory.total [MiB]\n"
        "0, NVIDIA GH200 480GB, GPU-1, 560.35.03, [N/A], [N/A]\n"
    )
    assert rows[0].compute_capability is None and rows[0].memory_total_bytes is None
    assert rows[0].driver_version == DriverVersion("560.35.03")
    assert parse_nvidia_smi_csv("") == []
    assert parse_nvidia_smi_csv("No devices were found\n") == []


# --------------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES


def test_visible_devices_note_on_mixed_node(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "mixed_h100_l4", environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert len(target.gpus) == 2  # the Target keeps every GPU NVML sees
    (note,) = target.notes
    assert note.startswith("CUDA_VISIBLE_DEVICES='1': CUDA programs see 1 of 2 GPUs: 1 NVIDIA L4")
    assert "fastest first" in note  # mixed GPUs: CUDA's index 1 may not be NVML's 1


def test_visible_devices_pci_order_is_exact(matrix: Matrix) -> None:
    target, _ = run_probe(
        matrix,
        "mixed_h100_l4",
        environ={"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    )
    assert "fastest first" not in target.notes[0]


def test_visible_devices_empty_hides_all(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "single_a100", environ={"CUDA_VISIBLE_DEVICES": ""})
    assert target.notes == (
        "CUDA_VISIBLE_DEVICES='' hides every GPU from CUDA programs (NVML "
        "still lists all 1; the Target keeps them)",
    )


def test_visible_devices_unset_says_nothing(matrix: Matrix) -> None:
    target, _ = run_probe(matrix, "mixed_a100_t4", environ={"PATH": "/usr/bin"})
    assert target.notes == ()


GPUS = (
    Gpu("NVIDIA A100-SXM4-80GB", (8, 0), 0, "GPU-a1000000-x"),
    Gpu("NVIDIA A100-SXM4-80GB", (8, 0), 1, "GPU-a1000001-x"),
    Gpu("Tesla T4", (7, 5), 2, "GPU-7e4a0000-x"),
)


@pytest.mark.parametrize(
    ("value", "indices"),
    [
        ("0,2", (0, 2)),
        ("2,0", (2, 0)),
        ("0,7,1", (0,)),  # CUDA stops at the first index it does not have
        ("-1,0", ()),
        ("1,1", (1,)),  # a repeat ends the list
        ("GPU-7e4a", (2,)),  # a unique UUID prefix
        ("GPU-a100", ()),  # ambiguous prefix
        ("GPU-a1000001-x, 0", (1, 0)),
        ("", ()),
    ],
)
def test_cuda_visible_devices_parsing(value: str, indices: tuple[int, ...]) -> None:
    assert cuda_visible_devices(value, GPUS, "PCI_BUS_ID").indices == indices


def test_cuda_visible_devices_exactness() -> None:
    assert not cuda_visible_devices("0", GPUS, None).exact  # mixed, fastest-first order
    assert cuda_visible_devices("GPU-7e4a", GPUS, None).exact  # UUIDs are unambiguous
    same = GPUS[:2]
    assert cuda_visible_devices("1", same, None).exact  # identical GPUs: same numbering


# --------------------------------------------------------------------------------------------
# Host


@pytest.mark.parametrize(
    ("tree", "limit"),
    [
        ("proprietary_535_cgroup_v2", 8 * GIB),  # nested v2 scope: 8589934592
        ("open_570_cgroup_v1_container", 16 * GIB),  # v1 root of the container's mount
        ("sysfs_only_580_v1_unlimited", None),  # 9223372036854771712 means no limit
        ("no_driver_cgroup_v2_max", None),  # "max"
    ],
)
def test_cgroup_limits(tree: str, limit: int | None) -> None:
    assert cgroup_limit(TREES / tree / "proc", TREES / tree / "sys") == limit


def cgroup_limit(proc_root: Path, sys_root: Path) -> int | None:
    return read_cgroup_memory(sys_root / "fs" / "cgroup", proc_root).limit_bytes


def test_cgroup_takes_tightest_ancestor(tmp_path: Path) -> None:
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/a/b\n")
    base = tmp_path / "sys" / "fs" / "cgroup"
    (base / "a" / "b").mkdir(parents=True)
    (base / "cgroup.controllers").write_text("memory\n")
    (base / "memory.max").write_text("max\n")
    (base / "a" / "memory.max").write_text("1073741824\n")
    (base / "a" / "b" / "memory.max").write_text("2147483648\n")
    # The parent's 1 GiB binds even though the process's own cgroup allows 2 GiB.
    assert cgroup_limit(tmp_path / "proc", tmp_path / "sys") == GIB


def test_probe_survives_unreadable_roots(tmp_path: Path, matrix: Matrix) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("x")
    target = probe_machine(
        proc_root=not_a_directory,
        sys_root=tmp_path / "absent",
        nvml=FakeNvml.load(FIXTURES / "nvml" / "library_not_found.json"),
        environ={},
        run_nvidia_smi=lambda: None,
        matrix=matrix,
    )
    assert not target.has_driver
    assert target.host.memory_total_bytes is None
    assert target.host.cgroup_memory_limit_bytes is None


def test_cgroup_missing_everything(tmp_path: Path) -> None:
    assert cgroup_limit(tmp_path, tmp_path) is None


def test_host_from_prepared_tree() -> None:
    tree = TREES / "proprietary_535_cgroup_v2"
    host = probe_host(proc_root=tree / "proc", sys_root=tree / "sys")
    assert host.memory_total_bytes == MEMINFO_BYTES
    assert host.cgroup_memory_limit_bytes == 8 * GIB
    assert host.os == "linux" and host.arch in ("x86_64", "aarch64")
    assert host.hostname


def test_parsers_small() -> None:
    assert parse_meminfo_total("MemTotal:       1024 kB\n") == 1024 * 1024
    assert parse_meminfo_total("MemFree: 1 kB\n") is None
    assert parse_cgroup_limit("max\n") is None
    assert parse_cgroup_limit("9223372036854771712\n") is None
    assert parse_cgroup_limit("536870912\n") == 512 * 1024 * 1024
    assert parse_cgroup_limit("") is None
    assert parse_proc_self_cgroup("11:memory,foo:/x\n0::/y\n") == ("/y", "/x")


def test_glibc_version_on_this_machine() -> None:
    version = glibc_version()
    assert version is None or re.fullmatch(r"\d+\.\d+(\.\d+)?", version)
    library, libc = platform.libc_ver()
    assert version == (libc if library == "glibc" else None)


def test_the_machine_is_named_as_the_platform_and_socket_modules_name_it() -> None:
    assert system_and_machine() == (platform.system(), platform.machine())
    assert hostname() == (socket.gethostname() or None)


def test_on_path_finds_what_shutil_which_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "nvidia-smi").write_text("not executable\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "nvidia-smi").mkdir()  # a directory by that name is no program
    (tmp_path / "bin").mkdir()
    program = tmp_path / "bin" / "nvidia-smi"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    for path in ("plain:dir:bin", "plain:dir", "", f"{tmp_path}/missing"):
        full = ":".join(str(tmp_path / part) if part else "" for part in path.split(":"))
        monkeypatch.setenv("PATH", full)
        assert _on_path("nvidia-smi") == shutil.which("nvidia-smi"), path
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert _on_path("nvidia-smi") == str(program)


@pytest.mark.parametrize(
    ("system", "machine", "expected"),
    [
        ("Linux", "x86_64", "linux-x86_64"),
        ("Linux", "aarch64", "linux-aarch64"),
        ("Linux", "arm64", "linux-aarch64"),
        ("Windows", "AMD64", "windows-x86_64"),
        ("Darwin", "arm64", "macos-arm64"),
        ("Darwin", "x86_64", "macos-x86_64"),
        ("Linux", "ppc64le", "linux-ppc64le"),
    ],
)
def test_platform_strings(system: str, machine: str, expected: str) -> None:
    assert platform_for(system, machine) == expected


def test_live_probe_json_round_trips(matrix: Matrix) -> None:
    """The probe's Target survives to_json → probe-file reading unchanged (bar source/notes)."""
    from cudalock.machine import target_from_json

    target, _ = run_probe(matrix, "mixed_a100_t4", tree="proprietary_535_cgroup_v2")
    again = target_from_json(json.loads(json.dumps(target.to_json())))
    assert again == target


@pytest.mark.skipif(
    not (default_matrix_dir() / "cuda.toml").exists(), reason="the shipped matrix is not there yet"
)
def test_fallback_with_the_shipped_matrix() -> None:
    """The /proc fallback against the real data: 570.124.06 is CUDA 12.8 Update 1's driver."""
    target, _ = run_probe(load_matrix(), "driver_not_loaded", tree="open_570_cgroup_v1_container")
    assert target.driver_cuda == (12, 8)
    assert [(g.name, g.compute_capability) for g in target.gpus] == [
        ("NVIDIA H100 80GB HBM3", (9, 0)),
        ("NVIDIA L4", (8, 9)),
    ]


def test_a_hanging_nvidia_smi_is_stopped_and_reported_not_taken_for_no_driver(
    matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from cudalock.machine import driver

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nsetsid sleep 1000 &\nexec sleep 1000\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(driver, "NVIDIA_SMI_TIMEOUT_S", 1.0)
    started = time.monotonic()
    target = probe_machine(
        proc_root=TREES / "no_driver_cgroup_v2_max" / "proc",
        sys_root=TREES / "no_driver_cgroup_v2_max" / "sys",
        nvml=FakeNvml.load(FIXTURES / "nvml" / "library_not_found.json"),
        environ={},
        matrix=matrix,
    )
    assert time.monotonic() - started < 10
    assert not target.has_driver
    assert target.notes[0] == "the NVIDIA driver did not answer: taken as a CPU-only target"
    assert any(
        "nvidia-smi gave no answer (nvidia-smi did not finish within 1 s" in n for n in target.notes
    )
    assert not any("no NVIDIA driver found" in n for n in target.notes)
