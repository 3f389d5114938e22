"""``cudalock doctor``: why a run ended with -9 / 137 (SIGKILL) or -11 / 139 (SIGSEGV).

:func:`diagnose` is pure: it takes the return code, what the training log said, what the machine
showed (kernel log, cgroup counters, /dev/shm, host RAM), the memory check and the audit's
findings, and returns a verdict with findings that quote their evidence. :func:`run_doctor`
gathers those inputs at the edge; every reader takes its roots and commands as parameters.

Finding codes (stable): host-oom-kill, cgroup-oom-kill, gpu-oom, sigkill-not-oom,
sigkill-collateral, oom-unconfirmed, kernel-log-unreadable, kubernetes-oomkilled-hint,
slurm-time-limit, killed-during-checkpoint-save, memory-check-skipped, host-memory-short,
host-memory-enough, host-memory-unknown, gpu-memory-short, segfault-in-library, gpu-xid-error,
shm-too-small, dataloader-bus-error, segfault-other-causes, audit-clean, audit-unavailable,
signal-other, exit-status-plain, other-oom-kills, other-kernel-crashes, kernel-events-unchecked,
kernel-log-not-this-run, oom-from-memory-check-only, slurm-out-of-memory, slurm-memory-request,
slurm-segfault, slurm-signal, slurm-job-cancelled, slurm-node-failure, slurm-job-completed,
slurm-job-unfinished, slurm-job-failed, container-oomkilled, kernel-log-not-read,
oom-undetermined, segfault-report-audited, plus the audit's own codes for -11.

Kernel lines count only when they are tied to the run and nothing rules them out
(:mod:`cudalock.doctor.matching`); the others are shown apart (other-oom-kills,
other-kernel-crashes, kernel-events-unchecked) and never decide the verdict. A Slurm
job's accounting (:mod:`cudalock.doctor.slurm_findings`) decides how the job ended.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cudalock.memory.model_size import ModelSize

from cudalock.doctor.kernel import (
    HOW_TO_READ,
    PASTED_SOURCE,
    KernelLog,
    OomKill,
    Segfault,
    Xid,
)
from cudalock.doctor.logs import (
    ExitStatus,
    LogEvent,
    LogFacts,
    RunShape,
)
from cudalock.doctor.matching import (
    Coverage,
    EventMatch,
    RunScope,
    SplitEvents,
    describe_match,
    kernel_coverage,
    split_kernel_events,
)
from cudalock.doctor.slurm_findings import (
    SlurmEvidence,
    job_end_findings,
    memory_request_finding,
    signal_finding,
)
from cudalock.machine.host import CgroupMemory, ShmInfo
from cudalock.memory import MemoryVerdict, TrainingSetup, format_gib
from cudalock.memory.finetuning import FineTuning, Method, lora_trainable_params
from cudalock.memory.sizes import format_params
from cudalock.model import Finding
from cudalock.procs import signal_name

__all__ = [
    "ASSUMED_LORA_SHARE",
    "FINDING_CODES",
    "MAX_QUOTED",
    "SHM_WARN_BYTES",
    "DoctorReport",
    "KernelView",
    "Observations",
    "SetupHints",
    "build_setup",
    "diagnose",
    "explain_audit_finding",
    "gpu_oom_finding",
    "log_reports_oom",
    "memory_only_finding",
    "merge_hints",
    "without_cpu_builds",
]

#: Every code doctor (and the memory check it runs) can report; the audit's codes come on top.
FINDING_CODES = (
    "host-oom-kill",
    "cgroup-oom-kill",
    "gpu-oom",
    "sigkill-not-oom",
    "sigkill-collateral",
    "oom-unconfirmed",
    "kernel-log-unreadable",
    "kubernetes-oomkilled-hint",
    "slurm-time-limit",
    "killed-during-checkpoint-save",
    "memory-check-skipped",
    "host-memory-short",
    "host-memory-enough",
    "host-memory-unknown",
    "gpu-memory-short",
    "segfault-in-library",
    "gpu-xid-error",
    "shm-too-small",
    "dataloader-bus-error",
    "segfault-other-causes",
    "audit-clean",
    "audit-unavailable",
    "signal-other",
    "exit-status-plain",
    "other-oom-kills",
    "other-kernel-crashes",
    "kernel-events-unchecked",
    "kernel-log-not-this-run",
    "oom-from-memory-check-only",
    "slurm-out-of-memory",
    "slurm-memory-request",
    "slurm-segfault",
    "slurm-signal",
    "slurm-job-cancelled",
    "slurm-node-failure",
    "slurm-job-completed",
    "slurm-job-unfinished",
    "slurm-job-failed",
    "container-oomkilled",
    "kernel-log-not-read",
    "oom-undetermined",
    "segfault-report-audited",
)

SIGKILL, SIGBUS, SIGSEGV = signal.SIGKILL, signal.SIGBUS, signal.SIGSEGV
#: ds_report warns below this /dev/shm size (DeepSpeed env_report.py).
SHM_WARN_BYTES = 512 * 2**20
MAX_QUOTED = 6


# --- the run's shape, from flags, DeepSpeed config, log and model files --------------------------


@dataclass(frozen=True)
class SetupHints:
    """What one source says about the run; None: that source does not say."""

    params: int | None = None
    params_source: str | None = None
    largest_layer_params: int | None = None
    zero_stage: int | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    offload_optimizer: bool | None = None
    offload_param: bool | None = None
    gather_16bit_weights: bool | None = None
    zero_init: bool | None = None
    #: LoRA / QLoRA (:mod:`cudalock.memory.finetuning`); None: not said (full fine-tuning).
    method: Method | None = None
    trainable_params: int | None = None
    trainable_source: str | None = None
    base_bits: int | None = None
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] | None = None
    #: The model's linear layers (from its files), to count LoRA's trainable parameters.
    linear_modules: tuple[tuple[str, int, int, int], ...] | None = None

    @classmethod
    def from_finetuning(cls, tuning: FineTuning | None, where: str) -> SetupHints:
        if tuning is None:
            return cls()
        if not tuning.adapter:
            return cls(method="full")
        return cls(
            method=tuning.method,
            trainable_params=tuning.trainable_params,
            trainable_source=f"{where}: 'trainable params'" if tuning.trainable_params else None,
            base_bits=tuning.base_bits,
            lora_rank=tuning.lora_rank,
            lora_targets=tuning.lora_targets or None,
        )

    @classmethod
    def from_shape(cls, shape: RunShape) -> SetupHints:
        tuning = cls.from_finetuning(shape.finetuning, "log")
        return replace(
            tuning,
            params=shape.params,
            params_source=shape.params_source,
            zero_stage=shape.zero_stage,
            gpus_per_node=shape.gpus_per_node,
            nodes=shape.nodes,
            offload_optimizer=shape.offload_optimizer,
            offload_param=shape.offload_param,
            gather_16bit_weights=shape.gather_16bit_weights,
        )

    @classmethod
    def from_model_size(cls, size: ModelSize) -> SetupHints:
        return cls(
            params=size.params,
            params_source=size.source,
            largest_layer_params=size.largest_layer_params,
            linear_modules=size.linear_modules or None,
        )


def merge_hints(*sources: SetupHints) -> SetupHints:
    """The first source that says something wins, field by field (flags first)."""
    merged: dict[str, Any] = {}
    for name in SetupHints.__dataclass_fields__:
        for source in sources:
            value = getattr(source, name)
            if value is not None:
                merged[name] = value
                break
    if merged.get("params") is not None and merged.get("params_source") is None:
        merged["params_source"] = "given"
    return SetupHints(**merged)


#: LoRA's trainable share when neither the count nor the model's layers are known: rank 8-64
#: adapters on a 7B llama-style model train 0.3-2.4 % of it (rank × (in + out) per layer).
ASSUMED_LORA_SHARE = 0.01


def _lora_trainable(hints: SetupHints, notes: list[str]) -> int:
    """LoRA's trainable count from its rank, targets and the model's linear layers; failing
    that, an assumption said in ``notes``."""
    assert hints.params is not None
    rank, targets = hints.lora_rank, hints.lora_targets or ()
    if rank is not None and hints.linear_modules:
        counted = lora_trainable_params(rank, targets, hints.linear_modules)
        if counted is not None:
            on = ", ".join(targets) if targets else "every linear layer (targets unknown)"
            notes.append(
                f"LoRA trainable parameters: rank {rank} × (in + out features) of {on} = "
                f"{counted:,}"
            )
            return counted
    assumed = max(1, int(hints.params * ASSUMED_LORA_SHARE))
    notes.append(
        f"LoRA trainable parameters unknown: assumed {ASSUMED_LORA_SHARE:.0%} of the model "
        f"({format_params(assumed)}); pass --trainable-params, or --lora-rank with --model"
    )
    return assumed


def build_setup(hints: SetupHints, default_gpus: int = 1) -> tuple[TrainingSetup | None, list[str]]:
    """A TrainingSetup from merged hints, with notes on every assumption; None without params."""
    notes: list[str] = []
    if hints.params is None:
        return None, notes
    stage = hints.zero_stage
    if stage is None and hints.offload_param:
        stage = 3
        notes.append("ZeRO stage unknown: assumed 3 (parameter offload needs ZeRO-3)")
    elif stage is None:
        stage = 2
        notes.append("ZeRO stage unknown: assumed 2 (pass --zero 2|3)")
    elif stage == 0:
        notes.append("ZeRO stage 0 (plain data parallel): checked as ZeRO-2, which needs less")
        stage = 2
    gpus = hints.gpus_per_node
    if gpus is None:
        gpus = max(1, default_gpus)
        notes.append(f"GPUs per node unknown: assumed {gpus} (pass --gpus-per-node)")
    method: Method = hints.method or "full"
    trainable = hints.trainable_params if method != "full" else None
    if method != "full" and trainable is None:
        trainable = _lora_trainable(hints, notes)
    elif trainable is not None:
        notes.append(
            f"{format_params(trainable)} trainable parameters ({hints.trainable_source or 'given'})"
        )
    setup = TrainingSetup(
        method=method,
        trainable_params=trainable,
        base_bits=(hints.base_bits or (4 if method == "qlora" else 16)) if method != "full" else 16,
        params=hints.params,
        zero_stage=stage,
        gpus_per_node=gpus,
        nodes=hints.nodes or 1,
        offload_optimizer=bool(hints.offload_optimizer),
        offload_param=bool(hints.offload_param),
        largest_layer_params=hints.largest_layer_params,
        zero_init=True if hints.zero_init is None else hints.zero_init,
        gather_16bit_weights=(
            True if hints.gather_16bit_weights is None else hints.gather_16bit_weights
        ),
        source=hints.params_source or "",
    )
    if stage == 3 and hints.gather_16bit_weights is None:
        notes.append(
            "stage3_gather_16bit_weights_on_model_save unknown: assumed true "
            "(the larger save-time need)"
        )
    return setup, notes


# --- the diagnosis (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class DoctorReport:
    exit: ExitStatus
    verdict: str
    summary: str
    findings: tuple[Finding, ...]
    memory: MemoryVerdict | None = None
    setup_notes: tuple[str, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)
    #: What the kernel evidence was matched against.
    scope: RunScope | None = None
    slurm: SlurmEvidence | None = None

    @property
    def exit_code(self) -> int:
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "exit": self.exit.to_json(),
            "verdict": self.verdict,
            "summary": self.summary,
            "findings": [f.to_json() for f in self.findings],
            "memory": self.memory.to_json() if self.memory else None,
            "setup_notes": list(self.setup_notes),
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class Observations:
    """What was read from the machine (any part None: not read)."""

    kernel: KernelLog | None = None
    cgroup: CgroupMemory | None = None
    shm: ShmInfo | None = None
    in_kubernetes: bool = False
    #: Why this machine's kernel log, cgroup counters and /dev/shm were not read (they speak
    #: only for a run on this host); None when they were, or were not needed.
    machine_not_read: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel.to_json() if self.kernel else None,
            "cgroup": self.cgroup.to_json() if self.cgroup else None,
            "shm": self.shm.to_json() if self.shm else None,
            "in_kubernetes": self.in_kubernetes,
            "this_machine_not_read": self.machine_not_read,
        }


def _quote(lines: Sequence[str]) -> tuple[str, ...]:
    quoted = tuple(lines[-MAX_QUOTED:])
    if len(lines) > MAX_QUOTED:
        quoted = (f"… {len(lines) - MAX_QUOTED} earlier lines not shown", *quoted)
    return quoted


def _kill_lines(kills: Sequence[OomKill]) -> list[str]:
    return [line for kill in kills for line in kill.lines]


def _matching(kills: Sequence[OomKill], pids: Sequence[int]) -> list[OomKill]:
    return [kill for kill in kills if kill.pid is not None and kill.pid in pids]


_OTHER_SIGKILL = (
    "the launcher killing the other ranks after one rank failed (look for the first rank that "
    "exited, and its own error, earlier in the log)",
    "a scheduler: Slurm time limit or scancel, a Kubernetes eviction, preemption or failed "
    "liveness probe (kubectl describe pod), a batch system's memory enforcement",
    "a person or script running kill -9",
    "an OOM kill before the last reboot (journalctl -k -b -1) or one that has scrolled out of "
    "the kernel ring buffer",
)


@dataclass(frozen=True)
class KernelView:
    """The kernel evidence as it bears on the run: its events, the others, and whether the
    log read could have recorded the run at all."""

    split: SplitEvents | None
    coverage: Coverage | None
    scope: RunScope

    @classmethod
    def of(cls, kernel: KernelLog | None, scope: RunScope) -> KernelView:
        if kernel is None:
            return cls(None, None, scope)
        return cls(split_kernel_events(kernel.events, scope), kernel_coverage(kernel, scope), scope)

    @property
    def kills(self) -> tuple[OomKill, ...]:
        return self.split.run.kills if self.split else ()

    @property
    def covers_run(self) -> bool:
        """Whether a kernel log kept on the run's host was read whole: kernel lines pasted
        into the training log may be a chosen few, so their silence rules nothing out."""
        return bool(
            self.coverage
            and any(not s.name.startswith(PASTED_SOURCE) for s in self.coverage.covering)
        )

    def note(self, events: Sequence[OomKill | Segfault | Xid]) -> str:
        """How the last of ``events`` was matched to the run, as a sentence (or nothing)."""
        if self.split is None or not events:
            return ""
        text = describe_match(self.split.match_of(events[-1]))
        return f" {text}" if text else ""


def _other_event_findings(view: KernelView, *, kills: bool) -> list[Finding]:
    """Kernel events that are not the run's, or that nothing ties to it, shown apart; they
    never decide the verdict. ``kills``: the OOM kills (for -9), else segfaults and Xids."""
    findings: list[Finding] = []
    split = view.split
    if split is None:
        return findings
    if kills and split.other_kills:
        pasted = any(kill.source.startswith(PASTED_SOURCE) for kill, _ in split.other_kills)
        where = "in the kernel lines read" if pasted else "on this machine"
        findings.append(
            Finding(
                "other-oom-kills",
                "info",
                f"Other OOM kills {where}, not matched to this run ({len(split.other_kills)}): "
                "they are not evidence about it and do not decide the verdict.",
                _quote(
                    [
                        f"{kill.describe()} [{kill.stamp.describe()}, {kill.source}]: "
                        + "; ".join(found.why_not)
                        for kill, found in split.other_kills
                    ]
                ),
            )
        )
    if not kills and split.other_crashes:
        findings.append(
            Finding(
                "other-kernel-crashes",
                "info",
                f"Segfault and GPU Xid lines in the kernel log, not matched to this run "
                f"({len(split.other_crashes)}): they do not decide the verdict.",
                _quote(
                    [
                        f"{event.line} [{event.source}]: " + "; ".join(found.why_not)
                        for event, found in split.other_crashes
                    ]
                ),
            )
        )
    untied: Sequence[tuple[OomKill | Segfault | Xid, EventMatch]] = (
        split.untied_kills if kills else split.untied_crashes
    )
    if untied:
        unknown = sorted({note for _, found in untied for note in found.unchecked})
        what = "OOM kill(s)" if kills else "segfault or Xid line(s)"
        findings.append(
            Finding(
                "kernel-events-unchecked",
                "warning",
                f"{len(untied)} {what} in the kernel log could be neither tied to this run nor "
                "ruled out (" + "; ".join(unknown) + "), so they do not decide the verdict.",
                _quote(
                    [
                        (event.describe() if isinstance(event, OomKill) else event.line)
                        + f" [{event.stamp.describe()}, {event.source}]"
                        for event, _ in untied
                    ]
                ),
                (
                    "Give the run's time: --log with its timestamps, or --since and --until "
                    "(and --host).",
                ),
            )
        )
    return findings


def _not_this_run_finding(view: KernelView, seen: Observations) -> list[Finding]:
    """The kernel log here was read, but it cannot have recorded the run."""
    coverage = view.coverage
    if coverage is None or coverage.covering or not coverage.not_covering:
        return []
    scope = view.scope
    counters = (
        " This machine's cgroup counters were left out for the same reason."
        if scope.ran_here is False and seen.cgroup is not None and seen.cgroup.levels
        else ""
    )
    where = ", ".join(scope.hosts) if scope.hosts and scope.ran_here is False else "the run's host"
    return [
        Finding(
            "kernel-log-not-this-run",
            "warning",
            "The kernel log read here cannot have recorded this run, so it neither confirms "
            "nor rules out an OOM kill." + counters,
            coverage.not_covering,
            (
                f"Run cudalock doctor on {where}, or paste its 'dmesg -T' output into the log "
                "given with --log.",
                "Where the journal is kept on disk, 'journalctl -k -b -1' shows the previous "
                "boot's kernel log.",
            ),
        )
    ]


def _host_oom_fixes(log: LogFacts | None) -> tuple[str, ...]:
    """What to change after a host OOM kill, for the phase the log shows the run was in: a
    single process loading its weights needs other advice than ranks saving a checkpoint."""
    fixes = ["Give the host more RAM, or make the run need less (see the memory check below)."]
    loading = log.died_while_loading if log else None
    if loading is not None:
        fixes.append(
            f"The kill came while the weights were loading (log line {loading.line_no}): load "
            "them in 16-bit (torch_dtype=torch.bfloat16) straight onto the GPUs "
            '(device_map="auto"), so that host RAM holds one checkpoint shard at a time, not '
            "the whole model."
        )
    ranks_or_saves = log is None or bool(
        log.of_kind("checkpoint-save")
        or log.shape.zero_stage is not None
        or log.shape.deepspeed_config is not None
        or (log.shape.gpus_per_node or 1) > 1
        or (log.shape.nodes or 1) > 1
    )
    if ranks_or_saves and loading is None:
        fixes.append(
            "Save checkpoints with ZeRO-3 and stage3_gather_16bit_weights_on_model_save: true, "
            "or stagger saves, so the ranks do not all copy the 16-bit weights at once."
        )
    return tuple(fixes)


def _sigkill_findings(
    exit_status: ExitStatus,
    log: LogFacts | None,
    seen: Observations,
    view: KernelView,
    slurm: SlurmEvidence | None,
) -> tuple[str, list[Finding]]:
    findings: list[Finding] = []
    kernel = seen.kernel
    kills = view.kills
    pids = log.reported_pids if log else ()
    host_kills = [k for k in kills if k.scope == "host"]
    cgroup_kills = [k for k in kills if k.scope == "cgroup"]
    # This machine's counters say nothing about a run on another host.
    cgroup_levels = (
        seen.cgroup.kill_levels if seen.cgroup and view.scope.ran_here is not False else ()
    )
    slurm_oom = log.of_kind("slurm-oom") if log else ()
    cuda_oom = log.of_kind("cuda-oom") if log else ()
    dataloader = log.of_kind("dataloader-killed") if log else ()
    verdict = "undetermined"

    def pid_note(group: Sequence[OomKill]) -> str:
        matched = _matching(group, pids)
        if matched:
            listed = ", ".join(str(k.pid) for k in matched)
            return f" PID {listed} is the very process the training log reports as killed."
        if pids and group:
            return (
                " None of these PIDs is one the training log reports (a DataLoader worker "
                "or another rank may have been chosen)."
            )
        return ""

    if slurm is not None and slurm.verdict.kind == "out-of-memory":
        verdict = "slurm-oom"
        finding = signal_finding(slurm)
        if cgroup_kills or host_kills:
            finding = replace(
                finding,
                message=finding.message
                + " The kernel log here has the kill: "
                + ", ".join(k.describe() for k in (cgroup_kills + host_kills)[-3:])
                + "."
                + view.note(cgroup_kills + host_kills),
                evidence=(*finding.evidence, *_quote(_kill_lines(cgroup_kills + host_kills))),
            )
        findings.append(finding)
    elif cgroup_kills or cgroup_levels or slurm_oom:
        verdict = "cgroup-oom"
        evidence: list[str] = _kill_lines(cgroup_kills)
        for level in cgroup_levels:
            evidence.extend(level.evidence)
        evidence.extend(e.line for e in slurm_oom)
        limit = seen.cgroup.limit_bytes if seen.cgroup else None
        limit_text = f" ({format_gib(limit)})" if limit is not None else ""
        undated = (
            " The cgroup counters are not dated: they count every OOM kill in this cgroup since "
            "it was created."
            if cgroup_levels and not cgroup_kills and not slurm_oom
            else ""
        )
        findings.append(
            Finding(
                "cgroup-oom-kill",
                "error",
                "The container/cgroup memory limit" + limit_text + " was hit and the kernel's OOM "
                "killer sent SIGKILL inside that cgroup; the host itself may have had memory left."
                + pid_note(cgroup_kills)
                + view.note(cgroup_kills)
                + undated,
                _quote(evidence),
                (
                    "Raise the container's memory limit (docker run --memory, Kubernetes "
                    "resources.limits.memory, Slurm --mem) to what the memory check below needs.",
                    "Or lower the run's host memory (see the memory check's alternatives).",
                ),
            )
        )
    if host_kills and verdict != "slurm-oom":
        if verdict == "undetermined":
            verdict = "host-oom"
        findings.append(
            Finding(
                "host-oom-kill",
                "error",
                "The host ran out of RAM and the kernel's OOM killer sent SIGKILL to "
                + ", ".join(k.describe() for k in host_kills[-3:])
                + "."
                + pid_note(host_kills)
                + view.note(host_kills),
                _quote(_kill_lines(host_kills)),
                _host_oom_fixes(log),
            )
        )
    if cuda_oom:
        if verdict == "undetermined":
            verdict = "gpu-oom"
        findings.append(
            gpu_oom_finding(
                cuda_oom,
                "the rank raises an exception, and the launcher then kills the other ranks, "
                "which is where a -9 comes from",
            )
        )
    if dataloader and verdict == "undetermined":
        findings.append(
            Finding(
                "oom-unconfirmed",
                "warning",
                "A DataLoader worker was killed with SIGKILL, which is usually the OOM killer, but "
                "no kernel or cgroup record of it was found here.",
                _quote([e.line for e in dataloader]),
                (
                    f"Check the kernel log with root rights ('{HOW_TO_READ[0]}').",
                    "Use fewer DataLoader workers (num_workers): each holds a copy of the "
                    "dataset state.",
                ),
            )
        )
    if kernel is not None and not kernel.readable:
        reasons = [f"{s.name}: {s.reason}" for s in kernel.sources]
        findings.append(
            Finding(
                "kernel-log-unreadable",
                "warning",
                "The kernel log could not be read here, so an OOM kill cannot be confirmed or "
                "ruled "
                "out from it"
                + (
                    " (the cgroup counters were read instead)."
                    if seen.cgroup and seen.cgroup.levels
                    else "."
                ),
                tuple(reasons),
                (
                    f"Read it with root rights ('{HOW_TO_READ[0]}', or '{HOW_TO_READ[1]}').",
                    "Inside a container, run it on the host (the container cannot read "
                    "the host's kernel log without privileges).",
                ),
            )
        )
    findings.extend(_not_this_run_finding(view, seen))
    findings.extend(_machine_not_read_findings(seen, view.scope))
    findings.extend(_other_event_findings(view, kills=True))
    pod_lines = log.of_kind("kubernetes-oomkilled") if log else ()
    if pod_lines:
        limit = log.shape.container_memory_limit if log else None
        limit_text = f" ({format_gib(limit)})" if limit is not None else ""
        if verdict == "undetermined":
            verdict = "cgroup-oom"
        findings.append(
            Finding(
                "container-oomkilled",
                "error",
                "The container runtime recorded the container as OOMKilled: its processes passed "
                f"the container's memory limit{limit_text} and the kernel's OOM killer ended "
                "them with SIGKILL (exit code 137). Kubernetes sets memory.oom.group, so one "
                "OOM kill ends every process in the container.",
                _quote([e.line for e in pod_lines]),
                (
                    "Raise resources.limits.memory (and requests.memory) of the container to "
                    "what the memory check below needs.",
                    "Or lower the run's host memory (see the memory check's alternatives).",
                ),
            )
        )
    elif exit_status.raw.strip() == "137" and seen.in_kubernetes:
        findings.append(
            Finding(
                "kubernetes-oomkilled-hint",
                "info",
                "137 in Kubernetes: if the container's last state says reason OOMKilled, the "
                "container's memory limit was hit (kubelet sets memory.oom.group, so one OOM "
                "kill ends every process in the container).",
                tuple(e.line for e in pod_lines),
                (
                    "Read the container's last state ('kubectl get pod POD -o jsonpath="
                    "'{.status.containerStatuses[*].lastState.terminated.reason}'', or "
                    "'kubectl describe pod POD').",
                ),
            )
        )
    time_limit = log.of_kind("slurm-time-limit", "slurm-cancelled") if log else ()
    # After an OOM kill srun cancels the step itself: that CANCELLED line is not a time limit.
    cancelled_after_oom = bool(slurm_oom) and not (log.of_kind("slurm-time-limit") if log else ())
    if time_limit and not cancelled_after_oom:
        findings.append(
            Finding(
                "slurm-time-limit",
                "error" if verdict == "undetermined" else "info",
                "Slurm cancelled the job (time limit or scancel); Slurm stops jobs with SIGTERM, "
                "then SIGKILL.",
                _quote([e.line for e in time_limit]),
                ("Ask for more time (--time), or checkpoint and resume.",),
            )
        )
        if verdict == "undetermined":
            verdict = "not-oom"
    if slurm is not None and slurm.verdict.kind == "signal":
        findings.append(signal_finding(slurm))
    if verdict == "undetermined" and log is not None:
        # Another rank's own failure: a signal other than SIGKILL, or (a launcher-exit line
        # without a signal) a plain non-zero exit status.
        other = [
            e
            for e in log.of_kind("launcher-exit", "launcher-signal")
            if e.signal != SIGKILL and not (e.signal is None and e.kind == "launcher-signal")
        ]
        if other:
            verdict = "not-oom"
            first = other[0]
            if first.signal is not None:
                what = signal_name(first.signal)
                explain = f"run cudalock doctor --exit-code -{first.signal}"
            else:
                what = "it exited with an error status, not by a signal"
                explain = "its own error message (the traceback before it in that rank's log)"
            findings.append(
                Finding(
                    "sigkill-collateral",
                    "warning",
                    f"Another rank failed first ({what}); the launcher then killed the remaining "
                    f"ranks with SIGKILL. Explain that first failure: {explain}.",
                    _quote([e.line for e in other]),
                )
            )
    untied = bool(view.split and view.split.untied_kills)
    if verdict == "undetermined" and view.covers_run and view.coverage is not None and not untied:
        verdict = "not-oom"
        findings.append(
            Finding(
                "sigkill-not-oom",
                "warning",
                "No OOM kill of this run is recorded in the kernel log or the cgroup counters, so "
                "this SIGKILL most likely came from somewhere else: "
                + "; ".join(_OTHER_SIGKILL)
                + ".",
                tuple(
                    f"{s.name}: read, no OOM kill of the run"
                    + (f" (oldest line {s.first_at:%Y-%m-%d %H:%M:%S})" if s.first_at else "")
                    for s in view.coverage.covering
                ),
            )
        )
    return verdict, findings


def gpu_oom_finding(lines: Sequence[LogEvent], how: str) -> Finding:
    """CUDA out of memory in the log: a GPU, not the host, ran out; ``how`` says how that
    ended the run."""
    return Finding(
        "gpu-oom",
        "error",
        "A GPU ran out of memory (CUDA out of memory). That is a different problem from a host "
        f"OOM: {how}.",
        _quote([e.line for e in lines]),
        (
            "Lower the micro-batch size or sequence length, or enable gradient checkpointing.",
            "Use ZeRO-3, or offload_optimizer/offload_param to CPU (it costs host RAM: see the "
            "memory check).",
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation.",
        ),
    )


def _machine_not_read_findings(seen: Observations, scope: RunScope) -> list[Finding]:
    """This machine's evidence was left unread: say so, and why."""
    if seen.machine_not_read is None:
        return []
    here = f" ({scope.local_host})" if scope.local_host else ""
    message = (
        f"This machine's{here} kernel log, cgroup counters and /dev/shm were not read: "
        f"{seen.machine_not_read}. They speak only for a run on this host."
    )
    evidence = (
        (f"the run's hosts: {', '.join(scope.hosts)} ({scope.hosts_from})",) if scope.hosts else ()
    )
    fix = (
        "Run cudalock doctor on "
        + (", ".join(scope.hosts) if scope.hosts else "the run's node")
        + " (with --host NAME), or paste its 'dmesg -T' output into the log given with --log.",
    )
    if scope.ran_here is False:
        return [Finding("kernel-log-not-this-run", "warning", message, evidence, fix)]
    return [Finding("kernel-log-not-read", "info", message, evidence, fix)]


