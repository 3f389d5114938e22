"""Evidence of OOM kills and crashes on this machine: kernel log, cgroup counters, /dev/shm.

Parsing is pure (:func:`parse_kernel_log`); reading takes its roots and commands as parameters so
tests feed prepared trees and recorded logs. Formats (``mm/oom_kill.c``):

- ``Out of memory: Killed process 1234 (python) total-vm:…kB, anon-rss:…kB, …`` (host OOM)
- ``Memory cgroup out of memory: Killed process …`` (a container or cgroup limit)
- ``oom-kill:constraint=CONSTRAINT_MEMCG,…,task_memcg=/…,task=python,pid=1234,uid=0``
- ``python[1234]: segfault at 0 ip … sp … error 4 in libcuda.so.535.104.05[…]``

Every line is dated and placed where it says so (:class:`Stamp`): ``dmesg -T``'s
``[Sun Nov 29 14:02:11 2026]``, ISO stamps (``dmesg --time-format=iso``, ``journalctl -o
short-iso``, rsyslog), syslog's ``Nov 29 14:31:05 HOST kernel:`` (no year: the one that puts the
line closest before the reference time) and plain ``dmesg``'s ``[12345.678]``, seconds since boot,
which only the boot time of the machine that wrote them turns into a time. Times are naive local
times, as training logs and Slurm print theirs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from cudalock import procs
from cudalock.errors import InputError
from cudalock.fsutil import read_tail
from cudalock.units import format_gib

__all__ = [
    "DEFAULT_LOG_COMMANDS",
    "DEFAULT_LOG_FILES",
    "HOW_TO_READ",
    "PASTED_SOURCE",
    "READ_LIMIT",
    "CommandResult",
    "CommandRunner",
    "KernelEvents",
    "KernelLog",
    "LineContext",
    "LogSource",
    "OomKill",
    "Scope",
    "Segfault",
    "Stamp",
    "Xid",
    "described_source",
    "is_kernel_line",
    "kernel_log_of",
    "line_stamp",
    "merge_kernel_logs",
    "parse_kernel_log",
    "read_kernel_log",
    "run_command",
    "year_for",
]

READ_LIMIT = 64 * 2**20  # kernel logs can be large; the newest part is what matters

DEFAULT_LOG_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("dmesg", "-T"),
    # short-iso: the journal's default format has no year.
    ("journalctl", "-k", "--no-pager", "-q", "-o", "short-iso"),
)
DEFAULT_LOG_FILES = ("/var/log/kern.log", "/var/log/messages")
#: The source name of kernel lines read from the training log: ``--log FILE``.
PASTED_SOURCE = "--log"
HOW_TO_READ = (
    "sudo dmesg -T | grep -i -E 'oom|killed process'",
    "sudo journalctl -k | grep -i -E 'oom|killed process'",
)


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str = ""


CommandRunner = Callable[[Sequence[str]], CommandResult]


def run_command(argv: Sequence[str], timeout: float = 20.0) -> CommandResult:
    """Run a log command, keeping the newest :data:`READ_LIMIT` of its output while it runs; a
    missing program or a timeout becomes a failed result, not an error: the other sources may
    still answer."""
    try:
        done = procs.run(
            argv,
            what=argv[0],
            timeout=timeout,
            output_limit=READ_LIMIT,
            keep_tail=True,
        )
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found")
    except procs.ChildTimedOut:
        return CommandResult(124, "", f"{argv[0]}: timed out after {timeout:.0f}s")
    except procs.ChildOutputTooLarge:  # stderr only: stdout keeps its tail
        return CommandResult(125, "", f"{argv[0]}: wrote too much on stderr")
    except OSError as err:
        return CommandResult(126, "", f"{argv[0]}: {err.strerror or err}")
    stdout = done.stdout
    if done.stdout_cut:  # the first line was cut in the middle
        stdout = stdout[stdout.find(b"\n") + 1 :]
    return CommandResult(done.returncode, stdout.decode("utf-8", "replace"), done.stderr_text())


# --- when and where a line was logged -------------------------------------------------------------


@dataclass(frozen=True)
class Stamp:
    """When and on which host a kernel line was logged, as far as the line and its source say.

    ``at`` is a naive local time; ``uptime`` is kept when the line only counts seconds since a
    boot whose time is unknown (so the line cannot be dated).
    """

    at: datetime | None = None
    uptime: float | None = None
    host: str | None = None

    def describe(self) -> str:
        when = (
            self.at.strftime("%Y-%m-%d %H:%M:%S")
            if self.at is not None
            else f"{self.uptime:.0f} s after an unknown boot"
            if self.uptime is not None
            else "undated"
        )
        return f"{when} on {self.host}" if self.host else when

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(sep=" ") if self.at else None,
            "uptime": self.uptime,
            "host": self.host,
        }


@dataclass(frozen=True)
class LineContext:
    """What the source of some kernel lines says about lines that do not say it themselves.

    ``host``: where lines without a hostname were logged (this machine, for its own ``dmesg``);
    ``boot_time``: the boot (seconds since the epoch) that ``[12345.678]`` stamps count from;
    ``reference``: year-less stamps get the year that puts them closest before it.
    """

    host: str | None = None
    boot_time: float | None = None
    reference: datetime | None = None


_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        start=1,
    )
}
_UPTIME_STAMP = re.compile(r"^\[\s*(?P<uptime>\d{1,12}\.\d+)\]")
_HUMAN_STAMP = re.compile(
    r"^\[(?:[A-Z][a-z]{2} )?(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) "
    r"(?P<time>\d\d:\d\d:\d\d) (?P<year>\d{4})\]"
)
_ISO_STAMP = re.compile(
    r"^(?P<date>\d{4}-\d\d-\d\d)[T ](?P<time>\d\d:\d\d:\d\d)(?:[.,]\d+)?"
    r"(?P<tz>Z|[+-]\d\d:?\d\d)?(?:\s+(?P<host>[^\s\[\]:]+)\s+kernel:)?"
)
_SYSLOG_STAMP = re.compile(
    r"^(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<time>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"(?P<host>\S+) kernel:"
)


def year_for(month: int, day: int, clock: str, reference: datetime | None) -> datetime | None:
    """A year-less date and time in the year that puts it closest before ``reference``."""
    anchor = reference or datetime.now()
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    for year in (anchor.year, anchor.year - 1):
        try:
            candidate = datetime(year, month, day, hours, minutes, seconds)
        except ValueError:  # 29 February in a year without one
            continue
        if candidate <= anchor + timedelta(days=1):
            return candidate
    return None


def _local(date: str, clock: str, tz: str | None) -> datetime | None:
    try:
        when = datetime.fromisoformat(f"{date}T{clock}{'+00:00' if tz == 'Z' else (tz or '')}")
    except ValueError:
        return None
    # An explicit offset is turned into this machine's local time, as naive stamps are read.
    return when.astimezone().replace(tzinfo=None) if when.tzinfo is not None else when


def line_stamp(line: str, context: LineContext = LineContext()) -> Stamp:
    """When and where ``line`` was logged, from its own stamp and its source's context."""
    text = line.strip()
    if (match := _HUMAN_STAMP.match(text)) is not None:
        month = _MONTHS.get(match.group("mon"))
        at = None
        if month is not None:
            try:
                at = datetime.strptime(
                    f"{match.group('year')}-{month}-{match.group('day')} {match.group('time')}",
                    "%Y-%m-%d %H:%M:%S",
                )
            except ValueError:
                at = None
        return Stamp(at, None, context.host)
    if (match := _UPTIME_STAMP.match(text)) is not None:
        uptime = float(match.group("uptime"))
        if context.boot_time is not None:
            return Stamp(datetime.fromtimestamp(context.boot_time + uptime), None, context.host)
        return Stamp(None, uptime, context.host)
    if (match := _ISO_STAMP.match(text)) is not None:
        at = _local(match.group("date"), match.group("time"), match.group("tz"))
        return Stamp(at, None, match.group("host") or context.host)
    if (match := _SYSLOG_STAMP.match(text)) is not None:
        month = _MONTHS.get(match.group("mon"))
        at = (
            year_for(month, int(match.group("day")), match.group("time"), context.reference)
            if month is not None
            else None
        )
        return Stamp(at, None, match.group("host"))
    return Stamp(None, None, context.host)


