"""Doctor's verdicts from recorded kernel logs, prepared cgroup trees and training logs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from cudalock.doctor import DoctorRequest, MachineReaders, run_doctor
from cudalock.doctor.diagnosis import SetupHints, build_setup, explain_audit_finding, merge_hints
from cudalock.doctor.kernel import CommandResult, KernelLog, read_kernel_log
from cudalock.machine.host import CgroupLevel, CgroupMemory, ShmInfo, read_cgroup_memory
from cudalock.model import Finding, Gpu, Host, Target
from cudalock.request import Compat
from tests.support.cli import cudalock

FIXTURES = Path(__file__).parents[1] / "fixtures" / "doctor"
KERNEL, LOGS = FIXTURES / "kernel", FIXTURES / "logs"
CORPUS = Path(__file__).parents[1] / "fixtures" / "corpus"
GIB = 2**30
#: The machine the tests' runs ran on: its kernel log and counters speak only for a run there.
HOST = "gpu-node-03"


def recorded_kernel(*names: str, dmesg_denied: bool = False) -> KernelLog:
    text = "".join((KERNEL / name).read_text() for name in names)

    def runner(argv: Sequence[str]) -> CommandResult:
        if argv[0] == "dmesg":
            if dmesg_denied:
                return CommandResult(
                    1, "", "dmesg: read kernel buffer failed: Operation not permitted"
                )
            return CommandResult(0, text)
        return CommandResult(1, "", "No journal files were opened due to insufficient permissions.")

    return read_kernel_log(runner=runner, files=())


def machine(
    kernel: KernelLog,
    *,
    cgroup: CgroupMemory | None = None,
    shm: ShmInfo | None = None,
    memory: int = 512 * GIB,
    gpus: int = 8,
    environ: dict[str, str] | None = None,
    hostname: str = HOST,
) -> MachineReaders:
    target = Target(
        platform="linux-x86_64",
        gpus=tuple(
            Gpu("NVIDIA A100-SXM4-80GB", (8, 0), index=i, memory_total_bytes=80 * GIB)
            for i in range(gpus)
        ),
        host=Host(memory_total_bytes=memory),
    )
    return MachineReaders(
        read_kernel_log=lambda: kernel,
        read_cgroup=lambda: cgroup or CgroupMemory(2, (CgroupLevel("/", None, 0, 0),)),
        read_shm=lambda: shm,
        probe=lambda: target,
        environ=environ or {},
        root=Path("/nonexistent-root"),
        hostname=hostname,
    )


def codes(findings: Sequence[Finding]) -> list[str]:
    return [f.code for f in findings]


def no_audit(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
    raise AssertionError("the audit must not run for -9")


def test_host_oom_during_zero2_save_with_memory_check() -> None:
    request = DoctorRequest(exit_code="-9", log_path=LOGS / "torchrun_zero2_sigkill.log")
    report = run_doctor(
        request, machine(recorded_kernel("host_oom_dmesg.txt"), memory=128 * GIB), audit=no_audit
    )
    assert report.verdict == "host-oom"
    host = next(f for f in report.findings if f.code == "host-oom-kill")
    assert "Out of memory: Killed process 48213 (python)" in " ".join(host.evidence)
    assert "PID 48213 is the very process the training log reports" in host.message
    assert any("ZeRO-3" in fix for fix in host.fix)
    saving = next(f for f in report.findings if f.code == "killed-during-checkpoint-save")
    # 8 ranks × 2 bytes × 6,738,415,616 = 107,814,649,856 bytes = 100.41 GiB
    assert "each of the 8 ranks on a node copies" in saving.message
    assert "100.41GiB extra" in saving.message
    # The run came from the log and its DeepSpeed config next to it: ZeRO-2, 8 GPUs,
    # 6,738,415,616 params. Save spike 8 × 2 × P = 107,814,649,856 bytes; rule of thumb 1.5×.
    assert report.memory is not None
    setup = report.memory.needs.setup
    assert (setup.zero_stage, setup.gpus_per_node, setup.params) == (2, 8, 6_738_415_616)
    assert setup.offload_optimizer is False
    assert report.memory.needs.save_spike_bytes == 107_814_649_856
    assert report.memory.host_enough is False
    assert "host-memory-short" in codes(report.findings)
    assert any("ds_z2.json" in note for note in report.setup_notes)
    assert report.exit_code == 1


def test_a_host_oom_while_loading_the_weights_is_not_given_checkpoint_advice() -> None:
    # deepseek-ai/DeepSeek-VL2#90: one process, "Loading checkpoint shards ... Killed", and the
    # kernel's OOM kill pasted below it; no DeepSpeed, no ranks, no save.
    paste = CORPUS / "doctor-deepseek-vl2-90-dmesg-loading-killed" / "paste.txt"
    result = cudalock("doctor", "--log", paste, "--exit-code", "-9", "--json")
    host = next(f for f in json.loads(result.stdout)["findings"] if f["code"] == "host-oom-kill")
    assert any("while the weights were loading (log line 1)" in fix for fix in host["fix"])
    assert not any("ZeRO-3" in fix for fix in host["fix"])


def test_cgroup_oom_with_counters_and_limit(tmp_path: Path) -> None:
    cgroup_root, proc = tmp_path / "cgroup", tmp_path / "proc"
    cgroup_root.mkdir()
    (cgroup_root / "cgroup.controllers").write_text("memory\n")
    (cgroup_root / "memory.max").write_text(str(128 * GIB) + "\n")
    (cgroup_root / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 1\noom_kill 2\n")
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/\n")
    readers = machine(
        recorded_kernel("cgroup_oom_journal.txt"),
        cgroup=read_cgroup_memory(cgroup_root, proc),
        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"},
        hostname="gpu-node-07",
    )
    report = run_doctor(
        DoctorRequest(
            exit_code="137",
            flags=SetupHints(params=7 * 10**9, zero_stage=2, gpus_per_node=8),
            # The kills are logged at 14:31:05; the window ties them to this run.
            since=datetime(2026, 11, 29, 14, 0),
            until=datetime(2026, 11, 29, 14, 45),
            hosts=("gpu-node-07",),
        ),
        readers,
        audit=no_audit,
    )
    assert report.verdict == "cgroup-oom"
    finding = next(f for f in report.findings if f.code == "cgroup-oom-kill")
    assert "(128.00GiB)" in finding.message
    evidence = " ".join(finding.evidence)
    assert "Memory cgroup out of memory: Killed process 3121" in evidence
    assert "oom_kill 2" in evidence
    assert "kubernetes-oomkilled-hint" in codes(report.findings)


def test_unreadable_kernel_log_with_short_host_is_a_likely_host_oom() -> None:
    readers = machine(
        recorded_kernel("clean_dmesg.txt", dmesg_denied=True),
        cgroup=CgroupMemory(None),
        memory=64 * GIB,
    )
    report = run_doctor(
        DoctorRequest(
            exit_code="exitcode: -9",
            flags=SetupHints(params=7 * 10**9, zero_stage=2, gpus_per_node=4),
            hosts=(HOST,),
        ),
        readers,
        audit=no_audit,
    )
    assert report.verdict == "likely-host-oom"
    unreadable = next(f for f in report.findings if f.code == "kernel-log-unreadable")
    assert any("Operation not permitted" in item for item in unreadable.evidence)
    assert any("sudo dmesg -T" in fix for fix in unreadable.fix)


def test_clean_kernel_log_means_not_an_oom() -> None:
    report = run_doctor(
        DoctorRequest(exit_code="-9", hosts=(HOST,)),
        machine(recorded_kernel("clean_dmesg.txt")),
        audit=no_audit,
    )
    assert report.verdict == "not-oom"
    assert codes(report.findings) == ["sigkill-not-oom", "memory-check-skipped"]
    assert "Slurm" in report.findings[0].message


def test_collateral_sigkill_points_at_the_first_failure() -> None:
    report = run_doctor(
        DoctorRequest(exit_code="-9", log_path=LOGS / "collateral_sigkill.log"),
        machine(recorded_kernel("clean_dmesg.txt")),
        audit=no_audit,
    )
    assert report.verdict == "not-oom"
    finding = next(f for f in report.findings if f.code == "sigkill-collateral")
    assert "SIGSEGV" in finding.message and "--exit-code -11" in finding.message


def test_gpu_oom_is_told_apart() -> None:
    report = run_doctor(
        DoctorRequest(exit_code="-9", log_path=LOGS / "cuda_oom.log"),
        machine(recorded_kernel("clean_dmesg.txt")),
        audit=no_audit,
    )
    assert report.verdict == "gpu-oom"
    gpu = next(f for f in report.findings if f.code == "gpu-oom")
    assert "Tried to allocate 2.00 GiB" in gpu.evidence[0]


def test_slurm_oom_event_counts_as_cgroup_oom() -> None:
    report = run_doctor(
        DoctorRequest(exit_code="137", log_path=LOGS / "slurm_oom.log"),
        machine(recorded_kernel("clean_dmesg.txt")),
        audit=no_audit,
    )
    assert report.verdict == "cgroup-oom"


def test_sigsegv_runs_the_audit_and_reads_the_kernel(tmp_path: Path) -> None:
    calls: list[tuple[Path | None, bool, Compat]] = []

    def audit(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
        calls.append((python, deep, compat))
        return [
            Finding(
                "driver-too-old",
                "error",
                "torch 2.8.0+cu128 needs CUDA 12.8; the driver supports 12.2",
                fix=("pip install torch==2.5.1 --index-url .../cu121",),
            )
        ]

    shm = ShmInfo("/dev/shm", 64 * 2**20, 10 * 2**20)
    report = run_doctor(
        DoctorRequest(
            exit_code="-11",
            log_path=LOGS / "deepspeed_segv.log",
            python=Path("/envs/ft/bin/python"),
            hosts=(HOST,),
        ),
        machine(recorded_kernel("segfault_xid.txt"), shm=shm),
        audit=audit,
    )
    assert calls == [(Path("/envs/ft/bin/python"), True, "strict")]
    # A build newer than the driver is the most likely cause: named first, its fix kept; the
    # kernel's segfault lines follow as its symptoms.
    assert report.verdict == "cuda-newer-than-driver"
    assert "newer CUDA than the NVIDIA driver" in report.summary
    found = codes(report.findings)
    assert found[:4] == [
        "driver-too-old",
        "segfault-in-library",
        "segfault-in-library",
        "gpu-xid-error",
    ]
    assert report.findings[0].message.startswith(
        "Most likely cause: torch 2.8.0+cu128 needs CUDA 12.8; the driver "
        "supports 12.2. Why -11: a build for a newer CUDA"
    )
    assert report.findings[0].fix == ("pip install torch==2.5.1 --index-url .../cu121",)
    assert "libcuda.so.535.104.05" in report.findings[1].message
    shm_finding = next(f for f in report.findings if f.code == "shm-too-small")
    assert "0.06GiB" in shm_finding.message  # 64 MiB, Docker's default
    other = next(f for f in report.findings if f.code == "segfault-other-causes")
    assert other.evidence == ("/dev/shm: 0.06GiB, 0.01GiB free",)
    # --no-run turns the deep (CUDA-initialising) part off.
    run_doctor(
        DoctorRequest(exit_code="139", no_run=True),
        machine(recorded_kernel("clean_dmesg.txt")),
        audit=audit,
    )
    assert calls[-1] == (None, False, "strict")
    # The policy reaches the audit as given.
    run_doctor(
        DoctorRequest(exit_code="139", no_run=True, compat="minor"),
        machine(recorded_kernel("clean_dmesg.txt")),
        audit=audit,
    )
    assert calls[-1] == (None, False, "minor")


def test_a_driver_mismatch_the_policy_accepts_is_not_named_the_cause() -> None:
    def audit(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
        return [Finding("minor-compat-only", "warning", "runs through minor-version compatibility")]

    report = run_doctor(
        DoctorRequest(exit_code="-11", compat="minor", hosts=(HOST,)),
        machine(recorded_kernel("segfault_xid.txt")),
        audit=audit,
    )
    assert report.verdict == "segfault"
    assert codes(report.findings)[0] != "minor-compat-only"
    mismatch = next(f for f in report.findings if f.code == "minor-compat-only")
    assert not mismatch.message.startswith("Most likely cause")
    assert mismatch.message.startswith("runs through minor-version compatibility. Why -11:")


def test_doctor_reads_the_policy_of_the_spec_here_for_a_segfault_only(tmp_path: Path) -> None:
    # A malformed cudalock.toml in the working directory: -11 reads it (and says so), -9 not.
    (tmp_path / "cudalock.toml").write_text("[request\n")
    segfault = cudalock("doctor", "--exit-code", "-11", "--no-run", cwd=tmp_path)
    assert segfault.returncode == 2
    assert segfault.stderr.startswith("cudalock: error: cudalock.toml:1:")
    kill = cudalock("doctor", "--exit-code", "-9", "--host-memory", "1TiB", cwd=tmp_path)
    assert kill.returncode in (0, 1), kill.stderr
    assert "Traceback" not in kill.stderr


def test_sigsegv_audit_failure_is_a_finding_not_a_crash() -> None:
    def broken(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
        raise RuntimeError("interpreter vanished")

    report = run_doctor(
        DoctorRequest(exit_code="-11"), machine(recorded_kernel("clean_dmesg.txt")), audit=broken
    )
    unavailable = next(f for f in report.findings if f.code == "audit-unavailable")
    assert "interpreter vanished" in unavailable.message


def test_bus_error_names_shm_size() -> None:
    shm = ShmInfo("/dev/shm", 64 * 2**20, 0)
    report = run_doctor(
        DoctorRequest(exit_code="-7", log_path=LOGS / "dataloader_bus_error.log", hosts=(HOST,)),
        machine(recorded_kernel("clean_dmesg.txt"), shm=shm),
        audit=no_audit,
    )
    assert report.verdict == "bus-error"
    assert codes(report.findings) == ["dataloader-bus-error", "shm-too-small"]
    assert report.exit_code == 1
    # A roomy /dev/shm here: the size is named, and the container's own /dev/shm suspected.
    roomy = ShmInfo("/dev/shm", 32 * GIB, 32 * GIB)
    report = run_doctor(
        DoctorRequest(exit_code="135", log_path=LOGS / "dataloader_bus_error.log", hosts=(HOST,)),
        machine(recorded_kernel("clean_dmesg.txt"), shm=roomy),
        audit=no_audit,
    )
    assert codes(report.findings) == ["dataloader-bus-error"]
    assert "32.00GiB" in report.findings[0].message
    assert "container's /dev/shm" in report.findings[0].message


def test_a_workers_bus_error_explains_the_plain_exit_status_it_ends_in() -> None:
    # The main process raises "DataLoader worker (pid N) is killed by signal: Bus error" and
    # exits with status 1: the bus error, not "a plain exit status", is the verdict.
    shm = ShmInfo("/dev/shm", 64 * 2**20, 0)
    report = run_doctor(
        DoctorRequest(exit_code="1", log_path=LOGS / "dataloader_bus_error.log", hosts=(HOST,)),
        machine(recorded_kernel("clean_dmesg.txt"), shm=shm),
        audit=no_audit,
    )
    assert report.verdict == "bus-error"
    assert codes(report.findings) == ["dataloader-bus-error", "shm-too-small"]


def test_plain_exit_status_reads_nothing() -> None:
    def fail() -> KernelLog:
        raise AssertionError("no kernel log for a plain exit status")

    readers = MachineReaders(
        read_kernel_log=fail,
        read_cgroup=lambda: CgroupMemory(None),
        read_shm=lambda: None,
        probe=lambda: None,
    )
    report = run_doctor(DoctorRequest(exit_code="1"), readers, audit=no_audit)
    assert (report.verdict, report.exit_code) == ("exit-status", 0)


def test_explain_audit_finding_keeps_the_code() -> None:
    finding = Finding("deepspeed-torch-mismatch", "error", "ops built with torch 2.4.")
    explained = explain_audit_finding(finding)
    assert explained.code == finding.code and "C++ ABI" in explained.message
    unknown = Finding("something-else", "warning", "x")
    assert explain_audit_finding(unknown) == unknown


def test_flags_win_over_log_and_assumptions_are_noted() -> None:
    hints = merge_hints(
        SetupHints(zero_stage=3), SetupHints(params=10**9, zero_stage=2, gpus_per_node=4)
    )
    assert (hints.zero_stage, hints.gpus_per_node, hints.params) == (3, 4, 10**9)
    setup, notes = build_setup(SetupHints(params=10**9), default_gpus=2)
    assert setup is not None and (setup.zero_stage, setup.gpus_per_node) == (2, 2)
    assert any("assumed 2" in note for note in notes)
    assert build_setup(SetupHints()) == (None, [])


# --- the commands, as real processes --------------------------------------------------------------


def test_memory_command_short_and_enough() -> None:
    short = cudalock(
        "memory",
        "--params",
        "7B",
        "--zero",
        "2",
        "--gpus-per-node",
        "8",
        "--host-memory",
        "128GiB",
        "--json",
    )
    assert short.returncode == 1, short.stderr
    document = json.loads(short.stdout)
    # 7e9 · 4 · 8 · 1.5 = 336e9 bytes at start-up (DeepSpeed's CPU figure without offload).
    assert document["needs"]["host_required_bytes"] == 336 * 10**9
    assert document["host"]["available_bytes"] == 128 * GIB
    assert document["kubernetes"]["limits.memory"] == "313Gi"
    assert [f["code"] for f in document["findings"]] == ["host-memory-short"]
    enough = cudalock(
        "memory", "--params", "7e9", "--zero", "3", "--gpus-per-node", "8", "--host-memory", "2TiB"
    )
    assert enough.returncode == 0, enough.stderr
    assert "offload_param=none, offload_optimizer=none, zero_init=1  <- this run" in enough.stdout


def test_memory_command_from_model_file() -> None:
    result = cudalock(
        "memory",
        "--model",
        str(FIXTURES / "models" / "llama-2-7b-config.json"),
        "--zero",
        "3",
        "--gpus-per-node",
        "8",
        "--host-memory",
        "1TiB",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    setup = json.loads(result.stdout)["needs"]["setup"]
    assert setup["params"] == 6_738_415_616
    assert setup["largest_layer_params"] == 131_072_000
    assert "estimate" in setup["source"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["memory", "--params", "7Q", "--host-memory", "1TiB"], "unknown suffix"),
        (["memory", "--params", "7B", "--host-memory", "lots"], "size 'lots'"),
        (
            ["memory", "--params", "7B", "--offload-optimizer", "gpu", "--host-memory", "1TiB"],
            "expected cpu or none",
        ),
        (
            [
                "memory",
                "--params",
                "7B",
                "--zero",
                "2",
                "--offload-param",
                "cpu",
                "--host-memory",
                "1TiB",
            ],
            "needs ZeRO-3",
        ),
        (["memory", "--host-memory", "1TiB"], "model size is missing"),
        (["doctor", "--exit-code", "bogus"], "not understood"),
        (["doctor", "--exit-code", "-9", "--log", "/nonexistent/train.log"], "does not exist"),
        (["doctor", "--exit-code", "-11", "--compat", "loose"], "invalid --compat 'loose'"),
        (
            ["doctor", "--exit-code", "-11", "--spec", "/nonexistent/cudalock.toml"],
            "does not exist",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], message: str) -> None:
    result = cudalock(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_doctor_command_with_log_and_host_memory() -> None:
    result = cudalock(
        "doctor",
        "--exit-code",
        "-9",
        "--log",
        str(LOGS / "torchrun_zero2_sigkill.log"),
        "--host-memory",
        "64GiB",
        "--json",
    )
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert document["exit"]["signal_name"] == "SIGKILL"
    assert document["memory"]["needs"]["setup"]["gpus_per_node"] == 8
    assert "host-memory-short" in [f["code"] for f in document["findings"]]
    text = cudalock("doctor", "--exit-code", "1")
    assert text.returncode == 0
    assert "exit-status-plain" in text.stdout


def test_sigsegv_with_the_real_audit_of_a_real_environment(tmp_path: Path) -> None:
    # A fresh venv without torch: the real inspection runs its interpreter and says so; an
    # environment without torch is not the one a torch run crashed in (rakhimovv/npbgpp#5:
    # doctor run where torch was not), so it is neither "clean" nor told to install torch.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")],
        check=True,
        timeout=120,
    )
    python = tmp_path / "env" / "bin" / "python"
    readers = machine(recorded_kernel("clean_dmesg.txt"))
    report = run_doctor(DoctorRequest(exit_code="139", python=python, no_run=True), readers)
    found = codes(report.findings)
    assert "audit-clean" not in found and "no-torch" not in found
    unavailable = next(f for f in report.findings if f.code == "audit-unavailable")
    assert "has no torch, so it is not the one that crashed" in unavailable.message
    assert any(str(tmp_path / "env") in line for line in unavailable.evidence)


def test_memory_command_against_a_probe_file(tmp_path: Path) -> None:
    # The training node, probed elsewhere: 4 GPUs of 80 GiB, 200 GiB RAM, a 96 GiB cgroup limit.
    node = Target(
        platform="linux-x86_64",
        gpus=tuple(
            Gpu("NVIDIA H100 80GB HBM3", (9, 0), index=i, memory_total_bytes=80 * GIB)
            for i in range(4)
        ),
        host=Host(memory_total_bytes=200 * GIB, cgroup_memory_limit_bytes=96 * GIB),
    )
    probe = tmp_path / "node.json"
    probe.write_text(json.dumps(node.to_json()))
    result = cudalock(
        "memory",
        "--params",
        "13B",
        "--zero",
        "2",
        "--offload-optimizer",
        "cpu",
        "--probe",
        str(probe),
        "--json",
    )
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert document["needs"]["setup"]["gpus_per_node"] == 4  # from the probe file
    assert document["host"]["available_bytes"] == 96 * GIB  # the cgroup limit is tighter
    assert document["gpu_memory_bytes"] == 80 * GIB
    # 13e9 · max(4·4, 16) · 1.5 = 312e9 held, plus 4 × 2 × 13e9 = 104e9 at save.
    assert document["needs"]["host_required_bytes"] == 416 * 10**9
    short = next(f for f in document["findings"] if f["code"] == "host-memory-short")
    assert "container/cgroup limit" in short["message"]


def test_default_readers_take_every_root_and_command(tmp_path: Path) -> None:
    from cudalock.doctor import default_readers

    proc, sys_root, root = tmp_path / "proc", tmp_path / "sys", tmp_path / "root"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/\n")
    (proc / "meminfo").write_text("MemTotal:       65536000 kB\nMemFree: 1 kB\n")
    cgroup = sys_root / "fs" / "cgroup"
    cgroup.mkdir(parents=True)
    (cgroup / "cgroup.controllers").write_text("memory\n")
    (cgroup / "memory.max").write_text(str(32 * GIB) + "\n")
    (cgroup / "memory.events").write_text("oom 0\noom_kill 0\n")
    (root / "var" / "log").mkdir(parents=True)
    (root / "var" / "log" / "kern.log").write_text((KERNEL / "host_oom_dmesg.txt").read_text())
    seen: list[tuple[str, ...]] = []

    def runner(argv: Sequence[str]) -> CommandResult:
        seen.append(tuple(argv))
        return CommandResult(1, "", "dmesg: read kernel buffer failed: Operation not permitted")

    readers = default_readers(
        proc_root=proc,
        sys_root=sys_root,
        shm_path=tmp_path,
        root=root,
        runner=runner,
        log_commands=[("dmesg",)],
        environ={},
        hostname="node-1",
    )
    report = run_doctor(
        DoctorRequest(
            exit_code="-9",
            flags=SetupHints(params=7 * 10**9, zero_stage=2, gpus_per_node=2),
            since=datetime(2026, 11, 29, 13, 30),
            until=datetime(2026, 11, 29, 14, 30),
            hosts=("node-1",),
        ),
        readers,
        audit=no_audit,
    )
    assert seen == [("dmesg",)]
    assert report.verdict == "host-oom"  # found in <root>/var/log/kern.log
    assert report.memory is not None
    assert report.memory.host.total_bytes == 65_536_000 * 1024
    assert report.memory.host.cgroup_limit_bytes == 32 * GIB
    assert not report.evidence["machine"]["in_kubernetes"]


def test_every_code_in_the_source_is_documented() -> None:
    import re

    from cudalock.doctor import diagnosis as doctor
    from cudalock.doctor import slurm_findings
    from cudalock.doctor.diagnosis import FINDING_CODES
    from cudalock.memory import estimates as memory

    used: set[str] = set()
    for module in (doctor, memory, slurm_findings):
        source = Path(module.__file__ or "").read_text()
        used.update(re.findall(r'Finding\(\s*"([a-z0-9-]+)"', source))
    assert used == set(FINDING_CODES)
    assert all(code in (doctor.__doc__ or "").replace("\n", " ") for code in FINDING_CODES)


def test_kills_on_another_host_after_the_run_are_set_apart() -> None:
    # The log: gpu-node-03, 13:40:02 – 14:02:15. The journal: gpu-node-07 at 14:31:05.
    report = run_doctor(
        DoctorRequest(
            exit_code="-9",
            log_path=LOGS / "torchrun_zero2_sigkill.log",
            host_memory_bytes=2048 * GIB,
        ),
        machine(recorded_kernel("cgroup_oom_journal.txt")),
        audit=no_audit,
    )
    assert report.verdict == "undetermined"
    assert "cgroup-oom-kill" not in codes(report.findings)
    other = next(f for f in report.findings if f.code == "other-oom-kills")
    assert "not matched to this run (2)" in other.message
    assert any(
        "after the run" in item and "logged on gpu-node-07; the run ran on gpu-node-03" in item
        for item in other.evidence
    )
    not_this_run = next(f for f in report.findings if f.code == "kernel-log-not-this-run")
    assert "begins at 2026-11-29 14:31:05, after the run ended" in not_this_run.evidence[0]
    assert report.memory is not None and report.memory.host_enough is True