def _undetermined_finding(
    scope: RunScope, seen: Observations, slurm: SlurmEvidence | None
) -> Finding:
    """No evidence either way: what would decide."""
    here = scope.local_host or "this machine"
    decide: list[str] = []
    if seen.machine_not_read is not None:
        decide.append(
            f"Give --host {here} if the run ran on this machine: its kernel log and cgroup "
            "counters are then read."
        )
    decide.append(
        "Paste the node's kernel log into the file given with --log ('dmesg -T | tail -n 200' "
        "or 'journalctl -k --since \"1 hour ago\"' on the node, right after the crash)."
    )
    if slurm is None:
        decide.append(
            "For a Slurm job, give --slurm-job ID: its accounting records an OUT_OF_MEMORY."
        )
    decide.append(
        "On Kubernetes, add the output of 'kubectl describe pod POD' (Last State, Reason: "
        "OOMKilled, Limits) to the log."
    )
    if not scope.knows_time:
        decide.append("Give the run's time: --since and --until, or a log with its timestamps.")
    return Finding(
        "oom-undetermined",
        "warning",
        "Undetermined: nothing read records an OOM kill of this run, and nothing rules one out. "
        "SIGKILL (-9) is most often the kernel's OOM killer, but it can also come from a "
        "scheduler, a launcher stopping the other ranks, or kill -9.",
        fix=tuple(decide),
    )


