"""The host a Target runs on: OS, architecture, glibc, RAM, and its cgroup memory limits.

This module is the one reader of ``/proc``'s memory, cgroup and boot-time files and of
``/sys/fs/cgroup``; the probe (the Target's host) and doctor (OOM counters, ``/dev/shm``, the boot
time that dates kernel lines) both read through it.
Paths are parameters so tests can point them at prepared trees."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudalock.model import Host
from cudalock.platforms import normalise_arch, os_name

#: cgroup v1 reports "no limit" as a huge page-aligned number (e.g. 9223372036854771712).
_CGROUP_V1_UNLIMITED = 1 << 60


def parse_meminfo_total(text: str) -> int | None:
    """``MemTotal:       32780352 kB`` from ``/proc/meminfo``, in bytes."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdecimal():
                unit = parts[2].lower() if len(parts) > 2 else "kb"
                return int(parts[1]) * (1024 if unit == "kb" else 1)
    return None


def parse_cgroup_limit(text: str) -> int | None:
    """A cgroup memory limit file's value in bytes; None for no limit.

    v2 ``memory.max`` says ``max``; v1 ``memory.limit_in_bytes`` says a huge number.
    """
    value = text.strip()
    if not value.isdecimal():
        return None
    number = int(value)
    return None if number >= _CGROUP_V1_UNLIMITED else number


def parse_proc_self_cgroup(text: str) -> tuple[str | None, str | None]:
    """The v2 path (``0::/path``) and the v1 memory controller path (``N:memory:/path``)."""
    v2_path: str | None = None
    v1_memory_path: str | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2_path = path.strip()
        elif "memory" in controllers.split(","):
            v1_memory_path = path.strip()
    return v2_path, v1_memory_path


def parse_boot_time(text: str) -> float | None:
    """``btime 1796066294`` from ``/proc/stat``: when this machine booted, in seconds since the
    epoch; the kernel log's ``[12345.678]`` stamps count seconds from then."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "btime" and value.strip().isdecimal():
            return float(value.strip())
    return None


def read_boot_time(proc_root: Path = Path("/proc")) -> float | None:
    """This machine's boot time (seconds since the epoch); None where ``/proc/stat`` says none."""
    text = read_text_or_none(proc_root / "stat")
    return parse_boot_time(text) if text else None


def probe_host(
    *,
    proc_root: Path = Path("/proc"),
    sys_root: Path = Path("/sys"),
    environ: Mapping[str, str] | None = None,
) -> Host:
    """OS, architecture, glibc, RAM, the cgroup memory limit and the CUDA toolkit of this
    machine."""
    meminfo = read_text_or_none(proc_root / "meminfo")
    cgroup = read_cgroup_memory(sys_root / "fs" / "cgroup", proc_root)
    system, machine = system_and_machine()
    toolkit = find_cuda_toolkit(os.environ if environ is None else environ)
    return Host(
        os=os_name(system),
        arch=normalise_arch(machine),
        glibc=glibc_version(),
        memory_total_bytes=parse_meminfo_total(meminfo) if meminfo else None,
        cgroup_memory_limit_bytes=cgroup.limit_bytes,
        hostname=hostname(),
        cuda_toolkit=toolkit[0] if toolkit else None,
        cuda_toolkit_path=toolkit[1] if toolkit else None,
    )


#: ``Cuda compilation tools, release 12.1, V12.1.105`` in ``nvcc --version``.
_NVCC_RELEASE_RE = re.compile(r"release (\d{1,3}\.\d{1,3})")


