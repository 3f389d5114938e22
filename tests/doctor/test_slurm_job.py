"""`doctor --slurm-job`: Slurm's record of a job as doctor's verdict, with the --mem it needs.

The jobs are sacct and scontrol output recorded on a real cluster (tests/fixtures/slurm/); the
live cluster's version of these checks is in tests/e2e/test_slurm_doctor.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from cudalock.doctor import DoctorRequest, MachineReaders, run_doctor
from cudalock.doctor.diagnosis import SetupHints
from cudalock.doctor.kernel import CommandResult, KernelLog, read_kernel_log
from cudalock.doctor.slurm import JobAccounting, expand_hostlist
from cudalock.errors import InputError
from cudalock.machine.host import CgroupMemory
from cudalock.model import Finding
from cudalock.request import Compat
from tests.support.cli import cudalock
from tests.support.index import offline_env
from tests.support.slurm_records import recorded

KERNEL = Path(__file__).parents[1] / "fixtures" / "doctor" / "kernel"
GIB = 2**30


def kernel_of(text: str, hostname: str = "vm") -> KernelLog:
    def runner(argv: Sequence[str]) -> CommandResult:
        return CommandResult(0, text) if argv[0] == "dmesg" else CommandResult(1, "", "no journal")

    return read_kernel_log(
        runner=runner, files=(), hostname=hostname, now=datetime(2026, 11, 30, 21, 0)
    )


def slurm_readers(
    accounting: JobAccounting, *, kernel: str = "", hostname: str = "login1"
) -> MachineReaders:
    def no_probe() -> None:
        raise AssertionError("a Slurm job's memory is its request: this machine is not probed")

    return MachineReaders(
        read_kernel_log=lambda: kernel_of(kernel, hostname),
        read_cgroup=lambda: CgroupMemory(None),
        read_shm=lambda: None,
        probe=no_probe,
        hostname=hostname,
        read_slurm_job=lambda reference: accounting,
    )


def audit_nothing(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
    return ()


def finding(report_findings: Sequence[Finding], code: str) -> Finding:
    found = [f for f in report_findings if f.code == code]
    assert found, f"no {code} in {[f.code for f in report_findings]}"
    return found[0]


ONE_B_ZERO2 = SetupHints(params=10**9, zero_stage=2)


def test_out_of_memory_job_gets_the_mem_it_needs() -> None:
    report = run_doctor(
        DoctorRequest(exit_code=None, slurm_job="3", flags=ONE_B_ZERO2),
        slurm_readers(recorded("oom-batch")),
        audit=audit_nothing,
    )
    assert (report.verdict, report.exit_code) == ("slurm-oom", 1)
    oom = finding(report.findings, "slurm-out-of-memory")
    assert oom.message.startswith("Slurm: step 3.batch ran out of memory")
    assert any("State=OUT_OF_MEMORY ExitCode=0:125" in e for e in oom.evidence)
    request = finding(report.findings, "slurm-memory-request")
    # DeepSpeed's ZeRO-2 CPU figure for 1e9 params on 1 GPU: 4 × 1e9 × 1 × 1.5 = 6e9 bytes.
    assert "The job could use 64.0 MiB per node (allocated per node (vm: 64.0 MiB))" in (
        request.message
    )
    assert "needs about 5.59GiB per node" in request.message
    assert "Ask Slurm for it: #SBATCH --mem=6G." in request.message
    assert request.fix[0] == "#SBATCH --mem=6G"
    assert request.fix[1] == "or #SBATCH --mem-per-gpu=6G (with 1 GPUs per node)"
    assert any("ZeRO-3" in fix and "#SBATCH --mem=" in fix for fix in request.fix)
    assert report.memory is not None
    assert report.memory.host.cgroup_limit_bytes == 64 * 2**20
    assert report.memory.host.total_bytes is None
    assert "Slurm job 3's request" in report.memory.host.source
    assert any("GPUs per node unknown: assumed 1" in note for note in report.setup_notes)


def test_a_per_gpu_request_is_answered_per_gpu() -> None:
    report = run_doctor(
        DoctorRequest(exit_code=None, slurm_job="12", flags=ONE_B_ZERO2),
        slurm_readers(recorded("oom-per-gpu")),
        audit=audit_nothing,
    )
    request = finding(report.findings, "slurm-memory-request")
    # 2 GPUs from the job's gres/gpu=2: 4 × 1e9 × 2 × 1.5 = 12e9 bytes = 11.18 GiB per node.
    assert report.memory is not None and report.memory.needs.setup.gpus_per_node == 2
    assert request.fix[0] == "#SBATCH --mem-per-gpu=6G (with 2 GPUs per node)"
    assert request.fix[1] == "or #SBATCH --mem=12G"


def test_without_a_model_size_the_oom_is_still_explained() -> None:
    report = run_doctor(
        DoctorRequest(exit_code=None, slurm_job="3"),
        slurm_readers(recorded("oom-batch")),
        audit=audit_nothing,
    )
    assert report.verdict == "slurm-oom"
    skipped = finding(report.findings, "memory-check-skipped")
    assert "#SBATCH --mem= it needs" in skipped.message


def test_time_limit_is_not_an_oom() -> None:
    report = run_doctor(
        DoctorRequest(exit_code=None, slurm_job="2", flags=ONE_B_ZERO2),
        slurm_readers(recorded("time-limit")),
        audit=audit_nothing,
    )
    assert (report.verdict, report.exit_code) == ("time-limit", 1)
    assert [f.code for f in report.findings] == ["slurm-time-limit"]
    assert "memory was not the cause" in report.findings[0].message
    assert "the job's limit was 1 min" in report.findings[0].fix[0]
    assert report.memory is None


def test_segfault_takes_the_minus_11_path() -> None:
    calls: list[tuple[Path | None, bool]] = []

    def audit(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
        calls.append((python, deep))
        return ()

    report = run_doctor(
        DoctorRequest(exit_code=None, slurm_job="4", python=Path("/envs/ft/bin/python")),
        slurm_readers(recorded("segfault-batch")),
        audit=audit,
    )
    assert report.verdict == "segfault"
    assert calls == [(Path("/envs/ft/bin/python"), True)]
    segfault = finding(report.findings, "slurm-segfault")
    assert segfault.severity == "error"
    assert "a shell reporting 128+11" in segfault.message
    assert "audit-clean" in [f.code for f in report.findings]


def test_a_plain_exit_11_is_not_called_a_certain_segfault() -> None:
    report = run_doctor(
        DoctorRequest(exit_code=None, slurm_job="6"),
        slurm_readers(recorded("exit-11", controller=False)),
        audit=audit_nothing,
    )
    segfault = finding(report.findings, "slurm-segfault")
    assert segfault.severity == "warning"
    assert "cannot tell a segfault from a plain 'exit 11'" in segfault.message


@pytest.mark.parametrize(
    ("name", "verdict", "code", "exit_code"),
    [
        ("success", "completed", "slurm-job-completed", 0),
        ("cancelled", "cancelled", "slurm-job-cancelled", 0),
        ("exit-3", "exit-status", "slurm-job-failed", 0),
    ],
)
def test_other_ends(name: str, verdict: str, code: str, exit_code: int) -> None:
    report = run_doctor(
        DoctorRequest(exit_code=None, slurm_job="1"),
        slurm_readers(recorded(name)),
        audit=audit_nothing,
    )
    assert (report.verdict, report.exit_code) == (verdict, exit_code)
    assert [f.code for f in report.findings] == [code]


def test_the_jobs_time_and_nodes_select_the_kernel_evidence() -> None:
    # oom-batch is job 3 on vm, 19:50:39 – 19:50:40. An earlier job 3 (another cluster state,
    # recorded in the fixture) was killed at 19:46:26; the real kill of this one is added.
    this_kill = (
        "[Mon Nov 30 19:50:40 2026] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),"
        "cpuset=/,mems_allowed=0,oom_memcg=/slurm_vm/uid_0/job_3,task_memcg=/slurm_vm/uid_0/"
        "job_3/step_batch/task_0,task=python,pid=30101,uid=0\n"
        "[Mon Nov 30 19:50:40 2026] Memory cgroup out of memory: Killed process 30101 (python) "
        "total-vm:1061092kB, anon-rss:64896kB, file-rss:5848kB, shmem-rss:0kB, UID:0\n"
    )
    text = (KERNEL / "slurm_jobs_memcg_dmesg.txt").read_text() + this_kill
    report = run_doctor(
        DoctorRequest(exit_code=None, slurm_job="3"),
        slurm_readers(recorded("oom-batch"), kernel=text, hostname="vm"),
        audit=audit_nothing,
    )
    assert report.scope is not None
    assert (report.scope.hosts, report.scope.slurm_job_ids) == (("vm",), ("3",))
    oom = finding(report.findings, "slurm-out-of-memory")
    assert "The kernel log here has the kill: PID 30101 (python)" in oom.message
    assert "the cgroup of Slurm job 3" in oom.message
    other = finding(report.findings, "other-oom-kills")
    reasons = " | ".join(other.evidence)
    assert "logged 2026-11-30 19:46:26, before the run began (2026-11-30 19:49:39)" in reasons
    assert "in the cgroup of Slurm job 12, not of job 3" in reasons


def test_a_login_node_kernel_log_is_not_the_jobs() -> None:
    text = (KERNEL / "slurm_jobs_memcg_dmesg.txt").read_text()
    report = run_doctor(
        DoctorRequest(exit_code=None, slurm_job="3"),
        slurm_readers(recorded("oom-batch"), kernel=text, hostname="login1"),
        audit=audit_nothing,
    )
    assert report.verdict == "slurm-oom"
    elsewhere = finding(report.findings, "kernel-log-not-this-run")
    assert "the run ran on vm (Slurm job 3's nodes), not on login1" in elsewhere.message


def test_accounting_problems_are_shown() -> None:
    accounting = recorded("oom-batch")
    partial = JobAccounting(
        accounting.job_id,
        (),
        accounting.controller,
        ("sacct failed (exit 1): sacct: error: Slurm accounting storage is disabled",),
    )
    report = run_doctor(
        DoctorRequest(exit_code=None, slurm_job="3"),
        slurm_readers(partial),
        audit=audit_nothing,
    )
    oom = finding(report.findings, "slurm-out-of-memory")
    assert any("not read: sacct failed" in e for e in oom.evidence)


def test_hostlists_expand() -> None:
    assert expand_hostlist("gpu-[01-03,07],login1") == (
        "gpu-01",
        "gpu-02",
        "gpu-03",
        "gpu-07",
        "login1",
    )
    assert expand_hostlist("r[1-2]n[1-2]") == ("r1n1", "r1n2", "r2n1", "r2n2")
    with pytest.raises(InputError, match="not understood"):
        expand_hostlist("gpu-[a-b]")


# --- the command, as a real process --------------------------------------------------------------


def test_without_slurm_commands_doctor_says_so_and_exits_3(tmp_path: Path) -> None:
    env = offline_env()
    env["PATH"] = str(tmp_path)  # no sacct, no scontrol
    result = cudalock("doctor", "--slurm-job", "1234", env=env)
    assert result.returncode == 3, result.stderr
    assert "sacct is not installed here" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("job", ["12x", "1234.0.1", ""])
def test_a_bad_job_id_is_a_usage_error(job: str) -> None:
    result = cudalock("doctor", "--slurm-job", job)
    assert result.returncode == 2
    assert "is not understood" in result.stderr


def test_exit_code_and_slurm_job_are_one_or_the_other() -> None:
    result = cudalock("doctor", "--exit-code", "-9", "--slurm-job", "3")
    assert result.returncode == 2
    assert "not allowed with argument" in result.stderr


def test_a_node_list_whose_product_is_past_the_cap_is_refused_before_it_is_built() -> None:
    import time

    from cudalock.doctor.slurm import MAX_HOSTLIST_NAMES

    started = time.monotonic()
    for hostile in ("n[0-99999]x[0-9999]", "a[0-999]b[0-999]", "n[0-5,0-99999]"):
        with pytest.raises(InputError, match=f"names more than {MAX_HOSTLIST_NAMES} nodes"):
            expand_hostlist(hostile)
    assert time.monotonic() - started < 5
    assert len(expand_hostlist("a[0-99]b[0-999]")) == MAX_HOSTLIST_NAMES
