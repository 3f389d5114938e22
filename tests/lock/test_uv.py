"""uv's version, asked in a thread of its own, from real processes standing in for uv."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from cudalock.errors import EnvironmentFailure
from cudalock.lock.uv import uv_version_later


def _uv(tmp_path: Path, body: str) -> str:
    script = tmp_path / "uv"
    script.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_the_version_uv_prints_is_the_answer(tmp_path: Path) -> None:
    wait = uv_version_later(_uv(tmp_path, "echo 'uv 0.13.9 (x86_64-unknown-linux-gnu)'"))
    assert wait() == "0.13.9"
    assert wait() == "0.13.9"  # asked once, answered as often as wanted


def test_a_uv_that_fails_raises_when_the_answer_is_waited_for(tmp_path: Path) -> None:
    wait = uv_version_later(_uv(tmp_path, "echo 'broken install' >&2; exit 2"))
    with pytest.raises(EnvironmentFailure, match="broken install"):
        wait()


def test_a_uv_that_cannot_start_raises_an_environment_failure(tmp_path: Path) -> None:
    wait = uv_version_later(str(tmp_path / "no-such-uv"))
    with pytest.raises(EnvironmentFailure, match="cannot run"):
        wait()
