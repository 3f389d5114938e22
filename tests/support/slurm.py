"""A real single-node Slurm cluster on localhost, started by the tests as root without systemd.

munged, MariaDB, slurmdbd, slurmctld and slurmd come from Debian's packages (see
:data:`DEBIAN_PACKAGES`); every daemon gets a private state directory, private ports and, for
munged and MariaDB, a private socket, so nothing on the host is touched except the Slurm cgroup
directories the kernel needs. Daemons run in the foreground in their own sessions (setsid) with
their output in log files; teardown cancels the jobs and stops each daemon by its PID.

Where the packages are missing, or the tests do not run as root, the fixture skips with the reason,
except under ``CI=true``, where a skipped Slurm test would hide a broken CI image: there it fails.

Timing facts these helpers work around (Slurm 22.05):

- sacct lags: a job's final record reaches slurmdbd a moment after the job ends, so
  :meth:`SlurmCluster.wait_for_final_record` polls until every record is final.
- time limits are whole minutes and slurmctld checks them only every 30 s (``PERIODIC_TIMEOUT``,
  compiled in), so a ``--time=1`` job ends after 60–90 s. :meth:`SlurmCluster.end_time_limit_now`
  moves a running job's end time to now, which slurmctld enforces at its next check (≤ 30 s);
  the job ends ``TIMEOUT`` through the same code path as one that ran out its limit.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, closing, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from cudalock.doctor.slurm import FINAL_STATES

DEBIAN_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "mariadb-server")

# Each program the cluster needs, with the Debian package that ships it.
REQUIRED_PROGRAMS: Mapping[str, str] = {
    "munged": "munge",
    "mungekey": "munge",
    "mariadbd": "mariadb-server",
    "slurmdbd": "slurmdbd",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "srun": "slurm-client",
    "sacct": "slurm-client",
    "scontrol": "slurm-client",
    "sinfo": "slurm-client",
    "squeue": "slurm-client",
    "scancel": "slurm-client",
}

STARTUP_TIMEOUT = 30.0
CLIENT_TIMEOUT = 30.0
DEFAULT_MEMORY_PER_CPU_MB = 256
GPUS_PER_NODE = 2
MEMORY_CGROUP_V1 = Path("/sys/fs/cgroup/memory")


class SlurmStartFailure(RuntimeError):
    """A daemon did not come up; the message carries the tail of its log."""


def missing_prerequisites() -> list[str]:
    """Why a cluster cannot be started here (empty when it can)."""
    reasons: list[str] = []
    if sys.platform != "linux":
        reasons.append("a Slurm cluster needs Linux")
    if os.geteuid() != 0:
        reasons.append("starting slurmd and slurmctld needs root")
    missing = sorted(
        {package for program, package in REQUIRED_PROGRAMS.items() if shutil.which(program) is None}
    )
    if missing:
        reasons.append(
            "missing Debian packages: "
            + " ".join(missing)
            + " (apt-get install -y --no-install-recommends "
            + " ".join(DEBIAN_PACKAGES)
            + ")"
        )
    return reasons


def memory_cgroup_v1_usable() -> bool:
    """Whether slurmd can confine jobs in a cgroup-v1 memory controller here.

    Slurm 22.05's cgroup/v2 plugin expects systemd to delegate it a cgroup subtree
    (doc/html/cgroup_v2.shtml), which a test run without systemd cannot give. Where v1 is not
    usable the fixture falls back to polling RSS: over-limit jobs are then killed with SIGKILL
    by Slurm, not by the kernel, and accounting says ``FAILED 0:9``, not ``OUT_OF_MEMORY``.
    """
    probe = MEMORY_CGROUP_V1 / f"cudalock-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        (probe / "memory.limit_in_bytes").write_text(str(64 * 2**20))
        return True
    except OSError:
        return False
    finally:
        probe.rmdir()


def free_tcp_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now."""
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def port_accepts(port: int) -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def node_hardware() -> dict[str, str]:
    """``slurmd -C``'s description of this machine: CPUs, sockets, cores, RealMemory."""
    printed = subprocess.run(
        ["slurmd", "-C"], capture_output=True, text=True, check=True, timeout=CLIENT_TIMEOUT
    ).stdout
    first_line = printed.splitlines()[0]
    return dict(item.split("=", 1) for item in first_line.split() if "=" in item)


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 15.0) -> None:
        stop_together([self], grace)


