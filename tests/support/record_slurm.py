"""Record real sacct and scontrol output of the test jobs into tests/fixtures/slurm/.

Run as root on a machine with the Slurm packages (see tests/support/slurm.py):

    python -m tests.support.record_slurm tests/fixtures/slurm

It starts a private cluster, runs every recipe, waits for sacct's final records and saves the
output of exactly the commands cudalock runs (``sacct_command``, ``scontrol_command``), each file
headed by comments naming the command, the job and the Slurm version. A second cluster without
memory cgroups records how jobs over their memory limit look there. The ``TIMEOUT`` job runs out
its one-minute limit for real here, so a run takes about two minutes.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from cudalock.doctor.slurm import parse_sacct, sacct_command, scontrol_command
from tests.support.slurm import (
    ABORT_BATCH,
    CANCELLED,
    EXIT_3,
    EXIT_11,
    OOM_BATCH,
    OOM_PER_GPU,
    OOM_SRUN,
    OOM_STEP_IN_BATCH,
    PER_CPU_SRUN,
    PYTHON,
    SEGFAULT_BATCH,
    SEGFAULT_EXEC,
    SEGFAULT_SRUN,
    SUCCESS,
    TIME_LIMIT,
    JobRecipe,
    SlurmCluster,
    SubmittedJob,
    running_slurm,
)

TIME_LIMIT_RUN_OUT = JobRecipe("time-limit-run-out", "sbatch", "sleep 600", ("--time=1",))
WITH_CGROUP = (
    TIME_LIMIT_RUN_OUT,
    TIME_LIMIT,
    OOM_BATCH,
    SEGFAULT_BATCH,
    SUCCESS,
    OOM_STEP_IN_BATCH,
    SEGFAULT_EXEC,
    ABORT_BATCH,
    EXIT_11,
    EXIT_3,
    CANCELLED,
    OOM_PER_GPU,
    OOM_SRUN,
    SEGFAULT_SRUN,
    PER_CPU_SRUN,
)
WITHOUT_CGROUP = (OOM_BATCH, OOM_SRUN)


def debian_version() -> str:
    queried = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "slurmctld"],
        capture_output=True,
        text=True,
        check=False,
    )
    return queried.stdout.strip() or "unknown"


def describe(job: SubmittedJob) -> list[str]:
    recipe = job.recipe
    shown = recipe.command.replace(PYTHON, "python")
    launch = (
        f'sbatch {" ".join(recipe.options)} --wrap="{shown}"'
        if recipe.launcher == "sbatch"
        else f"srun {' '.join(recipe.options)} {shown}"
    )
    lines = [f"Job: {' '.join(launch.split())}"]
    if recipe.expire_time_limit:
        lines.append(f"Then, once running: scontrol update JobId={job.job_id} EndTime=now+2")
    if recipe.cancel:
        lines.append(f"Then, once running: scancel {job.job_id}")
    if job.launcher_returncode is not None:
        stderr = " / ".join(line for line in job.launcher_stderr.splitlines() if line.strip())
        lines.append(f"srun exited {job.launcher_returncode}; its stderr: {stderr or '(none)'}")
    return lines


def record(
    cluster: SlurmCluster, job: SubmittedJob, directory: Path, suffix: str, setting: str
) -> None:
    cluster.wait_for_final_record(job, timeout=300)
    header = [
        f"Recorded from a real cluster: Slurm {cluster.version} (Debian package "
        f"{debian_version()}), one node, {setting}.",
        *describe(job),
    ]
    for kind, argv in (
        ("sacct", sacct_command(str(job.job_id))),
        ("scontrol", scontrol_command(str(job.job_id))),
    ):
        output = cluster.command(*argv).stdout
        if kind == "sacct":
            parse_sacct(output)  # a recording the parser cannot read is no use
        text = "".join(f"# {line}\n" for line in [*header, f"Command: {' '.join(argv)}"])
        path = directory / f"{job.recipe.name}{suffix}.{kind}.txt"
        path.write_text(text + output)
        print(f"wrote {path}")


def run_all(
    recipes: Sequence[JobRecipe], directory: Path, *, memory_cgroup: bool, suffix: str
) -> None:
    setting = (
        "memory cgroup v1 (task/cgroup, ConstrainRAMSpace=yes), PrologFlags=contain"
        if memory_cgroup
        else "no memory cgroup (jobacct_gather/linux with OverMemoryKill)"
    )
    with (
        tempfile.TemporaryDirectory(prefix="slurm-record-") as state,
        running_slurm(Path(state), memory_cgroup=memory_cgroup) as cluster,
    ):
        started = time.monotonic()
        # Batch jobs first, so the long TIMEOUT runs while the rest are recorded.
        ordered = sorted(recipes, key=lambda recipe: recipe.launcher != "sbatch")
        jobs = [cluster.submit(recipe) for recipe in ordered]
        for job in sorted(jobs, key=lambda job: job.recipe.name.startswith("time-limit")):
            record(cluster, job, directory, suffix, setting)
        print(f"{len(jobs)} jobs recorded in {time.monotonic() - started:.0f}s")


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.record_slurm DIRECTORY", file=sys.stderr)
        return 2
    directory = Path(argv[0])
    directory.mkdir(parents=True, exist_ok=True)
    run_all(WITH_CGROUP, directory, memory_cgroup=True, suffix="")
    run_all(WITHOUT_CGROUP, directory, memory_cgroup=False, suffix="-no-cgroup")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