def full_date(line: str) -> datetime | None:
    """The date and time of a kernel line whose stamp names its year (``dmesg -T``, ISO), else
    None: a syslog stamp names none, and an uptime counts from an unknown boot."""
    text = line.strip()
    if _HUMAN_STAMP.match(text) is None and _ISO_STAMP.match(text) is None:
        return None
    return line_stamp(text).at


def is_kernel_line(line: str) -> bool:
    """Whether ``line`` looks like a line of a kernel log (dmesg, journalctl -k, kern.log)."""
    text = line.strip()
    return bool(
        _UPTIME_STAMP.match(text)
        or _HUMAN_STAMP.match(text)
        or _SYSLOG_STAMP.match(text)
        or ((iso := _ISO_STAMP.match(text)) is not None and iso.group("host"))
        or _KILLED.search(text)
        or _SUMMARY.search(text)
        or _INVOKED.search(text)
        or _SEGFAULT.search(text)
        or _XID.search(text)
    )


# --- parsing ------------------------------------------------------------------------------------

Scope = Literal["host", "cgroup"]


@dataclass(frozen=True)
class OomKill:
    """One process the kernel's OOM killer chose, with the lines that say so."""

    scope: Scope
    pid: int | None
    comm: str | None
    anon_rss_kb: int | None = None
    total_vm_kb: int | None = None
    constraint: str | None = None
    task_memcg: str | None = None
    oom_memcg: str | None = None
    lines: tuple[str, ...] = ()
    stamp: Stamp = field(default_factory=Stamp)
    #: The log it was read from (``dmesg -T``, a file, the training log).
    source: str = ""

    def describe(self) -> str:
        who = f"PID {self.pid} ({self.comm})" if self.pid is not None else str(self.comm)
        rss = (
            f", {format_gib(self.anon_rss_kb * 1024)} resident"
            if self.anon_rss_kb is not None
            else ""
        )
        where = (
            f" in cgroup {self.oom_memcg or self.task_memcg}"
            if self.scope == "cgroup" and (self.oom_memcg or self.task_memcg)
            else ""
        )
        return f"{who}{rss}{where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "pid": self.pid,
            "comm": self.comm,
            "anon_rss_kb": self.anon_rss_kb,
            "total_vm_kb": self.total_vm_kb,
            "constraint": self.constraint,
            "task_memcg": self.task_memcg,
            "oom_memcg": self.oom_memcg,
            "lines": list(self.lines),
            "logged": self.stamp.to_json(),
            "source": self.source,
        }


