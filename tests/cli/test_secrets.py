"""Secrets stay out of messages and committed files; index URLs are read the way pip and uv read
them; files that hold a secret are their owner's alone, the others follow the umask.

Each case runs the real ``cudalock`` command line.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_errors import GPU_TARGET, assert_usage_error
from tests.support.cli import CUDALOCK, cudalock
from tests.support.index import offline_env


@pytest.mark.parametrize(
    "url",
    [
        "https://user:ab/SECRET@mirror.example/whl",
        "https://user:a@SECRET@mirror.example/whl",
        "https://mirror.example/whl?token=SECRET",
        "https://mirror.example/whl#SECRET",
        "http://user:SECRET@mirror.example/whl",
        "https://user:SECRET@mirror.example:99999/whl",
    ],
)
def test_error_messages_never_show_a_secret(url: str) -> None:
    done = cudalock("resolve", *GPU_TARGET, "--pytorch-index", url)
    assert_usage_error(done, "--pytorch-index")
    assert "SECRET" not in done.stderr + done.stdout


def test_a_backslash_cannot_smuggle_a_remote_host_past_the_loopback_rule() -> None:
    # pip and uv both connect to evil.example here; Python's urllib sees 127.0.0.1.
    done = cudalock(
        "resolve", *GPU_TARGET, "--pytorch-index", "http://evil.example\\@127.0.0.1/whl"
    )
    assert_usage_error(done, "backslash")


def test_matrix_refresh_applies_the_index_url_rule(tmp_path: Path) -> None:
    done = cudalock(
        "matrix", "refresh", "--dry-run", "--pypi-url", "http://pypi.evil.example/simple"
    )
    assert_usage_error(done, "--pypi-url", "plain http to a non-loopback host")
    done = cudalock("matrix", "refresh", "--dry-run", "--pytorch-index", "http://a\\@127.0.0.1/whl")
    assert_usage_error(done, "--pytorch-index", "backslash")


def test_a_byte_that_is_not_utf8_in_an_index_url_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    argv = [str(CUDALOCK), "bootstrap", *GPU_TARGET, "-o", str(out), "--pypi-index"]
    ran = subprocess.run(
        [*map(os.fsencode, argv), b"https://mirror.example/\xff/simple"],
        capture_output=True,
        env=offline_env(),
        timeout=120,
        check=False,
    )
    done = subprocess.CompletedProcess(
        ran.args, ran.returncode, ran.stdout.decode(), ran.stderr.decode("utf-8", "replace")
    )
    assert_usage_error(done, "--pypi-index", "percent-encode")
    assert not out.exists()
