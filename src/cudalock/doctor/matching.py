"""Which kernel lines belong to the crashed run: its time, its hosts and its processes.

A kernel log holds every OOM kill, segfault and Xid of a machine since it booted; only those
that match the run are evidence about it. :class:`RunScope` is what is known of the run — the
time window (``--since``/``--until``, the Slurm job's start and end, or the training log's first
and last timestamps), its hosts (``--host``, the job's nodes, the hosts the log names), the PIDs
and program names the log reports, and Slurm job ids (a job's processes live in a cgroup named
``…/job_ID/…``). :func:`match_event` checks each criterion that both sides know; what cannot be
checked is said, not assumed away. :func:`split_kernel_events` separates the run's events from
the others, and :func:`kernel_coverage` says whether a kernel log can speak for the run at all
(a log kept on another host, or beginning after the run ended, cannot). All pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from cudalock.doctor.kernel import (
    PASTED_SOURCE,
    KernelEvents,
    KernelLog,
    LogSource,
    OomKill,
    Segfault,
    Stamp,
    Xid,
)
from cudalock.doctor.logs import COMM_LENGTH, LogFacts

__all__ = [
    "LOG_SLACK_AFTER",
    "LOG_SLACK_BEFORE",
    "SLURM_SLACK",
    "TORCH_PROCESS_NAMES",
    "Coverage",
    "EventMatch",
    "JobPlace",
    "RunScope",
    "SplitEvents",
    "describe_match",
    "kernel_coverage",
    "match_event",
    "match_kill",
    "match_segfault",
    "match_xid",
    "run_scope",
    "same_program",
    "short_host",
    "split_kernel_events",
]

#: A training log's first line comes a little after the processes start.
LOG_SLACK_BEFORE = timedelta(minutes=1)
#: The kill can come a while after the last line the run wrote (a silent checkpoint save, a
#: step between progress lines); the launcher's report of it comes seconds after.
LOG_SLACK_AFTER = timedelta(minutes=15)
#: Slurm records a job's end after its processes are gone; the kernel logs the kill before.
SLURM_SLACK = timedelta(minutes=1)
#: PyTorch renames its processes: the main thread ``pt_main_thread`` (torch/csrc/Module.cpp)
#: and DataLoader workers ``pt_data_worker`` (torch/utils/data/_utils/worker.py); the kernel
#: names a process after its main thread.
TORCH_PROCESS_NAMES = ("pt_main_thread", "pt_data_worker")

_JOB_CGROUP = re.compile(r"/job_(?P<job>\d+)(?=/|$)")
_FORMAT = "%Y-%m-%d %H:%M:%S"


_PYTHON = re.compile(r"python(?:\d+(?:\.\d+)?)?")


def same_program(comm: str, name: str) -> bool:
    """Whether the kernel's process name ``comm`` is the program the log names: the same name
    (cut to 15 characters), or both a Python interpreter — ``python``, ``python3`` and
    ``python3.11`` are one program reached by different links."""
    comm, name = comm[:COMM_LENGTH], name[:COMM_LENGTH]
    return comm == name or bool(_PYTHON.fullmatch(comm) and _PYTHON.fullmatch(name))


def short_host(name: str) -> str:
    """``gpu-node-03.cluster.local`` → ``gpu-node-03``: logs name hosts either way."""
    return name.strip().split(".")[0].lower()


@dataclass(frozen=True)
class JobPlace:
    """Where and when a Slurm job ran, as its accounting records say."""

    job_id: str
    start: datetime | None
    end: datetime | None
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class RunScope:
    """What is known of the crashed run to match kernel lines against (every part optional)."""

    start: datetime | None = None
    end: datetime | None = None
    #: Where the window comes from, in words.
    window_from: str = ""
    hosts: tuple[str, ...] = ()
    hosts_from: str = ""
    pids: tuple[int, ...] = ()
    #: Process names as the kernel prints them (at most 15 characters).
    commands: tuple[str, ...] = ()
    slurm_job_ids: tuple[str, ...] = ()
    #: This machine: its own kernel log and cgroup counters speak for the run only if it ran here.
    local_host: str | None = None

    @property
    def knows_time(self) -> bool:
        return self.start is not None or self.end is not None

    def describe_window(self) -> str:
        start = self.start.strftime(_FORMAT) if self.start else "…"
        end = self.end.strftime(_FORMAT) if self.end else "…"
        return f"{start} – {end}" + (f" ({self.window_from})" if self.window_from else "")

    def runs_on(self, host: str | None) -> bool | None:
        """Whether ``host`` is one of the run's hosts; None when either is unknown."""
        if host is None or not self.hosts:
            return None
        return short_host(host) in {short_host(h) for h in self.hosts}

    @property
    def ran_here(self) -> bool | None:
        """Whether the run ran on this machine; None when that cannot be told."""
        return self.runs_on(self.local_host)

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start.isoformat(sep=" ") if self.start else None,
            "end": self.end.isoformat(sep=" ") if self.end else None,
            "window_from": self.window_from,
            "hosts": list(self.hosts),
            "hosts_from": self.hosts_from,
            "pids": list(self.pids),
            "commands": list(self.commands),
            "slurm_job_ids": list(self.slurm_job_ids),
            "this_machine": self.local_host,
            "ran_here": self.ran_here,
        }


