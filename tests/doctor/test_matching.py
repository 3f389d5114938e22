"""Kernel evidence that belongs to the run: its time, its host and its processes.

The logs in tests/fixtures/doctor/logs/ are one recorded ZeRO-2 crash moved in time or to another
host (zero2_four_hours_earlier.log, zero2_2025_other_host.log) or with the kernel lines people
paste (zero2_with_pasted_dmesg.log, pasted_uptime_dmesg.log);
kernel/slurm_jobs_memcg_dmesg.txt is `dmesg -T` of a test machine (hostname vm) whose Slurm
jobs were OOM-killed in their cgroups.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from cudalock.doctor import DoctorRequest, MachineReaders, run_doctor
from cudalock.doctor.diagnosis import SetupHints
from cudalock.doctor.kernel import (
    CommandResult,
    KernelLog,
    LineContext,
    line_stamp,
    parse_kernel_log,
    read_kernel_log,
)
from cudalock.doctor.logs import scan_training_log
from cudalock.doctor.matching import RunScope, match_kill, run_scope, same_program
from cudalock.machine.host import CgroupLevel, CgroupMemory, parse_boot_time, read_boot_time
from cudalock.model import Finding, Gpu, Host, Target
from cudalock.request import Compat
from tests.support.cli import cudalock

FIXTURES = Path(__file__).parents[1] / "fixtures" / "doctor"
KERNEL, LOGS = FIXTURES / "kernel", FIXTURES / "logs"
GIB = 2**30
NOW = datetime(2026, 11, 30, 20, 30)


def live_kernel(*names: str, hostname: str | None, boot_time: float | None = None) -> KernelLog:
    """This machine's kernel log as `dmesg -T` printed it (the journal unreadable)."""
    text = "".join((KERNEL / name).read_text() for name in names)

    def runner(argv: Sequence[str]) -> CommandResult:
        if argv[0] == "dmesg":
            return CommandResult(0, text)
        return CommandResult(1, "", "No journal files were opened due to insufficient permissions.")

    return read_kernel_log(runner=runner, files=(), hostname=hostname, boot_time=boot_time, now=NOW)


def readers(
    kernel: KernelLog,
    *,
    hostname: str | None,
    memory: int = 512 * GIB,
    cgroup: CgroupMemory | None = None,
) -> MachineReaders:
    target = Target(
        platform="linux-x86_64",
        gpus=tuple(
            Gpu("NVIDIA A100-SXM4-80GB", (8, 0), index=i, memory_total_bytes=80 * GIB)
            for i in range(8)
        ),
        host=Host(memory_total_bytes=memory, hostname=hostname),
    )
    return MachineReaders(
        read_kernel_log=lambda: kernel,
        read_cgroup=lambda: cgroup or CgroupMemory(2, (CgroupLevel("/", None, 0, 0),)),
        read_shm=lambda: None,
        probe=lambda: target,
        root=Path("/nonexistent-root"),
        hostname=hostname,
        now=lambda: NOW,
    )