def stop_together(daemons: Sequence[Daemon], grace: float = 15.0) -> None:
    """SIGTERM every daemon still running, then wait for all; SIGKILL those past ``grace``.

    Each Slurm daemon takes about two seconds to exit, so stopping them together saves time.
    """
    running = [daemon for daemon in daemons if daemon.process.poll() is None]
    for daemon in running:
        daemon.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for daemon in running:
        try:
            daemon.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            daemon.process.kill()
            daemon.process.wait()


@dataclass(frozen=True)
class JobRecipe:
    """A job the tests run: how it is launched and what it does.

    ``steps`` are the steps whose final records :meth:`SlurmCluster.wait_for_final_record`
    waits for; ``expire_time_limit`` ends the job's time limit once it runs.
    """

    name: str
    launcher: Literal["sbatch", "srun"]
    command: str
    options: tuple[str, ...] = ()
    steps: tuple[str, ...] = ("batch",)
    expire_time_limit: bool = False
    cancel: bool = False


@dataclass(frozen=True)
class SubmittedJob:
    recipe: JobRecipe
    job_id: int
    output: Path
    launcher_returncode: int | None = None  # srun's own exit status
    launcher_stderr: str = ""


@dataclass(frozen=True)
class SacctLine:
    record: str
    state: str
    requested: str
    usage_node: str


_unique = itertools.count(1)
PYTHON = shlex.quote(sys.executable)
ALLOCATE_1_GIB = f"{PYTHON} -c 'x = bytearray(1 << 30)'"  # bytearray() touches every page
SEGFAULT = f"{PYTHON} -c 'import ctypes; ctypes.string_at(0)'"

# The four jobs the doctor must tell apart, plus the variants sacct shows differently.
OOM_BATCH = JobRecipe("oom-batch", "sbatch", ALLOCATE_1_GIB, ("--mem=64M",))
TIME_LIMIT = JobRecipe("time-limit", "sbatch", "sleep 600", ("--time=1",), expire_time_limit=True)
SEGFAULT_BATCH = JobRecipe("segfault-batch", "sbatch", SEGFAULT)
SUCCESS = JobRecipe(
    "success",
    "sbatch",
    f"{PYTHON} -c 'import time; x = bytearray(50 << 20); time.sleep(2.5)'",
    ("--mem=200M",),
)
OOM_SRUN = JobRecipe("oom-srun", "srun", ALLOCATE_1_GIB, ("--mem=64M",), steps=("0",))
OOM_STEP_IN_BATCH = JobRecipe(
    "oom-step-in-batch", "sbatch", f"srun {ALLOCATE_1_GIB}", ("--mem=64M",), steps=("batch", "0")
)
SEGFAULT_EXEC = JobRecipe("segfault-exec", "sbatch", f"exec {SEGFAULT}")
SEGFAULT_SRUN = JobRecipe("segfault-srun", "srun", SEGFAULT, steps=("0",))
ABORT_BATCH = JobRecipe("abort-batch", "sbatch", f"{PYTHON} -c 'import os; os.abort()'")
EXIT_11 = JobRecipe("exit-11", "sbatch", "exit 11")
EXIT_3 = JobRecipe("exit-3", "sbatch", "exit 3")
CANCELLED = JobRecipe("cancelled", "sbatch", "sleep 600", cancel=True)
OOM_PER_GPU = JobRecipe("oom-per-gpu", "sbatch", ALLOCATE_1_GIB, ("--gpus=2", "--mem-per-gpu=40M"))
PER_CPU_SRUN = JobRecipe(
    "per-cpu-srun", "srun", "true", ("--cpus-per-task=2", "--mem-per-cpu=100M"), steps=("0",)
)


