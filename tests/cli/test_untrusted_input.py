"""Hostile input through the real ``cudalock`` command line: inputs that never end, block or
nest without limit, numbers with thousands of digits, values that would run code, terminal
escapes. Each gives its documented exit status and one line, quickly."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cudalock.defaults import OUTPUT_FORMATS, OutputFormat
from cudalock.envfiles.render import RenderOptions, render_files
from cudalock.matrix import default_matrix_dir
from cudalock.tomlfile import tomllib
from tests.cli.test_errors import GPU_TARGET, assert_usage_error
from tests.envfiles.test_render import make_plan
from tests.support.cli import CUDALOCK, cudalock

FIVE_THOUSAND_DIGITS = "9" * 5000
PROBE: dict[str, Any] = {
    "schema_version": 1,
    "name": "n",
    "platform": "linux-x86_64",
    "driver_version": "535.104.05",
    "driver_cuda": "12.2",
    "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}],
    "host": {"os": "linux", "arch": "x86_64", "glibc": "2.35", "memory_total_bytes": 2**36},
}


def quick(
    *args: str | os.PathLike[str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The command, which must be done within 20 s (a blocked read would hang until killed)."""
    started = time.monotonic()
    done = cudalock(*args, cwd=cwd, timeout=60)
    assert time.monotonic() - started < 20, done
    return done


def probe_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "probe.json"
    path.write_text(text)
    return path


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


# ---------------------------------------------------------------------------------------------
# Inputs that never end or block: refused at once, whoever named them


def special_inputs(fifo: Path, tmp_path: Path) -> dict[str, Path]:
    return {
        "fifo": fifo,
        "zero": Path("/dev/zero"),
        "urandom": Path("/dev/urandom"),
        "dir": tmp_path,
    }


@pytest.mark.parametrize("kind", ["fifo", "zero", "urandom", "dir"])
@pytest.mark.parametrize(
    "command",
    [
        ["resolve", "--probe", "{}"],
        ["lock", "--spec", "{}"],
        ["bootstrap", *GPU_TARGET, "--spec", "{}"],
        ["audit", "--report", "{}"],
        ["doctor", "--exit-code", "-9", "--log", "{}"],
        ["doctor", "--exit-code", "137", "--deepspeed-config", "{}", "--params", "7B"],
        ["memory", "--model", "{}", "--zero", "3", "--host-memory", "64G", "--gpus-per-node", "1"],
    ],
)
def test_fifos_devices_and_directories_are_refused_at_once(
    command: list[str], kind: str, fifo: Path, tmp_path: Path
) -> None:
    path = special_inputs(fifo, tmp_path)[kind]
    if command[0] == "memory" and kind == "dir":
        pytest.skip("a model directory is a valid --model")
    if command[:1] == ["doctor"] and "--log" in command and kind == "fifo":
        pytest.skip("a FIFO named as a log is read, within bounds (test_untrusted_text_sizes)")
    args = [str(path) if arg == "{}" else arg for arg in command]
    done = quick(*args, cwd=tmp_path)
    line = assert_usage_error(done)
    assert str(path) in line and re.search("not a regular file|is a directory", line), line


def test_a_matrix_file_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix"
    shutil.copytree(default_matrix_dir(), matrix)
    (matrix / "gpus.toml").unlink()
    os.mkfifo(matrix / "gpus.toml")
    assert_usage_error(quick("resolve", *GPU_TARGET, "--matrix", matrix), "not a regular file")


