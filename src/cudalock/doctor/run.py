"""Gathering what doctor judges: the training log, the DeepSpeed config and model files, the
machine's evidence (kernel log, cgroup counters, /dev/shm, the probe) and a Slurm job's
accounting, then :func:`diagnose`.

Every reader takes its roots and commands as parameters, so tests point them at prepared trees.
The run's scope (its time, hosts and processes) comes from the flags, the Slurm job and the log,
in that order; kernel lines pasted into the log are read as a kernel log of their own."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cudalock.audit.runner import AuditOutcome, audit_findings
from cudalock.doctor import kernel as ke
from cudalock.doctor.diagnosis import (
    SIGBUS,
    SIGKILL,
    SIGSEGV,
    DoctorReport,
    Observations,
    SetupHints,
    build_setup,
    diagnose,
    log_reports_oom,
    merge_hints,
)
from cudalock.doctor.kernel import (
    PASTED_SOURCE,
    CommandRunner,
    KernelLog,
    LineContext,
    LogSource,
    kernel_log_of,
    merge_kernel_logs,
)
from cudalock.doctor.logs import (
    MAX_LINE_CHARS,
    ExitStatus,
    LogFacts,
    RunShape,
    parse_exit_code,
    scan_training_log,
    shape_from_deepspeed_config,
)
from cudalock.doctor.matching import JobPlace, RunScope, run_scope
from cudalock.doctor.slurm import (
    JobAccounting,
    classify_job,
    expand_hostlist,
    read_job,
    split_job_reference,
)
from cudalock.doctor.slurm_findings import SlurmEvidence
from cudalock.errors import InputError, UsageError
from cudalock.fsutil import read_bounded, read_tail
from cudalock.machine import probe_machine
from cudalock.machine.host import (
    CgroupMemory,
    ShmInfo,
    read_boot_time,
    read_cgroup_memory,
    read_shm,
)
from cudalock.machine.overrides import GivenTargets
from cudalock.memory import (
    HostMemory,
    MemoryVerdict,
    check_host_memory,
    memory_needs,
    read_model_size,
)
from cudalock.memory.finetuning import FineTuning, finetuning_from_text
from cudalock.model import Finding, Host, Target
from cudalock.request import Compat

__all__ = [
    "ADAPTER_CONFIG",
    "MAX_CONFIG_BYTES",
    "MAX_LOG_BYTES",
    "AuditRunner",
    "DoctorRequest",
    "MachineReaders",
    "ReportAuditRunner",
    "default_audit",
    "default_readers",
    "default_report_audit",
    "gpus_evident",
    "host_memory_from",
    "in_kubernetes",
    "read_deepspeed_config",
    "read_log",
    "read_slurm_evidence",
    "read_training_config",
    "run_doctor",
    "smallest_gpu_memory",
]

#: How much of a training log is read: its newest part, where a run ends (as for kernel logs).
MAX_LOG_BYTES = 64 * 2**20


def in_kubernetes(environ: Mapping[str, str], root: Path = Path("/")) -> bool:
    return (
        "KUBERNETES_SERVICE_HOST" in environ
        or (root / "var/run/secrets/kubernetes.io/serviceaccount").is_dir()
    )


def _longest_line(text: str) -> int:
    """The length of the longest line (one ``find`` per line: linear, whatever the lines)."""
    longest, start = 0, 0
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        longest = max(longest, end - start)
        start = end + 1
    return longest


def read_log(path: Path) -> str:
    """The last :data:`MAX_LOG_BYTES` of a training log (a regular file: never a FIFO or a
    device), as text."""
    data, _cut = read_tail(path, limit=MAX_LOG_BYTES, what="log file")
    return data.decode("utf-8", errors="replace")


#: A DeepSpeed config is a few kB of JSON.
MAX_CONFIG_BYTES = 4 * 2**20


def read_deepspeed_config(path: Path) -> RunShape:
    raw = read_bounded(path, limit=MAX_CONFIG_BYTES, what="DeepSpeed config")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise InputError(f"DeepSpeed config {path} is not valid JSON: nested too deeply") from None
    except ValueError as err:  # also UnicodeDecodeError, and int() refusing 5000 digits
        raise InputError(f"DeepSpeed config {path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise InputError(f"DeepSpeed config {path} does not hold a JSON object")
    return shape_from_deepspeed_config(data)


#: PEFT's adapter_config.json, in an adapter's directory.
ADAPTER_CONFIG = "adapter_config.json"


def read_training_config(path: Path) -> FineTuning:
    """The fine-tuning method of a LLaMA-Factory / axolotl YAML or PEFT's adapter_config.json
    (a directory: its adapter_config.json)."""
    if path.is_dir():
        path = path / ADAPTER_CONFIG
    raw = read_bounded(path, limit=MAX_CONFIG_BYTES, what="training config")
    text = raw.decode("utf-8", errors="replace")
    tuning = finetuning_from_text(text)
    if tuning is None:
        raise InputError(
            f"training config {path} names no fine-tuning method; expected a LLaMA-Factory "
            "YAML (finetuning_type, lora_rank, lora_target, quantization_bit), an axolotl YAML "
            "(adapter, lora_r, load_in_4bit) or PEFT's adapter_config.json"
        )
    return tuning


def host_memory_from(
    host: Host | None, override: int | None, source: str = "/proc/meminfo and cgroup"
) -> HostMemory:
    """``--host-memory`` wins; otherwise the probed host's RAM and cgroup limit."""
    if override is not None:
        return HostMemory(override, None, "--host-memory")
    if host is None:
        return HostMemory(source=source if source.startswith("not read") else "not read")
    return HostMemory(host.memory_total_bytes, host.cgroup_memory_limit_bytes, source)


