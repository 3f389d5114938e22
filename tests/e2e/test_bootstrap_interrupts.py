"""``cudalock bootstrap`` against hostile conditions: a link planted where the log goes, Ctrl-C
and SIGTERM while it writes or builds, credentials in a framework URL, file modes. The real CLI
and real uv, resolving the closure against stand-in indexes on 127.0.0.1 (a private framework
comes from a real git repository served there); ``--create`` makes a real virtual environment."""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudalock.fsutil import output_lock
from tests.cli.test_errors import GPU_TARGET
from tests.support.cli import CUDALOCK, cudalock
from tests.support.gitserver import serve_git_repository
from tests.support.index import IndexServer, offline_env, serve_indexes
from tests.support.localproject import make_local_project
from tests.support.wheels import StandIn, torch_standin

pytestmark = pytest.mark.slow

PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
USER, TOKEN = "alice", "ghp_SECRETTOKEN"
LOCK_FILES = [
    "pylock.first.toml",
    "pylock.toml",
    "requirements.last.txt",
    "requirements.lock.txt",
    "uv-install.toml",
]
#: What one bootstrap --format venv writes: the environment files and the lock, together.
VENV_FILES = sorted(
    ["constraints.txt", "cudalock.toml", "install.sh", "requirements.txt", *LOCK_FILES]
)


def stand_ins() -> dict[str, list[StandIn]]:
    """torch 2.1.0+cu121 (the shipped matrix's choice for this target) and its torchvision."""
    return {
        "cu121": [
            torch_standin("2.1.0+cu121", "12.1"),
            StandIn("torchvision", "0.16.0+cu121", requires_dist=["torch==2.1.0"]),
        ]
    }


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    with serve_indexes(tmp_path_factory.mktemp("index"), pytorch=stand_ins()) as server:
        yield server


@pytest.fixture(scope="module")
def private_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """The same packages behind a user and a token, as a private mirror serves them."""
    with serve_indexes(
        tmp_path_factory.mktemp("private"), pytorch=stand_ins(), auth=(USER, TOKEN)
    ) as server:
        yield server


def bootstrap_argv(out: Path, index: IndexServer, *extra: str, credentials: str = "") -> list[str]:
    """The command line, both indexes on ``index`` (reached as ``credentials@`` if given)."""
    pytorch_url, pypi_url = (
        url.replace("http://", f"http://{credentials}@") if credentials else url for url in index
    )
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
        "--pytorch-index",
        pytorch_url,
        "--pypi-index",
        pypi_url,
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


def test_a_link_planted_at_the_log_is_replaced_not_followed(
    tmp_path: Path, index: IndexServer
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "cudalock-bootstrap.log").symlink_to(victim)
    # The closure resolves (from the wheels' metadata); installing it fails: no wheel is served.
    index.fail("/whl/cu121/*.whl", status=500)
    try:
        done = cudalock(
            *bootstrap_argv(out, index, "--create")[1:],
            cwd=tmp_path,
            env=offline_env() | {"UV_HTTP_RETRIES": "0"},
            timeout=300,
        )
    finally:
        index.clear_faults()
    assert done.returncode == 3, done.stderr  # the wheels are not there
    assert victim.read_text() == "precious\n"
    log = out / "cudalock-bootstrap.log"
    assert not log.is_symlink() and "### create the virtual environment" in log.read_text()