def run_scope(
    log: LogFacts | None = None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    hosts: Sequence[str] = (),
    hosts_from: str = "--host",
    job: JobPlace | None = None,
    local_host: str | None = None,
) -> RunScope:
    """The run's scope from what was given: flags first, then the Slurm job, then the log."""
    start: datetime | None = None
    end: datetime | None = None
    window_from: list[str] = []
    trace = log.trace if log is not None else None
    if job is not None and (job.start is not None or job.end is not None):
        start = job.start - SLURM_SLACK if job.start else None
        end = job.end + SLURM_SLACK if job.end else None
        window_from.append(f"Slurm job {job.job_id}'s start and end")
    elif trace is not None and trace.first_time is not None and trace.last_time is not None:
        start = trace.first_time - LOG_SLACK_BEFORE
        end = trace.last_time + LOG_SLACK_AFTER
        window_from.append(
            "the log's timestamps "
            f"{trace.first_time.strftime(_FORMAT)} – {trace.last_time.strftime(_FORMAT)}, "
            f"with {LOG_SLACK_AFTER.seconds // 60} min after the last"
            + (
                "; its stamps name no year, so this machine's year is assumed"
                if trace.year_assumed
                else ""
            )
        )
    if since is not None or until is not None:
        start = since if since is not None else start
        end = until if until is not None else end
        flags = " and ".join(
            flag for flag, value in (("--since", since), ("--until", until)) if value is not None
        )
        if since is None or until is None:
            flags += "; the other end from " + window_from[0] if window_from else ""
        window_from = [flags]
    run_hosts: tuple[str, ...] = ()
    given_from = hosts_from
    hosts_from = ""
    if hosts:
        run_hosts, hosts_from = tuple(hosts), given_from
    elif job is not None and job.hosts:
        run_hosts, hosts_from = job.hosts, f"Slurm job {job.job_id}'s nodes"
    elif trace is not None and trace.hosts:
        run_hosts, hosts_from = trace.hosts, "the hosts the log names"
    pids = log.reported_pids if log is not None else ()
    commands = tuple(trace.commands) if trace is not None else ()
    if pids or commands:
        commands = tuple(dict.fromkeys((*commands, *TORCH_PROCESS_NAMES)))
    jobs = tuple(
        dict.fromkeys(
            [
                *((job.job_id,) if job is not None else ()),
                *(trace.slurm_job_ids if trace is not None else ()),
            ]
        )
    )
    return RunScope(
        start=start,
        end=end,
        window_from="; ".join(window_from),
        hosts=run_hosts,
        hosts_from=hosts_from,
        pids=pids,
        commands=commands,
        slurm_job_ids=jobs,
        local_host=local_host,
    )


# --- one event ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventMatch:
    """How a kernel event compares with the run: what matched, what did not, what was unknown.

    It belongs to the run when nothing contradicts it and something ties it to the run: its
    time, a PID the log reports, or the Slurm job's cgroup. A shared host or program name alone
    does not (every process of the machine shares the one, every Python rank the other).
    """

    matched: tuple[str, ...] = ()
    why_not: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()
    tied: bool = False

    @property
    def belongs(self) -> bool:
        return self.tied and not self.why_not

    @property
    def contradicted(self) -> bool:
        return bool(self.why_not)


@dataclass(frozen=True)
class _Check:
    matched: str | None = None
    why_not: str | None = None
    unchecked: str | None = None
    #: Whether a match ties the event to the run by itself.
    ties: bool = False


def _when(stamp: Stamp) -> str:
    return stamp.at.strftime(_FORMAT) if stamp.at else "?"