def memory_only_finding(
    memory: MemoryVerdict, kernel_read: bool, not_read: str | None = None
) -> Finding:
    """The verdict rests on the memory arithmetic alone: say so, and which phase would fail."""
    setup = memory.needs.setup
    available = memory.host.available_bytes or 0
    save = next((p for p in memory.needs.phases if p.name == "checkpoint save"), None)
    if save is not None and save.bytes > available and setup.zero_stage in (1, 2):
        hit = (
            f", which a ZeRO-{setup.zero_stage} checkpoint save would hit (each of the "
            f"{setup.gpus_per_node} ranks on a node copies the 16-bit weights: "
            f"{format_gib(save.bytes)} needed, {format_gib(available)} available)"
        )
    elif save is not None and save.bytes > available:
        hit = (
            f", which a checkpoint save would hit (rank 0 gathers the 16-bit weights: "
            f"{format_gib(save.bytes)} needed)"
        )
    else:
        phase = memory.needs.deciding_phase
        hit = f", at '{phase.name}' ({format_gib(phase.bytes)} needed)"
    if kernel_read:
        why = "no kernel record of this run was found"
    elif not_read is not None:
        why = "this machine's kernel log was not read (" + not_read + ")"
    else:
        why = "the kernel log could not be read"
    return Finding(
        "oom-from-memory-check-only",
        "warning",
        f"Only the memory arithmetic points at an OOM kill: {why}; the memory check says the "
        f"host was {format_gib(memory.shortfall_bytes)} short{hit}.",
        (f"host: {memory.host.describe()}",),
        (f"Confirm with the kernel log of the run's node ('{HOW_TO_READ[0]}').",),
    )