@dataclass
class SlurmCluster:
    """A running cluster: its configuration, its daemons and the helpers tests submit jobs with."""

    state_dir: Path
    node_name: str
    memory_cgroup: bool
    env: dict[str, str]
    daemons: list[Daemon] = field(default_factory=list)
    version: str = ""

    @property
    def slurm_conf(self) -> Path:
        return self.state_dir / "etc" / "slurm.conf"

    @property
    def job_output_dir(self) -> Path:
        return self.state_dir / "jobs"

    def command(
        self, *argv: str, timeout: float = CLIENT_TIMEOUT, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster."""
        done = subprocess.run(
            list(argv), capture_output=True, text=True, env=self.env, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {done.returncode}: "
                f"{done.stderr.strip() or done.stdout.strip()}"
            )
        return done

    def submit(self, recipe: JobRecipe) -> SubmittedJob:
        """Start ``recipe``: sbatch returns at once; srun runs to its end (it is the job)."""
        name = f"{recipe.name}-{next(_unique)}"
        output = self.job_output_dir / f"{name}.out"
        common = (f"--job-name={name}", f"--chdir={self.job_output_dir}", *recipe.options)
        if recipe.launcher == "sbatch":
            submitted = self.command(
                "sbatch", "--parsable", f"--output={output}", *common, f"--wrap={recipe.command}"
            )
            job = SubmittedJob(recipe, int(submitted.stdout.strip().split(";")[0]), output)
        else:
            ran = self.command(
                "srun", *common, *shlex.split(recipe.command), check=False, timeout=120
            )
            job = SubmittedJob(
                recipe,
                self._job_id_by_name(name),
                output,
                launcher_returncode=ran.returncode,
                launcher_stderr=ran.stderr,
            )
        if recipe.expire_time_limit:
            self.end_time_limit_now(job.job_id)
        if recipe.cancel:
            self.wait_until_running(job.job_id)
            self.command("scancel", str(job.job_id))
        return job

    def _job_id_by_name(self, name: str, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            listed = self.command(
                "sacct",
                "--allocations",
                f"--name={name}",
                "--noheader",
                "--parsable2",
                "--format=JobIDRaw",
            ).stdout.split()
            if listed:
                return int(listed[0])
            if time.monotonic() > deadline:
                raise AssertionError(f"sacct has no job named {name} after {timeout:.0f}s")
            time.sleep(0.1)

    def job_state(self, job_id: int) -> str:
        """The controller's current state of a job (``scontrol show job``)."""
        shown = self.command("scontrol", "show", "job", "-o", str(job_id)).stdout
        match = re.search(r"\bJobState=(\S+)", shown)
        if not match:
            raise AssertionError(f"scontrol show job {job_id} has no JobState: {shown!r}")
        return match.group(1)

    def wait_until_running(self, job_id: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while (state := self.job_state(job_id)) == "PENDING":
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still PENDING after {timeout:.0f}s")
            time.sleep(0.1)
        if state != "RUNNING":
            raise AssertionError(f"job {job_id} is {state}, expected it RUNNING")

    def end_time_limit_now(self, job_id: int) -> None:
        """Move a running job's end time to (almost) now: its time limit has run out.

        slurmctld refuses an end time in the past, so the new one is two seconds ahead; the job
        is then killed with ``TIMEOUT`` at the controller's next time-limit check (≤ 30 s).
        """
        self.wait_until_running(job_id)
        self.command("scontrol", "update", f"JobId={job_id}", "EndTime=now+2")

    def sacct_lines(self, job_id: int) -> list[SacctLine]:
        """JobID, State, ReqTRES and MaxRSSNode of every record sacct has for the job."""
        listed = self.command(
            "sacct",
            "-j",
            str(job_id),
            "--parsable2",
            "--noheader",
            "--format=JobID,State,ReqTRES,MaxRSSNode",
        ).stdout
        lines = []
        for line in listed.splitlines():
            record, state, requested, usage_node = line.split("|")
            lines.append(SacctLine(record, state.split(" ")[0], requested, usage_node))
        return lines

    def wait_for_final_record(
        self, job: SubmittedJob, *, timeout: float = 120.0, settle: float = 10.0
    ) -> list[SacctLine]:
        """Poll sacct until the job's records are final and complete (sacct lags the job).

        Final: the job and the recipe's steps are in a final state and the controller has
        finished the job (no longer COMPLETING). Complete: the job line carries its request
        (ReqTRES); one written before the job's start record reached slurmdbd has none, is
        named ``allocation`` and has a ReqMem like ``16?``. Settled: every step carries its
        usage (MaxRSSNode); a step the job's end closed before the step's own end arrived shows
        the job's state and no usage. Waits up to ``settle`` seconds more for that.
        """
        deadline = time.monotonic() + timeout
        job_id = str(job.job_id)
        wanted = {job_id, *(f"{job_id}.{step}" for step in job.recipe.steps)}
        final_since: float | None = None
        while True:
            lines = self.sacct_lines(job.job_id)
            final = {line.record for line in lines if line.state in FINAL_STATES}
            complete = any(line.record == job_id and line.requested for line in lines)
            if (
                complete
                and wanted <= final
                and len(final) == len(lines)
                and self.job_state(job.job_id) in FINAL_STATES
            ):
                final_since = final_since or time.monotonic()
                settled = all(line.usage_node for line in lines if line.record != job_id)
                if settled or time.monotonic() - final_since > settle:
                    return lines
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"sacct has no final record of job {job_id} after {timeout:.0f}s: {lines}"
                )
            time.sleep(0.1)

    def cancel_all_jobs(self, timeout: float = 30.0) -> None:
        """Cancel every job and wait until the queue is empty: slurmstepd outlives slurmd."""
        if not any(
            daemon.name == "slurmctld" and daemon.process.poll() is None for daemon in self.daemons
        ):
            return
        self.command("scancel", "--full", "--user=root", check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            queue = self.command("squeue", "--noheader", "--format=%i", check=False)
            if queue.returncode != 0 or not queue.stdout.strip():
                return
            time.sleep(0.2)


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def _wait_for(
    condition_met: Callable[[], bool], what: str, daemon: Daemon, timeout: float = STARTUP_TIMEOUT
) -> None:
    deadline = time.monotonic() + timeout
    while not condition_met():
        if daemon.process.poll() is not None:
            raise SlurmStartFailure(
                f"{daemon.name} exited with status "
                f"{daemon.process.returncode} before {what}:\n"
                f"{daemon.log_tail()}"
            )
        if time.monotonic() > deadline:
            raise SlurmStartFailure(
                f"{daemon.name}: no {what} after {timeout:.0f}s:\n{daemon.log_tail()}"
            )
        time.sleep(0.05)


def _start(
    stack: ExitStack, cluster: SlurmCluster, name: str, argv: Sequence[str], log: Path
) -> Daemon:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as log_file:
        # Own session and no inherited stdout/stderr: a daemon holding the caller's pipes
        # would keep subprocess.run(capture_output=True) waiting forever.
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=cluster.env,
        )
    daemon = Daemon(name, process, log)
    cluster.daemons.append(daemon)
    stack.callback(daemon.stop)
    return daemon


def _slurm_conf(
    cluster: SlurmCluster, hardware: Mapping[str, str], ports: Mapping[str, int], munge_socket: Path
) -> str:
    d = cluster.state_dir
    if cluster.memory_cgroup:
        # PrologFlags=contain adds the "extern" step most sites have (pam_slurm_adopt needs it).
        enforcement = (
            "ProctrackType=proctrack/cgroup\n"
            "TaskPlugin=task/cgroup\n"
            "JobAcctGatherType=jobacct_gather/cgroup\n"
            "PrologFlags=contain\n"
        )
    else:
        enforcement = (
            "ProctrackType=proctrack/linuxproc\n"
            "TaskPlugin=task/none\n"
            "JobAcctGatherType=jobacct_gather/linux\n"
            "JobAcctGatherParams=OverMemoryKill\n"
        )
    topology = " ".join(
        f"{key}={hardware[key]}"
        for key in (
            "CPUs",
            "Boards",
            "SocketsPerBoard",
            "CoresPerSocket",
            "ThreadsPerCore",
            "RealMemory",
        )
        if key in hardware
    )
    node = cluster.node_name
    return (
        "ClusterName=cudalock\n"
        f"SlurmctldHost={node}(127.0.0.1)\n"
        "SlurmUser=root\n"
        "SlurmdUser=root\n"
        "AuthType=auth/munge\n"
        "CredType=cred/munge\n"
        f"AuthInfo=socket={munge_socket}\n"
        "MailProg=/bin/true\n"
        f"SlurmctldPort={ports['slurmctld']}\n"
        f"SlurmdPort={ports['slurmd']}\n"
        f"StateSaveLocation={d}/spool/ctld\n"
        f"SlurmdSpoolDir={d}/spool/d\n"
        f"SlurmctldPidFile={d}/run/slurmctld.pid\n"
        f"SlurmdPidFile={d}/run/slurmd.pid\n"
        f"SlurmctldLogFile={d}/log/slurmctld.log\n"
        f"SlurmdLogFile={d}/log/slurmd.log\n"
        f"{enforcement}"
        "JobAcctGatherFrequency=1\n"
        "AccountingStorageType=accounting_storage/slurmdbd\n"
        "AccountingStorageHost=127.0.0.1\n"
        f"AccountingStoragePort={ports['slurmdbd']}\n"
        # Connections to slurmdbd take their munge socket from here, not from AuthInfo.
        f"AccountingStoragePass=socket={munge_socket}\n"
        "JobCompType=jobcomp/none\n"
        # Two count-only GPUs (no device files): jobs can ask for --gpus and --mem-per-gpu,
        # and accounting records gres/gpu, as on a GPU node.
        "GresTypes=gpu\n"
        "AccountingStorageTRES=gres/gpu\n"
        "SelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_Core_Memory\n"
        # Without a default, a job that does not ask for memory gets the whole node and
        # every other job waits behind it.
        f"DefMemPerCPU={DEFAULT_MEMORY_PER_CPU_MB}\n"
        "SchedulerType=sched/backfill\n"
        # Batch jobs start at once instead of after the default 3 s delay.
        "SchedulerParameters=batch_sched_delay=0\n"
        "MpiDefault=none\n"
        "ReturnToService=2\n"
        # Keep finished jobs in scontrol for the whole session.
        "MinJobAge=3600\n"
        # Clusters started at once on one machine (parallel test runs) share its cgroup tree,
        # slurm_<node>/uid_0/job_<id>: with the same job ids, one cluster's job ending kills the
        # other's processes in that cgroup. Each cluster numbers its jobs from its own base.
        f"FirstJobId={first_job_id()}\n"
        "KillWait=2\n"
        "OverTimeLimit=0\n"
        "InactiveLimit=0\n"
        f"NodeName={node} NodeAddr=127.0.0.1 {topology} Gres=gpu:{GPUS_PER_NODE} "
        "State=UNKNOWN\n"
        # Jobs share cores, so a job waiting for its time limit does not hold up the others on
        # a two-core machine; memory stays allocated per job.
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE OverSubscribe=FORCE:8 "
        "State=UP\n"
    )


def first_job_id(pid: int | None = None) -> int:
    """A job id base for this process's cluster: ``N·1000 + 1``, below Slurm's MaxJobId."""
    return 1 + ((os.getpid() if pid is None else pid) % 60_000) * 1000


def _cgroup_conf() -> str:
    lines = [
        "CgroupPlugin=cgroup/v1",
        "ConstrainCores=no",
        "ConstrainRAMSpace=yes",
        "ConstrainDevices=no",
    ]
    # Without swap accounting a job over its limit could swap instead of being killed.
    if (MEMORY_CGROUP_V1 / "memory.memsw.limit_in_bytes").exists():
        lines += ["ConstrainSwapSpace=yes", "AllowedSwapSpace=0"]
    return "\n".join(lines) + "\n"


def _slurmdbd_conf(cluster: SlurmCluster, ports: Mapping[str, int], munge_socket: Path) -> str:
    d = cluster.state_dir
    return (
        "AuthType=auth/munge\n"
        f"AuthInfo=socket={munge_socket}\n"
        "DbdAddr=127.0.0.1\n"
        "DbdHost=localhost\n"
        f"DbdPort={ports['slurmdbd']}\n"
        "SlurmUser=root\n"
        f"PidFile={d}/run/slurmdbd.pid\n"
        f"LogFile={d}/log/slurmdbd.log\n"
        "StorageType=accounting_storage/mysql\n"
        "StorageHost=127.0.0.1\n"
        f"StoragePort={ports['mariadb']}\n"
        "StorageUser=slurm\n"
        "StorageLoc=slurm_acct_db\n"
    )


def _stand_in_gpu_devices(directory: Path) -> list[Path]:
    """Character devices with /dev/null's numbers, standing in for /dev/nvidiaN.

    Slurm 22.05 drops a GPU without a device file and logs an error for a file that is not a
    device; with ConstrainDevices=no nothing ever opens them.
    """
    directory.mkdir(parents=True, exist_ok=True)
    null_device = os.stat("/dev/null").st_rdev
    devices = []
    for index in range(GPUS_PER_NODE):
        path = directory / f"gpu{index}"
        os.mknod(path, 0o600 | stat.S_IFCHR, null_device)
        devices.append(path)
    return devices


def _remove_empty_cgroups(node_name: str) -> None:
    """rmdir the per-node Slurm cgroup trees, deepest first; rmdir only removes empty ones."""
    for controller in Path("/sys/fs/cgroup").iterdir():
        top = controller / f"slurm_{node_name}"
        if not top.is_dir():
            continue
        for directory in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with suppress(OSError):
                directory.rmdir()
        with suppress(OSError):
            top.rmdir()


@contextmanager
def running_slurm(state_dir: Path, *, memory_cgroup: bool | None = None) -> Iterator[SlurmCluster]:
    """Start munged, MariaDB, slurmdbd, slurmctld and slurmd under ``state_dir``; stop them after.

    Everything started is stopped again, also when start-up fails half-way.
    ``memory_cgroup=None`` uses cgroup v1 when this host allows it.
    """
    node_name = socket.gethostname().split(".")[0]
    if memory_cgroup is None:
        memory_cgroup = memory_cgroup_v1_usable()
    env = dict(os.environ)
    env["SLURM_CONF"] = str(state_dir / "etc" / "slurm.conf")
    # Client output in the formats the tests and the reader expect, whatever the caller set.
    for variable in ("SLURM_TIME_FORMAT", "SACCT_FORMAT", "SQUEUE_FORMAT", "SINFO_FORMAT"):
        env.pop(variable, None)
    cluster = SlurmCluster(
        state_dir=state_dir, node_name=node_name, memory_cgroup=memory_cgroup, env=env
    )
    for sub in ("etc", "run", "log", "spool/ctld", "spool/d", "mysql", "munge", "jobs"):
        (state_dir / sub).mkdir(parents=True, exist_ok=True)
    ports = dict(
        zip(("slurmctld", "slurmd", "slurmdbd", "mariadb"), free_tcp_ports(4), strict=True)
    )
    munge_socket = state_dir / "munge" / "munge.socket"

    with ExitStack() as stack:
        stack.callback(_remove_empty_cgroups, node_name)

        # A private munged with its own key: the host's munged (if any) stays untouched.
        key = state_dir / "munge" / "munge.key"
        subprocess.run(
            ["mungekey", "--create", f"--keyfile={key}"],
            check=True,
            capture_output=True,
            timeout=CLIENT_TIMEOUT,
        )
        munged = _start(
            stack,
            cluster,
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={munge_socket}",
                f"--key-file={key}",
                f"--pid-file={state_dir}/munge/munged.pid",
                f"--seed-file={state_dir}/munge/munged.seed",
                f"--log-file={state_dir}/log/munged.log",
            ],
            state_dir / "log" / "munged.out",
        )

        # A throw-away database on loopback: an empty datadir and no grant tables start in about
        # a second, where mariadb-install-db alone takes longer.
        mariadb = _start(
            stack,
            cluster,
            "mariadbd",
            [
                "mariadbd",
                "--no-defaults",
                "--user=root",
                f"--datadir={state_dir}/mysql",
                f"--socket={state_dir}/run/mysqld.sock",
                f"--pid-file={state_dir}/run/mysqld.pid",
                "--bind-address=127.0.0.1",
                f"--port={ports['mariadb']}",
                "--skip-name-resolve",
                "--skip-grant-tables",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=64M",
                "--innodb-log-file-size=16M",
                "--innodb-lock-wait-timeout=900",
                f"--log-error={state_dir}/log/mariadbd.log",
            ],
            state_dir / "log" / "mariadbd.out",
        )

        etc = state_dir / "etc"
        _write(etc / "slurm.conf", _slurm_conf(cluster, node_hardware(), ports, munge_socket))
        _write(etc / "cgroup.conf", _cgroup_conf())
        _write(
            etc / "gres.conf",
            "".join(f"Name=gpu File={path}\n" for path in _stand_in_gpu_devices(state_dir / "dev")),
        )
        _write(etc / "slurmdbd.conf", _slurmdbd_conf(cluster, ports, munge_socket), 0o600)

        _wait_for(munge_socket.exists, "socket", munged)
        _wait_for(lambda: port_accepts(ports["mariadb"]), "listening port", mariadb)
        slurmdbd = _start(
            stack, cluster, "slurmdbd", ["slurmdbd", "-D"], state_dir / "log" / "slurmdbd.out"
        )
        _wait_for(lambda: port_accepts(ports["slurmdbd"]), "listening port", slurmdbd)

        slurmctld = _start(
            stack, cluster, "slurmctld", ["slurmctld", "-D"], state_dir / "log" / "slurmctld.out"
        )
        slurmd = _start(
            stack, cluster, "slurmd", ["slurmd", "-D"], state_dir / "log" / "slurmd.out"
        )
        # Runs first at teardown. slurmstepd processes outlive slurmd, so jobs are cancelled
        # before the daemons go; then the daemons stop in dependency order.
        stack.callback(stop_together, [munged, mariadb])
        stack.callback(stop_together, [slurmdbd])
        stack.callback(stop_together, [slurmctld, slurmd])
        stack.callback(cluster.cancel_all_jobs)

        def controller_up() -> bool:
            pinged = cluster.command("scontrol", "ping", check=False, timeout=5)
            return "is UP" in pinged.stdout

        _wait_for(controller_up, "answer to scontrol ping", slurmctld)

        def node_idle() -> bool:
            listed = cluster.command(
                "sinfo", "--noheader", "--nodes", node_name, "--format=%T", check=False, timeout=5
            )
            return listed.stdout.strip() == "idle"

        _wait_for(node_idle, f"idle node {node_name}", slurmd)
        cluster.version = cluster.command("sinfo", "--version").stdout.strip()
        yield cluster