@dataclass(frozen=True)
class Segfault:
    comm: str
    pid: int
    library: str | None
    line: str
    stamp: Stamp = field(default_factory=Stamp)
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "comm": self.comm,
            "pid": self.pid,
            "library": self.library,
            "line": self.line,
            "logged": self.stamp.to_json(),
            "source": self.source,
        }


@dataclass(frozen=True)
class Xid:
    """An NVIDIA driver Xid line (a GPU fault: fallen off the bus, ECC, MMU fault)."""

    line: str
    stamp: Stamp = field(default_factory=Stamp)
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "logged": self.stamp.to_json(), "source": self.source}


@dataclass(frozen=True)
class KernelEvents:
    kills: tuple[OomKill, ...] = ()
    segfaults: tuple[Segfault, ...] = ()
    xids: tuple[Xid, ...] = ()
    #: ``… invoked oom-killer`` headers: who was allocating when memory ran out.
    invocations: tuple[str, ...] = ()


_KILLED = re.compile(
    r"(?:(?P<prefix>Out of memory|Memory cgroup out of memory)(?: \(oom_kill_allocating_task\))?"
    r": )?Killed process (?P<pid>\d{1,18}) \((?P<comm>[^)]*)\)"
    r"(?:,? total-vm:(?P<vm>\d{1,18})kB, anon-rss:(?P<anon>\d{1,18})kB)?"
)
_OLD_KILL = re.compile(
    r"(?P<prefix>Out of memory|Memory cgroup out of memory): Kill process (?P<pid>\d{1,18}) "
    r"\((?P<comm>[^)]*)\)"
)
_SUMMARY = re.compile(r"oom-kill:(?P<fields>constraint=\S+)")
# Each starts only where its first token starts (the look-behind): otherwise every position of a
# long token starts a scan to the token's end.
_INVOKED = re.compile(r"(?<!\S)\S+ invoked oom-killer:")
_SEGFAULT = re.compile(
    r"(?<![^\s\[\]])(?P<comm>[^\s\[\]]+)\[(?P<pid>\d{1,18})\]: "
    r"segfault at \S+ ip \S+ sp \S+ error \S+"
    r"(?: in (?P<lib>[^\s\[]+)\[)?"
)
_XID = re.compile(r"NVRM: Xid \(")
#: oom-kill:, invoked oom-killer; Killed process, Kill process; segfault at; NVRM: Xid.
_WORDS = ("oom", "Kill", "segfault", "Xid")