def find_cuda_toolkit(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The CUDA toolkit an extension build would use here, as (``X.Y``, nvcc path), looked for
    as torch's cpp_extension does: $CUDA_HOME (else $CUDA_PATH) when set, used as given even
    without a bin/nvcc; else nvcc on $PATH, else /usr/local/cuda. Its version is what
    ``nvcc --version`` says, as cpp_extension and DeepSpeed's builder read it (a toolkit whose
    nvcc was upgraded alone has a stale version.json), else the toolkit's version.json; None
    when there is no toolkit or neither says a version."""
    home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    if home:
        candidates = [os.path.join(home, "bin", "nvcc")]
    else:
        on_path = shutil.which("nvcc", path=environ.get("PATH", ""))
        candidates = [*([on_path] if on_path else []), "/usr/local/cuda/bin/nvcc"]
    nvcc = next((path for path in candidates if os.path.isfile(path)), None)
    if nvcc is None:
        return None
    version = _nvcc_release(nvcc)
    if version is None:
        version = _toolkit_version_json(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    return (version, nvcc) if version else None


def _toolkit_version_json(home: str) -> str | None:
    """``X.Y`` from a toolkit's version.json (``{"cuda": {"version": "12.1.1"}}``)."""
    text = read_text_or_none(Path(home) / "version.json")
    if not text:
        return None
    try:
        data = json.loads(text)
        version = data.get("cuda", {}).get("version") or data.get("cuda_nvcc", {}).get("version")
    except (ValueError, AttributeError):
        return None
    if not isinstance(version, str):
        return None
    match = re.match(r"(\d{1,3})\.(\d{1,3})", version)
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