#: The jobs the live tests read back, run once a session side by side.
FINISHED_JOBS = (TIME_LIMIT, OOM_BATCH, SEGFAULT_BATCH, SUCCESS, OOM_PER_GPU)


@pytest.fixture(scope="session")
def finished_slurm_jobs(slurm_cluster: SlurmCluster) -> Mapping[str, SubmittedJob]:
    """:data:`FINISHED_JOBS` by recipe name, each with its final sacct record; the time-limit
    job is submitted first, as it takes longest."""
    jobs = {recipe.name: slurm_cluster.submit(recipe) for recipe in FINISHED_JOBS}
    for job in jobs.values():
        slurm_cluster.wait_for_final_record(job)
    return jobs


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running single-node Slurm for the session, with ``SLURM_CONF`` exported to the tests."""
    reasons = missing_prerequisites()
    if reasons:
        message = "no Slurm cluster: " + "; ".join(reasons)
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: the Slurm tests must run in CI)", pytrace=False)
        pytest.skip(message)
    with (
        running_slurm(tmp_path_factory.mktemp("slurm")) as cluster,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setenv("SLURM_CONF", str(cluster.slurm_conf))
        for variable in ("SLURM_TIME_FORMAT", "SACCT_FORMAT"):
            patch.delenv(variable, raising=False)
        yield cluster