_LIBRARY_HINTS = (
    (
        ("libcuda", "libnvidia"),
        "the NVIDIA driver's own library: a driver/CUDA mismatch, a "
        "driver upgraded without a reboot, or a GPU fault (see Xid lines)",
    ),
    (
        (
            "libtorch_cuda",
            "libc10_cuda",
            "libcudnn",
            "libcublas",
            "libnvjitlink",
            "libcusparse",
            "libnccl",
        ),
        "a CUDA library of the PyTorch build: a build for a newer CUDA than the driver, "
        "or CUDA libraries from two different installs mixed on the library path",
    ),
    (
        ("cpu_adam", "fused_adam", "deepspeed", "transformer_inference", "_op"),
        "a compiled DeepSpeed/extension op: built against another torch or CUDA version",
    ),
    (("libgomp", "libiomp", "libomp"), "two OpenMP runtimes in one process"),
)


def _library_meaning(library: str) -> str:
    lower = library.lower()
    for needles, meaning in _LIBRARY_HINTS:
        if any(needle in lower for needle in needles):
            return meaning
    return "the library named (a native extension or system library)"


#: How a problem the audit finds turns into SIGSEGV, by the audit's finding code.
_AUDIT_CRASH_MEANING: dict[str, str] = {
    "driver-too-old": "a build for a newer CUDA than the driver fails at CUDA initialisation, "
    "or crashes in native code when CUDA libraries of two versions get mixed",
    "minor-compat-only": "under minor-version compatibility, kernels that need PTX JIT or newer "
    "driver features fail; extensions that skip error checks crash instead",
    "gpu-arch-unsupported": "without kernels for the GPU's architecture CUDA calls fail; "
    "extensions that skip the error check crash instead of raising",
    "mixed-cuda-builds": "two CUDA versions' libraries loaded into one process resolve symbols "
    "against each other and crash",
    "torchvision-mismatch": "torchvision's C++ ops are built for another torch: calling them "
    "jumps into a changed ABI",
    "torchaudio-mismatch": "torchaudio's C++ ops are built for another torch: calling them jumps "
    "into a changed ABI",
    "duplicate-torch": "two torch installs: the extension modules of one load the libraries of "
    "the other",
    "library-shadowing": "a library on LD_LIBRARY_PATH/LD_PRELOAD replaces the one torch was "
    "built with",
    "nvcc-mismatch": "DeepSpeed JIT-builds its ops with this nvcc; ops built for another CUDA "
    "than torch's crash or fail to load",
    "deepspeed-torch-mismatch": "DeepSpeed ops compiled against another torch call into a "
    "changed C++ ABI and crash",
    "deepspeed-cuda-mismatch": "DeepSpeed ops compiled for another CUDA load a second CUDA "
    "runtime into the process",
    "deepspeed-built-without-torch": "DeepSpeed's prebuilt ops were not built against this torch",
    "torch-import-crash": "the crash reproduces in a child process that only imports torch and "
    "initialises CUDA: the environment itself is at fault, not the "
    "training code",
    "cuda-init-failed": "CUDA initialisation fails in a child process: the same failure inside "
    "native training code can end as a segfault",
    "rocm-build-on-nvidia": "a ROCm build of torch cannot drive NVIDIA GPUs",
}