@pytest.mark.parametrize(
    ("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
def test_a_signal_during_create_stops_the_children_and_keeps_the_log(
    tmp_path: Path, index: IndexServer, sig: signal.Signals, status: int
) -> None:
    out = tmp_path / "out"
    # The first install step waits on the torch wheel while the signal comes.
    index.slow("/whl/cu121/torch-*.whl", 5)
    try:
        run = subprocess.Popen(
            bootstrap_argv(out, index, "--create"),
            cwd=tmp_path,
            env=offline_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        script = str(out / "install.sh")
        deadline = time.monotonic() + 120
        while not processes_mentioning(script) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert processes_mentioning(script), "install.sh never ran"
        run.send_signal(sig)  # to cudalock alone: its children are in a group of their own
        _stdout, stderr = run.communicate(timeout=60)
    finally:
        index.clear_faults()
    assert run.returncode == status, stderr
    assert "Traceback" not in stderr
    time.sleep(0.5)
    assert processes_mentioning(str(out)) == []  # nothing left running on its own
    log = (out / "cudalock-bootstrap.log").read_text()
    assert "### create the virtual environment" in log
    assert "### install.sh" in log
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(
        [*VENV_FILES, "cudalock-bootstrap.log"]
    )
    assert (out / ".venv").is_dir()  # left for inspection, as the message says
    assert not list(out.glob(".*.tmp")) and not (out / ".cudalock.lock").exists()


def interrupted_while_running(argv: list[str], cwd: Path, env: dict[str, str], path: str) -> str:
    """Run ``argv``, Ctrl-C it once a process it started names ``path``; its stderr (exit 130)."""
    run = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not processes_mentioning(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processes_mentioning(path), f"no process named {path} while it ran"
    run.send_signal(signal.SIGINT)
    _stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == 130, stderr
    return stderr


def test_a_signal_while_the_venv_is_made_beside_the_closure_leaves_nothing(
    tmp_path: Path, index: IndexServer
) -> None:
    out = tmp_path / "out"
    # uv resolves the closure for a while: the venv is being made meanwhile.
    index.slow("/whl/cu121/torchvision/", 5)
    try:
        stderr = interrupted_while_running(
            bootstrap_argv(out, index, "--create"), tmp_path, offline_env(), str(out / ".venv")
        )
    finally:
        index.clear_faults()
    assert "Traceback" not in stderr
    time.sleep(0.5)
    assert processes_mentioning(str(out)) == []
    # Nothing was written yet: the venv begun and its log are removed, and so is -o.
    assert not out.exists()


def test_a_signal_while_the_torch_wheels_download_ahead_leaves_nothing(
    tmp_path: Path, index: IndexServer
) -> None:
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    env = offline_env()
    del env["UV_NO_CACHE"]  # the head start fills uv's cache: none, and there is none
    env |= {"UV_CACHE_DIR": str(tmp_path / "uv-cache"), "TMPDIR": str(scratch)}
    # uv waits on a page both the resolution and the download ahead read.
    index.slow("/whl/cu121/torchvision/", 5)
    try:
        stderr = interrupted_while_running(
            bootstrap_argv(out, index, "--create"), tmp_path, env, str(scratch)
        )
    finally:
        index.clear_faults()
    assert "Traceback" not in stderr
    time.sleep(0.5)
    assert processes_mentioning(str(scratch)) == [] and processes_mentioning(str(out)) == []
    assert not out.exists()
    assert not list(scratch.iterdir()), "the download's directory was left behind"


def test_interrupted_bootstraps_leave_all_their_files_or_none(
    tmp_path: Path, index: IndexServer
) -> None:
    rng = random.Random(16)
    seen = set()
    for attempt in range(20):
        out = tmp_path / f"out-{attempt}"
        run = subprocess.Popen(
            bootstrap_argv(out, index),
            env=offline_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        # Somewhere between start-up and the end of the writes (a run takes ~1 s here).
        time.sleep(rng.uniform(0.05, 1.5))
        run.send_signal(rng.choice([signal.SIGINT, signal.SIGTERM]))
        run.wait(timeout=60)
        present = sorted(p.name for p in out.iterdir()) if out.exists() else []
        assert present in ([], VENV_FILES), (attempt, run.returncode, present)
        seen.add(tuple(present))
    # (Which outcomes occur depends on timing; the assertion above is the point.)
    assert seen


def test_a_bootstrap_into_a_directory_another_run_holds_exits_3(
    tmp_path: Path, index: IndexServer
) -> None:
    out = tmp_path / "out"
    with output_lock(out, command="cudalock lock"):
        done = cudalock(*bootstrap_argv(out, index)[1:], timeout=120)
    assert done.returncode == 3, done.stderr
    assert f"in use by another cudalock run (pid {os.getpid()}, 'cudalock lock'" in done.stderr
    assert not out.exists()  # nothing written, and the directory it made for the run is gone


def test_two_bootstraps_into_one_directory_never_mix_their_files(
    tmp_path: Path, index: IndexServer
) -> None:
    out = tmp_path / "out"
    for _round in range(6):
        runs = {
            python: subprocess.Popen(
                [*bootstrap_argv(out, index, "--force"), "--python", python],
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
            # "(pid N, ...)" names the holder, unless it has not written its name yet.
            assert code == 0 or "in use by another cudalock run (" in stderr, stderr
        headers = {
            name: ("3.10" if "Python 3.10" in (out / name).read_text() else "3.11")
            for name in ("constraints.txt", "install.sh", "requirements.txt")
        }
        spec_python = "3.10" if 'python = "3.10"' in (out / "cudalock.toml").read_text() else "3.11"
        assert set(headers.values()) == {spec_python}, headers
        assert sorted(p.name for p in out.iterdir()) == VENV_FILES
        # The lock files too: --check reads the request and target from cudalock.toml, compares
        # them with what pylock.toml records, and regenerates the other three lock files from
        # pylock.toml to compare them; a file of the other run would not match.
        check = cudalock("lock", "--check", "-o", str(out), timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr


@pytest.fixture
def private_framework(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A framework in a git repository only ``USER:TOKEN`` may read: (URL with the token, the
    same URL without it), tag v1.0."""
    source = make_local_project(tmp_path / "finetunekit", "finetunekit", "1.0", ["torch"])
    with serve_git_repository(tmp_path, source, tag="v1.0", auth=(USER, TOKEN)) as url:
        yield f"git+{url.replace('http://', f'http://{USER}:{TOKEN}@')}@v1.0", f"git+{url}@v1.0"


def test_a_token_in_a_framework_url_stays_out_of_the_spec_the_lock_and_the_output(
    tmp_path: Path, index: IndexServer, private_framework: tuple[str, str]
) -> None:
    out = tmp_path / "out"
    framework, without_token = private_framework
    done = cudalock(*bootstrap_argv(out, index, "--framework", framework)[1:], umask=0o022)
    assert done.returncode == 0, done.stderr
    assert "finetunekit" in (out / "requirements.lock.txt").read_text()  # uv read the repository
    assert TOKEN not in done.stdout + done.stderr
    spec = (out / "cudalock.toml").read_text()
    assert TOKEN not in spec and without_token in spec
    lock = (out / "pylock.toml").read_text()
    assert without_token.removeprefix("git+").removesuffix("@v1.0") in lock
    for name in LOCK_FILES:
        assert TOKEN not in (out / name).read_text() and USER not in (out / name).read_text()
    # install.sh needs the token to fetch the framework, so it is the owner's alone, and so is
    # nothing else; running it shows step titles without the token.
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {name: 0o700 if name == "install.sh" else 0o644 for name in VENV_FILES}
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
    assert f"the framework {without_token.replace('http://', 'http://***@')}" in ran.stdout
    assert TOKEN not in ran.stdout + ran.stderr


def test_a_private_framework_installs_from_a_lock_that_holds_no_token(
    tmp_path: Path, index: IndexServer, private_framework: tuple[str, str]
) -> None:
    out = tmp_path / "out"
    framework, _without_token = private_framework
    done = cudalock(
        *bootstrap_argv(out, index, "--framework", framework, "--create")[1:], timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert TOKEN not in (out / "pylock.toml").read_text()
    # install.sh installed the framework from the URL with the token first, so uv found the
    # locked commit in place when it installed pylock.toml.
    log = (out / "cudalock-bootstrap.log").read_text()
    assert "the framework git+http://***@127.0.0.1" in log and TOKEN not in log
    assert "environment ready" in done.stdout
    python = out / ".venv" / "bin" / "python"
    shown = subprocess.run(
        [str(python), "-c", "import finetunekit; print(finetunekit.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == "1.0"


def test_index_credentials_make_the_files_that_hold_them_owner_only(
    tmp_path: Path, private_index: IndexServer
) -> None:
    out = tmp_path / "out"
    argv = bootstrap_argv(out, private_index, "--format", "conda", credentials=f"{USER}:{TOKEN}")
    done = cudalock(*argv[1:], umask=0o002)
    assert done.returncode == 0, done.stderr
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {
        # environment.yml installs requirements.lock.txt, which names the indexes without them.
        "environment.yml": 0o664,
        "environment.conda-lock.yml": 0o600,
        "install.sh": 0o700,
        "constraints.txt": 0o664,
        "cudalock.toml": 0o664,
        **dict.fromkeys(LOCK_FILES, 0o664),
    }
    # uv read the private indexes with the credentials; the lock names them without.
    assert any(status == 200 for _method, _path, status in private_index.requests)
    assert f"--index-url {private_index.pypi_url}\n" in (out / "requirements.lock.txt").read_text()
    for name in ["cudalock.toml", "environment.yml", *LOCK_FILES]:
        assert TOKEN not in (out / name).read_text()
    assert TOKEN not in done.stdout + done.stderr
    assert os.access(out / "install.sh", os.X_OK)
