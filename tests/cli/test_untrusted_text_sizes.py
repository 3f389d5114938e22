"""Untrusted text read in time linear in its size, through the real command line: TOML with
thousands of dotted keys, logs of long tokens, one line of 20 MB."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

from tests.cli.test_errors import GPU_TARGET, assert_usage_error
from tests.support.cli import cudalock


def dotted_spec(keys: int) -> str:
    return "spec_version = 1\n[request]\n" + "".join(f"a.b{n} = 1\n" for n in range(keys))


def test_a_spec_of_thousands_of_dotted_keys_is_refused_quickly_where_it_is_found(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "cudalock.toml").write_text(dotted_spec(4000))  # 47 KB
    started = time.monotonic()
    done = cudalock("bootstrap", *GPU_TARGET, "-o", out, timeout=60)
    assert time.monotonic() - started < 10
    assert_usage_error(done, "cudalock.toml", "unknown key 'a'")


def test_a_larger_spec_with_nested_dotted_keys_named_with_spec_is_refused_quickly(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "cudalock.toml"
    spec.write_text(
        "spec_version = 1\n[request]\n"
        + "".join(f"torch.a{n}.b.c.d = 1\n" for n in range(20000))  # 540 KB
    )
    started = time.monotonic()
    done = cudalock("lock", "--spec", spec, *GPU_TARGET, timeout=60)
    assert time.monotonic() - started < 10
    assert_usage_error(done, "cudalock.toml", "torch")


def doctor(log: Path, *args: str) -> tuple[float, str, int]:
    started = time.monotonic()
    done = cudalock("doctor", "--exit-code", *args, "--log", log, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return time.monotonic() - started, done.stdout, done.returncode


def test_ten_long_base64_lines_in_a_log_are_read_quickly(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    line = base64.b64encode(os.urandom(48 * 1024)).decode()  # 64 KiB
    log.write_text("\n".join([line] * 10) + "\nSegmentation fault (core dumped)\n")
    for code in (["-9"], ["-11", "--no-run"]):
        seconds, _out, returncode = doctor(log, *code)
        assert seconds < 15 and returncode in (0, 1), (code, seconds)


def test_long_lines_of_the_tokens_the_patterns_start_with_are_read_quickly(
    tmp_path: Path,
) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        ("zero_config " * 5400 + "\n") * 5
        + ("x" * 65000 + "[1]: segfault at\n") * 5
        + ("a/" * 32000 + " invoked oom-killer:\n") * 5
    )
    seconds, _out, _code = doctor(log, "-9")
    assert seconds < 15


def test_a_log_of_one_20_mb_line_says_what_was_not_read(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("x" * 20_000_000 + " Killed\n")
    seconds, out, returncode = doctor(log, "-9")
    assert seconds < 30 and returncode in (0, 1)
    assert "the log has a line of 20,000,007 characters" in out


def test_a_log_from_process_substitution_is_read(tmp_path: Path) -> None:
    import subprocess

    from tests.support.cli import CUDALOCK
    from tests.support.index import offline_env

    kill = "[12.5] Out of memory: Killed process 4242 (python) total-vm:1kB, anon-rss:1kB"
    done = subprocess.run(
        ["bash", "-c", f"{CUDALOCK} doctor --exit-code -9 --log <(printf '%s\\n' '{kill}')"],
        capture_output=True,
        text=True,
        env=offline_env(),
        timeout=60,
        check=False,
    )
    assert "Traceback" not in done.stderr
    assert "host OOM" in done.stdout, done.stdout + done.stderr


def test_kernel_files_under_proc_are_refused_not_read(tmp_path: Path) -> None:
    for path in ("/proc/kmsg", "/proc/self/status"):
        done = cudalock("doctor", "--exit-code", "-9", "--log", path, timeout=30)
        assert_usage_error(done, path, "kernel interface under /proc")
    for device in ("/dev/urandom", "/dev/zero"):
        done = cudalock("doctor", "--exit-code", "-9", "--log", device, timeout=30)
        assert_usage_error(done, device, "not a regular file")
