"""Slurm's record of one job (sacct, scontrol show job), read and judged: OOM, time limit, crash.

The edge (:func:`read_job`) runs ``sacct`` and ``scontrol show job`` with a timeout; everything
else is pure: :func:`parse_sacct` and :func:`parse_scontrol_job` turn their output into
:class:`AccountingRecord` values, :func:`memory_limit_per_node` works out the memory each node of
the job was allowed, and :func:`classify_job` says how the job ended, with the lines that say so.

How Slurm (22.05) reports what happened, as seen on a real cluster:

- A job over its ``--mem`` is killed by the kernel in the job's memory cgroup: the step that was
  killed is ``OUT_OF_MEMORY`` with ExitCode ``0:125`` (Slurm's SIG_OOM, 253, as a wait status);
  ``srun`` itself exits 1, so the launcher sees neither -9 nor 137. When a batch script survives
  an OOM-killed ``srun`` step, the job is ``FAILED 1:0`` and only the step says OUT_OF_MEMORY
  (DerivedExitCode ``0:125``). Without cgroup enforcement (``JobAcctGatherParams=OverMemoryKill``)
  the step is ``CANCELLED by 0`` with ``0:9`` and a MaxRSS above the limit.
- A time limit ends the job ``TIMEOUT``: Slurm sends SIGTERM (steps ``CANCELLED 0:15``), which
  looks like a kill but is not an OOM.
- sacct's ExitCode folds exit statuses of 128 and more: a shell that reports a child killed by
  SIGSEGV exits 139, shown as ``11:0`` (137 as ``9:0``); scontrol shows ``139:0``. A process
  killed by the signal itself shows ``0:11``.
- The memory limit that matters is the job's per-node allocation (``--mem``, or
  ``--mem-per-cpu`` × CPUs, or ``--mem-per-gpu`` × GPUs on the node), not the host's RAM. Since
  21.08 sacct's ReqMem is the job's total; older releases print per node (``n``) or per CPU
  (``c``) suffixes.
- sacct lags: right after a job ends its record can still say RUNNING, or be a placeholder named
  ``allocation`` without the request (ReqMem like ``16?``); :attr:`AccountingRecord.incomplete`.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from cudalock import procs
from cudalock.errors import EnvironmentFailure, InputError, UsageError
from cudalock.units import GIB, format_gib

__all__ = [
    "COMMAND_TIMEOUT",
    "CRASH_SIGNALS",
    "FINAL_STATES",
    "MAX_HOSTLIST_NAMES",
    "OUTPUT_LIMIT",
    "SACCT_FIELDS",
    "SIGKILL",
    "SIGNAL_NAMES",
    "SIGSEGV",
    "SIGTERM",
    "SLURM_OOM_SIGNAL",
    "AccountingRecord",
    "ExitStatus",
    "JobAccounting",
    "JobVerdict",
    "MemoryBasis",
    "MemoryLimit",
    "MemoryRequest",
    "SlurmCommandFailed",
    "SlurmCommandNotFound",
    "SlurmCommandTimedOut",
    "SlurmJobNotFound",
    "SlurmQueryError",
    "VerdictKind",
    "classify_job",
    "expand_hostlist",
    "format_bytes",
    "memory_limit_per_node",
    "parse_duration",
    "parse_exit",
    "parse_requested_memory",
    "parse_sacct",
    "parse_scontrol_job",
    "parse_size",
    "parse_time_limit",
    "parse_timestamp",
    "parse_tres",
    "read_job",
    "read_sacct",
    "read_scontrol_job",
    "run_slurm_command",
    "sacct_command",
    "scontrol_command",
    "scontrol_fields",
    "split_job_reference",
]

# JobName comes last: it is the only free-text field and may itself contain the delimiter.
SACCT_FIELDS: tuple[str, ...] = (
    "JobID",
    "State",
    "ExitCode",
    "DerivedExitCode",
    "ReqMem",
    "MaxRSS",
    "MaxRSSNode",
    "NodeList",
    "NNodes",
    "NTasks",
    "NCPUS",
    "ElapsedRaw",
    "Start",
    "End",
    "TimelimitRaw",
    "ReqTRES",
    "AllocTRES",
    "JobName",
)
COMMAND_TIMEOUT = 30.0
OUTPUT_LIMIT = 4 * 2**20  # one job's records are small; a runaway command must not fill memory

# Exit "signal" Slurm records for a step the kernel OOM-killed in its cgroup: SIG_OOM (253)
# packed into a wait status shows as 253 & 0x7f.
SLURM_OOM_SIGNAL = 125
SIGKILL = 9
SIGSEGV = 11
SIGTERM = 15
# Signals whose numbers a folded sacct exit status most likely stands for (a shell reporting
# 128 + signal); smaller codes are ordinary exit statuses far more often.
CRASH_SIGNALS: Mapping[int, str] = {
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
}
SIGNAL_NAMES: Mapping[int, str] = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    13: "SIGPIPE",
    15: "SIGTERM",
    10: "SIGUSR1",
    12: "SIGUSR2",
    **CRASH_SIGNALS,
}

# Job and step states in which the record will not change any more.
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
        "REVOKED",
    }
)

_SIZE_UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}  # powers of 1024
# Digit runs are bounded: adjacent unbounded runs backtrack polynomially on a long one.
_SIZE = re.compile(
    r"(?P<number>\d{1,18}(?:\.\d{1,18})?)(?P<unit>[KMGTP]?)(?P<basis>[nc]?)", re.IGNORECASE
)
_EXIT = re.compile(r"(?P<code>\d{1,18}):(?P<signal>\d{1,18})")
_JOB_ID = re.compile(r"(?P<job>[^.\s]+)(?:\.(?P<step>[^.\s]+))?")
_ELAPSED = re.compile(
    r"(?:(?P<days>\d{1,9})-)?(?:(?P<hours>\d{1,9}):)?(?P<minutes>\d{1,9}):(?P<seconds>\d{1,9})"
    r"(?:\.\d{1,9})?"
)
_SCONTROL_KEY = re.compile(r"(?:^|(?<=\s))(?P<key>[A-Za-z][\w:/]*)=")


# --- errors -------------------------------------------------------------------------------------


class SlurmQueryError(EnvironmentFailure):
    """A Slurm command could not answer: not installed, timed out, or failed (exit 3)."""

    def __init__(
        self, message: str, *, command: Sequence[str], stderr: str = "", hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.command = tuple(command)
        self.stderr = stderr


class SlurmCommandNotFound(SlurmQueryError):
    """``sacct`` or ``scontrol`` is not on PATH: this is not a Slurm client machine."""


class SlurmCommandTimedOut(SlurmQueryError):
    """The command did not finish in time (slurmdbd or slurmctld not answering)."""


class SlurmCommandFailed(SlurmQueryError):
    """The command exited non-zero; ``stderr`` says why (no accounting, no controller, …)."""


class SlurmJobNotFound(UsageError):
    """Neither sacct nor the controller knows the job id (exit 2)."""


# --- values -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExitStatus:
    """An ``EXIT:SIGNAL`` pair as Slurm prints it.

    ``folded`` is True for sacct's ExitCode column, which subtracts 128 from statuses of 128 and
    more: there ``11:0`` is either ``exit 11`` or a shell reporting SIGSEGV (139).
    """

    code: int
    signal: int
    folded: bool = False

    @property
    def text(self) -> str:
        return f"{self.code}:{self.signal}"

    @property
    def success(self) -> bool:
        return self.code == 0 and self.signal == 0

    def signal_reported_by_shell(self) -> int | None:
        """The signal a shell's ``128 + N`` status stands for, when it certainly is one."""
        if not self.folded and self.signal == 0 and 128 < self.code < 128 + 65:
            return self.code - 128
        return None