def no_audit(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
    raise AssertionError("the audit must not run for -9")


def finding(findings: Sequence[Finding], code: str) -> Finding:
    found = [f for f in findings if f.code == code]
    assert found, f"no {code} in {[f.code for f in findings]}"
    return found[0]


def codes(findings: Sequence[Finding]) -> list[str]:
    return [f.code for f in findings]


# --- the cases from the issue ---------------------------------------------------------------------


def test_a_log_from_another_host_and_year_is_judged_by_the_memory_check_alone() -> None:
    """A ZeRO-2 log dated 2025 from gpu-node-12, read on vm after vm's Slurm jobs were
    OOM-killed: those kills are set apart, and the verdict says it rests on the arithmetic."""
    request = DoctorRequest(
        exit_code="-9", log_path=LOGS / "zero2_2025_other_host.log", host_memory_bytes=64 * GIB
    )
    with_kills = run_doctor(
        request,
        readers(live_kernel("slurm_jobs_memcg_dmesg.txt", hostname="vm"), hostname="vm"),
        audit=no_audit,
    )
    assert with_kills.verdict == "likely-host-oom"
    assert "cgroup-oom-kill" not in codes(with_kills.findings)
    only = finding(with_kills.findings, "oom-from-memory-check-only")
    # DeepSpeed's ZeRO-2 CPU figure: 4 × 6,738,415,616 × 8 ranks × 1.5 = 301.23 GiB; 64 GiB here.
    assert "this machine's kernel log was not read (the run ran on gpu-node-12" in only.message
    assert "the host was 237.23GiB short" in only.message
    assert "which a ZeRO-2 checkpoint save would hit" in only.message
    # vm's own kills are not read at all: the run ran on gpu-node-12.
    assert "other-oom-kills" not in codes(with_kills.findings)
    elsewhere = finding(with_kills.findings, "kernel-log-not-this-run")
    assert "the run ran on gpu-node-12 (the hosts the log names), not on vm" in elsewhere.message
    assert "Run cudalock doctor on gpu-node-12" in elsewhere.fix[0]
    # The verdict is the same before the unrelated kills happened.
    before = run_doctor(
        request,
        readers(live_kernel("clean_dmesg.txt", hostname="vm"), hostname="vm"),
        audit=no_audit,
    )
    assert before.verdict == with_kills.verdict == "likely-host-oom"
    assert "other-oom-kills" not in codes(before.findings)


def test_a_run_hours_before_a_kill_of_the_same_pid_is_not_that_kill() -> None:
    """Same host, same PID (reused), but the run ended four hours before the kill: the kernel
    log covers the run and has no kill of it, so this was not an OOM."""
    report = run_doctor(
        DoctorRequest(exit_code="-9", log_path=LOGS / "zero2_four_hours_earlier.log"),
        readers(
            live_kernel("host_oom_dmesg.txt", hostname="gpu-node-03"),
            hostname="gpu-node-03",
            memory=2048 * GIB,
        ),
        audit=no_audit,
    )
    assert report.verdict == "not-oom"
    assert "host-oom-kill" not in codes(report.findings)
    other = finding(report.findings, "other-oom-kills")
    (why,) = other.evidence
    assert why.startswith(
        "PID 48213 (python), 63.52GiB resident [2026-11-29 14:02:11 on gpu-node-03"
    )
    assert "after the run ended (2026-11-29 10:17:15)" in why
    not_oom = finding(report.findings, "sigkill-not-oom")
    assert "oldest line 2026-11-29 03:12:40" in not_oom.evidence[0]


def test_the_kill_of_the_run_is_matched_by_time_host_and_pid() -> None:
    report = run_doctor(
        DoctorRequest(exit_code="-9", log_path=LOGS / "torchrun_zero2_sigkill.log"),
        readers(
            live_kernel("host_oom_dmesg.txt", hostname="gpu-node-03"),
            hostname="gpu-node-03",
            memory=128 * GIB,
        ),
        audit=no_audit,
    )
    assert report.verdict == "host-oom"
    host = finding(report.findings, "host-oom-kill")
    assert (
        "Matched to the run by time 2026-11-29 14:02:11, host gpu-node-03, PID 48213, which the "
        "log reports." in host.message
    )
    assert "Not checked" not in host.message
    assert report.scope is not None and report.scope.hosts == ("gpu-node-03",)


def test_kernel_lines_pasted_into_the_log_are_evidence() -> None:
    # This machine's own kernel log has nothing; the log carries the dmesg lines of the node.
    report = run_doctor(
        DoctorRequest(exit_code="137", log_path=LOGS / "zero2_with_pasted_dmesg.log"),
        readers(live_kernel("clean_dmesg.txt", hostname="login1"), hostname="login1"),
        audit=no_audit,
    )
    assert report.verdict == "host-oom"
    host = finding(report.findings, "host-oom-kill")
    assert "PID 48213 is the very process the training log reports" in host.message
    assert "Not checked: host: the line names no host." in host.message
    sources = report.evidence["machine"]["kernel"]["sources"]
    assert sources[-1]["name"].startswith("--log ") and sources[-1]["readable"]
    (kill,) = report.evidence["machine"]["kernel"]["oom_kills"]
    assert kill["source"].endswith("zero2_with_pasted_dmesg.log")
    # The pasted lines do not widen the run's window: it still ends 15 min after 14:02:15.
    assert report.scope is not None and report.scope.end == datetime(2026, 11, 29, 14, 17, 15)


def test_pasted_seconds_since_boot_cannot_be_dated_and_say_so() -> None:
    report = run_doctor(
        DoctorRequest(exit_code="-9", log_path=LOGS / "pasted_uptime_dmesg.log"),
        readers(live_kernel("clean_dmesg.txt", hostname="vm"), hostname="vm"),
        audit=no_audit,
    )
    assert report.verdict == "host-oom"
    host = finding(report.findings, "host-oom-kill")
    assert "Matched to the run by PID 2207, which the log reports." in host.message
    assert "time: logged 1234568 s after a boot whose time is unknown" in host.message
    pasted = report.evidence["machine"]["kernel"]["sources"][-1]
    assert "seconds since boot of a machine whose boot time is unknown" in pasted["clock"]


def test_a_kill_of_another_program_at_the_same_time_is_not_the_run() -> None:
    text = (
        "[Sun Nov 29 14:02:11 2026] Out of memory: Killed process 5150 (java) "
        "total-vm:9000000kB, anon-rss:8000000kB, file-rss:0kB, shmem-rss:0kB\n"
    )
    events = parse_kernel_log(text, LineContext(host="gpu-node-03"), "dmesg -T")
    log = scan_training_log((LOGS / "torchrun_zero2_sigkill.log").read_text())
    found = match_kill(events.kills[0], run_scope(log))
    assert not found.belongs
    assert found.matched == ("time 2026-11-29 14:02:11", "host gpu-node-03")
    (why,) = found.why_not
    assert why.startswith("PID 5150 (java) is not a process of the run (the log names PIDs 48213")
    assert "pt_main_thread" in why


def test_a_slurm_jobs_cgroup_names_the_job() -> None:
    events = parse_kernel_log(
        (KERNEL / "slurm_jobs_memcg_dmesg.txt").read_text(), LineContext(host="vm"), "dmesg -T"
    )
    scope = RunScope(slurm_job_ids=("12",), hosts=("vm",), hosts_from="--host")
    verdicts = {kill.pid: match_kill(kill, scope) for kill in events.kills}
    assert verdicts[24693].belongs and verdicts[24693].matched[-1] == "the cgroup of Slurm job 12"
    assert not verdicts[24573].belongs
    assert verdicts[24573].why_not == ("in the cgroup of Slurm job 3, not of job 12",)


def test_flags_win_over_the_log_for_window_and_host() -> None:
    log = scan_training_log((LOGS / "torchrun_zero2_sigkill.log").read_text())
    scope = run_scope(
        log, since=datetime(2026, 11, 29, 14, 0), hosts=("gpu-node-09",), local_host="vm"
    )
    assert scope.start == datetime(2026, 11, 29, 14, 0)
    assert scope.end == datetime(2026, 11, 29, 14, 17, 15)
    assert scope.window_from.startswith("--since; the other end from the log's timestamps")
    assert (scope.hosts, scope.hosts_from, scope.ran_here) == (("gpu-node-09",), "--host", False)


def test_this_machines_cgroup_counters_do_not_count_for_a_run_elsewhere() -> None:
    counters = CgroupMemory(
        2,
        (
            CgroupLevel(
                "/", oom=3, oom_kill=3, evidence=("/sys/fs/cgroup/memory.events: oom_kill 3",)
            ),
        ),
    )
    report = run_doctor(
        DoctorRequest(exit_code="-9", log_path=LOGS / "zero2_2025_other_host.log"),
        readers(live_kernel("clean_dmesg.txt", hostname="vm"), hostname="vm", cgroup=counters),
        audit=no_audit,
    )
    assert report.verdict != "cgroup-oom"
    elsewhere = finding(report.findings, "kernel-log-not-this-run")
    assert "kernel log, cgroup counters and /dev/shm were not read" in elsewhere.message


# --- dating kernel lines -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "at", "host"),
    [
        (
            "[Sun Nov 29 14:02:11 2026] python invoked oom-killer:",
            datetime(2026, 11, 29, 14, 2, 11),
            "here",
        ),
        (
            "Nov 29 14:31:05 gpu-node-07 kernel: Memory cgroup out of memory",
            datetime(2026, 11, 29, 14, 31, 5),
            "gpu-node-07",
        ),
        (
            "2026-11-29T14:31:05.123456 gpu-node-07 kernel: python[7001]: segfault",
            datetime(2026, 11, 29, 14, 31, 5),
            "gpu-node-07",
        ),
        ("2026-11-29T14:02:11,123456 Killed process 1", datetime(2026, 11, 29, 14, 2, 11), "here"),
        ("Dec 31 23:59:59 node kernel: x", datetime(2025, 12, 31, 23, 59, 59), "node"),
    ],
)
def test_kernel_line_stamps(line: str, at: datetime, host: str) -> None:
    stamp = line_stamp(line, LineContext(host="here", reference=NOW))
    assert (stamp.at, stamp.host) == (at, host)