def test_stdin_the_user_chose_is_read_up_to_the_limit(tmp_path: Path) -> None:
    # '-' with /dev/zero behind it: read to the limit (16 MiB), found binary, exit 2.
    started = time.monotonic()
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run(
            [str(CUDALOCK), "audit", "--report", "-"],
            stdin=zero,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert time.monotonic() - started < 20
    assert_usage_error(done, "binary data")


# ---------------------------------------------------------------------------------------------
# Numbers with thousands of digits (int() refuses more than 4300) and absurd nesting


@pytest.mark.parametrize(
    ("field", "value", "command", "needles"),
    [
        ("gpu index", FIVE_THOUSAND_DIGITS, ["resolve"], ["not valid JSON", "thousands of digits"]),
        (
            "host memory",
            FIVE_THOUSAND_DIGITS,
            ["memory", "--params", "7B", "--zero", "3"],
            ["thousands of digits"],
        ),
        ("host glibc", f'"2.{FIVE_THOUSAND_DIGITS}"', ["lock"], ["'host.glibc'", "like 2.35"]),
        ("host memory", str(2**70), ["memory", "--params", "7B"], ["below 2^63"]),
    ],
)
def test_huge_numbers_in_probe_files_exit_2(
    tmp_path: Path, field: str, value: str, command: list[str], needles: list[str]
) -> None:
    text = json.dumps(PROBE)
    if field == "gpu index":
        text = text.replace('"index": 0', f'"index": {value}')
    elif field == "host memory":
        text = text.replace(f'"memory_total_bytes": {2**36}', f'"memory_total_bytes": {value}')
    else:
        text = text.replace('"glibc": "2.35"', f'"glibc": {value}')
    path = probe_file(tmp_path, text)
    done = quick(*command, "--probe", path, cwd=tmp_path)
    line = assert_usage_error(done, "probe.json", *needles)
    assert len(line) < 400  # the number itself is not echoed back


def test_a_huge_exit_code_exits_2() -> None:
    line = assert_usage_error(quick("doctor", "--exit-code", FIVE_THOUSAND_DIGITS), "out of range")
    assert len(line) < 200


def test_a_reports_5000_digit_driver_is_not_read_as_its_first_digits(tmp_path: Path) -> None:
    report = tmp_path / "report.txt"
    report.write_text(
        "PyTorch version: 2.1.0+cu121\nCUDA used to build PyTorch: 12.1\n"
        f"Nvidia driver version: {FIVE_THOUSAND_DIGITS}\nGPU 0: NVIDIA A100-SXM4-80GB\n"
    )
    done = quick("audit", "--report", report, "--json")
    assert "Traceback" not in done.stderr
    targets = json.loads(done.stdout)["target"]
    assert "9999" not in json.dumps(targets)


def nested_json(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    "command",
    [
        ["doctor", "--exit-code", "137", "--params", "7B", "--deepspeed-config", "{}"],
        ["memory", "--zero", "3", "--host-memory", "64G", "--gpus-per-node", "1", "--model", "{}"],
        ["resolve", "--probe", "{}"],
    ],
)
def test_deeply_nested_json_exits_2(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(nested_json(100_000))
    args = [str(path) if arg == "{}" else arg for arg in command]
    assert_usage_error(quick(*args, cwd=tmp_path), "nested too deeply")


def user_matrix(tmp_path: Path) -> Path:
    matrix = tmp_path / "matrix"
    shutil.copytree(default_matrix_dir(), matrix)
    return matrix


def test_a_deeply_nested_or_non_utf8_matrix_exits_2(tmp_path: Path) -> None:
    matrix = user_matrix(tmp_path)
    with (matrix / "gpus.toml").open("a") as handle:
        handle.write("deep = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert_usage_error(quick("resolve", *GPU_TARGET, "--matrix", matrix), "nested too deeply")
    shutil.copy(default_matrix_dir() / "gpus.toml", matrix / "gpus.toml")
    with (matrix / "gpus.toml").open("ab") as handle:
        handle.write(b"# caf\xe9\n")
    assert_usage_error(quick("resolve", *GPU_TARGET, "--matrix", matrix), "not UTF-8")


# ---------------------------------------------------------------------------------------------
# A hostile --matrix: every value checked against its grammar when it loads


@pytest.mark.parametrize(
    ("old", "new", "needles"),
    [
        (
            'torchvision = "0.16.0"',
            'torchvision = "0.16.0\\n-e /tmp/evil-package\\n#"',
            ["torch.toml", "version = '2.1.0'", "'torchvision'", "control characters"],
        ),
        (
            'torchvision = "0.16.0"',
            'torchvision = "0.16.0 --index-url=http://evil.example/"',
            ["torch.toml", "'torchvision'", "PEP 440"],
        ),
        (
            'variant = "cu121"',
            'variant = "cu121 -e /tmp/evil-package"',
            ["torch.toml", "build #", "'variant'", "not a build variant"],
        ),
        (
            'name = "Tesla P100"',
            'name = "Tesla P100\\u001b]52;c;ZXZpbA==\\u0007"',
            ["gpus.toml", "Tesla P100", "control characters"],
        ),
    ],
)
def test_matrix_values_that_would_reach_a_requirements_file_are_refused(
    tmp_path: Path, old: str, new: str, needles: list[str]
) -> None:
    matrix = user_matrix(tmp_path)
    file = "gpus.toml" if "Tesla" in old else "torch.toml"
    text = (matrix / file).read_text()
    assert old in text, old
    (matrix / file).write_text(text.replace(old, new, 1))
    out = tmp_path / "out"
    done = quick("bootstrap", *GPU_TARGET, "--format", "venv", "--matrix", matrix, "-o", out)
    assert_usage_error(done, *needles)
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# Values taken at face value


def test_an_impossible_compute_capability_exits_2() -> None:
    done = quick("resolve", "--driver-version", "535.104.05", "--compute-capability", "99.9")
    assert_usage_error(done, "'99.9'", "from 1 to 15")
    assert "sm_999" not in done.stdout + done.stderr


def test_an_environment_name_with_a_newline_is_refused(tmp_path: Path) -> None:
    done = quick("bootstrap", *GPU_TARGET, "--name=okname\n", "-o", tmp_path / "out")
    assert_usage_error(done, "invalid environment name")
    assert not (tmp_path / "out").exists()


def test_repeated_with_flags_mean_both_constraints() -> None:
    for flags in (
        ["--with", "deepspeed<0.15", "--with", "deepspeed>=0.10"],
        ["--with", "deepspeed>=0.10", "--with", "deepspeed<0.15"],
    ):
        done = quick("resolve", *GPU_TARGET, "--torch", "2.1.0", *flags, "--json")
        assert done.returncode == 0, done.stderr
        plan = json.loads(done.stdout)
        (deepspeed,) = [p["version"] for p in plan["packages"] if p["name"] == "deepspeed"]
        major, minor = (int(part) for part in deepspeed.split(".")[:2])
        assert (major, minor) < (0, 15) and (major, minor) >= (0, 10), deepspeed


ESCAPES = "\x1b[2J\x1b]0;owned\x07\x1b]52;c;ZXZpbA==\x07\rfake line"


def test_a_probe_with_control_characters_in_a_name_exits_2(tmp_path: Path) -> None:
    document = {**PROBE, "host": {**PROBE["host"], "hostname": f"node{ESCAPES}"}}
    path = probe_file(tmp_path, json.dumps(document))
    done = quick("bootstrap", "--probe", path, "-o", tmp_path / "out")
    line = assert_usage_error(done, "'host.hostname'", "control characters")
    assert "\x1b" not in done.stderr and "\r" not in done.stderr, line
    assert not (tmp_path / "out").exists()


def test_escape_sequences_in_a_report_never_reach_the_terminal(tmp_path: Path) -> None:
    report = tmp_path / "report.txt"
    report.write_text(
        f"PyTorch version: 2.1.0+cu121{ESCAPES}\nCUDA used to build PyTorch: 12.1\n"
        f"GPU 0: NVIDIA A100{ESCAPES}\nNvidia driver version: 535.104.05\n"
    )
    for extra in ([], ["--json"]):
        done = quick("audit", "--report", report, *extra)
        assert done.returncode in (0, 1), done.stderr
        for stream in (done.stdout, done.stderr):
            assert "\x1b" not in stream and "\x07" not in stream and "\r" not in stream


def test_escape_sequences_in_a_bad_flag_value_are_escaped_in_the_usage_error() -> None:
    done = quick("resolve", "--compat", f"strict{ESCAPES}")
    assert done.returncode == 2 and "\x1b" not in done.stderr and "\\x1b" in done.stderr
    done = quick("resolve", "--no-such-flag", f"x{ESCAPES}")
    assert done.returncode == 2 and "\x1b" not in done.stderr


@pytest.mark.parametrize("output_format", OUTPUT_FORMATS)
def test_generated_files_parse_whatever_the_target_name_holds(output_format: OutputFormat) -> None:
    plan = make_plan()
    hostile = dataclasses.replace(plan.targets[0], name=f"node{ESCAPES}\u2028\x85end")
    plan = dataclasses.replace(plan, targets=(hostile,))
    files = render_files(plan, RenderOptions(name="ft", output_format=output_format))
    for name, text in files.items():
        assert "\x1b" not in text and "\x07" not in text, name
        if name.endswith(".yml"):
            yaml.safe_load(text)
        elif name.endswith(".toml"):
            tomllib.loads(text)