def smallest_gpu_memory(target: Target | None) -> int | None:
    if target is None:
        return None
    sizes = [g.memory_total_bytes for g in target.gpus if g.memory_total_bytes]
    return min(sizes) if sizes else None


@dataclass(frozen=True)
class DoctorRequest:
    #: The return code as the user saw it; None with ``slurm_job`` (Slurm says how it ended).
    exit_code: str | None
    log_path: Path | None = None
    flags: SetupHints = field(default_factory=SetupHints)
    model_path: Path | None = None
    deepspeed_config: Path | None = None
    #: A LLaMA-Factory / axolotl YAML or PEFT adapter config: LoRA, QLoRA or full.
    training_config: Path | None = None
    host_memory_bytes: int | None = None
    python: Path | None = None
    no_run: bool = False
    #: The compatibility policy the -11 audit judges with (``--compat``, as in resolve).
    compat: Compat = "strict"
    #: The run's time window and hosts, when the log does not say or says wrong.
    since: datetime | None = None
    until: datetime | None = None
    hosts: tuple[str, ...] = ()
    #: ``ID`` or ``ID.STEP``: read the job's Slurm accounting.
    slurm_job: str | None = None
    #: The Target flags, read and checked as every command reads them: the machine that
    #: crashed (its driver and GPUs for the -11 audit, its host and RAM from a probe file for
    #: the -9 memory check). None: none given (the shipped matrix, this machine).
    target: GivenTargets | None = None
    #: ``--report``: the crashed environment's collect_env / ds_report text, audited for -11
    #: instead of an interpreter here.
    report_text: str | None = None
    report_name: str | None = None


#: The audit, as doctor calls it: (python, deep, compat) → findings. Injected so tests need no
#: torch.
AuditRunner = Callable[[Path | None, bool, Compat], Sequence[Finding]]
#: The audit of a pasted report on the machine the Target flags (or the report) describe.
ReportAuditRunner = Callable[[str, "GivenTargets | None", Compat], AuditOutcome]


@dataclass(frozen=True)
class MachineReaders:
    """Where doctor looks on this machine; tests point these at prepared trees."""

    read_kernel_log: Callable[[], KernelLog]
    read_cgroup: Callable[[], CgroupMemory]
    read_shm: Callable[[], ShmInfo | None]
    probe: Callable[[], Target | None]
    environ: Mapping[str, str] = field(default_factory=dict)
    root: Path = Path("/")
    #: This machine's name: its kernel log and counters speak for a run only if it ran here.
    hostname: str | None = None
    read_slurm_job: Callable[[str], JobAccounting] = read_job
    now: Callable[[], datetime] = datetime.now


