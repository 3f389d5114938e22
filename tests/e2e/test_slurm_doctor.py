"""`cudalock doctor --slurm-job` against a real single-node Slurm: real OUT_OF_MEMORY, TIMEOUT
and segfault jobs, read back by the command as a user runs it.

The cluster and its finished jobs come from the session fixtures in tests/support/slurm.py
(Debian's Slurm packages, started as root); without them these tests are skipped, except under
CI=true. The cluster's node is this machine, so the jobs' kernel OOM kills are in its kernel log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest

from tests.support.cli import cudalock
from tests.support.index import offline_env
from tests.support.slurm import (
    OOM_BATCH,
    OOM_PER_GPU,
    OOM_SRUN,
    SEGFAULT_BATCH,
    SUCCESS,
    TIME_LIMIT,
    SlurmCluster,
    SubmittedJob,
)

pytestmark = pytest.mark.slurm


def doctor(cluster: SlurmCluster, *args: str) -> tuple[int, dict[str, Any], str]:
    """``cudalock doctor ARGS --json`` with the cluster's SLURM_CONF; (status, document, text)."""
    env = offline_env(cluster.env)
    done = cudalock("doctor", *args, "--json", env=env)
    assert done.returncode in (0, 1), done.stderr
    text = cudalock("doctor", *args, env=env)
    assert text.returncode == done.returncode, text.stderr
    return done.returncode, json.loads(done.stdout), text.stdout


def findings(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {finding["code"]: finding for finding in document["findings"]}


def kernel_log_readable() -> bool:
    return subprocess.run(["dmesg"], capture_output=True, check=False).returncode == 0


def test_out_of_memory_job_and_the_mem_it_needs(
    slurm_cluster: SlurmCluster, finished_slurm_jobs: Mapping[str, SubmittedJob]
) -> None:
    job = finished_slurm_jobs[OOM_BATCH.name]
    status, document, text = doctor(
        slurm_cluster, "--slurm-job", str(job.job_id), "--params", "1B", "--zero", "2"
    )
    assert (status, document["verdict"]) == (1, "slurm-oom")
    found = findings(document)
    oom = found["slurm-out-of-memory"]
    assert oom["message"].startswith(f"Slurm: step {job.job_id}.batch ran out of memory")
    assert any("State=OUT_OF_MEMORY ExitCode=0:125" in line for line in oom["evidence"])
    # 4 bytes × 1e9 params × 1 GPU × 1.5 (DeepSpeed's ZeRO-2 CPU figure) = 5.59 GiB per node.
    request = found["slurm-memory-request"]
    assert "The job could use 64.0 MiB per node" in request["message"]
    assert request["fix"][0] == "#SBATCH --mem=6G"
    assert "fix: #SBATCH --mem=6G" in text
    assert text.startswith(f"Slurm job {job.job_id}: OUT_OF_MEMORY ExitCode 0:125\n")
    assert document["evidence"]["run"]["hosts"] == [slurm_cluster.node_name]
    if slurm_cluster.memory_cgroup and kernel_log_readable():
        # The kernel killed it in the job's cgroup, on this machine, inside the job's window.
        assert "The kernel log here has the kill" in oom["message"]
        assert f"the cgroup of Slurm job {job.job_id}" in oom["message"]


def test_per_gpu_request_gets_per_gpu_advice(
    slurm_cluster: SlurmCluster, finished_slurm_jobs: Mapping[str, SubmittedJob]
) -> None:
    job = finished_slurm_jobs[OOM_PER_GPU.name]
    status, document, _ = doctor(
        slurm_cluster, "--slurm-job", str(job.job_id), "--params", "1B", "--zero", "2"
    )
    assert (status, document["verdict"]) == (1, "slurm-oom")
    # The job's --gpus=2 makes the run 2 ranks on the node: 12e9 bytes = 11.18 GiB per node.
    assert document["memory"]["needs"]["setup"]["gpus_per_node"] == 2
    fixes = findings(document)["slurm-memory-request"]["fix"]
    assert fixes[:2] == ["#SBATCH --mem-per-gpu=6G (with 2 GPUs per node)", "or #SBATCH --mem=12G"]


def test_time_limit_is_explained_as_such(
    slurm_cluster: SlurmCluster, finished_slurm_jobs: Mapping[str, SubmittedJob]
) -> None:
    job = finished_slurm_jobs[TIME_LIMIT.name]
    status, document, _ = doctor(
        slurm_cluster, "--slurm-job", str(job.job_id), "--params", "1B", "--zero", "2"
    )
    assert (status, document["verdict"]) == (1, "time-limit")
    assert list(findings(document)) == ["slurm-time-limit"]
    assert document["memory"] is None


def test_segfault_goes_to_the_environment_audit(
    slurm_cluster: SlurmCluster, finished_slurm_jobs: Mapping[str, SubmittedJob]
) -> None:
    job = finished_slurm_jobs[SEGFAULT_BATCH.name]
    status, document, _ = doctor(
        slurm_cluster, "--slurm-job", str(job.job_id), "--python", sys.executable, "--no-run"
    )
    assert (status, document["verdict"]) == (1, "segfault")
    found = findings(document)
    assert "a shell reporting 128+11" in found["slurm-segfault"]["message"]
    assert found["slurm-segfault"]["severity"] == "error"
    # The audit of this interpreter ran: it has no torch, so it is not the crashed environment.
    assert "has no torch" in found["audit-unavailable"]["message"]
    assert "audit-clean" not in found


def test_a_step_of_a_job(slurm_cluster: SlurmCluster) -> None:
    job = slurm_cluster.submit(OOM_SRUN)
    slurm_cluster.wait_for_final_record(job)
    status, document, _ = doctor(slurm_cluster, "--slurm-job", f"{job.job_id}.0")
    assert (status, document["verdict"]) == (1, "slurm-oom")
    assert document["evidence"]["slurm"]["verdict"]["step"] == "0"
    missing = cudalock(
        "doctor", "--slurm-job", f"{job.job_id}.7", env=offline_env(slurm_cluster.env)
    )
    assert missing.returncode == 2
    assert f"Slurm job {job.job_id} has no step '7'" in missing.stderr


def test_a_finished_job_and_an_unknown_one(
    slurm_cluster: SlurmCluster, finished_slurm_jobs: Mapping[str, SubmittedJob]
) -> None:
    job = finished_slurm_jobs[SUCCESS.name]
    status, document, _ = doctor(slurm_cluster, "--slurm-job", str(job.job_id))
    assert (status, document["verdict"]) == (0, "completed")
    unknown = cudalock("doctor", "--slurm-job", "987654", env=offline_env(slurm_cluster.env))
    assert unknown.returncode == 2
    assert "unknown to sacct and scontrol" in unknown.stderr
