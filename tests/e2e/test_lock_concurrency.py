"""``cudalock lock`` against hostile conditions: credentials, concurrent runs, files it did not
write, an output path that is not a directory, file modes. The real CLI and real uv against the
stand-in indexes of ``test_lock_e2e`` on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_errors import assert_usage_error
from tests.e2e.test_lock import (
    REQUEST,
    TARGET,
    lock,
    pypi_stand_ins,
    pytorch_stand_ins,
    serve_lock_indexes,
)
from tests.support.cli import CUDALOCK, cudalock
from tests.support.index import IndexServer, offline_env, serve_indexes

pytestmark = pytest.mark.slow

USER, PASSWORD = "alice", "pa55/w@rd"
#: The lock files one ``cudalock lock`` writes.
LOCK_FILES = [
    "pylock.first.toml",
    "pylock.toml",
    "requirements.last.txt",
    "requirements.lock.txt",
    "uv-install.toml",
]
#: What a lock with Target and Request flags writes: the lock files and the spec remembering
#: the flags.
WRITTEN = sorted(["cudalock.toml", *LOCK_FILES])


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    yield from serve_lock_indexes(tmp_path_factory)


@pytest.fixture(scope="module")
def private_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    with serve_indexes(
        tmp_path_factory.mktemp("private"),
        pytorch={"cu121": pytorch_stand_ins()},
        pypi=pypi_stand_ins(),
        auth=(USER, PASSWORD),
    ) as server:
        yield server


@pytest.fixture(scope="module")
def uv_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uv-cache")


def lock_argv(pytorch_url: str, pypi_url: str, *extra: str) -> list[str]:
    """The whole ``cudalock lock`` command line for the test target and request."""
    indexes = ["--pytorch-index", pytorch_url, "--pypi-index", pypi_url]
    return [str(CUDALOCK), "lock", *TARGET, *REQUEST, *indexes, *extra]


def silent_server() -> socket.socket:
    """A listening socket that never answers: a lock using it waits until its --timeout."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    return silent


def with_credentials(url: str) -> str:
    quoted = PASSWORD.replace("/", "%2F").replace("@", "%40")
    return url.replace("http://", f"http://{USER}:{quoted}@")


