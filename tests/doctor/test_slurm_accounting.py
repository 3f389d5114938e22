"""Reading and judging Slurm accounting, from sacct/scontrol output recorded on a real cluster.

Each file in tests/fixtures/slurm/ starts with comments naming the job, the command and the
Slurm version that produced it (tests/support/record_slurm.py writes them).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from cudalock.doctor.slurm import (
    AccountingRecord,
    ExitStatus,
    JobAccounting,
    MemoryBasis,
    SlurmCommandFailed,
    SlurmCommandNotFound,
    SlurmCommandTimedOut,
    SlurmJobNotFound,
    SlurmQueryError,
    classify_job,
    memory_limit_per_node,
    parse_duration,
    parse_exit,
    parse_requested_memory,
    parse_sacct,
    parse_scontrol_job,
    parse_size,
    parse_time_limit,
    parse_tres,
    read_job,
    read_sacct,
    run_slurm_command,
    scontrol_fields,
    split_job_reference,
)
from cudalock.errors import EXIT_ENVIRONMENT, EXIT_USAGE, InputError
from tests.support.slurm_records import (
    FIXTURES,
    recorded,
    recorded_sacct,
    recorded_scontrol,
    without_comments,
)

MIB = 2**20


def by_ident(records: tuple[AccountingRecord, ...]) -> dict[str, AccountingRecord]:
    return {record.ident: record for record in records}


# --- parsing what sacct printed -----------------------------------------------------------------


def test_sacct_oom_batch_job_and_steps() -> None:
    records = by_ident(recorded_sacct("oom-batch"))
    assert set(records) == {"3", "3.batch", "3.extern"}
    job, batch = records["3"], records["3.batch"]
    assert (job.step, job.state, job.exit) == (None, "OUT_OF_MEMORY", ExitStatus(0, 125, True))
    assert job.requested_memory is not None
    assert (job.requested_memory.bytes, job.requested_memory.basis) == (
        64 * MIB,
        MemoryBasis.JOB_TOTAL,
    )
    assert job.allocated_tres == {"billing": "1", "cpu": "1", "mem": "64M", "node": "1"}
    assert (job.nodes, job.cpus, job.tasks, job.gpus) == (1, 1, None, None)
    assert job.time_limit_minutes is None  # UNLIMITED
    assert job.start is not None and job.end is not None and job.end >= job.start
    assert job.name == "oom-batch-3"
    assert not job.incomplete
    assert (batch.step, batch.state, batch.max_rss, batch.max_rss_node) == (
        "batch",
        "OUT_OF_MEMORY",
        0,
        "vm",
    )  # killed before the first 1 s sample
    assert batch.requested_memory is None and batch.tasks == 1


def test_sacct_max_rss_of_a_step_that_ran() -> None:
    batch = by_ident(recorded_sacct("success"))["5.batch"]
    assert batch.max_rss == 54180 * 1024  # "54180K": 50 MiB of bytearray plus the interpreter
    assert batch.elapsed_seconds == 4


def test_sacct_cancelled_by_uid_and_time_limit_minutes() -> None:
    job = by_ident(recorded_sacct("cancelled"))["11"]
    assert (job.state, job.cancelled_by) == ("CANCELLED", 0)
    timeout = by_ident(recorded_sacct("time-limit-run-out"))["1"]
    assert (timeout.state, timeout.time_limit_minutes, timeout.elapsed_seconds) == (
        "TIMEOUT",
        1,
        87,
    )


def test_sacct_gpus_from_alloc_tres() -> None:
    records = by_ident(recorded_sacct("oom-per-gpu"))
    assert records["12"].gpus == 2
    assert records["12"].allocated_tres["gres/gpu"] == "2"
    assert records["12"].requested_memory is not None
    assert records["12"].requested_memory.bytes == 80 * MIB  # 2 GPUs × 40M, summed by sacct


def test_sacct_placeholder_job_line_is_incomplete() -> None:
    records = by_ident(recorded_sacct("oom-per-gpu-incomplete"))
    job = records["1"]
    assert job.incomplete and job.name == "allocation"
    assert job.requested_memory is None  # "16?" is an unset value, not 16 of anything
    assert job.time_limit_minutes is None and not job.requested_tres
    assert not records["1.batch"].incomplete


def test_sacct_line_with_too_few_fields_is_rejected() -> None:
    with pytest.raises(InputError, match="3 fields where 18 were asked for"):
        parse_sacct("1|COMPLETED|0:0\n")


def test_sacct_job_name_may_contain_the_delimiter() -> None:
    text = without_comments((FIXTURES / "exit-3.sacct.txt").read_text())
    renamed = text.replace("|exit-3-10\n", "|exit|3|10\n")
    job = by_ident(parse_sacct(renamed))["10"]
    assert job.name == "exit|3|10" and job.exit == ExitStatus(3, 0, True)


# --- parsing what scontrol printed --------------------------------------------------------------


def test_scontrol_keeps_exit_codes_unfolded() -> None:
    assert (recorded_scontrol("segfault-batch") or pytest.fail()).exit == ExitStatus(139, 0)
    assert (recorded_scontrol("abort-batch") or pytest.fail()).exit == ExitStatus(134, 0)
    assert (recorded_scontrol("exit-11") or pytest.fail()).exit == ExitStatus(11, 0)
    oom = recorded_scontrol("oom-step-in-batch") or pytest.fail()
    assert (oom.exit, oom.derived_exit) == (ExitStatus(1, 0), ExitStatus(0, 125))


def test_scontrol_memory_request_and_per_node_allocation() -> None:
    oom = recorded_scontrol("oom-batch") or pytest.fail()
    assert oom.requested_memory is not None
    assert (oom.requested_memory.bytes, oom.requested_memory.basis) == (
        64 * MIB,
        MemoryBasis.PER_NODE,
    )
    assert oom.node_memory == {"vm": 64 * MIB}
    assert (oom.state, oom.reason, oom.nodes, oom.cpus) == ("OUT_OF_MEMORY", "OutOfMemory", 1, 1)
    per_cpu = recorded_scontrol("per-cpu-srun") or pytest.fail()
    assert per_cpu.requested_memory is not None
    assert (per_cpu.requested_memory.bytes, per_cpu.requested_memory.basis) == (
        100 * MIB,
        MemoryBasis.PER_CPU,
    )
    per_gpu = recorded_scontrol("oom-per-gpu") or pytest.fail()
    assert per_gpu.memory_per_gpu == 40 * MIB and per_gpu.gpus == 2
    assert per_gpu.requested_memory is not None
    assert per_gpu.requested_memory.basis is MemoryBasis.PER_GPU  # MinMemoryNode=0 is ignored


def test_scontrol_fields_keep_odd_keys_empty_values_and_repeats() -> None:
    pairs = scontrol_fields(
        "JobId=7 AllocNode:Sid=localhost:5399 GRES= Nodes=a Mem=1 "
        "Nodes=b Mem=2 Command=/bin/run a job"
    )
    assert pairs == [
        ("JobId", "7"),
        ("AllocNode:Sid", "localhost:5399"),
        ("GRES", ""),
        ("Nodes", "a"),
        ("Mem", "1"),
        ("Nodes", "b"),
        ("Mem", "2"),
        ("Command", "/bin/run a job"),
    ]


def test_scontrol_without_a_job_line_is_none() -> None:
    assert parse_scontrol_job("slurm_load_jobs error: Invalid job id specified\n") is None


# --- values -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "default_unit", "expected"),
    [
        ("54184K", "", 54184 * 1024),
        ("1.50G", "", round(1.5 * 2**30)),
        ("64M", "", 64 * MIB),
        ("2T", "", 2 * 2**40),
        ("0", "", 0),
        ("80", "M", 80 * MIB),  # scontrol's Mem= and MinMemory* count megabytes
        ("4096", "", 4096),  # sacct's MaxRSS counts bytes since 21.08
        ("16?", "", None),  # NO_VAL printed through convert_num_unit
        ("", "", None),
        ("100Mn", "", None),  # a request with a basis is no plain size
    ],
)
def test_parse_size(text: str, default_unit: str, expected: int | None) -> None:
    assert parse_size(text, default_unit) == expected


@pytest.mark.parametrize(
    ("text", "size", "basis"),
    [
        ("64M", 64 * MIB, MemoryBasis.JOB_TOTAL),
        ("1.50G", round(1.5 * 2**30), MemoryBasis.JOB_TOTAL),
        # Before 21.08 ReqMem ended in 'n' (per node) or 'c' (per CPU):
        # SchedMD/slurm@slurm-20-11-9-1:doc/man/man1/sacct.1 and src/sacct/print.c
        ("100Mn", 100 * MIB, MemoryBasis.PER_NODE),
        ("4000Mc", 4000 * MIB, MemoryBasis.PER_CPU),
        ("2Gn", 2 * 2**30, MemoryBasis.PER_NODE),
    ],
)
def test_parse_requested_memory(text: str, size: int, basis: MemoryBasis) -> None:
    request = parse_requested_memory(text)
    assert request is not None and (request.bytes, request.basis) == (size, basis)


def test_exit_status_folding() -> None:
    assert parse_exit("0:125", folded=True) == ExitStatus(0, 125, True)
    assert parse_exit("") is None
    assert ExitStatus(139, 0).signal_reported_by_shell() == 11
    assert ExitStatus(137, 0).signal_reported_by_shell() == 9
    assert ExitStatus(11, 0, folded=True).signal_reported_by_shell() is None  # 11 or 139
    assert ExitStatus(1, 0).signal_reported_by_shell() is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("87", 87),
        ("00:01:27", 87),
        ("1-02:03:04", 93784),
        ("05:06", 306),
        ("", None),
        ("INVALID", None),
    ],
)
def test_parse_duration(text: str, seconds: int | None) -> None:
    assert parse_duration(text) == seconds


def test_parse_time_limit() -> None:
    assert parse_time_limit("1") == 1
    assert parse_time_limit("00:01:00") == 1
    assert parse_time_limit("UNLIMITED") is None
    assert parse_time_limit("Partition_Limit") is None


def test_parse_tres_typed_gpus() -> None:
    assert parse_tres("cpu=8,gres/gpu=2,gres/gpu:a100=2,mem=64G") == {
        "cpu": "8",
        "gres/gpu": "2",
        "gres/gpu:a100": "2",
        "mem": "64G",
    }


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("1234", ("1234", None)),
        ("1234.batch", ("1234", "batch")),
        ("1234.0", ("1234", "0")),
        (" 77.extern ", ("77", "extern")),
        ("12_3", ("12_3", None)),
        ("12+1.0", ("12+1", "0")),
    ],
)
def test_split_job_reference(reference: str, expected: tuple[str, str | None]) -> None:
    assert split_job_reference(reference) == expected


@pytest.mark.parametrize("reference", ["", "abc", "12.3.4", "12;rm", "-1"])
def test_split_job_reference_rejects(reference: str) -> None:
    with pytest.raises(Exception, match="not understood") as caught:
        split_job_reference(reference)
    assert getattr(caught.value, "exit_code", None) == EXIT_USAGE


# --- the per-node memory limit ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "limit_mib"),
    [
        ("oom-batch", 64),
        ("oom-srun", 64),
        ("oom-per-gpu", 80),
        ("per-cpu-srun", 200),
        ("success", 200),
        ("exit-3", 256),  # no --mem: DefMemPerCPU=256 × 1 CPU
    ],
)
def test_memory_limit_per_node_with_and_without_the_controller(name: str, limit_mib: int) -> None:
    with_controller = memory_limit_per_node(recorded(name))
    sacct_only = memory_limit_per_node(recorded(name, controller=False))
    assert with_controller is not None and sacct_only is not None
    assert with_controller.bytes == sacct_only.bytes == limit_mib * MIB
    assert "allocated per node" in with_controller.how and with_controller.exact
    assert "ReqMem" in sacct_only.how


def test_memory_limit_of_an_incomplete_record_falls_back_to_alloc_tres() -> None:
    limit = memory_limit_per_node(recorded("oom-per-gpu-incomplete", controller=False))
    assert limit is not None and limit.bytes == 80 * MIB and "AllocTRES" in limit.how


def _job_line(request: str, *, cpus: int, nodes: int, gpus: int | None = None) -> AccountingRecord:
    return AccountingRecord(
        source="sacct",
        job_id="1",
        step=None,
        name="train",
        state="FAILED",
        exit=ExitStatus(1, 0, True),
        line="",
        requested_memory=parse_requested_memory(request),
        cpus=cpus,
        nodes=nodes,
        gpus=gpus,
    )


@pytest.mark.parametrize(
    ("request_text", "cpus", "nodes", "limit", "exact"),
    [
        ("100Mn", 8, 2, 100 * MIB, True),  # per node: as requested
        ("4000Mc", 8, 2, 4 * 4000 * MIB, True),  # per CPU: × 4 CPUs on each node
        ("4000Mc", 9, 2, 5 * 4000 * MIB, False),  # uneven: the bigger share, not exact
        ("128G", 16, 2, 64 * 2**30, False),  # 21.08+ total: split over nodes (--mem or not)
        ("128G", 16, 1, 128 * 2**30, True),
    ],
)
def test_memory_limit_arithmetic(
    request_text: str, cpus: int, nodes: int, limit: int, exact: bool
) -> None:
    job = _job_line(request_text, cpus=cpus, nodes=nodes)
    computed = memory_limit_per_node(JobAccounting("1", (job,)))
    assert computed is not None and (computed.bytes, computed.exact) == (limit, exact)


# --- classification -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "step", "signal"),
    [
        ("oom-batch", "out-of-memory", "batch", 9),
        ("oom-srun", "out-of-memory", "0", 9),
        ("oom-step-in-batch", "out-of-memory", "0", 9),  # the job itself says FAILED 1:0
        ("oom-per-gpu", "out-of-memory", "batch", 9),
        ("time-limit", "time-limit", None, 15),
        ("time-limit-run-out", "time-limit", None, 15),
        ("time-limit-completing", "time-limit", None, 15),
        ("segfault-batch", "segfault", "batch", 11),
        ("segfault-exec", "segfault", "batch", 11),
        ("segfault-srun", "segfault", "0", 11),
        ("abort-batch", "signal", "batch", 6),
        ("exit-11", "failed", "batch", None),
        ("exit-3", "failed", "batch", None),
        ("cancelled", "cancelled", None, None),
        ("success", "success", None, None),
    ],
)
def test_classify_recorded_jobs(name: str, kind: str, step: str | None, signal: int | None) -> None:
    verdict = classify_job(recorded(name))
    assert (verdict.kind, verdict.step, verdict.signal) == (kind, step, signal)
    assert verdict.certain
    assert verdict.evidence and all(isinstance(line, str) for line in verdict.evidence)


def test_oom_verdict_names_the_limit_and_the_evidence() -> None:
    verdict = classify_job(recorded("oom-batch"))
    assert verdict.memory_limit is not None and verdict.memory_limit.bytes == 64 * MIB
    assert "64.0 MiB per node" in verdict.summary and "shell reports 137" in verdict.summary
    srun = classify_job(recorded("oom-srun"))
    assert "exits 1, so the launcher sees no -9 or 137" in srun.summary
    assert verdict.evidence[0].startswith(
        "sacct 3.batch State=OUT_OF_MEMORY ExitCode=0:125 MaxRSS=0.0 MiB"
    )
    assert any(
        line.startswith("scontrol 3 State=OUT_OF_MEMORY Reason=OutOfMemory")
        for line in verdict.evidence
    )
    assert not any("3.extern" in line for line in verdict.evidence)  # the extern step completed
    assert verdict.to_json()["memory_limit_bytes"] == 64 * MIB


def test_time_limit_is_not_an_oom() -> None:
    verdict = classify_job(recorded("time-limit-run-out"))
    assert "time limit of 1 min" in verdict.summary and "not an out-of-memory" in verdict.summary
    assert "sacct 1.batch State=CANCELLED ExitCode=0:15" in " | ".join(verdict.evidence)


@pytest.mark.parametrize("name", ["oom-batch-no-cgroup", "oom-srun-no-cgroup"])
def test_over_limit_kill_without_a_memory_cgroup(name: str) -> None:
    verdict = classify_job(recorded(name))
    assert verdict.kind == "out-of-memory" and verdict.signal == 9
    assert not verdict.certain  # SIGKILL plus MaxRSS over the limit, no OOM state
    assert verdict.step in ("batch", "0") and "RSS polling" in verdict.summary


@pytest.mark.parametrize(
    ("name", "kind", "signal"),
    [
        ("segfault-batch", "segfault", 11),  # 11:0 without scontrol's 139:0
        ("exit-11", "segfault", 11),  # ... and a plain "exit 11" reads the same
        ("abort-batch", "signal", 6),
    ],
)
def test_folded_exit_codes_without_the_controller_are_probable(
    name: str, kind: str, signal: int
) -> None:
    verdict = classify_job(recorded(name, controller=False))
    assert (verdict.kind, verdict.signal, verdict.step) == (kind, signal, "batch")
    assert not verdict.certain
    assert f"plain 'exit {signal}' looks the same" in verdict.summary


@pytest.mark.parametrize(
    "name",
    [
        "oom-batch",
        "oom-srun",
        "oom-step-in-batch",
        "segfault-exec",
        "segfault-srun",
        "time-limit",
        "cancelled",
        "success",
        "exit-3",
    ],
)
def test_sacct_alone_gives_the_same_verdict(name: str) -> None:
    with_controller = classify_job(recorded(name))
    sacct_only = classify_job(recorded(name, controller=False))
    assert (sacct_only.kind, sacct_only.step, sacct_only.signal, sacct_only.certain) == (
        with_controller.kind,
        with_controller.step,
        with_controller.signal,
        with_controller.certain,
    )


def test_incomplete_record_still_classifies_and_says_so() -> None:
    verdict = classify_job(recorded("oom-per-gpu-incomplete", controller=False))
    assert verdict.kind == "out-of-memory" and verdict.step == "batch"
    assert any("still incomplete" in line for line in verdict.evidence)


def test_completing_job_from_the_controller_alone_is_unfinished() -> None:
    controller = recorded_scontrol("time-limit-completing")
    assert controller is not None and controller.state == "COMPLETING"
    verdict = classify_job(JobAccounting("1", (), controller))
    assert verdict.kind == "unfinished" and not verdict.certain


def test_running_step_is_unfinished() -> None:
    records = recorded_sacct("success")
    running = tuple(
        record
        if record.step != "batch"
        else AccountingRecord(
            source="sacct",
            job_id=record.job_id,
            step="batch",
            name="batch",
            state="RUNNING",
            exit=ExitStatus(0, 0, True),
            line=record.line,
        )
        for record in records
    )
    assert classify_job(JobAccounting("5", running)).kind == "unfinished"


def test_no_records_at_all_is_job_not_found() -> None:
    with pytest.raises(SlurmJobNotFound):
        classify_job(JobAccounting("42"))


# --- the edge: real commands --------------------------------------------------------------------


def test_missing_sacct_and_scontrol_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmCommandNotFound) as caught:
        read_job("1234")
    assert caught.value.exit_code == EXIT_ENVIRONMENT
    assert caught.value.command[0] == "sacct"
    assert "not installed" in caught.value.message


def test_a_command_past_its_timeout_is_a_typed_error() -> None:
    with pytest.raises(SlurmCommandTimedOut, match="did not answer within"):
        run_slurm_command([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_large_output_on_both_pipes_is_drained_and_a_runaway_is_stopped() -> None:
    script = "import sys; sys.stderr.write('e' * 3_000_000); sys.stdout.write('o' * 3_000_000)"
    done = run_slurm_command([sys.executable, "-c", script], timeout=60)
    assert done.returncode == 0
    assert len(done.stdout) == len(done.stderr) == 3_000_000
    runaway = "import sys; sys.stdout.write('o' * 6_000_000)"
    with pytest.raises(SlurmQueryError, match="more than 4 MiB") as caught:
        run_slurm_command([sys.executable, "-c", runaway], timeout=60)
    assert caught.value.exit_code == EXIT_ENVIRONMENT


@pytest.mark.skipif(shutil.which("sacct") is None, reason="needs sacct (slurm-client)")
def test_sacct_without_accounting_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cluster without accounting: sacct refuses at once. (Without any slurm.conf, sacct
    # first tries a DNS SRV lookup for the configuration, which can take minutes.)
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=nodb\nSlurmctldHost=localhost\n"
        "AccountingStorageType=accounting_storage/none\n"
        "NodeName=localhost CPUs=1\nPartitionName=all Nodes=ALL\n"
    )
    monkeypatch.setenv("SLURM_CONF", str(conf))
    with pytest.raises(SlurmCommandFailed) as caught:
        read_sacct("1234", timeout=30)
    assert caught.value.command[0] == "sacct"
    assert "accounting storage is disabled" in caught.value.message
    assert caught.value.exit_code == EXIT_ENVIRONMENT
