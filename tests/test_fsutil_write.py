"""Writing outputs: never through a link, all of a group or none (signals included), modes that
follow the umask (owner-only for secrets), and one writer per output directory."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudalock.errors import EnvironmentFailure, UsageError
from cudalock.fsutil import (
    LOCK_FILE,
    append_log,
    credentials_note,
    output_lock,
    start_log,
    write_atomic,
    write_group,
    write_outputs,
)

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_files_follow_the_umask_and_secrets_are_owner_only(
    tmp_path: Path, umask_022: None
) -> None:
    plain, script, secret = tmp_path / "a.txt", tmp_path / "install.sh", tmp_path / "req.txt"
    write_group(
        {plain: "a\n", script: "#!/bin/sh\n", secret: "--index-url https://u:p@h/\n"},
        force=False,
        executable=[script],
        secret=[secret],
    )
    assert (mode_of(plain), mode_of(script), mode_of(secret)) == (0o644, 0o755, 0o600)
    os.umask(0o027)
    write_atomic(plain, "again\n")
    assert mode_of(plain) == 0o640  # a rewrite follows today's umask, not mkstemp's 0600


def test_outputs_holding_a_credential_are_found_and_made_owner_only(
    tmp_path: Path, umask_022: None
) -> None:
    files = {
        tmp_path / "install.sh": "pip install --index-url https://u:tok@h.example/simple x\n",
        tmp_path / "pylock.toml": 'note = "from https://***@h.example/simple (redacted)"\n',
        tmp_path / "cudalock.toml": 'pypi_index = "https://h.example/simple"\n',
    }
    secret = write_outputs(files, executable=[tmp_path / "install.sh"])
    assert secret == [tmp_path / "install.sh"]
    assert {path.name: mode_of(path) for path in files} == {
        "install.sh": 0o700,
        "pylock.toml": 0o644,
        "cudalock.toml": 0o644,
    }
    assert credentials_note(secret) == (
        "install.sh: hold(s) credentials from a URL; written readable by you alone"
    )


def test_a_link_at_the_destination_is_replaced_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "environment.yml").symlink_to(victim)
    write_group({out / "environment.yml": "name: x\n"}, force=True)
    assert victim.read_text() == "precious\n"
    assert not (out / "environment.yml").is_symlink()
    assert (out / "environment.yml").read_text() == "name: x\n"


def test_a_planted_link_is_an_existing_file_without_force(tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="already exists"):
        write_group({tmp_path / "dangling": "x"}, force=False)


def test_the_log_replaces_a_planted_link_and_refuses_to_append_through_one(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    log = tmp_path / "cudalock-bootstrap.log"
    log.symlink_to(victim)
    start_log(log, "header\n")
    with append_log(log) as handle:
        handle.write("line\n")
    assert log.read_text() == "header\nline\n" and victim.read_text() == "precious\n"
    # Swapped for a link (or a second name of another file) while the run goes on: refused.
    log.unlink()
    log.symlink_to(victim)
    with pytest.raises(EnvironmentFailure, match="symbolic link"), append_log(log):
        pass
    log.unlink()
    os.link(victim, log)
    with pytest.raises(EnvironmentFailure, match="replaced by a link"), append_log(log):
        pass
    assert victim.read_text() == "precious\n"


def test_a_signal_during_the_renames_waits_until_the_group_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {tmp_path / f"f{n}.txt": f"new {n}\n" for n in range(4)}
    real_replace = os.replace
    calls = []

    def replace_and_interrupt(source: str, destination: str) -> None:
        calls.append(destination)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C after the first of four renames
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", replace_and_interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_group(files, force=False)
    assert len(calls) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in files]


def test_an_interrupt_before_the_renames_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "b.txt").write_text("old\n")
    real_fsync = os.fsync
    synced = []

    def fsync_then_interrupt(fd: int) -> None:
        synced.append(fd)
        if len(synced) == 2:
            raise KeyboardInterrupt
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_group(
            {tmp_path / "a.txt": "a", tmp_path / "b.txt": "b", tmp_path / "c": "c"}, force=True
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.txt"]  # no .tmp left behind
    assert (tmp_path / "b.txt").read_text() == "old\n"


@pytest.mark.parametrize("which", [1, 3])
def test_an_interrupt_as_a_temporary_file_is_created_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: int
) -> None:
    # Ctrl-C or SIGTERM arriving just after the file exists, before its name is handed back
    # (as it can inside mkstemp): the group must still know the file, and remove it.
    real_open = os.open
    created = []

    def open_then_interrupt(path: str, flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)
        if flags & os.O_CREAT:
            created.append(path)
            if len(created) == which:
                os.close(fd)
                raise KeyboardInterrupt
        return fd

    monkeypatch.setattr(os, "open", open_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_group({tmp_path / f"f{n}.txt": f"{n}\n" for n in range(4)}, force=False)
    assert len(created) == which
    assert list(tmp_path.iterdir()) == []


def test_text_that_cannot_be_encoded_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    with pytest.raises(UsageError, match="not valid text"):
        write_group({tmp_path / "a": "fine", tmp_path / "b": "bad \udcff byte"}, force=False)
    assert list(tmp_path.iterdir()) == []


def test_a_second_writer_is_refused_naming_the_first_and_the_lock_goes_away(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    with output_lock(out, command="cudalock lock"):
        assert (out / LOCK_FILE).exists()
        # flock locks belong to an open file: a second open in this process is a second run.
        with (
            pytest.raises(
                EnvironmentFailure,
                match=rf"in use by another cudalock run \(pid {os.getpid()}, 'cudalock lock'",
            ),
            output_lock(out, command="cudalock bootstrap"),
        ):
            pass
        (out / "pylock.toml").write_text("x")
    assert sorted(p.name for p in out.iterdir()) == ["pylock.toml"]


def test_a_second_process_exits_3_while_the_first_holds_the_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(SRC)!r})
        from pathlib import Path
        from cudalock.fsutil import output_lock
        with output_lock(Path({str(out)!r}), command="cudalock bootstrap"):
            print("held", flush=True)
            sys.stdin.read()
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "held\n"
        held = rf"pid {process.pid}, 'cudalock bootstrap'"
        with pytest.raises(EnvironmentFailure, match=held), output_lock(out, command="lock"):
            pass
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)
    with output_lock(out, command="cudalock lock"):  # free again
        (out / "done").write_text("")
    assert sorted(p.name for p in out.iterdir()) == ["done"]


def test_a_failed_run_leaves_no_directory_it_created(tmp_path: Path) -> None:
    out = tmp_path / "new" / "out"
    with pytest.raises(RuntimeError), output_lock(out, command="x"):
        raise RuntimeError("the command failed")
    assert not out.exists()
    assert not (tmp_path / "new").exists()  # every directory it made, not only the last


def test_a_failed_run_removes_only_the_directories_it_created(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    out = tmp_path / "mine" / "a" / "b"
    with pytest.raises(RuntimeError), output_lock(out, command="x"):
        raise RuntimeError("the command failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    assert list((tmp_path / "mine").iterdir()) == []
    # A directory that fills meanwhile stays, and so does everything above it.
    with pytest.raises(RuntimeError), output_lock(out, command="x"):
        (tmp_path / "mine" / "a" / "kept").write_text("")
        raise RuntimeError("the command failed")
    assert sorted(p.name for p in (tmp_path / "mine" / "a").iterdir()) == ["kept"]


def test_the_output_directory_must_be_a_directory(tmp_path: Path) -> None:
    regular = tmp_path / "file"
    regular.write_text("x")
    with pytest.raises(UsageError, match="is not a directory"), output_lock(regular, command="x"):
        pass
    with (
        pytest.raises(UsageError, match="a part of its path is a file"),
        output_lock(regular / "sub", command="x"),
    ):
        pass
    assert regular.read_text() == "x"


def test_a_link_planted_as_the_lock_file_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).symlink_to(victim)
    with pytest.raises(EnvironmentFailure, match="symbolic link"), output_lock(out, command="x"):
        pass
    assert victim.read_text() == "precious\n"


def test_a_hard_link_planted_as_the_lock_file_is_not_written_into(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / LOCK_FILE)
    with pytest.raises(EnvironmentFailure, match="hard link"), output_lock(out, command="x"):
        pass
    assert victim.read_text() == "precious\n"


def test_a_fifo_planted_as_the_lock_file_is_refused_at_once(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / LOCK_FILE)
    with (
        pytest.raises(EnvironmentFailure, match="not a regular file"),
        output_lock(out, command="x"),
    ):
        pass


def test_a_name_past_name_max_is_a_usage_error(tmp_path: Path) -> None:
    for out in (tmp_path / ("a" * 300), tmp_path / "new" / ("b" * 300) / "c"):
        with (
            pytest.raises(UsageError, match="longer than the system allows"),
            output_lock(out, command="x"),
        ):
            pass
    assert list(tmp_path.iterdir()) == []