#: Audit codes saying the installed build is for a newer CUDA than the driver. At error level
#: (the policy the audit judged with refuses the build) they are the most likely cause of a -11.
_DRIVER_MISMATCH_CODES = ("driver-too-old", "minor-compat-only")


def _is_driver_mismatch(finding: Finding) -> bool:
    return finding.severity == "error" and finding.code in _DRIVER_MISMATCH_CODES


def explain_audit_finding(finding: Finding) -> Finding:
    """The audit's finding, with a sentence on how it produces a segfault (code unchanged)."""
    meaning = _AUDIT_CRASH_MEANING.get(finding.code)
    if meaning is None:
        return finding
    message = finding.message.rstrip()
    separator = " " if message.endswith((".", "!", ")")) else ". "
    return replace(finding, message=f"{message}{separator}Why -11: {meaning}.")


#: A fix line that installs a CPU build of torch (a ``+cpu`` version, the ``/whl/cpu`` index).
_CPU_BUILD = re.compile(r"\+cpu\b|/whl/cpu\b")


def without_cpu_builds(finding: Finding) -> Finding:
    """``finding`` without fix lines that install a CPU torch: wrong for a machine whose
    NVIDIA GPUs the evidence shows, however little else of it is known."""
    kept = tuple(line for line in finding.fix if not _CPU_BUILD.search(line))
    if kept == finding.fix:
        return finding
    note = (
        "# the crashed machine has NVIDIA GPUs, so no CPU build: give its driver "
        "(--driver-version, --probe) or its collect_env (--report) for the CUDA build it runs"
    )
    return replace(finding, fix=(*kept, note))


