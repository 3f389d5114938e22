"""``cudalock bootstrap`` against hostile conditions: a link planted where the log goes, Ctrl-C
and SIGTERM while it writes or builds, credentials in a framework URL, file modes. The real CLI;
``--create`` makes a real virtual environment."""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cudalock.fsutil import output_lock
from tests.support.cli import CUDALOCK, cudalock
from tests.support.index import offline_env
from tests.test_reliability import GPU_TARGET

pytestmark = pytest.mark.slow

PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
TOKEN = "ghp_SECRETTOKEN"
#: A port nothing listens on: install.sh's first download fails at once.
DEAD_INDEX = "http://127.0.0.1:9/whl"
VENV_FILES = ["constraints.txt", "cudalock.toml", "install.sh", "requirements.txt"]


def bootstrap_argv(out: Path, *extra: str) -> list[str]:
    return [
        str(CUDALOCK),
        "bootstrap",
        *GPU_TARGET,
        "--torch",
        "2.1.0",
        "--python",
        PYTHON,
        "--format",
        "venv",
        "-o",
        str(out),
        *extra,
    ]


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split(") ")[1][0]
        except OSError:
            continue
        if text in argv and state != "Z":
            found.append(argv)
    return found


def test_a_link_planted_at_the_log_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "cudalock-bootstrap.log").symlink_to(victim)
    done = cudalock(
        *bootstrap_argv(out, "--create", "--pytorch-index", DEAD_INDEX)[1:],
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 3, done.stderr  # the index is not there
    assert victim.read_text() == "precious\n"
    log = out / "cudalock-bootstrap.log"
    assert not log.is_symlink() and "### create the virtual environment" in log.read_text()


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_create_stops_the_children_and_keeps_the_log(
    tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    out = tmp_path / "out"
    run = subprocess.Popen(
        bootstrap_argv(out, "--create", "--pytorch-index", DEAD_INDEX),
        cwd=tmp_path,
        env=offline_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    venv = str(out / ".venv")
    deadline = time.monotonic() + 120
    while not processes_mentioning(venv) and time.monotonic() < deadline:
        time.sleep(0.02)  # python -m venv (then ensurepip) is running
    assert processes_mentioning(venv), "the venv was never being created"
    run.send_signal(sig)  # to cudalock alone: its children are in a group of their own
    _stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == status, stderr
    assert "Traceback" not in stderr
    time.sleep(0.5)
    assert processes_mentioning(venv) == []  # nothing left running on its own
    log = (out / "cudalock-bootstrap.log").read_text()
    assert "### create the virtual environment" in log
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "constraints.txt",
        "cudalock-bootstrap.log",
        "cudalock.toml",
        "install.sh",
        "requirements.txt",
    ]
    assert not list(out.glob(".*.tmp")) and not (out / ".cudalock.lock").exists()


def test_interrupted_bootstraps_leave_all_their_files_or_none(tmp_path: Path) -> None:
    rng = random.Random(16)
    seen = set()
    for attempt in range(20):
        out = tmp_path / f"out-{attempt}"
        run = subprocess.Popen(
            bootstrap_argv(out),
            env=offline_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        # Somewhere between start-up and the end of the writes (a run takes ~0.5 s here).
        time.sleep(rng.uniform(0.05, 0.6))
        run.send_signal(rng.choice([signal.SIGINT, signal.SIGTERM]))
        run.wait(timeout=60)
        present = sorted(p.name for p in out.iterdir()) if out.exists() else []
        assert present in ([], VENV_FILES), (attempt, run.returncode, present)
        seen.add(tuple(present))
    # (Which outcomes occur depends on timing; the assertion above is the point.)
    assert seen


def test_a_bootstrap_into_a_directory_another_run_holds_exits_3(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with output_lock(out, command="cudalock lock"):
        done = cudalock(*bootstrap_argv(out)[1:], timeout=120)
    assert done.returncode == 3, done.stderr
    assert f"in use by another cudalock run (pid {os.getpid()}, 'cudalock lock'" in done.stderr
    assert not out.exists()  # nothing written, and the directory it made for the run is gone


def test_two_bootstraps_into_one_directory_never_mix_their_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for _round in range(6):
        runs = {
            python: subprocess.Popen(
                [*bootstrap_argv(out, "--force"), "--python", python],
                env=offline_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for python in ("3.10", "3.11")
        }
        results = {
            python: (run.wait(timeout=120), run.communicate()[1]) for python, run in runs.items()
        }
        assert sorted(code for code, _err in results.values()) in ([0, 0], [0, 3]), results
        for code, stderr in results.values():
            assert code == 0 or "in use by another cudalock run (pid" in stderr, stderr
        headers = {
            name: ("3.10" if "Python 3.10" in (out / name).read_text() else "3.11")
            for name in ("constraints.txt", "install.sh", "requirements.txt")
        }
        spec_python = "3.10" if 'python = "3.10"' in (out / "cudalock.toml").read_text() else "3.11"
        assert set(headers.values()) == {spec_python}, headers


def test_a_token_in_a_framework_url_stays_out_of_the_spec_and_the_output(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    framework = f"git+https://alice:{TOKEN}@git.example/org/finetunekit.git@v1.0"
    done = subprocess.run(
        [
            "sh",
            "-c",
            'umask 022 && exec "$@"',
            "sh",
            *bootstrap_argv(out, "--framework", framework),
        ],
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr
    spec = (out / "cudalock.toml").read_text()
    assert TOKEN not in spec and "git+https://git.example/org/finetunekit.git@v1.0" in spec
    # install.sh needs the token to fetch the framework, so it is the owner's alone, and so is
    # nothing else; running it shows step titles without the token.
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {
        "install.sh": 0o700,
        "requirements.txt": 0o644,
        "constraints.txt": 0o644,
        "cudalock.toml": 0o644,
    }
    assert "note: install.sh: hold(s) credentials" in done.stdout + done.stderr
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    ran = subprocess.run(
        ["bash", str(out / "install.sh")],
        env={**offline_env(), "PYTHON": str(fake)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "the framework git+https://***@git.example" in ran.stdout
    assert TOKEN not in ran.stdout + ran.stderr


def test_index_credentials_make_the_files_that_hold_them_owner_only(tmp_path: Path) -> None:
    out = tmp_path / "out"
    mirror = ["--pypi-index", f"https://alice:{TOKEN}@mirror.example/simple"]
    done = subprocess.run(
        [
            "sh",
            "-c",
            'umask 002 && exec "$@"',
            "sh",
            *bootstrap_argv(out, "--format", "conda", *mirror),
        ],
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {
        "environment.yml": 0o600,
        "environment.conda-lock.yml": 0o600,
        "install.sh": 0o700,
        "constraints.txt": 0o664,
        "cudalock.toml": 0o664,
    }
    assert TOKEN not in (out / "cudalock.toml").read_text()
    assert TOKEN not in done.stdout + done.stderr
    assert os.access(out / "install.sh", os.X_OK)
