"""Which evidence doctor reads for a run: this machine's only for a run on this host, pasted
kernel lines as their own source, resource managers' OOM records whatever the exit status, and
"undetermined" (with what would decide) when nothing speaks either way."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from cudalock.audit.installed import Installed
from cudalock.audit.runner import AuditOutcome
from cudalock.doctor import DoctorRequest, MachineReaders, run_doctor
from cudalock.doctor.diagnosis import SetupHints
from cudalock.doctor.kernel import CommandResult, KernelLog, read_kernel_log
from cudalock.doctor.logs import container_memory_limit, scan_training_log
from cudalock.machine.host import CgroupLevel, CgroupMemory, ShmInfo
from cudalock.machine.overrides import GivenTargets, TargetOptions, read_target_options
from cudalock.matrix import load_matrix
from cudalock.model import Finding, Gpu, Host, Target
from cudalock.request import Compat
from cudalock.versions import DriverVersion
from tests.support.cli import cudalock

FIXTURES = Path(__file__).parents[1] / "fixtures"
KERNEL, LOGS = FIXTURES / "doctor" / "kernel", FIXTURES / "doctor" / "logs"
REPORTS = FIXTURES / "reports"
GIB = 2**30


def kernel_of(name: str) -> KernelLog:
    text = (KERNEL / name).read_text()

    def runner(argv: Sequence[str]) -> CommandResult:
        return CommandResult(0, text) if argv[0] == "dmesg" else CommandResult(1, "", "denied")

    return read_kernel_log(runner=runner, files=(), hostname="vm")


class Reads:
    """Readers of a machine called vm that count what doctor reads of it."""

    def __init__(self, kernel: str = "host_oom_dmesg.txt", memory: int = 512 * GIB) -> None:
        self.kernel, self.memory = kernel, memory
        self.read: list[str] = []

    def readers(self) -> MachineReaders:
        def kernel() -> KernelLog:
            self.read.append("kernel")
            return kernel_of(self.kernel)

        def cgroup() -> CgroupMemory:
            self.read.append("cgroup")
            return CgroupMemory(2, (CgroupLevel("/", None, 0, 0),))

        def shm() -> ShmInfo:
            self.read.append("shm")
            return ShmInfo("/dev/shm", 64 * 2**20, 0)

        def probe() -> Target:
            self.read.append("probe")
            return Target(
                platform="linux-x86_64",
                gpus=(Gpu("NVIDIA A100-SXM4-80GB", (8, 0), 0, memory_total_bytes=80 * GIB),),
                host=Host(memory_total_bytes=self.memory, hostname="vm"),
            )

        return MachineReaders(
            read_kernel_log=kernel,
            read_cgroup=cgroup,
            read_shm=shm,
            probe=probe,
            root=Path("/nonexistent-root"),
            hostname="vm",
        )


def no_audit(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
    raise AssertionError("the audit must not run here")


def codes(findings: Sequence[Finding]) -> list[str]:
    return [f.code for f in findings]


def finding(findings: Sequence[Finding], code: str) -> Finding:
    found = [f for f in findings if f.code == code]
    assert found, f"no {code} in {codes(findings)}"
    return found[0]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- this machine's evidence: only for a run on this host ----------------------------------------


def test_a_log_without_host_or_time_is_not_judged_by_this_machines_kernel_log(
    tmp_path: Path,
) -> None:
    """The issue's case: a DeepSpeed launcher log with no host and no timestamps got "not an
    OOM" from the local dmesg. Now nothing of this machine is read, and the verdict is
    undetermined, with what would decide."""
    log = write(
        tmp_path,
        "train.log",
        "[INFO] [launch.py:315:sigkill_handler] Killing subprocess 2454240\n"
        "[ERROR] [launch.py:321:sigkill_handler] ['/venv/bin/python3', '-u', 'train.py', "
        "'--local_rank=3'] exits with return code = -9\n",
    )
    reads = Reads(kernel="clean_dmesg.txt")
    report = run_doctor(
        DoctorRequest(exit_code="-9", log_path=log), reads.readers(), audit=no_audit
    )
    assert reads.read == []
    assert report.verdict == "undetermined" and report.verdict != "not-oom"
    assert "sigkill-not-oom" not in codes(report.findings)
    not_read = finding(report.findings, "kernel-log-not-read")
    assert "nothing says the run ran on this machine" in not_read.message
    undetermined = finding(report.findings, "oom-undetermined")
    assert any(
        fix.startswith("Give --host vm if the run ran on this machine") for fix in undetermined.fix
    )
    assert any("dmesg -T" in fix for fix in undetermined.fix)
    assert any("--slurm-job" in fix for fix in undetermined.fix)
    assert any("kubectl describe pod" in fix for fix in undetermined.fix)
    # Said to have run here, the same clean kernel log covering it rules an OOM kill out.
    here = run_doctor(
        DoctorRequest(exit_code="-9", log_path=log, hosts=("vm",)),
        reads.readers(),
        audit=no_audit,
    )
    assert here.verdict == "not-oom" and "kernel" in reads.read and "cgroup" in reads.read


def test_a_run_here_is_judged_by_this_machines_kernel_log_and_ram() -> None:
    reads = Reads(kernel="host_oom_dmesg.txt", memory=64 * GIB)
    report = run_doctor(
        DoctorRequest(
            exit_code="-9",
            hosts=("vm.cluster.local",),
            flags=SetupHints(params=7 * 10**9, zero_stage=2, gpus_per_node=8),
            since=None,
        ),
        reads.readers(),
        audit=no_audit,
    )
    assert {"kernel", "cgroup", "probe"} <= set(reads.read)
    assert report.memory is not None and report.memory.host.total_bytes == 64 * GIB


def test_a_run_elsewhere_reads_neither_this_machines_kernel_log_nor_its_ram(
    tmp_path: Path,
) -> None:
    reads = Reads()
    report = run_doctor(
        DoctorRequest(
            exit_code="-9",
            hosts=("gpu-node-12",),
            flags=SetupHints(params=7 * 10**9, zero_stage=2, gpus_per_node=8),
        ),
        reads.readers(),
        audit=no_audit,
    )
    assert reads.read == []
    assert report.verdict == "undetermined"
    assert "host-oom-kill" not in codes(report.findings)
    assert report.memory is not None and report.memory.host_enough is None
    assert "host-memory-unknown" in codes(report.findings)
    elsewhere = finding(report.findings, "kernel-log-not-this-run")
    assert "the run ran on gpu-node-12 (--host), not on vm" in elsewhere.message


def test_a_probe_file_of_the_node_names_the_run_host_and_its_ram(tmp_path: Path) -> None:
    probe = write(
        tmp_path,
        "node.json",
        json.dumps(
            {
                "schema_version": 1,
                "name": "gpu-node-05",
                "platform": "linux-x86_64",
                "driver_version": "535.104.05",
                "driver_cuda": "12.2",
                "gpus": [
                    {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"} for _ in range(4)
                ],
                "host": {"memory_total_bytes": 128 * GIB, "hostname": "gpu-node-05"},
            }
        ),
    )
    reads = Reads()
    report = run_doctor(
        DoctorRequest(
            exit_code="-9",
            flags=SetupHints(params=7 * 10**9, zero_stage=2),
            target=read_target_options(TargetOptions(probe_files=(probe,)), load_matrix()),
        ),
        reads.readers(),
        audit=no_audit,
    )
    assert reads.read == []  # the run ran on gpu-node-05, not here
    assert report.scope is not None and report.scope.hosts == ("gpu-node-05",)
    assert report.memory is not None
    assert report.memory.host.total_bytes == 128 * GIB
    assert report.memory.needs.setup.gpus_per_node == 4  # the probe's GPUs


def test_pasted_kernel_lines_are_their_own_source_wherever_doctor_runs() -> None:
    # zero2_with_pasted_dmesg.log: gpu-node-03's run with its dmesg pasted in; doctor runs on vm.
    reads = Reads(kernel="slurm_jobs_memcg_dmesg.txt")
    report = run_doctor(
        DoctorRequest(exit_code="-9", log_path=LOGS / "zero2_with_pasted_dmesg.log"),
        reads.readers(),
        audit=no_audit,
    )
    assert "kernel" not in reads.read
    assert report.verdict == "host-oom"
    kill = finding(report.findings, "host-oom-kill")
    assert "--log" in json.dumps(report.evidence["machine"]["kernel"]["sources"])
    # vm's own Slurm-job kills are not pooled with the paste.
    assert "other-oom-kills" not in codes(report.findings)
    assert kill.evidence


def test_a_pasted_kill_of_a_python_process_without_pid_or_time_is_the_runs(
    tmp_path: Path,
) -> None:
    log = write(
        tmp_path,
        "issue.txt",
        "exits with return code = -9\n"
        "$ dmesg | grep -i kill\n"
        "[184527.110203] Out of memory: Killed process 40321 (python) total-vm:210345012kB, "
        "anon-rss:190123456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:380000kB "
        "oom_score_adj:0\n",
    )
    report = run_doctor(
        DoctorRequest(exit_code="-9", log_path=log), Reads().readers(), audit=no_audit
    )
    assert report.verdict == "host-oom"
    kill = finding(report.findings, "host-oom-kill")
    assert "the process name python in the kernel lines pasted" in kill.message


# --- resource managers' records decide, whatever the exit status ---------------------------------


def test_slurmstepd_oom_kill_decides_with_sruns_exit_status_1() -> None:
    reads = Reads()
    report = run_doctor(
        DoctorRequest(exit_code="1", log_path=LOGS / "slurm_oom.log"),
        reads.readers(),
        audit=no_audit,
    )
    assert report.verdict == "cgroup-oom"
    oom = finding(report.findings, "cgroup-oom-kill")
    assert any("Detected 1 oom_kill event in StepId=884422.0" in e for e in oom.evidence)
    assert any("srun: error: gpu-node-11: task 0: Out Of Memory" in e for e in oom.evidence)
    assert "exit-status-plain" not in codes(report.findings)
    assert report.exit_code == 1


def test_a_pods_oomkilled_state_decides_and_gives_the_memory_limit(tmp_path: Path) -> None:
    log = write(
        tmp_path,
        "pod.txt",
        """Containers:
  trainer:
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
    Limits:
      cpu:             16
      memory:          64Gi
      nvidia.com/gpu:  4