def _summary_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


@dataclass
class _PendingKill:
    prefix: str
    pid: int
    comm: str
    anon_kb: int | None
    vm_kb: int | None
    line: str
    stamp: Stamp


def parse_kernel_log(
    text: str, context: LineContext = LineContext(), source: str = ""
) -> KernelEvents:
    """Every OOM kill, segfault and Xid in a kernel log (dmesg, journalctl -k, kern.log), each
    dated and placed by :func:`line_stamp` with ``context``; lines of other kinds are skipped, so
    a training log with kernel lines pasted into it parses too."""
    # An oom-kill: summary belongs to the next "Killed process" line of its PID.
    summaries: dict[int, tuple[dict[str, str], str]] = {}
    pending: list[tuple[_PendingKill, dict[str, str], str]] = []
    old_prefix: dict[int, str] = {}
    segfaults: list[Segfault] = []
    xids: list[Xid] = []
    invocations: list[str] = []
    for raw in text.splitlines():
        # Every pattern below needs one of these words: most lines of a large log are passed
        # over with four substring tests instead of six regular expressions.
        if not any(word in raw for word in _WORDS):
            continue
        line = raw.strip()
        if (summary := _SUMMARY.search(line)) is not None:
            fields = _summary_fields(summary.group("fields"))
            summary_pid = fields.get("pid", "")
            if summary_pid.isdigit() and len(summary_pid) <= 18:
                summaries[int(summary_pid)] = (fields, line)
            continue
        if (old := _OLD_KILL.search(line)) is not None:
            old_prefix[int(old.group("pid"))] = old.group("prefix")
            continue
        if (killed := _KILLED.search(line)) is not None:
            pid_value = int(killed.group("pid"))
            fields, summary_line = summaries.pop(pid_value, ({}, ""))
            kill = _PendingKill(
                killed.group("prefix") or old_prefix.get(pid_value, ""),
                pid_value,
                killed.group("comm"),
                int(killed.group("anon")) if killed.group("anon") else None,
                int(killed.group("vm")) if killed.group("vm") else None,
                line,
                line_stamp(line, context),
            )
            pending.append((kill, fields, summary_line))
            continue
        if _INVOKED.search(line):
            invocations.append(line)
            continue
        if (segv := _SEGFAULT.search(line)) is not None:
            segfaults.append(
                Segfault(
                    segv.group("comm"),
                    int(segv.group("pid")),
                    segv.group("lib"),
                    line,
                    line_stamp(line, context),
                    source,
                )
            )
            continue
        if _XID.search(line):
            xids.append(Xid(line, line_stamp(line, context), source))
    kills: list[OomKill] = []
    for kill, found, found_line in pending:
        # A summary logged after its kill line (never seen, but cheap to allow).
        fields, summary_line = (found, found_line) if found else summaries.get(kill.pid, ({}, ""))
        constraint = fields.get("constraint")
        cgroup = kill.prefix == "Memory cgroup out of memory" or constraint == "CONSTRAINT_MEMCG"
        kills.append(
            OomKill(
                scope="cgroup" if cgroup else "host",
                pid=kill.pid,
                comm=kill.comm,
                anon_rss_kb=kill.anon_kb,
                total_vm_kb=kill.vm_kb,
                constraint=constraint,
                task_memcg=fields.get("task_memcg"),
                oom_memcg=fields.get("oom_memcg"),
                lines=tuple(x for x in (summary_line, kill.line) if x),
                stamp=kill.stamp,
                source=source,
            )
        )
    return KernelEvents(tuple(kills), tuple(segfaults), tuple(xids), tuple(invocations))