def _nvcc_release(nvcc: str) -> str | None:
    try:
        result = subprocess.run(  # noqa: S603 - the nvcc an extension build would run
            [nvcc, "--version"],
            capture_output=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = _NVCC_RELEASE_RE.search(result.stdout.decode("utf-8", "replace"))
    return match.group(1) if match else None


# os.uname() and os.confstr() answer what the platform and socket modules would, without
# importing them (about 10 ms of every command's start-up); Windows has neither.


def system_and_machine() -> tuple[str, str]:
    """``("Linux", "x86_64")``, as ``platform.system()`` and ``platform.machine()`` say."""
    if hasattr(os, "uname"):
        uname = os.uname()
        return uname.sysname, uname.machine
    import platform

    return platform.system(), platform.machine()


def hostname() -> str | None:
    if hasattr(os, "uname"):
        return os.uname().nodename or None
    import socket

    return socket.gethostname() or None


def glibc_version() -> str | None:
    """``"2.36"``; None on musl, macOS and Windows (what ``platform.libc_ver()`` reads first)."""
    try:
        library, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    except (AttributeError, ValueError, OSError):
        return None
    return version if library == "glibc" and version else None


def cgroup_ancestry(base: Path, relative: str) -> list[tuple[str, Path]]:
    """The process's cgroup and its parents that exist under ``base``, leaf first.

    Inside a container with its own cgroup namespace the recorded path may not exist under
    the mount; then the mount root itself is the container's cgroup.
    """
    parts = [p for p in relative.strip("/").split("/") if p and p != ".."]
    chain: list[tuple[str, Path]] = []
    for depth in range(len(parts), -1, -1):
        rel = "/" + "/".join(parts[:depth])
        directory = base.joinpath(*parts[:depth])
        if directory.is_dir():
            chain.append((rel, directory))
    return chain


def read_text_or_none(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class CgroupLevel:
    """One cgroup directory on the way from the process's cgroup up to the root."""

    path: str
    limit_bytes: int | None = None
    oom: int | None = None
    oom_kill: int | None = None
    peak_bytes: int | None = None
    evidence: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "limit_bytes": self.limit_bytes,
            "oom": self.oom,
            "oom_kill": self.oom_kill,
            "peak_bytes": self.peak_bytes,
            "evidence": list(self.evidence),
        }


@dataclass(frozen=True)
class CgroupMemory:
    version: int | None
    levels: tuple[CgroupLevel, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def limit_bytes(self) -> int | None:
        """The effective limit: the smallest one on the way up."""
        limits = [level.limit_bytes for level in self.levels if level.limit_bytes is not None]
        return min(limits) if limits else None

    @property
    def oom_kill_count(self) -> int:
        """OOM kills counted by the process's own cgroup (hierarchical: it includes children)."""
        counts = [level.oom_kill for level in self.levels if level.oom_kill is not None]
        return max(counts) if counts else 0

    @property
    def kill_levels(self) -> tuple[CgroupLevel, ...]:
        return tuple(level for level in self.levels if level.oom_kill)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "limit_bytes": self.limit_bytes,
            "oom_kill": self.oom_kill_count,
            "levels": [level.to_json() for level in self.levels],
            "notes": list(self.notes),
        }


def _limit(text: str | None) -> int | None:
    return parse_cgroup_limit(text) if text is not None else None


def _keyed(text: str | None) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _, number = line.strip().partition(" ")
        if number.strip().lstrip("-").isdigit():
            values[key] = int(number.strip())
    return values


@dataclass(frozen=True)
class _CgroupFiles:
    """Where one cgroup version keeps a level's limit, OOM counters and peak usage."""

    limit: str
    counters: str
    oom_key: str
    peak: str


_V2_FILES = _CgroupFiles("memory.max", "memory.events", "oom", "memory.peak")
_V1_FILES = _CgroupFiles(
    "memory.limit_in_bytes", "memory.oom_control", "under_oom", "memory.max_usage_in_bytes"
)


def _cgroup_levels(base: Path, relative: str, files: _CgroupFiles) -> list[CgroupLevel]:
    """The levels from the process's cgroup up that have a limit or counters file."""
    levels = []
    for rel, directory in cgroup_ancestry(base, relative):
        limit_file = directory / files.limit
        counters_file = directory / files.counters
        limit_text = read_text_or_none(limit_file)
        counters_text = read_text_or_none(counters_file)
        if limit_text is None and counters_text is None:
            continue
        counters = _keyed(counters_text)
        evidence = []
        if counters_text is not None:
            shown = ", ".join(f"{k} {v}" for k, v in counters.items())
            evidence.append(f"{counters_file}: {shown}")
        if limit_text is not None:
            evidence.append(f"{limit_file}: {limit_text.strip()}")
        peak = _limit(read_text_or_none(directory / files.peak))
        levels.append(
            CgroupLevel(
                rel,
                _limit(limit_text),
                counters.get(files.oom_key),
                counters.get("oom_kill"),
                peak,
                tuple(evidence),
            )
        )
    return levels


def read_cgroup_memory(
    cgroup_root: Path = Path("/sys/fs/cgroup"), proc_root: Path = Path("/proc"), pid: str = "self"
) -> CgroupMemory:
    """Memory limit and OOM-kill counters of a process's cgroup and its ancestors (v1 or v2)."""
    own_v2, own_v1 = parse_proc_self_cgroup(read_text_or_none(proc_root / pid / "cgroup") or "")
    if (cgroup_root / "cgroup.controllers").is_file():
        levels = _cgroup_levels(cgroup_root, own_v2 or "/", _V2_FILES)
        notes = () if levels else (f"no memory controller files under {cgroup_root}",)
        return CgroupMemory(2, tuple(levels), notes)
    memory_base = cgroup_root / "memory"
    if memory_base.is_dir():
        return CgroupMemory(1, tuple(_cgroup_levels(memory_base, own_v1 or "/", _V1_FILES)))
    return CgroupMemory(None, (), (f"no cgroup memory controller found under {cgroup_root}",))


@dataclass(frozen=True)
class ShmInfo:
    path: str
    total_bytes: int
    free_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "total_bytes": self.total_bytes, "free_bytes": self.free_bytes}


def read_shm(path: Path = Path("/dev/shm")) -> ShmInfo | None:
    """Size and free space of the shared-memory mount DataLoader workers use."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return ShmInfo(str(path), stat.f_frsize * stat.f_blocks, stat.f_frsize * stat.f_bavail)