def _check_time(stamp: Stamp, scope: RunScope) -> _Check:
    if stamp.at is None:
        if stamp.uptime is not None:
            return _Check(
                unchecked=f"time: logged {stamp.uptime:.0f} s after a boot whose time is unknown"
            )
        return _Check(unchecked="time: the line carries no time")
    if not scope.knows_time:
        return _Check(unchecked="time: the run's time is unknown (pass --since/--until)")
    if scope.start is not None and stamp.at < scope.start:
        return _Check(
            why_not=f"logged {_when(stamp)}, before the run began ({scope.start:{_FORMAT}})"
        )
    if scope.end is not None and stamp.at > scope.end:
        return _Check(why_not=f"logged {_when(stamp)}, after the run ended ({scope.end:{_FORMAT}})")
    return _Check(matched=f"time {_when(stamp)}", ties=True)


def _check_host(stamp: Stamp, scope: RunScope) -> _Check:
    if stamp.host is None:
        return _Check(unchecked="host: the line names no host")
    on_run_host = scope.runs_on(stamp.host)
    if on_run_host is None:
        return _Check(unchecked="host: the run's host is unknown (pass --host)")
    if not on_run_host:
        return _Check(why_not=f"logged on {stamp.host}; the run ran on {', '.join(scope.hosts)}")
    return _Check(matched=f"host {stamp.host}")


def _check_process(
    pid: int | None, comm: str | None, memcgs: Sequence[str | None], scope: RunScope
) -> _Check:
    # A Slurm job's processes live in its cgroup: the cgroup names the job for certain.
    jobs_named = {
        match.group("job") for memcg in memcgs if memcg for match in _JOB_CGROUP.finditer(memcg)
    }
    if scope.slurm_job_ids and jobs_named:
        named_jobs = ", ".join(sorted(jobs_named))
        if jobs_named & set(scope.slurm_job_ids):
            return _Check(matched=f"the cgroup of Slurm job {named_jobs}", ties=True)
        return _Check(
            why_not=f"in the cgroup of Slurm job {named_jobs}, not of job "
            f"{', '.join(scope.slurm_job_ids)}"
        )
    if not scope.pids and not scope.commands:
        return _Check(unchecked="process: the log names no PID or program of the run")
    if pid is not None and pid in scope.pids:
        return _Check(matched=f"PID {pid}, which the log reports", ties=True)
    if comm is not None and any(same_program(comm, name) for name in scope.commands):
        return _Check(matched=f"the process name {comm}")
    named = ", ".join(
        part
        for part in (
            "PIDs " + ", ".join(map(str, scope.pids)) if scope.pids else "",
            "names " + ", ".join(scope.commands) if scope.commands else "",
        )
        if part
    )
    who = f"PID {pid} ({comm})" if pid is not None else str(comm)
    return _Check(why_not=f"{who} is not a process of the run (the log names {named})")


def match_event(
    stamp: Stamp,
    scope: RunScope,
    *,
    pid: int | None = None,
    comm: str | None = None,
    memcgs: Sequence[str | None] = (),
    check_process: bool = True,
) -> EventMatch:
    """Check one event against every part of the scope that both sides know."""
    checks = [_check_time(stamp, scope), _check_host(stamp, scope)]
    if check_process:
        checks.append(_check_process(pid, comm, memcgs, scope))
    return EventMatch(
        matched=tuple(c.matched for c in checks if c.matched),
        why_not=tuple(c.why_not for c in checks if c.why_not),
        unchecked=tuple(c.unchecked for c in checks if c.unchecked),
        tied=any(c.ties and c.matched for c in checks),
    )


def match_kill(kill: OomKill, scope: RunScope) -> EventMatch:
    found = match_event(
        kill.stamp,
        scope,
        pid=kill.pid,
        comm=kill.comm,
        memcgs=(kill.task_memcg, kill.oom_memcg),
    )
    if found.tied or found.why_not or not kill.source.startswith(PASTED_SOURCE):
        return found
    # Kernel lines pasted into the run's log were chosen by the person who saw the crash: a
    # kill of the run's program (or of a Python / PyTorch process) there is the run's, unless
    # its time, host or PID says otherwise.
    comm = kill.comm
    if comm is not None and any(
        same_program(comm, name) for name in (*scope.commands, "python", *TORCH_PROCESS_NAMES)
    ):
        return replace(
            found,
            matched=(*found.matched, f"the process name {comm} in the kernel lines pasted"),
            tied=True,
        )
    return found


