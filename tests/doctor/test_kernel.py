"""Kernel-log, cgroup and /dev/shm evidence, from recorded logs and prepared trees."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from cudalock.doctor.kernel import CommandResult, parse_kernel_log, read_kernel_log, run_command
from cudalock.machine.host import read_cgroup_memory, read_shm

KERNEL = Path(__file__).parents[1] / "fixtures" / "doctor" / "kernel"


def fixture(name: str) -> str:
    return (KERNEL / name).read_text()


def test_host_oom_pairs_summary_and_kill_line() -> None:
    events = parse_kernel_log(fixture("host_oom_dmesg.txt"))
    (kill,) = events.kills
    assert kill.scope == "host"
    assert (kill.pid, kill.comm) == (48213, "python")
    assert kill.constraint == "CONSTRAINT_NONE"
    assert kill.anon_rss_kb == 66_604_936
    assert kill.task_memcg == "/user.slice/user-1000.slice/session-4.scope"
    assert kill.lines[0].endswith("task=python,pid=48213,uid=1000")
    assert "Out of memory: Killed process 48213 (python)" in kill.lines[1]
    assert "63.52GiB resident" in kill.describe()  # 66,604,936 kB / 2**20
    assert len(events.invocations) == 1


def test_cgroup_oom_group_kill_sees_every_process() -> None:
    events = parse_kernel_log(fixture("cgroup_oom_journal.txt"))
    assert [(k.scope, k.pid) for k in events.kills] == [("cgroup", 3121), ("cgroup", 3122)]
    first = events.kills[0]
    assert first.constraint == "CONSTRAINT_MEMCG"
    assert first.oom_memcg is not None and first.oom_memcg.endswith("cri-containerd-9f2e.scope")
    assert "in cgroup /kubepods.slice" in first.describe()


def test_old_kernel_format_keeps_the_prefix() -> None:
    (kill,) = parse_kernel_log(fixture("old_kernel_oom.txt")).kills
    assert (kill.scope, kill.pid, kill.comm, kill.anon_rss_kb) == (
        "host",
        2207,
        "python",
        60_123_456,
    )


def test_segfault_and_xid_lines() -> None:
    events = parse_kernel_log(fixture("segfault_xid.txt"))
    assert [(s.comm, s.pid, s.library) for s in events.segfaults] == [
        ("python", 7001, "libcuda.so.535.104.05"),
        ("pt_data_worker", 7010, "libgomp.so.1.0.0"),
    ]
    assert len(events.xids) == 1 and "79" in events.xids[0].line
    assert parse_kernel_log(fixture("clean_dmesg.txt")).kills == ()


class RecordedCommands:
    """Answers log commands from recorded output, as the real commands answer on a host."""

    def __init__(self, answers: dict[str, CommandResult]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(tuple(argv))
        return self.answers.get(argv[0], CommandResult(127, "", f"{argv[0]}: not found"))


def test_unprivileged_dmesg_is_reported_and_journal_is_used(tmp_path: Path) -> None:
    runner = RecordedCommands(
        {
            "dmesg": CommandResult(
                1, "", "dmesg: read kernel buffer failed: Operation not permitted\n"
            ),
            "journalctl": CommandResult(0, fixture("cgroup_oom_journal.txt")),
        }
    )
    log = read_kernel_log(runner=runner, root=tmp_path)
    assert runner.calls == [
        ("dmesg", "-T"),
        ("journalctl", "-k", "--no-pager", "-q", "-o", "short-iso"),
    ]
    by_name = {s.name: s for s in log.sources}
    assert by_name["dmesg -T"].readable is False
    assert "Operation not permitted" in by_name["dmesg -T"].reason
    assert by_name["/var/log/kern.log"].reason == "does not exist"
    assert log.readable
    assert [k.pid for k in log.events.kills] == [3121, 3122]


def test_the_same_kill_in_dmesg_and_kern_log_counts_once(tmp_path: Path) -> None:
    (tmp_path / "var" / "log").mkdir(parents=True)
    (tmp_path / "var" / "log" / "kern.log").write_text(fixture("host_oom_dmesg.txt"))
    runner = RecordedCommands(
        {
            "dmesg": CommandResult(0, fixture("host_oom_dmesg.txt")),
            "journalctl": CommandResult(0, "-- No entries --\n"),
        }
    )
    log = read_kernel_log(runner=runner, root=tmp_path)
    assert len(log.events.kills) == 1
    assert {s.name: s.readable for s in log.sources} == {
        "dmesg -T": True,
        "journalctl -k --no-pager -q -o short-iso": False,
        "/var/log/kern.log": True,
        "/var/log/messages": False,
    }


def test_busybox_dmesg_without_T_is_retried_plain(tmp_path: Path) -> None:
    calls: list[tuple[str, ...]] = []

    def runner(argv: Sequence[str]) -> CommandResult:
        calls.append(tuple(argv))
        if tuple(argv) == ("dmesg", "-T"):
            return CommandResult(1, "", "dmesg: invalid option -- 'T'")
        return CommandResult(0, fixture("old_kernel_oom.txt"))

    log = read_kernel_log(runner=runner, commands=[("dmesg", "-T")], files=(), root=tmp_path)
    assert calls == [("dmesg", "-T"), ("dmesg",)]
    assert [s.name for s in log.sources] == ["dmesg"]
    assert [k.pid for k in log.events.kills] == [2207]


@given(st.text(max_size=2000))
def test_any_text_parses_without_error(text: str) -> None:
    events = parse_kernel_log(text)
    assert all(kill.lines for kill in events.kills)


def test_nothing_readable(tmp_path: Path) -> None:
    runner = RecordedCommands(
        {
            "dmesg": CommandResult(
                1, "", "dmesg: read kernel buffer failed: Operation not permitted"
            ),
            "journalctl": CommandResult(
                0, "", "No journal files were opened due to insufficient permissions."
            ),
        }
    )
    log = read_kernel_log(runner=runner, root=tmp_path)
    assert not log.readable
    journal = next(s for s in log.sources if s.name.startswith("journalctl"))
    assert "insufficient permissions" in journal.reason


def test_run_command_real_process_and_missing_program() -> None:
    assert run_command(["sh", "-c", "echo hello; exit 3"]) == CommandResult(3, "hello\n", "")
    assert run_command(["cudalock-no-such-program-xyz"]).returncode == 127


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_in_container_namespace(tmp_path: Path) -> None:
    # The container sees its own cgroup as "/": the recorded path does not exist under the mount.
    cgroup, proc = tmp_path / "cgroup", tmp_path / "proc"
    write(cgroup / "cgroup.controllers", "cpuset cpu io memory pids\n")
    write(cgroup / "memory.max", "137438953472\n")
    write(cgroup / "memory.events", "low 0\nhigh 0\nmax 412\noom 3\noom_kill 2\noom_group_kill 1\n")
    write(proc / "self" / "cgroup", "0::/kubepods.slice/pod5d1c/cri-containerd-9f2e.scope\n")
    memory = read_cgroup_memory(cgroup, proc)
    assert memory.version == 2
    assert memory.limit_bytes == 128 * 2**30
    assert memory.oom_kill_count == 2
    (level,) = memory.kill_levels
    assert any("oom_kill 2" in item for item in level.evidence)


def test_cgroup_v2_nested_limit_is_the_smallest_on_the_way_up(tmp_path: Path) -> None:
    cgroup, proc = tmp_path / "cgroup", tmp_path / "proc"
    write(cgroup / "cgroup.controllers", "memory\n")
    write(cgroup / "job.slice" / "memory.max", "68719476736\n")
    write(cgroup / "job.slice" / "memory.events", "oom 0\noom_kill 0\n")
    write(cgroup / "job.slice" / "step" / "memory.max", "max\n")
    write(cgroup / "job.slice" / "step" / "memory.events", "oom 0\noom_kill 0\n")
    write(proc / "4242" / "cgroup", "0::/job.slice/step\n")
    memory = read_cgroup_memory(cgroup, proc, pid="4242")
    assert [level.path for level in memory.levels] == ["/job.slice/step", "/job.slice"]
    assert memory.limit_bytes == 64 * 2**30
    assert memory.oom_kill_count == 0 and memory.kill_levels == ()


def test_cgroup_v1_oom_control(tmp_path: Path) -> None:
    cgroup, proc = tmp_path / "cgroup", tmp_path / "proc"
    write(cgroup / "memory" / "docker" / "abc" / "memory.limit_in_bytes", "34359738368\n")
    write(
        cgroup / "memory" / "docker" / "abc" / "memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
    )
    write(cgroup / "memory" / "memory.limit_in_bytes", "9223372036854771712\n")
    write(proc / "self" / "cgroup", "12:pids:/docker/abc\n11:memory:/docker/abc\n")
    memory = read_cgroup_memory(cgroup, proc)
    assert memory.version == 1
    assert memory.limit_bytes == 32 * 2**30  # the root's LONG_MAX means no limit
    assert memory.oom_kill_count == 1


def test_no_cgroup_controller(tmp_path: Path) -> None:
    memory = read_cgroup_memory(tmp_path / "none", tmp_path / "proc")
    assert memory.version is None and memory.limit_bytes is None and memory.notes


def test_shm_size_from_a_real_statvfs(tmp_path: Path) -> None:
    shm = read_shm(tmp_path)
    assert shm is not None
    stat = os.statvfs(tmp_path)
    assert shm.total_bytes == stat.f_frsize * stat.f_blocks
    assert read_shm(tmp_path / "missing") is None
