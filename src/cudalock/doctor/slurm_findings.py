"""A Slurm job's end in doctor's words, and the ``#SBATCH`` memory request a ZeRO run needs.

Pure: it takes what :mod:`cudalock.doctor.slurm` read and judged (:class:`SlurmEvidence`) and
the memory check, and returns findings. The memory a job's processes can use is its per-node
request (``--mem``, ``--mem-per-cpu`` × CPUs, ``--mem-per-gpu`` × GPUs), enforced in the job's
cgroup, not the node's RAM; so the answer to a job killed over it is the request to make.
Slurm reads ``G`` in ``--mem=`` as 1024 MiB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cudalock.doctor.slurm import (
    SIGKILL,
    SIGNAL_NAMES,
    JobAccounting,
    JobVerdict,
    MemoryBasis,
    format_bytes,
)
from cudalock.memory import MemoryVerdict, format_gib
from cudalock.model import Finding
from cudalock.units import GIB

__all__ = [
    "SlurmEvidence",
    "job_end_findings",
    "memory_request_finding",
    "signal_finding",
]


@dataclass(frozen=True)
class SlurmEvidence:
    """One job as Slurm recorded it: the records, how it ended, and what could not be read."""

    reference: str
    accounting: JobAccounting
    verdict: JobVerdict
    #: Commands that did not answer (sacct without accounting, a controller that forgot the job).
    problems: tuple[str, ...] = ()

    @property
    def signal(self) -> int | None:
        """The signal doctor explains the job's end with (SIGKILL for an OOM kill)."""
        if self.verdict.kind == "out-of-memory":
            return SIGKILL
        if self.verdict.kind in ("segfault", "signal"):
            return self.verdict.signal
        return None

    @property
    def per_gpu_request(self) -> bool:
        """Whether the job asked for memory per GPU (the advice then does too)."""
        return any(
            (
                record.requested_memory is not None
                and record.requested_memory.basis is MemoryBasis.PER_GPU
            )
            or record.memory_per_gpu is not None
            for record in self.accounting.all_records()
        )

    @property
    def gpus_per_node(self) -> int | None:
        job = self.accounting.job
        if job is None or not job.gpus:
            return None
        nodes = max(job.nodes or 1, 1)
        return math.ceil(job.gpus / nodes)

    @property
    def nodes(self) -> int | None:
        job = self.accounting.job
        return job.nodes if job is not None else None

    def max_rss(self) -> tuple[int, str] | None:
        """The largest MaxRSS of any step, with the step and node that reached it."""
        measured = [
            (record.max_rss, f"{record.ident} on {record.max_rss_node or 'its node'}")
            for record in self.accounting.records
            if record.max_rss
        ]
        return max(measured) if measured else None

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.reference,
            "verdict": self.verdict.to_json(),
            "records": [record.line for record in self.accounting.all_records()],
            "problems": list(self.problems),
        }


def _problems_note(slurm: SlurmEvidence) -> tuple[str, ...]:
    return tuple(f"not read: {problem}" for problem in slurm.problems)


def job_end_findings(slurm: SlurmEvidence) -> tuple[str | None, list[Finding]]:
    """The verdict and findings of a job that did not end by a signal doctor explains further
    (None: the OOM, segfault and signal paths take it from here, with :func:`signal_finding`)."""
    verdict = slurm.verdict
    evidence = (*verdict.evidence, *_problems_note(slurm))
    job = slurm.accounting.job
    if verdict.kind == "time-limit":
        return "time-limit", [
            Finding(
                "slurm-time-limit",
                "error",
                f"Slurm: {verdict.summary}. The steps show SIGTERM (0:15) or SIGKILL because Slurm "
                "stopped them; memory was not the cause.",
                evidence,
                (
                    "Ask for more time with #SBATCH --time=… (the job's limit was "
                    f"{job.time_limit_minutes if job and job.time_limit_minutes else '?'} min).",
                    "Or save checkpoints often enough to resume from one in the next job.",
                ),
            )
        ]
    if verdict.kind == "cancelled":
        return "cancelled", [
            Finding(
                "slurm-job-cancelled",
                "warning",
                f"Slurm: {verdict.summary} (scancel, preemption or a deadline), not a crash and "
                "not an out-of-memory kill.",
                evidence,
                (
                    "'CANCELLED by UID' names who cancelled it (getent passwd UID); if it was not "
                    "you, ask the cluster's admins.",
                ),
            )
        ]
    if verdict.kind == "node-failure":
        return "node-failure", [
            Finding(
                "slurm-node-failure",
                "error",
                f"Slurm: {verdict.summary}: the node went down under the job (hardware, the "
                "node's own OOM or a reboot); the job's processes did not crash by themselves.",
                evidence,
                (
                    "Read the node's state: 'scontrol show node NODE' (its Reason), 'sinfo -R'.",
                    "Resubmit with --exclude=NODE, or ask the admins about the node.",
                ),
            )
        ]
    if verdict.kind == "success":
        return "completed", [
            Finding("slurm-job-completed", "info", f"Slurm: {verdict.summary}.", evidence)
        ]
    if verdict.kind == "unfinished":
        return "unfinished", [
            Finding(
                "slurm-job-unfinished",
                "info",
                f"Slurm: {verdict.summary}; ask again once it has ended (sacct records a job's "
                "end a moment after it).",
                evidence,
            )
        ]
    if verdict.kind == "failed":
        return "exit-status", [
            Finding(
                "slurm-job-failed",
                "info",
                f"Slurm: {verdict.summary}: the program exited by itself, not by a signal, so its "
                "own error message (the last traceback in the job's output file) explains it.",
                evidence,
                (
                    "Read the job's output file ('scontrol show job ID | grep StdOut'), then "
                    "its last lines.",
                ),
            )
        ]
    return None, []