class MemoryBasis(str, Enum):
    """What a memory request is counted per."""

    PER_NODE = "per-node"
    PER_CPU = "per-cpu"
    PER_GPU = "per-gpu"
    JOB_TOTAL = "job-total"  # sacct ReqMem since 21.08: the request summed over the job's nodes


@dataclass(frozen=True)
class MemoryRequest:
    bytes: int
    basis: MemoryBasis
    text: str


@dataclass(frozen=True)
class AccountingRecord:
    """One line of sacct (the job or one of its steps) or the controller's view of the job.

    ``step`` is None for the job itself, else ``batch``, ``extern``, ``0``, ``1``, …. Sizes are
    bytes; ``None`` is "not recorded" (Slurm prints empty, ``Unknown`` or ``None``).
    """

    source: Literal["sacct", "scontrol"]
    job_id: str
    step: str | None
    name: str | None
    state: str
    exit: ExitStatus | None
    line: str
    cancelled_by: int | None = None
    reason: str | None = None
    derived_exit: ExitStatus | None = None
    requested_memory: MemoryRequest | None = None
    max_rss: int | None = None
    max_rss_node: str | None = None
    node_list: str | None = None
    nodes: int | None = None
    tasks: int | None = None
    cpus: int | None = None
    gpus: int | None = None
    elapsed_seconds: int | None = None
    start: datetime | None = None
    end: datetime | None = None
    time_limit_minutes: int | None = None
    requested_tres: Mapping[str, str] = field(default_factory=dict)
    allocated_tres: Mapping[str, str] = field(default_factory=dict)
    #: Memory allocated on each node (``scontrol show job -d``: ``Nodes=… Mem=…``), bytes.
    node_memory: Mapping[str, int] = field(default_factory=dict)
    #: ``--mem-per-gpu`` (``MemPerTres=gres:gpu:N``), bytes.
    memory_per_gpu: int | None = None
    #: A sacct job line written before the job's start record arrived: no request yet, and
    #: ReqMem may be garbage such as ``16?``. Asking again a moment later gives the full line.
    incomplete: bool = False

    @property
    def ident(self) -> str:
        return self.job_id if self.step is None else f"{self.job_id}.{self.step}"

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    def describe(self) -> str:
        """The line as evidence: where it comes from and the fields that matter."""
        parts = [f"{self.source} {self.ident}", f"State={self.state}"]
        if self.cancelled_by is not None:
            parts[-1] += f" by {self.cancelled_by}"
        if self.reason and self.reason != "None":
            parts.append(f"Reason={self.reason}")
        if self.exit is not None:
            parts.append(f"ExitCode={self.exit.text}")
        if self.derived_exit is not None and not self.derived_exit.success:
            parts.append(f"DerivedExitCode={self.derived_exit.text}")
        if self.requested_memory is not None:
            parts.append(self.requested_memory.text)
        if self.max_rss is not None:
            parts.append(f"MaxRSS={format_bytes(self.max_rss)}")
        if self.elapsed_seconds is not None:
            parts.append(f"Elapsed={self.elapsed_seconds}s")
        if self.time_limit_minutes is not None:
            parts.append(f"TimeLimit={self.time_limit_minutes}min")
        return " ".join(parts)