def test_seconds_since_boot_are_dated_with_this_machines_boot_time(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("cpu  1 2 3\nbtime 1796066294\nprocesses 9\n")
    boot = read_boot_time(tmp_path)
    assert boot == 1796066294.0 and parse_boot_time("cpu 1\n") is None

    def busybox(argv: Sequence[str]) -> CommandResult:
        if "-T" in argv:
            return CommandResult(1, "", "dmesg: invalid option -- 'T'")
        return CommandResult(0, (KERNEL / "old_kernel_oom.txt").read_text())

    log = read_kernel_log(
        runner=busybox, commands=[("dmesg", "-T")], files=(), hostname="vm", boot_time=boot
    )
    (kill,) = log.events.kills
    assert kill.stamp.at == datetime.fromtimestamp(1796066294 + 1234567.890789)
    (source,) = log.sources
    assert source.clock.startswith("seconds since boot, dated with this machine's boot time")
    undated = read_kernel_log(runner=busybox, commands=[("dmesg", "-T")], files=(), hostname="vm")
    assert undated.events.kills[0].stamp.at is None
    assert undated.events.kills[0].stamp.uptime == pytest.approx(1234567.890789)


def test_python_interpreter_names_are_one_program() -> None:
    assert same_program("python", "python3") and same_program("python3.11", "python")
    assert same_program("pt_main_thread", "pt_main_thread")
    assert not same_program("java", "python3")


def test_the_log_says_where_and_when_it_ran() -> None:
    trace = scan_training_log((LOGS / "torchrun_zero2_sigkill.log").read_text()).trace
    assert (trace.first_time, trace.last_time) == (
        datetime(2026, 11, 29, 13, 40, 2),
        datetime(2026, 11, 29, 14, 2, 15),
    )
    assert (trace.hosts, trace.commands) == (("gpu-node-03",), ("python",))
    pasted = scan_training_log((LOGS / "zero2_with_pasted_dmesg.log").read_text()).trace
    assert pasted.kernel_lines == 4 and pasted.last_time == trace.last_time
    slurm = scan_training_log((LOGS / "slurm_oom.log").read_text()).trace
    assert (slurm.hosts, slurm.slurm_job_ids) == (("gpu-node-11",), ("884422",))


def test_glog_stamps_take_their_year_from_the_kernel_lines_pasted_with_them() -> None:
    glog = "W0613 07:54:19.123000 1234 torch/distributed/elastic/multiprocessing/api.py:900] x\n"
    dmesg = "[Fri Jun 13 07:55:02 2025] Out of memory: Killed process 4242 (python)\n"
    later = datetime(2026, 12, 4, 12, 0, 0)
    anchored = scan_training_log(glog + dmesg, reference=later).trace
    assert anchored.first_time == datetime(2025, 6, 13, 7, 54, 19)
    assert not anchored.year_assumed
    alone = scan_training_log(glog, reference=later).trace
    assert alone.first_time == datetime(2026, 6, 13, 7, 54, 19)
    assert alone.year_assumed
    scope = run_scope(scan_training_log(glog, reference=later))
    assert "this machine's year is assumed" in scope.window_from


# --- the command, as a real process --------------------------------------------------------------


def test_doctor_command_on_this_machine_sets_its_kernel_lines_apart() -> None:
    """Whatever this machine's kernel log holds (the Slurm tests OOM-kill jobs here), a log from
    another host in 2025 is judged by the memory check alone."""
    result = cudalock(
        "doctor",
        "--exit-code",
        "-9",
        "--log",
        str(LOGS / "zero2_2025_other_host.log"),
        "--host-memory",
        "64GiB",
        "--json",
    )
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert document["verdict"] == "likely-host-oom"
    found = {f["code"]: f for f in document["findings"]}
    assert "cgroup-oom-kill" not in found and "host-oom-kill" not in found
    only = found["oom-from-memory-check-only"]["message"]
    assert "this machine's kernel log was not read (the run ran on gpu-node-12" in only
    assert document["evidence"]["run"]["hosts"] == ["gpu-node-12"]
    text = cudalock(
        "doctor",
        "--exit-code",
        "-9",
        "--log",
        str(LOGS / "zero2_2025_other_host.log"),
        "--host-memory",
        "64GiB",
        "--since",
        "2025-06-14 08:30",
        "--until",
        "2025-06-14T09:10:00",
    )
    assert "Run window: 2025-06-14 08:30:00 – 2025-06-14 09:10:00 (--since and --until)" in (
        text.stdout
    )
    assert "Run hosts: gpu-node-12 (the hosts the log names)" in text.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--exit-code", "-9", "--since", "yesterday"], "expected a date and time"),
        (["--log", str(LOGS / "cuda_oom.log")], "one of the arguments --exit-code --slurm-job"),
        (
            ["--exit-code", "-9", "--since", "2026-11-30", "--until", "2026-11-29"],
            "is after --until",
        ),
    ],
)
def test_bad_window_flags_are_usage_errors(args: list[str], message: str) -> None:
    result = cudalock("doctor", *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_flags_are_the_memory_check_too() -> None:
    # Unchanged by the evidence rules: the flags still describe the run.
    report = run_doctor(
        DoctorRequest(
            exit_code="-9",
            flags=SetupHints(params=7 * 10**9, zero_stage=2, gpus_per_node=8),
            host_memory_bytes=64 * GIB,
        ),
        readers(live_kernel("clean_dmesg.txt", hostname="vm"), hostname="vm"),
        audit=no_audit,
    )
    # Nothing says the run ran here: vm's clean kernel log is not read, and the verdict rests
    # on the arithmetic (never "not an OOM" without evidence).
    assert report.verdict == "likely-host-oom"
    assert "kernel-log-not-read" in codes(report.findings)
    # Said to have run here, the clean kernel log covering it rules an OOM kill out.
    here = run_doctor(
        DoctorRequest(
            exit_code="-9",
            flags=SetupHints(params=7 * 10**9, zero_stage=2, gpus_per_node=8),
            host_memory_bytes=64 * GIB,
            hosts=("vm",),
        ),
        readers(live_kernel("clean_dmesg.txt", hostname="vm"), hostname="vm"),
        audit=no_audit,
    )
    assert here.verdict == "not-oom"


def test_segfault_lines_of_another_time_do_not_explain_a_minus_11() -> None:
    # The segfault and Xid lines are from 15:01 on 29 November; this run ended at 10:02.
    calls: list[bool] = []

    def audit(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
        calls.append(deep)
        return ()

    report = run_doctor(
        DoctorRequest(exit_code="-11", log_path=LOGS / "zero2_four_hours_earlier.log"),
        readers(live_kernel("segfault_xid.txt", hostname="gpu-node-03"), hostname="gpu-node-03"),
        audit=audit,
    )
    assert report.verdict == "segfault" and calls == [True]
    found = codes(report.findings)
    assert "segfault-in-library" not in found and "gpu-xid-error" not in found
    other = finding(report.findings, "other-kernel-crashes")
    assert "not matched to this run (3)" in other.message
    assert all("after the run ended (2026-11-29 10:17:15)" in item for item in other.evidence)


def test_kills_nothing_ties_to_the_run_do_not_decide_it() -> None:
    # No log, no window: vm's kills of its Slurm jobs can be neither tied to the run nor ruled
    # out, so they are listed as such; given the run's window, the ones inside it count.
    kernel = live_kernel("slurm_jobs_memcg_dmesg.txt", hostname="vm")
    unknown = run_doctor(
        DoctorRequest(exit_code="-9", hosts=("vm",)), readers(kernel, hostname="vm"), audit=no_audit
    )
    assert unknown.verdict == "undetermined"
    assert "sigkill-not-oom" not in codes(unknown.findings)
    unchecked = finding(unknown.findings, "kernel-events-unchecked")
    assert unchecked.message.startswith("3 OOM kill(s) in the kernel log could be neither tied")
    assert "time: the run's time is unknown (pass --since/--until)" in unchecked.message
    windowed = run_doctor(
        DoctorRequest(
            exit_code="-9",
            since=datetime(2026, 11, 30, 19, 46, 20),
            until=datetime(2026, 11, 30, 19, 46, 26),
            hosts=("vm",),
        ),
        readers(kernel, hostname="vm"),
        audit=no_audit,
    )
    assert windowed.verdict == "cgroup-oom"
    cgroup = finding(windowed.findings, "cgroup-oom-kill")
    assert "Killed process 24573" in " ".join(cgroup.evidence)
    assert "Matched to the run by time 2026-11-30 19:46:26, host vm." in cgroup.message
    later = finding(windowed.findings, "other-oom-kills")
    assert len(later.evidence) == 2