""",
    )
    report = run_doctor(
        DoctorRequest(
            exit_code="137",
            log_path=log,
            flags=SetupHints(params=7 * 10**9, zero_stage=2, gpus_per_node=4),
        ),
        Reads().readers(),
        audit=no_audit,
    )
    assert report.verdict == "cgroup-oom"
    oom = finding(report.findings, "container-oomkilled")
    assert "(64.00GiB)" in oom.message and "Reason:       OOMKilled" in oom.evidence[0]
    assert report.memory is not None
    assert report.memory.host.cgroup_limit_bytes == 64 * GIB
    assert "container's memory limit" in report.memory.host.source


def test_container_memory_limits_in_the_forms_kubectl_prints_them() -> None:
    assert container_memory_limit("    Limits:\n      cpu:  4\n      memory:  16Gi\n") == 16 * GIB
    compact = '{"resources":{"limits":{"cpu":"8","memory":"32Gi"},"requests":{"memory":"8Gi"}}}'
    assert container_memory_limit(compact) == 32 * GIB
    pretty = '"limits": {\n  "cpu": "8",\n  "memory": "17179869184"\n},'
    assert container_memory_limit(pretty) == 16 * GIB
    assert container_memory_limit("resources:\n  limits:\n    memory: 8G\n") == 8 * 10**9
    assert container_memory_limit("no pod here") is None


def test_docker_inspects_oomkilled_false_is_not_an_oom() -> None:
    facts = scan_training_log('"State": {"Status": "exited", "OOMKilled": false, "ExitCode": 137}')
    assert not facts.of_kind("kubernetes-oomkilled")
    killed = scan_training_log('"State": {"Status": "exited", "OOMKilled": true, "ExitCode": 137}')
    assert killed.of_kind("kubernetes-oomkilled")


# --- -11: the crashed environment's report ------------------------------------------------------


def test_minus_11_audits_the_report_given_on_its_own_machine() -> None:
    seen: list[tuple[str, GivenTargets | None, Compat]] = []

    def report_audit(text: str, given: GivenTargets | None, compat: Compat) -> AuditOutcome:
        seen.append((text, given, compat))
        found = (Finding("driver-too-old", "error", "torch 2.9.1+cu128 needs CUDA 12.8"),)
        crashed = Target(
            platform="linux-x86_64",
            driver_version=DriverVersion("530.30.02"),
            driver_cuda=(12, 1),
            gpus=(Gpu("NVIDIA A100-SXM4-80GB", (8, 0)),),
            name="the machine in the report",
        )
        return AuditOutcome(found, Installed(source="report:collect_env"), (crashed,))

    options = read_target_options(TargetOptions(driver_version="530.30.02"), load_matrix())
    report = run_doctor(
        DoctorRequest(
            exit_code="-11",
            report_text="PyTorch version: 2.9.1+cu128\n",
            report_name="collect_env.txt",
            target=options,
        ),
        Reads().readers(),
        audit=no_audit,
        report_audit=report_audit,
    )
    assert seen == [("PyTorch version: 2.9.1+cu128\n", options, "strict")]
    assert report.verdict == "cuda-newer-than-driver"
    audited = finding(report.findings, "segfault-report-audited").message
    assert "collect_env.txt" in audited
    # The machine judged is named as audit names it.
    assert (
        "the machine in the report (driver 530.30.02 (CUDA 12.1); NVIDIA A100-SXM4-80GB (8.0))"
        in audited
    )


def test_doctor_takes_the_target_flags_and_a_report() -> None:
    result = cudalock(
        "doctor",
        "--exit-code",
        "-11",
        "--report",
        REPORTS / "collect_env_2_9_cu128_driver_530.txt",
        "--driver-version",
        "530.30.02",
        "--json",
    )
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert document["verdict"] == "cuda-newer-than-driver"
    found = codes([Finding(f["code"], f["severity"], f["message"]) for f in document["findings"]])
    assert "segfault-report-audited" in found and "audit-clean" not in found
    fixes = " ".join(fix for f in document["findings"] for fix in f["fix"])
    assert "+cpu" not in fixes
    both = cudalock("doctor", "--exit-code", "-11", "--report", "-", "--probe", "-")
    assert both.returncode == 2 and "both read stdin" in both.stderr


def test_no_cpu_torch_is_suggested_when_the_log_shows_nvidia_gpus(tmp_path: Path) -> None:
    def audit(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
        # What an audit on a machine without a driver offers for a CUDA torch.
        return (
            Finding(
                "no-driver",
                "error",
                "no NVIDIA driver found",
                fix=(
                    "# a build this target runs: torch 2.15.0+cpu",
                    "pip install --force-reinstall torch==2.15.0+cpu --index-url "
                    "https://download.pytorch.org/whl/cpu",
                    "# or install the NVIDIA driver",
                ),
            ),
        )

    log = write(
        tmp_path,
        "train.log",
        "NCCL INFO Channel 00/02 : 0 1\n[ERROR] [launch.py:321:sigkill_handler] "
        "['/venv/bin/python', '-u', 'train.py'] exits with return code = -11\n",
    )
    report = run_doctor(
        DoctorRequest(exit_code="-11", log_path=log), Reads().readers(), audit=audit
    )
    fixes = finding(report.findings, "no-driver").fix
    assert not any("+cpu" in fix or "/whl/cpu" in fix for fix in fixes)
    assert "# or install the NVIDIA driver" in fixes
    assert any("NVIDIA GPUs, so no CPU build" in fix for fix in fixes)
    # Without evidence of GPUs the audit's fix stands as it is.
    plain = write(tmp_path, "plain.log", "Segmentation fault (core dumped)\n")
    kept = run_doctor(
        DoctorRequest(exit_code="-11", log_path=plain), Reads().readers(), audit=audit
    )
    assert any("+cpu" in fix for fix in finding(kept.findings, "no-driver").fix)


def test_memory_does_not_judge_a_node_by_a_probe_for_another_machine(tmp_path: Path) -> None:
    # A probe written by an older cudalock with --driver-version: this machine's RAM and name
    # were recorded under "given by flags".
    probe = write(
        tmp_path,
        "other.json",
        json.dumps(
            {
                "schema_version": 1,
                "name": "given by flags",
                "source": "override",
                "platform": "linux-x86_64",
                "driver_version": "535.104.05",
                "driver_cuda": "12.2",
                "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}],
                "host": {"memory_total_bytes": 16 * GIB, "hostname": "laptop"},
            }
        ),
    )
    args = ("--params", "7B", "--zero", "2", "--gpus-per-node", "8", "--json")
    result = cudalock("memory", "--probe", probe, *args)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["host"]["total_bytes"] is None
    assert "host-memory-unknown" in {f["code"] for f in document["findings"]}
    from cudalock.machine.probefiles import read_probe_file

    target = read_probe_file(probe)
    assert (target.host.memory_total_bytes, target.host.hostname, target.name) == (
        None,
        None,
        "other",
    )
    assert any("written with the Target flags for another machine" in n for n in target.notes)