@dataclass(frozen=True)
class JobAccounting:
    """Everything known about one job: sacct's lines and, while it remembers, the controller's."""

    job_id: str
    records: tuple[AccountingRecord, ...] = ()
    controller: AccountingRecord | None = None
    #: A command that did not answer while the other did (sacct without accounting).
    problems: tuple[str, ...] = ()

    @property
    def job(self) -> AccountingRecord | None:
        """The job line: sacct's, or the controller's when sacct has none."""
        for record in self.records:
            if record.step is None:
                return record
        return self.controller

    @property
    def steps(self) -> tuple[AccountingRecord, ...]:
        return tuple(record for record in self.records if record.step is not None)

    def all_records(self) -> tuple[AccountingRecord, ...]:
        return self.records + ((self.controller,) if self.controller is not None else ())


# --- parsing ------------------------------------------------------------------------------------


def _absent(text: str) -> bool:
    return text.strip() in ("", "Unknown", "None", "N/A", "(null)", "None assigned")


def parse_size(text: str, default_unit: str = "") -> int | None:
    """A Slurm size (``54072K``, ``1.50G``, ``64M``, ``0``) in bytes; K/M/G/T/P are 1024-based.

    A bare number counts in ``default_unit``: MaxRSS is in bytes, ReqMem and MinMemory* in
    megabytes. Values Slurm cannot print (``16?``: a NO_VAL sentinel) and absent ones are None.
    """
    match = _SIZE.fullmatch(text.strip())
    if match is None or match.group("basis"):
        return None
    unit = (match.group("unit") or default_unit).upper()
    return round(float(match.group("number")) * _unit_bytes(unit))


def _unit_bytes(unit: str) -> int:
    return 1 << (10 * _SIZE_UNITS[unit.upper()])


def format_bytes(value: int) -> str:
    if value >= GIB:
        return format_gib(value)
    return f"{value / 2**20:.1f} MiB"


def parse_requested_memory(text: str) -> MemoryRequest | None:
    """sacct's ReqMem: ``64M`` (job total, 21.08+), ``100Mn`` (per node), ``4000Mc`` (per CPU)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        return None
    size = round(float(match.group("number")) * _unit_bytes(match.group("unit") or "M"))
    basis = {"n": MemoryBasis.PER_NODE, "c": MemoryBasis.PER_CPU}.get(
        match.group("basis").lower(), MemoryBasis.JOB_TOTAL
    )
    return MemoryRequest(size, basis, f"ReqMem={text.strip()}")


def parse_exit(text: str, *, folded: bool = False) -> ExitStatus | None:
    match = _EXIT.fullmatch(text.strip())
    if match is None:
        return None
    return ExitStatus(int(match.group("code")), int(match.group("signal")), folded)


def parse_duration(text: str) -> int | None:
    """Seconds from ``ElapsedRaw`` (``83``) or ``Elapsed``/``RunTime`` (``1-02:03:04``)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    match = _ELAPSED.fullmatch(text)
    if match is None:
        return None
    days, hours = int(match.group("days") or 0), int(match.group("hours") or 0)
    return ((days * 24 + hours) * 60 + int(match.group("minutes"))) * 60 + int(
        match.group("seconds")
    )