def _sigsegv_findings(
    log: LogFacts | None,
    seen: Observations,
    view: KernelView,
    audit_findings: Sequence[Finding] | None,
    audit_error: str | None,
    slurm: SlurmEvidence | None,
    gpus_evident: bool = False,
) -> tuple[str, list[Finding]]:
    findings: list[Finding] = []
    verdict = "segfault"
    explained = [explain_audit_finding(f) for f in audit_findings or ()]
    if gpus_evident:
        explained = [without_cpu_builds(f) for f in explained]
    # A build newer than the driver comes first: the kernel lines below are then its symptoms.
    for finding in explained:
        if _is_driver_mismatch(finding):
            verdict = "cuda-newer-than-driver"
            findings.append(replace(finding, message=f"Most likely cause: {finding.message}"))
    if slurm is not None:
        findings.append(signal_finding(slurm))
    if view.split is not None:
        run_events = view.split.run
        for seg in run_events.segfaults[-3:]:
            if seg.library:
                findings.append(
                    Finding(
                        "segfault-in-library",
                        "error",
                        f"The kernel recorded {seg.comm} (PID {seg.pid}) crashing in "
                        f"{seg.library}: "
                        f"{_library_meaning(seg.library)}." + view.note([seg]),
                        (seg.line,),
                    )
                )
        if run_events.xids:
            findings.append(
                Finding(
                    "gpu-xid-error",
                    "error",
                    "The NVIDIA driver logged Xid errors (GPU faults). Processes using a "
                    "faulting GPU "
                    "can die with SIGSEGV or SIGKILL; this is a driver or hardware problem, not a "
                    "package version." + view.note(run_events.xids),
                    _quote([xid.line for xid in run_events.xids]),
                    (
                        "Look the Xid number up in NVIDIA's Xid catalogue: 79 (fallen off the "
                        "bus), 48 "
                        "and 63/64 (ECC) need the machine's administrator.",
                    ),
                )
            )
        findings.extend(_other_event_findings(view, kills=False))
    no_torch = next((f for f in audit_findings or () if f.code == "no-torch"), None)
    if no_torch is not None:
        # An environment without torch is not the one a torch run crashed in: saying it is
        # clean, or how to install torch into it, would judge the wrong environment.
        findings.append(
            Finding(
                "audit-unavailable",
                "warning",
                "The environment audited has no torch, so it is not the one that crashed, and "
                "nothing here judged the crashed environment's versions. Give that "
                "environment's interpreter (--python PATH) or its report (--report FILE: its "
                "'pip list' or 'python -m torch.utils.collect_env').",
                no_torch.evidence,
            )
        )
    elif audit_findings is not None:
        problems = [f for f in audit_findings if f.severity in ("error", "warning")]
        findings.extend(f for f in explained if not _is_driver_mismatch(f))
        if not problems:
            findings.append(
                Finding(
                    "audit-clean",
                    "info",
                    "The audit of the environment found no version problem (driver, GPU "
                    "architecture, CUDA libraries, DeepSpeed build) that explains a segfault.",
                )
            )
    elif audit_error:
        findings.append(
            Finding(
                "audit-unavailable",
                "warning",
                f"The environment audit could not run: {audit_error}",
            )
        )
    findings.extend(_shm_findings(log, seen.shm, crash=True))
    shm = seen.shm
    shm_evidence = (
        f"{shm.path}: {format_gib(shm.total_bytes)}, {format_gib(shm.free_bytes)} free"
        if shm
        else "/dev/shm: size not read",
    )
    findings.append(
        Finding(
            "segfault-other-causes",
            "info",
            "Causes of -11 that are not version problems: DataLoader workers with too small "
            "/dev/shm; forking DataLoader workers after CUDA was initialised; two OpenMP runtimes "
            "(libgomp and libiomp5) in one process; a too small stack (ulimit -s) for deep "
            "recursion; faulty GPU or host memory (Xid errors, ECC). And one an audit sees only "
            "where the package says what it was built against: a compiled extension "
            "(torch-scatter, mmcv, detectron2, …) built against another torch.",
            evidence=shm_evidence,
            fix=(
                "Re-run with num_workers=0 to rule DataLoader workers out.",
                "PYTHONFAULTHANDLER=1 (or python -X faulthandler) prints the Python stack at the "
                "crash.",
            ),
        )
    )
    return verdict, findings