def signal_finding(slurm: SlurmEvidence) -> Finding:
    """How Slurm recorded a job that ended by a signal: OOM kill, segfault or another."""
    verdict = slurm.verdict
    evidence = (*verdict.evidence, *_problems_note(slurm))
    if verdict.kind == "out-of-memory":
        measured = slurm.max_rss()
        limit = verdict.memory_limit
        used = (
            f" The largest MaxRSS was {format_bytes(measured[0])} ({measured[1]})"
            + (f" of the {format_bytes(limit.bytes)} limit." if limit else ".")
            if measured
            else ""
        )
        return Finding(
            "slurm-out-of-memory",
            "error",
            f"Slurm: {verdict.summary}." + used,
            evidence,
            ("Ask for the memory the run needs: see slurm-memory-request below.",),
        )
    if verdict.kind == "segfault":
        certainty = (
            ""
            if verdict.certain
            else " (sacct alone cannot tell a segfault from a plain 'exit 11'; scontrol shows "
            "139:0 for the segfault while the job is still in its memory)"
        )
        return Finding(
            "slurm-segfault",
            "error" if verdict.certain else "warning",
            f"Slurm: {verdict.summary}{certainty}. Not an out-of-memory kill: the environment "
            "audit below looks for the version problems that crash this way.",
            evidence,
        )
    name = SIGNAL_NAMES.get(verdict.signal or 0, f"signal {verdict.signal}")
    return Finding(
        "slurm-signal",
        "error" if verdict.certain else "warning",
        f"Slurm: {verdict.summary} ({name}, with no out-of-memory record in Slurm's accounting).",
        evidence,
    )


def _gib_up(size: int) -> int:
    return max(1, math.ceil(size / GIB))


def memory_request_finding(slurm: SlurmEvidence, memory: MemoryVerdict) -> Finding:
    """The ``#SBATCH --mem=`` (or ``--mem-per-gpu=``) the run needs, or the ZeRO-3 / offload
    configuration that fits the request the job made."""
    needs = memory.needs
    setup = needs.setup
    required = needs.host_required_bytes
    limit = slurm.verdict.memory_limit
    per_node = f"#SBATCH --mem={_gib_up(required)}G"
    per_gpu = (
        f"#SBATCH --mem-per-gpu={_gib_up(math.ceil(required / setup.gpus_per_node))}G "
        f"(with {setup.gpus_per_node} GPUs per node)"
    )
    requests = [per_gpu, "or " + per_node] if slurm.per_gpu_request else [per_node, "or " + per_gpu]
    changes: list[str] = []
    for alternative in memory.alternatives:
        alt_need = alternative.needs.host_required_bytes
        if alternative.fits_gpu is False:
            continue
        if alternative.fits_host:
            changes.append(
                f"or keep the job's request and change the run: {alternative.change} (needs "
                f"{format_gib(alt_need)} per node)"
            )
        elif alt_need < required:
            changes.append(
                f"or {alternative.change}: needs {format_gib(alt_need)} per node, "
                f"#SBATCH --mem={_gib_up(alt_need)}G"
            )
    asked = (
        f"The job could use {format_bytes(limit.bytes)} per node ({limit.how})"
        if limit is not None
        else "The job's memory request could not be read"
    )
    phase = needs.deciding_phase
    if limit is not None and limit.bytes >= required:
        measured = slurm.max_rss()
        return Finding(
            "slurm-memory-request",
            "warning",
            f"{asked}, which covers the {format_gib(required)} {setup.describe()} needs per node "
            f"('{phase.name}'). The step still reached its limit"
            + (f" (MaxRSS {format_bytes(measured[0])})" if measured else "")
            + ": the estimate counts model states only; activations, DataLoader workers, pinned "
            "buffers and CUDA contexts come on top.",
            (f"memory check: {format_gib(required)} per node at '{phase.name}'",),
            (
                "Raise #SBATCH --mem= above what the step used, or lower what comes on top "
                "(DataLoader num_workers, micro-batch size).",
            ),
        )
    return Finding(
        "slurm-memory-request",
        "error",
        f"{asked}; {setup.describe()} needs about {format_gib(required)} per node at "
        f"'{phase.name}'. Ask Slurm for it: {per_node}.",
        (
            *(f"{p.name}: {format_gib(p.bytes)} per node" for p in needs.phases),
            *((f"limit: {limit.how}",) if limit is not None else ()),
        ),
        (
            *requests,
            *changes,
            "A node with less RAM than that cannot give it (sinfo -o '%N %m' lists RealMemory): "
            "then change the run instead.",
        ),
    )
