"""Evidence of OOM kills and crashes on this machine: kernel log, cgroup counters, /dev/shm.

Parsing is pure (:func:`parse_kernel_log`); reading takes its roots and commands as parameters so
tests feed prepared trees and recorded logs. Formats (``mm/oom_kill.c``):

- ``Out of memory: Killed process 1234 (python) total-vm:…kB, anon-rss:…kB, …`` (host OOM)
- ``Memory cgroup out of memory: Killed process …`` (a container or cgroup limit)
- ``oom-kill:constraint=CONSTRAINT_MEMCG,…,task_memcg=/…,task=python,pid=1234,uid=0``
- ``python[1234]: segfault at 0 ip … sp … error 4 in libcuda.so.535.104.05[…]``
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cudalock import procs
from cudalock.errors import InputError
from cudalock.fsutil import read_tail

READ_LIMIT = 64 * 2**20  # kernel logs can be large; the newest part is what matters

DEFAULT_LOG_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("dmesg", "-T"),
    ("journalctl", "-k", "--no-pager", "-q"),
)
DEFAULT_LOG_FILES = ("/var/log/kern.log", "/var/log/messages")
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
    missing program or a timeout becomes a failed result, not an error."""
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

    def describe(self) -> str:
        who = f"PID {self.pid} ({self.comm})" if self.pid is not None else str(self.comm)
        rss = (
            f", {self.anon_rss_kb / 2**20:.1f} GiB resident" if self.anon_rss_kb is not None else ""
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
        }


@dataclass(frozen=True)
class Segfault:
    comm: str
    pid: int
    library: str | None
    line: str

    def to_json(self) -> dict[str, Any]:
        return {"comm": self.comm, "pid": self.pid, "library": self.library, "line": self.line}


@dataclass(frozen=True)
class KernelEvents:
    kills: tuple[OomKill, ...] = ()
    segfaults: tuple[Segfault, ...] = ()
    #: NVIDIA driver Xid lines (GPU faults: fallen off the bus, ECC, MMU faults).
    xids: tuple[str, ...] = ()
    #: ``… invoked oom-killer`` headers: who was allocating when memory ran out.
    invocations: tuple[str, ...] = ()