def match_segfault(segfault: Segfault, scope: RunScope) -> EventMatch:
    return match_event(segfault.stamp, scope, pid=segfault.pid, comm=segfault.comm)


def match_xid(xid: Xid, scope: RunScope) -> EventMatch:
    # A GPU fault hits every process on that GPU: its time and host decide, not its PID.
    return match_event(xid.stamp, scope, check_process=False)


# --- a whole kernel log -------------------------------------------------------------------------


@dataclass(frozen=True)
class SplitEvents:
    """The kernel events of the run; the others, with why each is not the run's; and those
    nothing ties to the run or rules out (the run's time unknown, no PID of it in the log)."""

    run: KernelEvents
    other_kills: tuple[tuple[OomKill, EventMatch], ...] = ()
    other_crashes: tuple[tuple[Segfault | Xid, EventMatch], ...] = ()
    untied_kills: tuple[tuple[OomKill, EventMatch], ...] = ()
    untied_crashes: tuple[tuple[Segfault | Xid, EventMatch], ...] = ()
    matches: dict[OomKill | Segfault | Xid, EventMatch] = field(default_factory=dict)

    def match_of(self, event: OomKill | Segfault | Xid) -> EventMatch | None:
        return self.matches.get(event)


def split_kernel_events(events: KernelEvents, scope: RunScope) -> SplitEvents:
    kills: list[OomKill] = []
    segfaults: list[Segfault] = []
    xids: list[Xid] = []
    other_kills: list[tuple[OomKill, EventMatch]] = []
    other_crashes: list[tuple[Segfault | Xid, EventMatch]] = []
    untied_kills: list[tuple[OomKill, EventMatch]] = []
    untied_crashes: list[tuple[Segfault | Xid, EventMatch]] = []
    matches: dict[OomKill | Segfault | Xid, EventMatch] = {}
    for kill in events.kills:
        found = matches[kill] = match_kill(kill, scope)
        if found.belongs:
            kills.append(kill)
        else:
            (other_kills if found.contradicted else untied_kills).append((kill, found))
    crashes: list[tuple[Segfault | Xid, EventMatch]] = [
        (segfault, match_segfault(segfault, scope)) for segfault in events.segfaults
    ]
    crashes.extend((xid, match_xid(xid, scope)) for xid in events.xids)
    for event, found in crashes:
        matches[event] = found
        if found.belongs:
            if isinstance(event, Segfault):
                segfaults.append(event)
            else:
                xids.append(event)
        else:
            (other_crashes if found.contradicted else untied_crashes).append((event, found))
    return SplitEvents(
        KernelEvents(tuple(kills), tuple(segfaults), tuple(xids), events.invocations),
        tuple(other_kills),
        tuple(other_crashes),
        tuple(untied_kills),
        tuple(untied_crashes),
        matches,
    )


@dataclass(frozen=True)
class Coverage:
    """Which readable kernel-log sources can speak for the run, and why the others cannot."""

    covering: tuple[LogSource, ...]
    not_covering: tuple[str, ...]


def kernel_coverage(kernel: KernelLog, scope: RunScope) -> Coverage:
    """A source covers the run when it was kept on one of the run's hosts (or that is unknown)
    and reaches back to before the run ended (or that is unknown)."""
    covering: list[LogSource] = []
    reasons: list[str] = []
    for source in kernel.sources:
        if not source.readable:
            continue
        if scope.runs_on(source.host) is False:
            reasons.append(
                f"{source.name}: the kernel log of {source.host}, and the run ran on "
                f"{', '.join(scope.hosts)} ({scope.hosts_from})"
            )
            continue
        if source.first_at is not None and scope.end is not None and source.first_at > scope.end:
            reasons.append(
                f"{source.name}: begins at {source.first_at.strftime(_FORMAT)}, after the run "
                f"ended ({scope.describe_window()})"
            )
            continue
        covering.append(source)
    return Coverage(tuple(covering), tuple(reasons))


def describe_match(found: EventMatch | None) -> str:
    """A sentence on how an event was matched to the run, for a finding's message."""
    if found is None:
        return ""
    parts: list[str] = []
    if found.matched:
        parts.append("Matched to the run by " + ", ".join(found.matched) + ".")
    if found.unchecked:
        parts.append("Not checked: " + "; ".join(found.unchecked) + ".")
    return " ".join(parts)