def _shm_findings(log: LogFacts | None, shm: ShmInfo | None, *, crash: bool) -> list[Finding]:
    bus_errors = log.of_kind("dataloader-bus-error", "shell-bus-error") if log else ()
    findings: list[Finding] = []
    fixes = (
        "docker run --shm-size=16g … (Docker's default is 64 MiB)",
        "Kubernetes: mount an emptyDir with medium: Memory (and a sizeLimit) at /dev/shm",
        "or lower DataLoader num_workers",
    )
    small = shm is not None and shm.total_bytes < SHM_WARN_BYTES
    if bus_errors:
        size = ""
        if shm is not None:
            size = (
                f" {shm.path} here is {format_gib(shm.total_bytes)} "
                f"({format_gib(shm.free_bytes)} free)"
            )
            size += (
                "."
                if small
                else (
                    ": large enough now, so if the run was in a container, "
                    "check the container's /dev/shm (Docker's default is "
                    "64 MiB)."
                )
            )
        findings.append(
            Finding(
                "dataloader-bus-error",
                "error",
                "DataLoader workers died of SIGBUS: they ran out of shared memory."
                + size
                + " Check the kernel/cgroup evidence too: a cgroup OOM can show up the same way.",
                _quote([e.line for e in bus_errors]),
                fixes,
            )
        )
    if shm is not None and small:
        findings.append(
            Finding(
                "shm-too-small",
                "error" if bus_errors or crash else "warning",
                f"{shm.path} is {format_gib(shm.total_bytes)} ({format_gib(shm.free_bytes)} free); "
                "DataLoader workers pass batches through it, and DeepSpeed's ds_report warns below "
                "512 MiB.",
                (
                    f"statvfs({shm.path}): size {shm.total_bytes} bytes, free {shm.free_bytes} "
                    "bytes",
                ),
                fixes,
            )
        )
    return findings


_VERDICT_SUMMARY = {
    "host-oom": "host OOM: the machine ran out of RAM and the kernel's OOM killer sent SIGKILL",
    "cgroup-oom": "container/cgroup limit: the memory limit of the container (or job cgroup) "
    "was hit and the OOM killer sent SIGKILL",
    "gpu-oom": "GPU OOM: a GPU ran out of memory; the -9 is the launcher stopping the other ranks",
    "not-oom": "not an OOM: no OOM kill is recorded; something else sent SIGKILL",
    "undetermined": "undetermined: no OOM kill of this run was found, and none could be ruled out",
    "likely-host-oom": "probably a host OOM: the host has less RAM than this run needs, but no "
    "kernel record of the run's kill was found",
    "slurm-oom": "out of memory in the Slurm job: a step passed the job's memory request and "
    "the kernel killed it in the job's cgroup",
    "time-limit": "Slurm time limit: the job ran out of time and Slurm stopped it; not an OOM",
    "cancelled": "cancelled: the Slurm job was cancelled, not crashed",
    "node-failure": "node failure: a node of the Slurm job went down",
    "completed": "completed: the Slurm job ended with exit code 0",
    "unfinished": "unfinished: the Slurm job has not ended yet",
    "segfault": "segmentation fault (SIGSEGV)",
    "cuda-newer-than-driver": "segmentation fault (SIGSEGV), most likely because torch is built "
    "for a newer CUDA than the NVIDIA driver supports",
    "bus-error": "bus error (SIGBUS), usually DataLoader workers out of shared memory",
    "other-signal": "killed by another signal",
    "exit-status": "a plain exit status, not a signal",
}


def log_reports_oom(log: LogFacts | None) -> bool:
    """Whether the log itself records an OOM kill by a resource manager: slurmstepd's
    ``Detected N oom-kill event(s)`` (or srun's ``Out Of Memory``) or a container
    ``OOMKilled``. Such a line decides the run ended in an OOM kill whatever exit status the
    user saw (srun reports 1, a pod 137)."""
    return log is not None and bool(log.of_kind("slurm-oom", "kubernetes-oomkilled"))


