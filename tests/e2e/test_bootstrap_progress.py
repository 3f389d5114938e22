"""``bootstrap --create`` shows how far a long download is: read off a real terminal (tmux) while
it runs, and off a pipe, against a stand-in PyTorch index that serves a large torch wheel slowly.

Real cudalock, uv, venv and bash; the torch stand-in carries 16 MiB of incompressible payload
and the index sends it at 1 MiB/s, so the first install step is quiet for about 16 seconds, as
a real torch download is for minutes.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from cudalock.envfiles.wheelsahead import TITLE as WAITED_FOR
from tests.support.cli import CUDALOCK, cudalock
from tests.support.index import IndexServer, offline_env, serve_indexes
from tests.support.wheels import torch_standin

pytestmark = pytest.mark.slow

PAYLOAD = 16 << 20
RATE = 1 << 20


@pytest.fixture
def slow_index(tmp_path: Path) -> Iterator[IndexServer]:
    torch = replace(torch_standin("2.1.0+cu121", "12.1"), payload_bytes=PAYLOAD)
    with serve_indexes(tmp_path / "index", pytorch={"cu121": [torch]}, pypi=[]) as server:
        server.throttle("/whl/cu121/torch-*.whl", RATE)
        yield server


def bootstrap_args(server: IndexServer, out: Path) -> list[str]:
    pytorch, pypi = server
    return [
        "bootstrap",
        "-o",
        str(out),
        "--format",
        "venv",
        "--create",
        "--driver-version",
        "535.104.05",
        "--compute-capability",
        "8.0",
        "--torch",
        "==2.1.0",
        "--with",
        "none",
        "--python",
        f"{sys.version_info[0]}.{sys.version_info[1]}",
        "--pytorch-index",
        pytorch,
        "--pypi-index",
        pypi,
    ]


#: Where the long download happens: install.sh's first step (uv's cache off, as in the other
#: tests), or the head start bootstrap gives it while uv resolves, which the run then waits for.
WHERE = {"install step": "step 1/", "head start": WAITED_FOR}


def environment(where: str, tmp_path: Path) -> dict[str, str]:
    env = offline_env()
    if where == "head start":
        del env["UV_NO_CACHE"]
        env["UV_CACHE_DIR"] = str(tmp_path / "uv-cache")
    return env


@pytest.mark.parametrize("where", list(WHERE))
def test_a_quiet_step_says_what_it_is_doing_at_least_every_ten_seconds_into_a_pipe(
    slow_index: IndexServer, tmp_path: Path, where: str
) -> None:
    started = time.monotonic()
    args = bootstrap_args(slow_index, tmp_path / "out")
    done = cudalock(*args, env=environment(where, tmp_path), timeout=300)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    beats = [line for line in done.stdout.splitlines() if "still working" in line]
    assert beats, done.stdout
    assert all(WHERE[where] in line for line in beats), beats
    assert any("downloading torch" in line for line in beats), beats
    # A line per quiet period, never a flood: the log of a one-hour install stays readable.
    assert len(beats) <= took / 10 + 1
    assert "\r" not in done.stdout and "\x1b" not in done.stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux for a real terminal")
@pytest.mark.parametrize("where", list(WHERE))
def test_on_a_terminal_one_status_line_counts_the_download_while_it_runs(
    slow_index: IndexServer, tmp_path: Path, where: str
) -> None:
    session = f"cudalock-progress-{os.getpid()}"
    script, status = tmp_path / "run.sh", tmp_path / "status"
    exports = "".join(
        f"export {key}={shlex.quote(value)}\n"
        for key, value in environment(where, tmp_path).items()
        if key.isidentifier()
    )
    command = shlex.join([str(CUDALOCK), *bootstrap_args(slow_index, tmp_path / "out")])
    script.write_text(f"{exports}{command}\necho $? > {shlex.quote(str(status))}\nsleep 600\n")
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "40", "bash", script],
        check=True,
    )
    screens: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
            screens.append(
                subprocess.run(
                    ["tmux", "capture-pane", "-p", "-t", session],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
        final = screens[-1] if screens else ""
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    assert status.exists() and status.read_text().strip() == "0", final
    live = [
        line
        for screen in screens
        for line in screen.splitlines()
        if line.startswith(WHERE[where]) and "downloading torch" in line
    ]
    assert live, "no status line was seen while torch downloaded:\n" + final
    # The line was redrawn in place while the seconds went by, not printed again and again.
    assert len({line.split(", ", 1)[1].split(":", 1)[0] for line in live}) >= 3, live
    assert "still working" not in final
    assert final.count("step 1/") == 1, final