# --- reading the kernel log -----------------------------------------------------------------------


@dataclass(frozen=True)
class LogSource:
    name: str
    readable: bool
    reason: str = ""
    #: The host whose kernel wrote it, when the source is this machine's.
    host: str | None = None
    #: Its oldest dated line: the log says nothing about what happened before.
    first_at: datetime | None = None
    #: How its lines were dated, when that needs saying (seconds since boot).
    clock: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "readable": self.readable,
            "reason": self.reason,
            "host": self.host,
            "first_at": self.first_at.isoformat(sep=" ") if self.first_at else None,
            "clock": self.clock,
        }


@dataclass(frozen=True)
class KernelLog:
    sources: tuple[LogSource, ...]
    events: KernelEvents

    @property
    def readable(self) -> bool:
        return any(source.readable for source in self.sources)

    def to_json(self) -> dict[str, Any]:
        return {
            "sources": [source.to_json() for source in self.sources],
            "oom_kills": [kill.to_json() for kill in self.events.kills],
            "segfaults": [seg.to_json() for seg in self.events.segfaults],
            "xids": [xid.to_json() for xid in self.events.xids],
        }


_DENIED = (
    "operation not permitted",
    "permission denied",
    "insufficient permissions",
    "no journal files were opened",
)


def _command_source(argv: Sequence[str], result: CommandResult) -> tuple[LogSource, str]:
    name = " ".join(argv)
    message = (result.stderr or "").strip().splitlines()
    first = message[0] if message else ""
    if result.returncode != 0:
        return LogSource(name, False, first or f"exit status {result.returncode}"), ""
    denied = any(word in (result.stderr or "").lower() for word in _DENIED)
    if denied and not result.stdout.strip():
        return LogSource(name, False, first), ""
    if not result.stdout.strip() or result.stdout.strip() == "-- No entries --":
        return LogSource(name, False, "no output" + (f" ({first})" if first else "")), ""
    return LogSource(name, True), result.stdout


def _file_source(path: Path) -> tuple[LogSource, str]:
    try:
        data, _cut = read_tail(path, limit=READ_LIMIT, what="kernel log")
    except InputError as err:  # "kernel log '/p' does not exist", "cannot read ...: reason"
        message = err.message
        reason = message.split("': ", 1)[1] if "': " in message else message.rsplit("' ", 1)[-1]
        return LogSource(str(path), False, reason.split(";")[0].lower()), ""
    return LogSource(str(path), True), data.decode("utf-8", errors="replace")


def _first_dated(text: str, context: LineContext) -> datetime | None:
    """The time of the first line that can be dated."""
    for line in text.splitlines():
        if line.strip() and (at := line_stamp(line, context).at) is not None:
            return at
    return None


def described_source(
    source: LogSource, text: str, context: LineContext, *, boot_named: str = "this machine's"
) -> LogSource:
    """``source`` with where its lines come from, its oldest dated line and how it was dated."""
    if not source.readable:
        return replace(source, host=context.host)
    clock = ""
    if any(_UPTIME_STAMP.match(line.lstrip()) for line in text.splitlines()):
        if context.boot_time is not None:
            booted = datetime.fromtimestamp(context.boot_time).strftime("%Y-%m-%d %H:%M:%S")
            clock = f"seconds since boot, dated with {boot_named} boot time ({booted})"
        else:
            clock = (
                "seconds since boot of a machine whose boot time is unknown: those lines "
                "cannot be dated (paste 'dmesg -T' output instead)"
            )
    return replace(source, host=context.host, first_at=_first_dated(text, context), clock=clock)