def parse_time_limit(text: str) -> int | None:
    """Minutes: ``TimelimitRaw`` (``1``) or ``TimeLimit`` (``00:01:00``); None when unlimited."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    seconds = parse_duration(text)
    return None if seconds is None else math.ceil(seconds / 60)


def parse_timestamp(text: str) -> datetime | None:
    """``2026-11-30T19:29:30`` (Slurm's default format, local time) → naive datetime."""
    if _absent(text):
        return None
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        return None


def parse_tres(text: str) -> dict[str, str]:
    """``billing=1,cpu=1,gres/gpu=2,mem=80M,node=1`` → {name: value}."""
    pairs = (item.partition("=") for item in text.strip().split(",") if "=" in item)
    return {name: value for name, _, value in pairs}


def _tres_gpus(tres: Mapping[str, str]) -> int | None:
    # A typed request is listed twice (gres/gpu=2 and gres/gpu:a100=2): the untyped one is
    # the total.
    value = tres.get("gres/gpu")
    return int(value) if value is not None and value.isdigit() else None


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def _state_and_canceller(text: str) -> tuple[str, int | None]:
    """``CANCELLED by 0`` → (CANCELLED, 0): the uid that cancelled it."""
    state, _, rest = text.strip().partition(" ")
    by = re.fullmatch(r"by (\d+)", rest.strip())
    return state, int(by.group(1)) if by else None


def split_job_reference(reference: str) -> tuple[str, str | None]:
    """``123`` → (123, None); ``123.batch`` / ``123.0`` → (123, step); ``12_3.0`` for arrays."""
    match = _JOB_ID.fullmatch(reference.strip())
    if match is None or not re.fullmatch(r"\d+(?:[_+]\d+)?", match.group("job")):
        raise UsageError(
            f"Slurm job {reference!r} is not understood; expected ID or ID.STEP "
            "such as 1234, 1234.batch or 1234.0"
        )
    return match.group("job"), match.group("step")


def parse_sacct(text: str, fields: Sequence[str] = SACCT_FIELDS) -> tuple[AccountingRecord, ...]:
    """Parse ``sacct --parsable2 --noheader --format=<fields>`` output (``|``-separated)."""
    records: list[AccountingRecord] = []
    names = [name.lower() for name in fields]
    for raw in text.splitlines():
        if not raw.strip():
            continue
        # The last field may contain "|" itself (a job name): split no further than needed.
        values = raw.split("|", len(names) - 1)
        if len(values) < len(names):
            raise InputError(
                f"sacct line has {len(values)} fields where {len(names)} were asked for: {raw!r}",
                hint="Print it with --parsable2 and the --format cudalock asks for.",
            )
        row = dict(zip(names, values, strict=True))
        records.append(_sacct_record(row, raw))
    return tuple(records)


def _sacct_record(row: Mapping[str, str], raw: str) -> AccountingRecord:
    def value(*names: str) -> str:
        for name in names:
            if name in row:
                return row[name]
        return ""

    job_match = _JOB_ID.fullmatch(value("jobid", "jobidraw").strip())
    if job_match is None:
        raise InputError(f"sacct line without a job id: {raw!r}")
    state, cancelled_by = _state_and_canceller(value("state"))
    requested_tres = parse_tres(value("reqtres"))
    allocated_tres = parse_tres(value("alloctres"))
    name = value("jobname").strip()
    return AccountingRecord(
        source="sacct",
        job_id=job_match.group("job"),
        step=job_match.group("step"),
        name=name or None,
        state=state,
        cancelled_by=cancelled_by,
        exit=parse_exit(value("exitcode"), folded=True),
        derived_exit=parse_exit(value("derivedexitcode")),
        reason=None if _absent(value("reason")) else value("reason").strip(),
        requested_memory=parse_requested_memory(value("reqmem")),
        max_rss=parse_size(value("maxrss")),
        max_rss_node=None if _absent(value("maxrssnode")) else value("maxrssnode").strip(),
        node_list=None if _absent(value("nodelist")) else value("nodelist").strip(),
        nodes=_int_or_none(value("nnodes")),
        tasks=_int_or_none(value("ntasks")),
        cpus=_int_or_none(value("ncpus", "alloccpus")),
        gpus=_tres_gpus(allocated_tres) if allocated_tres else _tres_gpus(requested_tres),
        elapsed_seconds=parse_duration(value("elapsedraw", "elapsed")),
        start=parse_timestamp(value("start")),
        end=parse_timestamp(value("end")),
        time_limit_minutes=parse_time_limit(value("timelimitraw", "timelimit")),
        requested_tres=requested_tres,
        allocated_tres=allocated_tres,
        line=raw,
        incomplete=(
            job_match.group("step") is None
            and "reqtres" in row
            and not requested_tres
            and state in FINAL_STATES
        ),
    )


def scontrol_fields(line: str) -> list[tuple[str, str]]:
    """``scontrol show job -o`` output as (key, value) pairs, in order; keys may repeat.

    Values run to the next `` Key=``, so the few that contain spaces (a command line) survive.
    """
    keys = list(_SCONTROL_KEY.finditer(line))
    pairs: list[tuple[str, str]] = []
    for index, key in enumerate(keys):
        end = keys[index + 1].start() if index + 1 < len(keys) else len(line)
        pairs.append((key.group("key"), line[key.end() : end].strip()))
    return pairs


def parse_scontrol_job(text: str) -> AccountingRecord | None:
    """Parse ``scontrol show job -d -o ID``: the controller's record, with unfolded exit codes."""
    line = next(
        (
            candidate.strip()
            for candidate in text.splitlines()
            if candidate.strip().startswith("JobId=")
        ),
        None,
    )
    if line is None:
        return None
    pairs = scontrol_fields(line)
    first: dict[str, str] = {}
    for key, value in pairs:
        first.setdefault(key, value)
    node_memory: dict[str, int] = {}
    current_nodes: str | None = None
    for key, value in pairs:
        # The detail lines come as "Nodes=vm CPU_IDs=0 Mem=80 GRES=" (Mem in megabytes).
        if key == "Nodes":
            current_nodes = value
        elif key == "Mem" and current_nodes is not None:
            size = parse_size(value, "M")
            if size is not None:
                node_memory[current_nodes] = size
    tres = parse_tres(first.get("TRES", ""))
    memory_per_gpu = None
    if (per_tres := re.fullmatch(r"gres:gpu:(\d+)", first.get("MemPerTres", ""))) is not None:
        memory_per_gpu = int(per_tres.group(1)) * 2**20
    requested: MemoryRequest | None = None
    if memory_per_gpu is not None:
        requested = MemoryRequest(
            memory_per_gpu, MemoryBasis.PER_GPU, f"MemPerTres={first['MemPerTres']}"
        )
    else:
        for key, basis in (
            ("MinMemoryNode", MemoryBasis.PER_NODE),
            ("MinMemoryCPU", MemoryBasis.PER_CPU),
        ):
            size = parse_size(first.get(key, ""), "M")
            if size:
                requested = MemoryRequest(size, basis, f"{key}={first[key]}")
    raw_state = first.get("JobState", "")
    return AccountingRecord(
        source="scontrol",
        job_id=first.get("JobId", "").strip(),
        step=None,
        name=first.get("JobName") or None,
        state=raw_state,
        reason=first.get("Reason"),
        exit=parse_exit(first.get("ExitCode", "")),
        derived_exit=parse_exit(first.get("DerivedExitCode", "")),
        requested_memory=requested,
        node_list=None if _absent(first.get("NodeList", "")) else first["NodeList"],
        nodes=_int_or_none(first.get("NumNodes", "").split("-")[0]),
        tasks=_int_or_none(first.get("NumTasks", "")),
        cpus=_int_or_none(first.get("NumCPUs", "").split("-")[0]),
        gpus=_tres_gpus(tres),
        elapsed_seconds=parse_duration(first.get("RunTime", "")),
        start=parse_timestamp(first.get("StartTime", "")),
        end=parse_timestamp(first.get("EndTime", "")),
        time_limit_minutes=parse_time_limit(first.get("TimeLimit", "")),
        allocated_tres=tres,
        node_memory=node_memory,
        memory_per_gpu=memory_per_gpu,
        line=line,
    )


# --- the per-node memory limit ------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryLimit:
    """The memory each node of the job could use (the job's cgroup limit there), in bytes."""

    bytes: int
    how: str
    evidence: tuple[str, ...]
    exact: bool = True


def _per_node(count: int | None, nodes: int | None) -> tuple[int, bool] | None:
    """``count`` (CPUs or GPUs of the whole job) per node, rounded up; exact when even."""
    if not count:
        return None
    node_count = max(nodes or 1, 1)
    return math.ceil(count / node_count), count % node_count == 0


def memory_limit_per_node(accounting: JobAccounting) -> MemoryLimit | None:
    """The job's per-node memory limit: its ``--mem`` (or per-CPU/per-GPU request) per node.

    The controller's per-node allocation is exact; otherwise the request is scaled by the
    job's CPUs or GPUs per node, or sacct's job total is divided by the number of nodes (exact
    for ``--mem``, an average for per-CPU requests spread unevenly).
    """
    controller = accounting.controller
    if controller is not None:
        if controller.node_memory:
            biggest = max(controller.node_memory.values())
            shown = ", ".join(
                f"{nodes}: {format_bytes(size)}" for nodes, size in controller.node_memory.items()
            )
            return MemoryLimit(biggest, f"allocated per node ({shown})", (controller.line,))
        limit = _scaled(controller.requested_memory, controller)
        if limit is not None:
            return limit
    job = next(
        (
            record
            for record in accounting.records
            if record.step is None and record.requested_memory is not None
        ),
        None,
    )
    if job is not None:
        limit = _scaled(job.requested_memory, job)
        if limit is not None:
            return limit
    if job is None:
        job = next((record for record in accounting.records if record.step is None), None)
    if job is not None and (size := parse_size(job.allocated_tres.get("mem", ""), "M")):
        nodes = max(job.nodes or 1, 1)
        return MemoryLimit(
            size // nodes,
            f"AllocTRES mem={job.allocated_tres['mem']} over {nodes} node(s)",
            (job.line,),
            exact=nodes == 1,
        )
    return None


def _scaled(request: MemoryRequest | None, record: AccountingRecord) -> MemoryLimit | None:
    if request is None or request.bytes <= 0:
        return None
    nodes = max(record.nodes or 1, 1)
    evidence = (record.line,)
    if request.basis is MemoryBasis.PER_NODE:
        return MemoryLimit(request.bytes, f"{request.text} per node", evidence)
    if request.basis is MemoryBasis.JOB_TOTAL:
        return MemoryLimit(
            request.bytes // nodes,
            f"{request.text} for the job over {nodes} node(s)",
            evidence,
            exact=nodes == 1,
        )
    count, what = (
        (record.cpus, "CPUs") if request.basis is MemoryBasis.PER_CPU else (record.gpus, "GPUs")
    )
    per_node = _per_node(count, record.nodes)
    if per_node is None:
        return None
    units, even = per_node
    return MemoryLimit(
        request.bytes * units,
        f"{request.text} {request.basis.value} × {units} {what} per node",
        evidence,
        exact=even,
    )


# --- classification -----------------------------------------------------------------------------

VerdictKind = Literal[
    "out-of-memory",
    "time-limit",
    "node-failure",
    "cancelled",
    "segfault",
    "signal",
    "failed",
    "success",
    "unfinished",
]


@dataclass(frozen=True)
class JobVerdict:
    """How a job ended, the step that shows it, and the lines that say so.

    ``certain`` is False where the records allow another reading (sacct's folded ``11:0`` is
    also what ``exit 11`` gives); the summary then says which.
    """

    kind: VerdictKind
    summary: str
    job_id: str
    step: str | None = None
    signal: int | None = None
    exit_code: int | None = None
    certain: bool = True
    evidence: tuple[str, ...] = ()
    memory_limit: MemoryLimit | None = None

    def to_json(self) -> dict[str, Any]:
        limit = self.memory_limit
        return {
            "kind": self.kind,
            "summary": self.summary,
            "job_id": self.job_id,
            "step": self.step,
            "signal": self.signal,
            "exit_code": self.exit_code,
            "certain": self.certain,
            "evidence": list(self.evidence),
            "memory_limit_bytes": limit.bytes if limit else None,
            "memory_limit_how": limit.how if limit else None,
        }


@dataclass(frozen=True)
class _Crash:
    signal: int
    certain: bool
    how: str
    shown_by: tuple[AccountingRecord, ...]


def _step_first(records: Iterable[AccountingRecord]) -> list[AccountingRecord]:
    """The most specific record first: steps before the job line, sacct before scontrol.

    The ``extern`` step (PrologFlags=contain) shares the job's cgroup but runs no user
    process, so it comes after the steps that do.
    """
    return sorted(records, key=lambda r: (r.step is None, r.step == "extern", r.source != "sacct"))


def _where(record: AccountingRecord, job_id: str) -> str:
    return f"step {record.ident}" if record.step else f"job {job_id}"


def classify_job(accounting: JobAccounting) -> JobVerdict:
    """Say how the job ended: OOM (and which step), time limit, crash, failure or success.

    The checks run from the most specific cause to the least: a step the kernel OOM-killed
    explains a failed job, and a time limit explains the SIGTERM its steps died of.
    """
    records = _step_first(accounting.all_records())
    job = accounting.job
    job_id = accounting.job_id
    if job is None:
        raise SlurmJobNotFound(f"Slurm has no record of job {job_id}")
    limit = memory_limit_per_node(accounting)
    limit_text = f" (limit {format_bytes(limit.bytes)} per node)" if limit else ""

    def verdict(
        kind: VerdictKind, summary: str, shown_by: Iterable[AccountingRecord], **details: Any
    ) -> JobVerdict:
        evidence = tuple(dict.fromkeys(record.describe() for record in shown_by))
        if limit is not None and kind in ("out-of-memory", "signal"):
            evidence += (f"memory limit {format_bytes(limit.bytes)} per node: {limit.how}",)
        if any(record.incomplete for record in accounting.records):
            evidence += (
                "sacct's job line is still incomplete (its start record has not "
                "reached the database); ask again for ReqMem and ReqTRES",
            )
        return JobVerdict(
            kind=kind,
            summary=summary,
            job_id=job_id,
            evidence=evidence,
            memory_limit=limit,
            **details,
        )

    unfinished = [r for r in records if not r.final and r.source == "sacct"]
    if not job.final or unfinished:
        return verdict(
            "unfinished",
            f"job {job_id} has not finished ({job.state})",
            [job, *unfinished],
            certain=False,
        )

    oom = [
        r
        for r in records
        if r.state == "OUT_OF_MEMORY"
        or r.reason == "OutOfMemory"
        or any(
            status is not None and status.signal == SLURM_OOM_SIGNAL
            for status in (r.exit, r.derived_exit)
        )
    ]
    if oom:
        killed = next((r for r in oom if r.state == "OUT_OF_MEMORY"), oom[0])
        if killed.step is not None and killed.step.isdigit():
            seen = "srun reports 'Out Of Memory' and exits 1, so the launcher sees no -9 or 137"
        else:
            seen = "the killed command got SIGKILL (a shell reports 137)"
        return verdict(
            "out-of-memory",
            f"{_where(killed, job_id)} ran out of memory: the kernel killed it in "
            f"the job's memory cgroup{limit_text}; {seen}",
            oom,
            step=killed.step,
            signal=SIGKILL,
        )

    if job.state == "TIMEOUT" or any(r.reason == "TimeLimit" for r in records):
        minutes = next(
            (r.time_limit_minutes for r in records if r.time_limit_minutes is not None), None
        )
        of = f" of {minutes} min" if minutes is not None else ""
        return verdict(
            "time-limit",
            f"job {job_id} reached its time limit{of}; Slurm stopped it with SIGTERM "
            "(SIGKILL after KillWait): not an out-of-memory kill",
            [r for r in records if r.state in ("TIMEOUT", "CANCELLED") or r.reason == "TimeLimit"],
            signal=SIGTERM,
        )

    over_limit = _killed_over_memory_limit(records, limit)
    if over_limit:
        return verdict(
            "out-of-memory",
            f"{_where(over_limit[0], job_id)} was killed with SIGKILL after its "
            f"memory use passed the job's limit{limit_text}: Slurm's RSS polling "
            "(OverMemoryKill, no memory cgroup) killed it",
            over_limit,
            step=over_limit[0].step,
            signal=SIGKILL,
            certain=False,
        )

    if job.state in ("NODE_FAIL", "BOOT_FAIL"):
        return verdict(
            "node-failure",
            f"job {job_id} ended because a node failed "
            f"({job.state} on {job.node_list or 'its nodes'})",
            [job],
        )

    crash = _crash(records)
    if crash is not None:
        shown = crash.shown_by[0]
        step = next((r.step for r in crash.shown_by if r.step is not None), None)
        where = f"step {job_id}.{step}" if step is not None else f"job {job_id}"
        if crash.signal == SIGSEGV:
            kind: VerdictKind = "segfault"
            what = "crashed with a segmentation fault (SIGSEGV)"
        else:
            kind = "signal"
            what = f"was killed by {SIGNAL_NAMES.get(crash.signal, f'signal {crash.signal}')}"
        return verdict(
            kind,
            f"{where} {what}: {crash.how}",
            [*crash.shown_by, *(r for r in records if r.step is None)],
            step=step,
            signal=crash.signal,
            certain=crash.certain,
            exit_code=shown.exit.code if shown.exit is not None else None,
        )

    if job.state in ("CANCELLED", "PREEMPTED", "DEADLINE", "REVOKED"):
        who = f" by uid {job.cancelled_by}" if job.cancelled_by is not None else ""
        return verdict(
            "cancelled",
            f"job {job_id} was {job.state.lower()}{who}",
            [r for r in records if r.step is None],
        )

    failed = [r for r in records if r.exit is not None and not r.exit.success]
    if job.state == "COMPLETED" and not failed:
        return verdict(
            "success",
            f"job {job_id} completed with exit code 0",
            [r for r in records if r.step is None],
        )
    first = failed[0] if failed else job
    code = first.exit.code if first.exit is not None else None
    return verdict(
        "failed",
        f"{_where(first, job_id)} failed with exit code {code}",
        [first, *(r for r in records if r.step is None)],
        step=first.step,
        exit_code=code,
    )


def _killed_over_memory_limit(
    records: Sequence[AccountingRecord], limit: MemoryLimit | None
) -> list[AccountingRecord]:
    """Steps killed with SIGKILL whose MaxRSS reached the limit (jobacct OverMemoryKill)."""
    if limit is None:
        return []
    return [
        r
        for r in records
        if r.exit is not None
        and r.exit.signal == SIGKILL
        and r.max_rss is not None
        and r.max_rss >= limit.bytes
    ]


def _crash(records: Sequence[AccountingRecord]) -> _Crash | None:
    """A signal death in the records (most specific first), and how sure the reading is.

    Three ways it shows: the signal itself (``0:11``: the step's process was killed), a shell's
    ``128+N`` where nothing folded it (scontrol ``139:0``, DerivedExitCode), or sacct's folded
    ``11:0``, which a plain ``exit 11`` also gives.
    """

    def statuses(record: AccountingRecord) -> list[tuple[str, ExitStatus]]:
        return [
            (label, status)
            for label, status in (
                ("ExitCode", record.exit),
                ("DerivedExitCode", record.derived_exit),
            )
            if status is not None
        ]

    for record in records:
        for label, status in statuses(record):
            if status.signal and status.signal != SLURM_OOM_SIGNAL:
                return _Crash(
                    status.signal,
                    True,
                    f"{record.source} {label} {status.text}, killed by the signal",
                    (record,),
                )
    for record in records:
        for label, status in statuses(record):
            signal = status.signal_reported_by_shell()
            if signal is not None:
                # sacct shows the same status folded on the step that ran the shell.
                folded = [
                    r
                    for r in records
                    if r.exit is not None
                    and r.exit.folded
                    and r.exit.code == signal
                    and r.exit.signal == 0
                ]
                return _Crash(
                    signal,
                    True,
                    f"{record.source} {label} {status.text}, a shell reporting 128+{signal}",
                    (*folded, record),
                )
    unfolded_codes = {
        status.code
        for record in records
        for _, status in statuses(record)
        if not status.folded and status.signal == 0
    }
    for record in records:
        shown = record.exit
        # An unfolded status with the same code (scontrol's 11:0, not 139:0) is a plain exit.
        if (
            shown is not None
            and shown.folded
            and shown.signal == 0
            and shown.code in CRASH_SIGNALS
            and shown.code not in unfolded_codes
        ):
            name = CRASH_SIGNALS[shown.code]
            return _Crash(
                shown.code,
                False,
                f"sacct ExitCode {shown.text} is 128+{shown.code} folded, most "
                f"likely a shell reporting {name}; a plain 'exit {shown.code}' "
                "looks the same",
                (record,),
            )
    return None


# --- the edge: running sacct and scontrol -------------------------------------------------------


def run_slurm_command(
    argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client command; a missing program, a timeout or runaway output becomes a
    typed error (both pipes are drained, each up to OUTPUT_LIMIT bytes)."""
    # SLURM_TIME_FORMAT changes how timestamps print; the parser expects Slurm's default.
    env = {key: value for key, value in os.environ.items() if key != "SLURM_TIME_FORMAT"}
    try:
        done = procs.run(argv, what=argv[0], timeout=timeout, env=env, output_limit=OUTPUT_LIMIT)
    except FileNotFoundError:
        raise SlurmCommandNotFound(
            f"{argv[0]} is not installed here: Slurm accounting cannot be read on this machine",
            command=argv,
            hint="Run this on a Slurm login node, or pass the sacct output as a file.",
        ) from None
    except procs.ChildTimedOut:
        raise SlurmCommandTimedOut(
            f"{argv[0]} did not answer within {timeout:.0f}s (slurmdbd or slurmctld busy or down)",
            command=argv,
        ) from None
    except procs.ChildOutputTooLarge:
        raise SlurmQueryError(
            f"{argv[0]} wrote more than {OUTPUT_LIMIT // 2**20} MiB for one job; it was stopped",
            command=argv,
        ) from None
    except OSError as err:
        raise SlurmQueryError(
            f"{argv[0]} could not be run: {err.strerror or err}", command=argv
        ) from None
    return subprocess.CompletedProcess(
        list(done.argv), done.returncode, done.stdout_text(), done.stderr_text()
    )


def sacct_command(job_id: str, fields: Sequence[str] = SACCT_FIELDS) -> list[str]:
    return ["sacct", "-j", job_id, "--parsable2", "--noheader", "--format=" + ",".join(fields)]


def scontrol_command(job_id: str) -> list[str]:
    # -d adds DerivedExitCode and the memory allocated on each node.
    return ["scontrol", "show", "job", "-d", "-o", job_id]


def read_sacct(job_id: str, *, timeout: float = COMMAND_TIMEOUT) -> tuple[AccountingRecord, ...]:
    argv = sacct_command(job_id)
    done = run_slurm_command(argv, timeout=timeout)
    if done.returncode != 0:
        raise SlurmCommandFailed(
            f"sacct failed (exit {done.returncode}): {_first_line(done.stderr)}",
            command=argv,
            stderr=done.stderr,
        )
    return parse_sacct(done.stdout)


def read_scontrol_job(job_id: str, *, timeout: float = COMMAND_TIMEOUT) -> AccountingRecord | None:
    """The controller's record, or None once it has forgotten the job (after MinJobAge)."""
    argv = scontrol_command(job_id)
    done = run_slurm_command(argv, timeout=timeout)
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return None
        raise SlurmCommandFailed(
            f"scontrol failed (exit {done.returncode}): {_first_line(done.stderr)}",
            command=argv,
            stderr=done.stderr,
        )
    return parse_scontrol_job(done.stdout)


def read_job(reference: str, *, timeout: float = COMMAND_TIMEOUT) -> JobAccounting:
    """sacct's records of ``ID[.STEP]`` (all steps) and the controller's while it knows the job.

    A failing scontrol (controller down) does not hide sacct's answer, and the other way round;
    only when both fail is the error raised.
    """
    job_id, step = split_job_reference(reference)
    sacct_error: SlurmQueryError | None = None
    problems: list[str] = []
    records: tuple[AccountingRecord, ...] = ()
    try:
        records = read_sacct(job_id, timeout=timeout)
    except SlurmQueryError as err:
        sacct_error = err
        problems.append(err.message)
    try:
        controller = read_scontrol_job(job_id, timeout=timeout)
    except SlurmQueryError as err:
        if sacct_error is not None:
            raise sacct_error from None
        controller = None
        problems.append(err.message)
    if not records and controller is None:
        if sacct_error is not None:
            raise sacct_error
        raise SlurmJobNotFound(
            f"Slurm job {job_id} is unknown to sacct and scontrol",
            hint="Check the id: sacct only searches this cluster (add -M CLUSTER on "
            "multi-cluster sites).",
        )
    if step is not None:
        # The step asked about, with the job line (the request and the job's end).
        chosen = tuple(r for r in records if r.step in (None, step))
        if records and len(chosen) == len([r for r in records if r.step is None]):
            steps = ", ".join(r.ident for r in records if r.step is not None) or "none"
            raise SlurmJobNotFound(f"Slurm job {job_id} has no step {step!r}; its steps: {steps}")
        records = chosen
    return JobAccounting(job_id, records, controller, tuple(problems))


# --- where the job ran --------------------------------------------------------------------------

_HOSTLIST_PART = re.compile(r"(?P<prefix>[^\[\],]*)(?:\[(?P<ranges>[^\]]*)\])?")


#: The most node names one node list may stand for (the largest clusters have about 10⁵ nodes);
#: counted before each product is formed, so ``n[0-99999]x[0-9999]`` is refused, not built.
MAX_HOSTLIST_NAMES = 100_000


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm's compressed node list (``gpu-[01-03,07],login1``) as names, in order.

    Ranges keep their zero padding (``01-03`` → ``01 02 03``); several bracket groups in one
    name multiply (``r[1-2]n[1-2]`` → ``r1n1 r1n2 r2n1 r2n2``). More than
    :data:`MAX_HOSTLIST_NAMES` names is an :class:`InputError`.
    """
    names: list[str] = []
    for item in _split_top_level(text.strip()):
        expanded = [""]
        position = 0
        while position < len(item):
            match = _HOSTLIST_PART.match(item, position)
            if match is None or match.end() == position:
                raise InputError(f"Slurm node list {text!r} is not understood")
            choices = [match.group("prefix")]
            if match.group("ranges") is not None:
                budget = (MAX_HOSTLIST_NAMES - len(names)) // len(expanded)
                choices = [
                    match.group("prefix") + value
                    for value in _ranges(match.group("ranges"), text, budget)
                ]
            expanded = [head + choice for head in expanded for choice in choices]
            position = match.end()
        names.extend(name for name in expanded if name)
    return tuple(dict.fromkeys(names))


def _shown(text: str) -> str:
    return text if len(text) <= 80 else text[:80] + "…"


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets."""
    items: list[str] = []
    depth, current = 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [item.strip() for item in items if item.strip()]


def _ranges(text: str, whole: str, budget: int) -> list[str]:
    """The values of one bracket group; more than ``budget`` of them is an InputError."""
    values: list[str] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise InputError(f"Slurm node list {whole!r}: range {part!r} is not understood")
        count = 1 if not high else int(high) - int(low) + 1
        if len(values) + count > budget:
            raise InputError(
                f"Slurm node list {_shown(whole)!r} names more than {MAX_HOSTLIST_NAMES} nodes"
            )
        if not high:
            values.append(low)
            continue
        width = len(low) if low.startswith("0") else 0
        values.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return values


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no message")
