"""The Slurm reader against a real single-node cluster: real jobs, read back from sacct.

The cluster comes from the session fixture in tests/support/slurm.py (Debian's Slurm packages,
started as root); without them these tests are skipped, except under CI=true.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from cudalock.doctor.slurm import SlurmJobNotFound, classify_job, read_job
from tests.support.slurm import (
    OOM_BATCH,
    OOM_SRUN,
    SEGFAULT_BATCH,
    SUCCESS,
    TIME_LIMIT,
    SlurmCluster,
    SubmittedJob,
    running_slurm,
)

pytestmark = pytest.mark.slurm
MIB = 2**20


@pytest.fixture
def finished_jobs(finished_slurm_jobs: Mapping[str, SubmittedJob]) -> Mapping[str, SubmittedJob]:
    """The session's finished jobs (shared with the doctor's live tests)."""
    return finished_slurm_jobs


def test_job_over_its_mem_limit_is_out_of_memory(finished_jobs: Mapping[str, SubmittedJob]) -> None:
    job = finished_jobs[OOM_BATCH.name]
    verdict = classify_job(read_job(str(job.job_id)))
    assert (verdict.kind, verdict.step, verdict.certain) == ("out-of-memory", "batch", True)
    assert verdict.memory_limit is not None and verdict.memory_limit.bytes == 64 * MIB
    assert any("State=OUT_OF_MEMORY ExitCode=0:125" in line for line in verdict.evidence)


def test_job_past_its_time_limit_is_a_timeout_not_an_oom(
    finished_jobs: Mapping[str, SubmittedJob],
) -> None:
    accounting = read_job(str(finished_jobs[TIME_LIMIT.name].job_id))
    assert accounting.job is not None and accounting.job.state == "TIMEOUT"
    verdict = classify_job(accounting)
    assert (verdict.kind, verdict.signal) == ("time-limit", 15)
    assert "not an out-of-memory kill" in verdict.summary


def test_segfaulting_job_is_a_segfault(finished_jobs: Mapping[str, SubmittedJob]) -> None:
    accounting = read_job(str(finished_jobs[SEGFAULT_BATCH.name].job_id))
    batch = next(step for step in accounting.steps if step.step == "batch")
    assert batch.exit is not None and batch.exit.text == "11:0"  # sacct folds the shell's 139
    assert accounting.controller is not None and accounting.controller.exit is not None
    assert accounting.controller.exit.text == "139:0"
    verdict = classify_job(accounting)
    assert (verdict.kind, verdict.step, verdict.signal, verdict.certain) == (
        "segfault",
        "batch",
        11,
        True,
    )


def test_successful_job_and_its_measured_memory(finished_jobs: Mapping[str, SubmittedJob]) -> None:
    job = finished_jobs[SUCCESS.name]
    accounting = read_job(f"{job.job_id}.batch")
    assert classify_job(accounting).kind == "success"
    batch = next(step for step in accounting.steps if step.step == "batch")
    assert batch.max_rss is not None and batch.max_rss >= 50 * MIB  # the bytearray it held
    assert batch.max_rss_node == accounting.job.node_list if accounting.job else False


def test_srun_over_its_limit_exits_1_and_reads_as_out_of_memory(
    slurm_cluster: SlurmCluster,
) -> None:
    job = slurm_cluster.submit(OOM_SRUN)
    assert job.launcher_returncode == 1  # not 137: srun itself is not killed
    assert "Out Of Memory" in job.launcher_stderr
    slurm_cluster.wait_for_final_record(job)
    verdict = classify_job(read_job(str(job.job_id)))
    assert (verdict.kind, verdict.step) == ("out-of-memory", "0")


def test_unknown_job_is_reported_as_such(slurm_cluster: SlurmCluster) -> None:
    with pytest.raises(SlurmJobNotFound, match="unknown to sacct and scontrol"):
        read_job("987654")


def test_cluster_comes_up_and_every_daemon_stops(
    tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    started = time.monotonic()
    with running_slurm(tmp_path / "second") as cluster:
        up = time.monotonic() - started
        daemons = list(cluster.daemons)
        assert {daemon.name for daemon in daemons} == {
            "munged",
            "mariadbd",
            "slurmdbd",
            "slurmctld",
            "slurmd",
        }
        assert all(daemon.process.poll() is None for daemon in daemons)
    assert up < 30
    for daemon in daemons:
        assert daemon.process.returncode is not None, daemon.name
        assert not os.path.exists(f"/proc/{daemon.process.pid}"), daemon.name