def _same_kill(a: OomKill, b: OomKill) -> bool:
    """The same kill, read from two sources (dmesg and kern.log) or twice from one."""
    if (a.pid, a.comm, a.scope) != (b.pid, b.comm, b.scope):
        return False
    if a.stamp.at is None or b.stamp.at is None:
        return True
    # A PID is reused over weeks; the same kill is logged within seconds in every source.
    return abs((a.stamp.at - b.stamp.at).total_seconds()) <= 120


def _dedupe(kills: Sequence[OomKill]) -> tuple[OomKill, ...]:
    kept: list[OomKill] = []
    for kill in kills:
        for index, other in enumerate(kept):
            if _same_kill(kill, other):
                # Keep the richest copy: the one carrying the oom-kill: summary, and a date.
                score = (len(kill.lines), kill.stamp.at is not None)
                if score > (len(other.lines), other.stamp.at is not None):
                    kept[index] = kill
                break
        else:
            kept.append(kill)
    return tuple(kept)


def merge_kernel_logs(*logs: KernelLog) -> KernelLog:
    """One log of every source; an event seen in several counts once."""
    segfaults: dict[tuple[int, str | None, datetime | None], Segfault] = {}
    xids: dict[tuple[str, datetime | None], Xid] = {}
    for log in logs:
        for seg in log.events.segfaults:
            segfaults.setdefault((seg.pid, seg.library, seg.stamp.at), seg)
        for xid in log.events.xids:
            xids.setdefault((_XID_BODY.sub("", xid.line), xid.stamp.at), xid)
    return KernelLog(
        tuple(source for log in logs for source in log.sources),
        KernelEvents(
            _dedupe([kill for log in logs for kill in log.events.kills]),
            tuple(segfaults.values()),
            tuple(xids.values()),
            tuple(dict.fromkeys(line for log in logs for line in log.events.invocations)),
        ),
    )


# The same Xid in dmesg and kern.log differs only in the stamp before "NVRM:".
_XID_BODY = re.compile(r"^.*?(?=NVRM: Xid)")


def kernel_log_of(
    text: str, source: LogSource, context: LineContext, *, boot_named: str = "this machine's"
) -> KernelLog:
    """The events of one source's text, with the source described."""
    events = parse_kernel_log(text, context, source.name) if text else KernelEvents()
    return KernelLog(
        (described_source(source, text, context, boot_named=boot_named),),
        events,
    )


def read_kernel_log(
    runner: CommandRunner = run_command,
    commands: Sequence[Sequence[str]] = DEFAULT_LOG_COMMANDS,
    files: Sequence[str | Path] = DEFAULT_LOG_FILES,
    root: Path = Path("/"),
    *,
    hostname: str | None = None,
    boot_time: float | None = None,
    now: datetime | None = None,
) -> KernelLog:
    """Read every source that answers; one event seen in several is counted once.

    ``hostname`` is this machine's (its kernel wrote every line read here); ``boot_time``
    dates plain ``dmesg``'s seconds-since-boot stamps.
    """
    logs: list[KernelLog] = []
    live = LineContext(host=hostname, boot_time=boot_time, reference=now)
    for argv in commands:
        result = runner(argv)
        if (
            result.returncode != 0
            and "-T" in argv
            and any(
                word in result.stderr.lower()
                for word in ("invalid option", "unrecognized option", "unknown option")
            )
        ):
            argv = [arg for arg in argv if arg != "-T"]  # busybox dmesg has no -T
            result = runner(argv)
        source, text = _command_source(argv, result)
        logs.append(kernel_log_of(text, source, live))
    # Files outlive reboots: their [uptime] stamps may count from an earlier boot.
    from_files = LineContext(host=hostname, boot_time=None, reference=now)
    for name in files:
        path = root / str(name).lstrip("/")
        source, text = _file_source(path)
        logs.append(
            kernel_log_of(text, LogSource(str(name), source.readable, source.reason), from_files)
        )
    return merge_kernel_logs(*logs)


# --- cgroup memory ------------------------------------------------------------------------------


# --- /dev/shm and the bundle doctor reads ---------------------------------------------------------