def test_no_password_reaches_the_lock_or_the_output(
    private_index: IndexServer, tmp_path: Path, uv_cache: Path
) -> None:
    done = cudalock(
        "lock",
        *TARGET,
        *REQUEST,
        "--pytorch-index",
        with_credentials(private_index.pytorch_url),
        "--pypi-index",
        with_credentials(private_index.pypi_url),
        "--cache-dir",
        uv_cache,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    written = {path.name: path.read_text() for path in tmp_path.iterdir() if path.is_file()}
    assert sorted(written) == WRITTEN
    for text in [*written.values(), done.stdout, done.stderr]:
        assert "pa55" not in text and USER not in text


def test_lock_files_follow_the_umask_and_stay_as_the_user_set_them(
    index: IndexServer, tmp_path: Path, uv_cache: Path
) -> None:
    argv = lock_argv(index.pytorch_url, index.pypi_url, "--cache-dir", str(uv_cache))
    done = cudalock(*argv[1:], cwd=tmp_path, umask=0o022)
    assert done.returncode == 0, done.stderr
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(WRITTEN, 0o644)


def test_a_regular_file_as_the_output_directory_is_refused_before_uv_runs(
    index: IndexServer, tmp_path: Path
) -> None:
    target = tmp_path / "pylock.toml"
    target.write_text("mine\n")
    asked = len(index.requests)
    done = lock(index, tmp_path, "-o", str(target))
    assert_usage_error(done, "is not a directory")
    assert index.requests[asked:] == []  # uv never ran
    assert target.read_text() == "mine\n"


def test_a_comment_that_says_cudalock_does_not_make_a_lock_ours(
    index: IndexServer, tmp_path: Path, uv_cache: Path
) -> None:
    hand_written = (
        '# created-by = "cudalock"  (not really)\n'
        'lock-version = "1.0"\ncreated-by = "someone"\npackages = []\n'
    )
    (tmp_path / "pylock.toml").write_text(hand_written)
    done = lock(index, tmp_path, cache=uv_cache)
    assert_usage_error(done, "pylock.toml already exists", "--force")
    assert (tmp_path / "pylock.toml").read_text() == hand_written


def test_two_locks_into_one_directory_never_mix_their_files(
    index: IndexServer, tmp_path: Path, uv_cache: Path
) -> None:
    args = lock_argv(index.pytorch_url, index.pypi_url, "--cache-dir", str(uv_cache))
    for round_ in range(4):
        out = tmp_path / f"round-{round_}"
        out.mkdir()
        # Two runs differing in what they record: all four files must come from one of them.
        runs = [
            subprocess.Popen(
                [*args, "--python", python, "-o", str(out)],
                env=offline_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for python in ("3.10", "3.11")
        ]
        results = [(run.wait(timeout=300), run.communicate()) for run in runs]
        codes = sorted(code for code, _output in results)
        assert codes in ([0, 0], [0, 3]), results
        for code, (_stdout, stderr) in results:
            if code == 3:
                assert "in use by another cudalock run (pid" in stderr, stderr
        lock_text = (out / "pylock.toml").read_text()
        requirements = (out / "requirements.lock.txt").read_text()
        python = "3.10" if 'requires-python = "==3.10.*"' in lock_text else "3.11"
        assert f"# For Python {python} on" in requirements
        assert sorted(p.name for p in out.iterdir()) == WRITTEN
        # --check regenerates requirements.lock.txt, requirements.last.txt and uv-install.toml
        # from pylock.toml and compares: any file of the other run would not match.
        check = subprocess.run(
            [*args, "--python", python, "-o", str(out), "--check"],
            env=offline_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert check.returncode == 0, check.stderr


def test_a_second_lock_exits_3_naming_the_run_that_holds_the_directory(
    index: IndexServer, tmp_path: Path
) -> None:
    # The first run holds the directory while it waits on a server that never answers.
    silent = silent_server()
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    slow = ["--timeout", "30", "--retries", "0", "-o", str(tmp_path)]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    first = subprocess.Popen(
        lock_argv(f"{url}/whl", f"{url}/simple", *slow),
        env={**offline_env(), "TMPDIR": str(scratch)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / ".cudalock.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = lock(index, tmp_path)
        assert second.returncode == 3, second.stderr
        assert f"in use by another cudalock run (pid {first.pid}, 'cudalock lock'" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        first.terminate()  # SIGTERM: cudalock stops uv and removes its scratch directory
        first.wait()
        silent.close()
    assert not (tmp_path / "pylock.toml").exists()
    assert list(scratch.iterdir()) == []


def test_sigterm_during_a_lock_leaves_no_temporary_files(
    index: IndexServer, tmp_path: Path
) -> None:
    silent = silent_server()
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    slow = ["--timeout", "60", "--retries", "0", "-o", str(tmp_path / "out")]
    run = subprocess.Popen(
        lock_argv(f"{url}/whl", f"{url}/simple", *slow),
        env={**offline_env(), "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("cudalock-lock-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # uv is running, waiting on the silent server
        run.terminate()
        _stdout, stderr = run.communicate(timeout=60)
    finally:
        silent.close()
    assert run.returncode == 143, stderr
    assert "cudalock: terminated" in stderr and "Traceback" not in stderr
    assert sorted(os.listdir(tmp_path)) == []  # no scratch project, no output directory
    assert processes_working_in(tmp_path) == []  # uv went with cudalock


def processes_working_in(directory: Path) -> list[int]:
    """PIDs whose working directory is under ``directory`` (uv runs in lock's scratch dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if cwd.startswith(str(directory)):
                found.append(int(entry.name))
    return found