def default_readers(
    proc_root: Path = Path("/proc"),
    sys_root: Path = Path("/sys"),
    shm_path: Path = Path("/dev/shm"),
    root: Path = Path("/"),
    runner: CommandRunner | None = None,
    log_commands: Sequence[Sequence[str]] | None = None,
    environ: Mapping[str, str] | None = None,
    hostname: str | None = None,
) -> MachineReaders:
    """This machine's evidence; every root, command and the environment can be replaced."""

    def probe() -> Target | None:

        return probe_machine(proc_root=proc_root, sys_root=sys_root)

    name = hostname if hostname is not None else (socket.gethostname() or None)
    return MachineReaders(
        read_kernel_log=lambda: ke.read_kernel_log(
            runner=runner or ke.run_command,
            commands=ke.DEFAULT_LOG_COMMANDS if log_commands is None else log_commands,
            root=root,
            hostname=name,
            boot_time=read_boot_time(proc_root),
        ),
        read_cgroup=lambda: read_cgroup_memory(sys_root / "fs" / "cgroup", proc_root),
        read_shm=lambda: read_shm(shm_path),
        probe=probe,
        environ=dict(os.environ if environ is None else environ),
        root=root,
        hostname=name,
    )


def default_audit(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
    """Run cudalock's audit on an environment under policy ``compat``."""

    return audit_findings(python, deep, compat)


def default_report_audit(text: str, given: GivenTargets | None, compat: Compat) -> AuditOutcome:
    """Audit a pasted report (collect_env, ds_report, ...) on the machine it names, with the
    Target flags replacing what they give."""
    from cudalock.audit.reports import parse_report
    from cudalock.audit.runner import audit_report

    return audit_report(parse_report(text), given, compat=compat)


def read_slurm_evidence(reference: str, readers: MachineReaders) -> tuple[SlurmEvidence, JobPlace]:
    """The job's accounting, how it ended, and where and when it (or the step asked for) ran."""
    accounting = readers.read_slurm_job(reference)
    verdict = classify_job(accounting)
    _, step = split_job_reference(reference)
    job = accounting.job
    place = next((r for r in accounting.steps if r.step == step), None) if step else None
    timed = place if place is not None and (place.start or place.end) else job
    node_list = (place.node_list if place is not None else None) or (job.node_list if job else None)
    evidence = SlurmEvidence(reference, accounting, verdict, accounting.problems)
    return evidence, JobPlace(
        accounting.job_id,
        timed.start if timed else None,
        timed.end if timed else None,
        expand_hostlist(node_list) if node_list else (),
    )


def _exit_status(request: DoctorRequest, slurm: SlurmEvidence | None) -> ExitStatus:
    if slurm is None:
        if request.exit_code is None:
            raise UsageError("give --exit-code CODE (e.g. -9, 137, -11, 139) or --slurm-job ID")
        return parse_exit_code(request.exit_code)
    job = slurm.accounting.job
    shown = " ".join(
        part
        for part in (
            job.state if job else "",
            f"ExitCode {job.exit.text}" if job and job.exit else "",
        )
        if part
    )
    return ExitStatus(
        f"Slurm job {slurm.reference}",
        slurm.signal,
        slurm.verdict.exit_code if slurm.signal is None else None,
        f"Slurm accounting: {shown}" if shown else "Slurm accounting",
    )


def _pasted_kernel_lines(text: str, log: LogFacts, path: Path, now: datetime) -> KernelLog | None:
    """The kernel lines people paste into logs (``dmesg`` output), read like a kernel log."""
    if not log.trace.kernel_lines:
        return None
    context = LineContext(host=None, boot_time=None, reference=log.trace.last_time or now)
    return kernel_log_of(
        text, LogSource(f"{PASTED_SOURCE} {path}", True), context, boot_named="an unknown"
    )


def _probe_targets(given: GivenTargets | None) -> tuple[Target, ...]:
    """The machines ``--probe`` files describe, the other Target flags replacing the fields
    they give: the nodes the run ran on."""
    return given.probe_file_targets() if given is not None else ()


#: Words that show NVIDIA GPUs in a training log or report (CUDA devices, NCCL, nvidia-smi).
_NVIDIA_WORDS = re.compile(r"\bNVIDIA\b|\bNCCL\b|\bcuda:\d|CUDA out of memory|nvidia-smi")


def gpus_evident(
    request: DoctorRequest, texts: Sequence[str | None], probed: Sequence[Target]
) -> bool:
    """Whether the evidence shows the crashed machine had NVIDIA GPUs: the Target flags or
    probe files say so, or the log or report names NVIDIA, NCCL or CUDA devices."""
    given = request.target
    if given is not None and (given.overrides.driver_given or given.overrides.gpus):
        return True
    if any(t.gpus or t.driver_version for t in probed):
        return True
    return any(text is not None and _NVIDIA_WORDS.search(text) for text in texts)


def _not_read_reason(scope: RunScope) -> str:
    """Why this machine's kernel log, cgroup counters and /dev/shm do not speak for the run."""
    here = scope.local_host or "this machine"
    if scope.ran_here is False:
        return f"the run ran on {', '.join(scope.hosts)} ({scope.hosts_from}), not on {here}"
    return (
        "nothing says the run ran on this machine: the log names no host and neither --host, "
        "--slurm-job nor a --probe file gives one"
    )


def run_doctor(
    request: DoctorRequest,
    readers: MachineReaders,
    audit: AuditRunner | None = None,
    report_audit: ReportAuditRunner = default_report_audit,
) -> DoctorReport:
    """Gather the evidence for one crash and diagnose it.

    This machine's kernel log, cgroup counters and /dev/shm are read only for a run on this
    host (the log's hostnames, ``--host``, the Slurm job's nodes or the probe files'
    hostnames name it); kernel lines pasted into the log are read as their own source."""
    slurm: SlurmEvidence | None = None
    job_place: JobPlace | None = None
    if request.slurm_job is not None:
        slurm, job_place = read_slurm_evidence(request.slurm_job, readers)
    exit_status = _exit_status(request, slurm)
    now = readers.now()
    text = read_log(request.log_path) if request.log_path else None
    log = scan_training_log(text, reference=now) if text is not None else None
    probed = _probe_targets(request.target)
    probe_hosts = tuple(t.host.hostname for t in probed if t.host.hostname)
    scope = run_scope(
        log,
        since=request.since,
        until=request.until,
        hosts=request.hosts or probe_hosts,
        hosts_from="--host" if request.hosts else "the --probe files' hostnames",
        job=job_place,
        local_host=readers.hostname,
    )
    sig = exit_status.signal
    as_kill = sig == SIGKILL or log_reports_oom(log)
    ran_here = scope.ran_here is True
    wants_kernel = as_kill or sig in (SIGSEGV, SIGBUS)
    local_kernel = readers.read_kernel_log() if wants_kernel and ran_here else None
    pasted = (
        _pasted_kernel_lines(text, log, request.log_path, now)
        if wants_kernel and text is not None and log is not None and request.log_path
        else None
    )
    kernel = (
        merge_kernel_logs(local_kernel, pasted)
        if local_kernel is not None and pasted is not None
        else local_kernel or pasted
    )
    cgroup = readers.read_cgroup() if as_kill and ran_here else None
    # A worker's bus error ends the run with a plain exit status (the main process raises).
    bus_error_logged = log is not None and bool(log.of_kind("dataloader-bus-error"))
    shm = (
        readers.read_shm() if (sig in (SIGSEGV, SIGBUS) or bus_error_logged) and ran_here else None
    )
    seen = Observations(
        kernel,
        cgroup,
        shm,
        in_kubernetes(readers.environ, readers.root) if ran_here else False,
        machine_not_read=None if ran_here or not wants_kernel else _not_read_reason(scope),
    )

    memory: MemoryVerdict | None = None
    notes: list[str] = []
    if as_kill:
        memory, notes = _memory_for_doctor(
            request, log, readers, read_model_size, slurm, probed=probed, ran_here=ran_here
        )
    if text is not None and (longest := _longest_line(text)) > MAX_LINE_CHARS:
        notes.append(
            f"the log has a line of {longest:,} characters; only the first "
            f"{MAX_LINE_CHARS // 2**10} KiB of each line are read, so a crash message further "
            "along such a line is not seen"
        )

    audit_findings: Sequence[Finding] | None = None
    audit_error: str | None = None
    audited_on: str | None = None
    if sig == SIGSEGV and not as_kill:
        try:
            if request.report_text is not None:
                outcome = report_audit(request.report_text, request.target, request.compat)
                audit_findings = outcome.findings
                audited_on = " and ".join(f"{t.name} ({t.describe()})" for t in outcome.targets)
            else:
                runner = audit or _live_audit(request.target)
                audit_findings = tuple(runner(request.python, not request.no_run, request.compat))
        except (ImportError, InputError) as err:
            audit_error = str(err)
        except Exception as err:  # the audit failing must not hide the rest of the diagnosis
            audit_error = f"{type(err).__name__}: {err}"
    return diagnose(
        exit_status,
        log=log,
        seen=seen,
        memory=memory,
        setup_notes=notes,
        audit_findings=audit_findings,
        audit_error=audit_error,
        audited=request.report_name,
        audited_on=audited_on,
        scope=scope,
        slurm=slurm,
        gpus_evident=sig == SIGSEGV and gpus_evident(request, (text, request.report_text), probed),
    )


def _live_audit(given: GivenTargets | None) -> AuditRunner:
    """The audit of an interpreter's environment, on the machine the Target flags describe
    (default: this one, as probed now)."""

    def run(python: Path | None, deep: bool, compat: Compat) -> Sequence[Finding]:
        return audit_findings(python, deep, compat, given)

    return run


def _memory_for_doctor(
    request: DoctorRequest,
    log: LogFacts | None,
    readers: MachineReaders,
    read_model_size: Callable[[Path], Any],
    slurm: SlurmEvidence | None = None,
    *,
    probed: Sequence[Target] = (),
    ran_here: bool = False,
) -> tuple[MemoryVerdict | None, list[str]]:
    notes: list[str] = []
    sources: list[SetupHints] = [request.flags]
    if slurm is not None:
        # The job's allocation: GPUs per node and nodes, as Slurm gave them.
        sources.append(SetupHints(gpus_per_node=slurm.gpus_per_node, nodes=slurm.nodes))
    if request.model_path is not None:
        size = read_model_size(request.model_path)
        sources.append(SetupHints.from_model_size(size))
    config_path = request.deepspeed_config
    if config_path is None and log is not None and log.shape.deepspeed_config:
        candidate = Path(log.shape.deepspeed_config)
        if not candidate.is_absolute() and request.log_path is not None:
            beside = request.log_path.parent / candidate
            candidate = beside if beside.is_file() else candidate
        if candidate.is_file():
            config_path = candidate
        else:
            notes.append(
                f"the log names DeepSpeed config {log.shape.deepspeed_config}, which is "
                "not readable here (pass --deepspeed-config)"
            )
    if config_path is not None:
        sources.append(SetupHints.from_shape(read_deepspeed_config(config_path)))
        notes.append(f"ZeRO settings read from {config_path}")
    if request.training_config is not None:
        tuning = read_training_config(request.training_config)
        sources.append(SetupHints.from_finetuning(tuning, str(request.training_config)))
        notes.append(f"{tuning.describe()} read from {request.training_config}")
    if log is not None:
        shape = log.shape
        guessed = shape.params is None or "guess" in (shape.params_source or "")
        if shape.model and guessed:
            model_dir = Path(shape.model)
            if model_dir.is_dir():
                size = read_model_size(model_dir)
                sources.append(SetupHints.from_model_size(size))
        sources.append(SetupHints.from_shape(shape))
    hints = merge_hints(*sources)
    limit = slurm.verdict.memory_limit if slurm is not None else None
    # The machine the run had: a probe file of its node, else this one when it ran here. A
    # Slurm job's limit is its request, on nodes that are not this one.
    target: Target | None = None
    if probed:
        target = min(probed, key=lambda t: t.host.memory_total_bytes or 2**63)
    elif (
        slurm is None
        and ran_here
        and (request.host_memory_bytes is None or hints.gpus_per_node is None)
    ):
        target = readers.probe()
    default_gpus = len(target.gpus) if target is not None and target.gpus else 1
    setup, setup_notes = build_setup(hints, default_gpus)
    notes.extend(setup_notes)
    if setup is None:
        return None, notes
    pod_limit = log.shape.container_memory_limit if log is not None else None
    if request.host_memory_bytes is not None:
        host = host_memory_from(None, request.host_memory_bytes)
    elif slurm is not None and limit is not None:
        host = HostMemory(
            None, limit.bytes, f"Slurm job {slurm.accounting.job_id}'s request: {limit.how}"
        )
    elif pod_limit is not None:
        host = HostMemory(None, pod_limit, "the container's memory limit in the log")
    elif target is not None:
        source = "the --probe file" if probed else "/proc/meminfo and cgroup"
        host = host_memory_from(target.host, None, source)
    else:
        host = HostMemory(
            source="not read: the run's host is not known to be this machine (pass "
            "--host-memory, or --probe with the node's probe file)"
        )
    return check_host_memory(memory_needs(setup), host, smallest_gpu_memory(target)), notes
