"""When bootstrap gives the torch wheels a head start (only where uv's cache will hold them),
and how its throwaway directory links into that cache."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from cudalock.envfiles.wheelsahead import WheelsAhead, link_mode, wheels_ahead_wanted
from cudalock.fsutil import start_log
from cudalock.lock.closure import RoutedWheels
from cudalock.lock.uv import find_uv
from tests.support.index import offline_env
from tests.support.tmpfs import mounted_tmpfs


@pytest.mark.parametrize("value", ["", "0", "false", "False", "no", "off"])
def test_a_flag_left_off_leaves_the_head_start_on(value: str) -> None:
    assert wheels_ahead_wanted({"UV_NO_CACHE": value, "UV_OFFLINE": value})


@pytest.mark.parametrize("name", ["UV_NO_CACHE", "UV_OFFLINE"])
@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_no_cache_or_offline_turns_it_off(name: str, value: str) -> None:
    assert not wheels_ahead_wanted({name: value})


def test_the_directory_links_into_uv_s_cache_by_hard_links_on_its_filesystem_only(
    tmp_path: Path,
) -> None:
    # Real uv says where its cache is (not made yet: its parent's filesystem counts).
    uv = find_uv()
    env = offline_env() | {"UV_CACHE_DIR": str(tmp_path / "cache" / "uv")}
    beside = tmp_path / "beside"
    beside.mkdir()
    assert link_mode(uv, beside, env) == "hardlink"
    with mounted_tmpfs(tmp_path / "elsewhere", "64k") as elsewhere:
        # A hard link to another filesystem would be a copy of every file.
        assert link_mode(uv, elsewhere, env) == "symlink"


def test_a_head_start_given_up_says_what_the_closure_changed(tmp_path: Path) -> None:
    # A stand-in uv: `cache dir` answers, a download of the pin `quick` ends at once, any other
    # runs until it is stopped, as a download of several GB would.
    uv = tmp_path / "uv"
    uv.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = cache ]; then echo "$UV_CACHE_DIR"; exit 0; fi\n'
        'case "$*" in *quick==*) exit 0;; esac\n'
        "exec sleep 60\n"
    )
    uv.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "UV_CACHE_DIR": str(tmp_path / "cache")}
    ahead = WheelsAhead(str(uv), None, env, timeout_s=120)
    wheels = RoutedWheels(
        "http://127.0.0.1:9/whl/cu128",
        ("torch==2.8.0+cu128",),
        python="3.12",
        python_platform="x86_64-manylinux_2_28",
    )
    ahead.start(wheels)
    # Each start replaces the one before; the log says what the closure changed.
    changes: list[tuple[dict[str, Any], str]] = [
        ({"python": "3.11"}, "the closure is resolved for Python 3.11 instead"),
        (
            {"python_platform": "aarch64-manylinux_2_28"},
            "the closure is resolved for aarch64-manylinux_2_28 instead",
        ),
        (
            {"index_url": "http://127.0.0.1:9/whl/cu126"},
            "the closure takes the torch family from another index",
        ),
        ({"pins": ("quick==1",)}, "the closure is resolved again, with other torch and CUDA pins"),
    ]
    for change, _ in changes:
        wheels = dataclasses.replace(wheels, **change)
        ahead.start(wheels)
    log = tmp_path / "log"
    start_log(log, "the test's log\n")
    ahead.wait(log, lambda line: None)
    stopped = [line for line in log.read_text().splitlines() if line.startswith("stopped: ")]
    assert stopped == [f"stopped: {reason}" for _, reason in changes]