def diagnose(
    exit_status: ExitStatus,
    *,
    log: LogFacts | None = None,
    seen: Observations | None = None,
    memory: MemoryVerdict | None = None,
    setup_notes: Sequence[str] = (),
    audit_findings: Sequence[Finding] | None = None,
    audit_error: str | None = None,
    scope: RunScope | None = None,
    slurm: SlurmEvidence | None = None,
    audited: str | None = None,
    audited_on: str | None = None,
    gpus_evident: bool = False,
) -> DoctorReport:
    """The verdict and findings for one crash (pure).

    Kernel events count only where they match ``scope`` (the run's time, hosts and processes;
    an empty scope matches everything and says what went unchecked); ``slurm``, the job's
    accounting, decides how the job ended where it is given.
    """
    seen = seen or Observations()
    scope = scope or RunScope()
    view = KernelView.of(seen.kernel, scope)
    findings: list[Finding] = []
    sig = exit_status.signal
    slurm_verdict, slurm_findings = job_end_findings(slurm) if slurm else (None, [])
    if slurm_verdict is not None:
        verdict = slurm_verdict
        findings.extend(slurm_findings)
    elif sig == SIGKILL or log_reports_oom(log):
        verdict, found = _sigkill_findings(exit_status, log, seen, view, slurm)
        findings.extend(found)
        saving = log.died_while_saving if log else None
        if saving is not None:
            spike = ""
            if memory is not None and memory.needs.save_spike_bytes:
                setup = memory.needs.setup
                who = (
                    f"each of the {setup.gpus_per_node} ranks on a node copies"
                    if setup.zero_stage in (1, 2)
                    else "rank 0 gathers"
                )
                spike = (
                    f" For this run {who} the full 16-bit weights into host RAM: "
                    f"{format_gib(memory.needs.save_spike_bytes)} extra at that moment."
                )
            findings.append(
                Finding(
                    "killed-during-checkpoint-save",
                    "warning",
                    "The last thing the log shows before the kill is a checkpoint save, with no "
                    "training step after it: the save-time host memory spike is the likely trigger."
                    + spike,
                    (f"log line {saving.line_no}: {saving.line}",),
                    (
                        'ZeRO-3 with "stage3_gather_16bit_weights_on_model_save": true keeps '
                        "the 16-bit "
                        "copy on rank 0 only.",
                        "Or give the node the RAM the memory check asks for."
                        if memory is not None
                        else "Or give the node more host RAM (--params, --zero and "
                        "--gpus-per-node say how much the save needs).",
                    ),
                )
            )
        if memory is not None:
            if slurm is not None and verdict == "slurm-oom":
                findings.append(memory_request_finding(slurm, memory))
            findings.extend(memory.findings)
            if verdict == "undetermined" and memory.host_enough is False:
                verdict = "likely-host-oom"
                kernel = seen.kernel
                findings.append(
                    memory_only_finding(
                        memory,
                        kernel_read=kernel is not None and kernel.readable,
                        not_read=seen.machine_not_read,
                    )
                )
        else:
            for_slurm = (
                " and get the #SBATCH --mem= it needs"
                if slurm is not None and verdict == "slurm-oom"
                else ""
            )
            findings.append(
                Finding(
                    "memory-check-skipped",
                    "info",
                    "No memory check: the model size is unknown. Pass --params 7B (or --model "
                    "PATH) with --zero and --gpus-per-node to compare this host with what the run "
                    f"needs{for_slurm}.",
                )
            )
        if verdict == "undetermined":
            findings.append(_undetermined_finding(view.scope, seen, slurm))
    elif sig == SIGSEGV:
        verdict, found = _sigsegv_findings(
            log, seen, view, audit_findings, audit_error, slurm, gpus_evident
        )
        findings.extend(found)
        findings.extend(_machine_not_read_findings(seen, scope))
        if audited is not None:
            findings.append(
                Finding(
                    "segfault-report-audited",
                    "info",
                    f"The audit judged {audited}, the report of the environment that crashed, "
                    "on the machine it names (and the Target flags give)"
                    + (f", {audited_on}" if audited_on else "")
                    + ", not an interpreter here.",
                )
            )
    elif sig == SIGBUS:
        verdict = "bus-error"
        findings.extend(_shm_findings(log, seen.shm, crash=True))
        if not findings:
            findings.append(
                Finding(
                    "shm-too-small",
                    "warning",
                    "SIGBUS in training is nearly always shared memory (/dev/shm) running out; its "
                    "size could not be read here.",
                    fix=("Check the size of /dev/shm ('df -h /dev/shm').",),
                )
            )
    elif sig is not None:
        verdict = "other-signal"
        if slurm is not None:
            findings.append(signal_finding(slurm))
        findings.append(
            Finding(
                "signal-other",
                "info",
                f"The process was killed by {signal_name(sig)} ({sig}); cudalock doctor "
                "explains -9 "
                "(SIGKILL) and -11 (SIGSEGV) in depth. SIGABRT (-6) usually follows a C++ "
                "exception or an NCCL watchdog timeout: look for the message just before it.",
            )
        )
    elif log is not None and (cuda_oom := log.of_kind("cuda-oom")):
        verdict = "gpu-oom"
        findings.append(
            gpu_oom_finding(
                cuda_oom, f"the rank raised torch.OutOfMemoryError and exited ({exit_status.name})"
            )
        )
    elif log is not None and log.of_kind("dataloader-bus-error"):
        # A worker's SIGBUS surfaces in the main process as a RuntimeError, so the run exits
        # with a plain status: the bus error is still what ended it.
        verdict = "bus-error"
        findings.extend(_shm_findings(log, seen.shm, crash=True))
    else:
        verdict = "exit-status"
        findings.append(
            Finding(
                "exit-status-plain",
                "info",
                f"Exit status {exit_status.code} is not a signal: the program exited by itself, "
                "so its own error message (the last traceback in the log) explains it.",
            )
        )
    summary = _VERDICT_SUMMARY[verdict]
    evidence: dict[str, Any] = {"machine": seen.to_json(), "run": scope.to_json()}
    if log is not None:
        evidence["log"] = log.to_json()
    if slurm is not None:
        evidence["slurm"] = slurm.to_json()
    return DoctorReport(
        exit_status,
        verdict,
        summary,
        tuple(findings),
        memory,
        tuple(setup_notes),
        evidence,
        scope=scope,
        slurm=slurm,
    )


# --- gathering the inputs (the edge) --------------------------------------------------------------


# --- text output ----------------------------------------------------------------------------------