_KILLED = re.compile(
    r"(?:(?P<prefix>Out of memory|Memory cgroup out of memory)(?: \(oom_kill_allocating_task\))?"
    r": )?Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
    r"(?:,? total-vm:(?P<vm>\d+)kB, anon-rss:(?P<anon>\d+)kB)?"
)
_OLD_KILL = re.compile(
    r"(?P<prefix>Out of memory|Memory cgroup out of memory): Kill process (?P<pid>\d+) "
    r"\((?P<comm>[^)]*)\)"
)
_SUMMARY = re.compile(r"oom-kill:(?P<fields>constraint=\S+)")
_INVOKED = re.compile(r"\S+ invoked oom-killer:")
_SEGFAULT = re.compile(
    r"(?P<comm>[^\s\[\]]+)\[(?P<pid>\d+)\]: segfault at \S+ ip \S+ sp \S+ error \S+"
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


def _number(text: str | None) -> int | None:
    """A PID or size from a kernel line; None when absent or longer than any real one (int()
    refuses thousands of digits)."""
    return int(text) if text and len(text) <= 18 else None


def parse_kernel_log(text: str) -> KernelEvents:
    """Every OOM kill, segfault and Xid in a kernel log (dmesg, journalctl -k, kern.log)."""
    summaries: dict[int, tuple[dict[str, str], str]] = {}
    pending: list[tuple[str, int | None, str | None, int | None, int | None, str]] = []
    old_prefix: dict[int, str] = {}
    segfaults: list[Segfault] = []
    xids: list[str] = []
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
            if summary_pid.isdigit() and (number := _number(summary_pid)) is not None:
                summaries[number] = (fields, line)
            continue
        if (old := _OLD_KILL.search(line)) is not None:
            if (old_pid := _number(old.group("pid"))) is not None:
                old_prefix[old_pid] = old.group("prefix")
            continue
        if (killed := _KILLED.search(line)) is not None:
            pid_value = _number(killed.group("pid"))
            prefix = killed.group("prefix") or old_prefix.get(pid_value or -1, "")
            pending.append(
                (
                    prefix,
                    pid_value,
                    killed.group("comm"),
                    _number(killed.group("anon")),
                    _number(killed.group("vm")),
                    line,
                )
            )
            continue
        if _INVOKED.search(line):
            invocations.append(line)
            continue
        if (segv := _SEGFAULT.search(line)) is not None:
            if (segv_pid := _number(segv.group("pid"))) is not None:
                segfaults.append(Segfault(segv.group("comm"), segv_pid, segv.group("lib"), line))
            continue
        if _XID.search(line):
            xids.append(line)
    kills: list[OomKill] = []
    for prefix, pid, comm, anon, vm, line in pending:
        fields, summary_line = summaries.get(pid, ({}, "")) if pid is not None else ({}, "")
        constraint = fields.get("constraint")
        cgroup = prefix == "Memory cgroup out of memory" or constraint == "CONSTRAINT_MEMCG"
        kills.append(
            OomKill(
                scope="cgroup" if cgroup else "host",
                pid=pid,
                comm=comm,
                anon_rss_kb=anon,
                total_vm_kb=vm,
                constraint=constraint,
                task_memcg=fields.get("task_memcg"),
                oom_memcg=fields.get("oom_memcg"),
                lines=tuple(x for x in (summary_line, line) if x),
            )
        )
    return KernelEvents(tuple(kills), tuple(segfaults), tuple(xids), tuple(invocations))


# --- reading the kernel log -----------------------------------------------------------------------


@dataclass(frozen=True)
class LogSource:
    name: str
    readable: bool
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "readable": self.readable, "reason": self.reason}


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
            "xids": list(self.events.xids),
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


def _dedupe(kills: Sequence[OomKill]) -> tuple[OomKill, ...]:
    seen: dict[tuple[int | None, str | None, str], OomKill] = {}
    for kill in kills:
        key = (kill.pid, kill.comm, kill.scope)
        # Keep the richest copy (the one carrying the oom-kill: summary).
        if key not in seen or len(kill.lines) > len(seen[key].lines):
            seen[key] = kill
    return tuple(seen.values())


def read_kernel_log(
    runner: CommandRunner = run_command,
    commands: Sequence[Sequence[str]] = DEFAULT_LOG_COMMANDS,
    files: Sequence[str | Path] = DEFAULT_LOG_FILES,
    root: Path = Path("/"),
) -> KernelLog:
    """Read every source that answers; one event seen in several is counted once."""
    sources: list[LogSource] = []
    kills: list[OomKill] = []
    segfaults: dict[tuple[int, str | None], Segfault] = {}
    xids: dict[str, None] = {}
    invocations: dict[str, None] = {}
    texts: list[str] = []
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
        sources.append(source)
        texts.append(text)
    for name in files:
        path = root / str(name).lstrip("/")
        source, text = _file_source(path)
        sources.append(LogSource(str(name), source.readable, source.reason))
        texts.append(text)
    for text in texts:
        if not text:
            continue
        events = parse_kernel_log(text)
        kills.extend(events.kills)
        for seg in events.segfaults:
            segfaults.setdefault((seg.pid, seg.library), seg)
        xids.update(dict.fromkeys(events.xids))
        invocations.update(dict.fromkeys(events.invocations))
    return KernelLog(
        tuple(sources),
        KernelEvents(_dedupe(kills), tuple(segfaults.values()), tuple(xids), tuple(invocations)),
    )


# --- cgroup memory ------------------------------------------------------------------------------


# --- /dev/shm and the bundle doctor reads ---------------------------------------------------------
