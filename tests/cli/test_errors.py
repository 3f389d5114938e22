"""Issue 10, reliability and safety, through the real ``cudalock`` console script.

Bad input exits 2 with one line naming the bad value and what is expected; nothing satisfying the
request exits 1 with the explanation; faults of the machine exit 3 and leave the previous files
as they were; hostile values are refused or quoted, never executed. Every case runs the CLI in a
subprocess and checks the exit status, the message and that no traceback reached the user.

Cases other test modules already prove are not repeated here; docs/exit-codes-and-errors.md and
docs/security-and-limits.md state the rules these cases check.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudalock.audit.reports import MAX_REPORT_CHARS
from cudalock.doctor.logs import parse_exit_code, scan_training_log, shape_from_deepspeed_config
from cudalock.doctor.run import read_deepspeed_config
from cudalock.errors import EnvironmentFailure, InputError, UsageError
from cudalock.fsutil import write_atomic, write_group
from cudalock.matrix import default_matrix_dir
from cudalock.memory import parse_bytes, parse_param_count
from cudalock.resolve import parse_torch_spec
from cudalock.urls import redact, validate_index_url
from cudalock.versions import parse_python_version
from tests.support.cli import cudalock
from tests.support.index import offline_env

SRC = Path(__file__).resolve().parents[2] / "src" / "cudalock"
SHELLCHECK = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which(
    "shellcheck"
)
DRIVER = ["--driver-version", "535.104.05"]
GPU_TARGET = [*DRIVER, "--compute-capability", "8.0"]


def assert_usage_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, one ``cudalock: error:`` line (and at most a hint line), no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert lines and lines[0].startswith("cudalock: error: "), done.stderr
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ---------------------------------------------------------------------------------------------
# Bad input: exit 2, one line naming the bad value and the expected form


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--driver-version", "abc"], ["'abc'", "expected digits like 535.104.05"]),
        (["--driver-version", "12.x"], ["'12.x'", "expected digits like 535.104.05"]),
        (
            ["--driver-version", "535.104.05", "--driver-cuda", "12.x"],
            ["'12.x'", "expected MAJOR.MINOR like 12.1"],
        ),
        (["--no-gpu", "--driver-cuda", "twelve"], ["'twelve'", "expected MAJOR.MINOR"]),
        ([*DRIVER, "--compute-capability", "abc"], ["'abc'", "expected MAJOR.MINOR like 8.6"]),
        ([*DRIVER, "--compute-capability", "8"], ["'8'", "expected MAJOR.MINOR like 8.6"]),
        ([*GPU_TARGET, "--python", "three"], ["'three'", "expected MAJOR.MINOR like 3.11"]),
        ([*GPU_TARGET, "--torch", ">>2"], ["'>>2'", "expected PEP 440"]),
        ([*DRIVER, "--gpu", "H1OO"], ["'H1OO'", "did you mean", "H100"]),
        ([*DRIVER, "--gpu", "RTX 4O90"], ["'RTX 4O90'", "did you mean", "RTX 4090"]),
    ],
)
def test_bad_target_and_request_flags_exit_2_naming_the_value(
    args: list[str], needles: list[str]
) -> None:
    assert_usage_error(cudalock("resolve", *args), *needles)


@pytest.mark.parametrize(
    "command",
    [
        ["resolve"],
        ["bootstrap", "--format", "venv"],
        ["lock"],
        ["audit", "--no-gpu"],
        ["probe"],
    ],
)
def test_every_command_with_target_flags_rejects_a_bad_driver_the_same_way(
    command: list[str], tmp_path: Path
) -> None:
    if command[0] == "audit":  # --no-gpu would make the driver moot; use a report instead
        report = tmp_path / "report.txt"
        report.write_text("PyTorch version: 2.1.0+cu121\n")
        command = ["audit", "--report", str(report)]
    done = cudalock(*command, "--driver-version", "12.x", cwd=tmp_path)
    assert_usage_error(done, "'12.x'", "expected digits like 535.104.05")
    assert list(tmp_path.iterdir()) in ([], [tmp_path / "report.txt"])  # nothing written


def _probe_file(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "probe.json"
    path.write_text(content)
    return path


_VALID_PROBE = json.dumps(
    {
        "schema_version": 1,
        "name": "n",
        "platform": "linux-x86_64",
        "driver_version": "535.104.05",
        "driver_cuda": "12.2",
        "gpus": [],
    }
)


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        ("{not json", ["not valid JSON", "line 1"]),
        ("[1, 2]", ["must be a JSON object, got a list"]),
        ('{"schema_version": 99}', ["schema_version 99 is not supported", "reads 1"]),
        (
            _VALID_PROBE.replace('"535.104.05"', "535"),
            ["'driver_version' must be a string", "got a number"],
        ),
        (_VALID_PROBE.replace("[]", '"A100"'), ["'gpus' must be a list", "got a string"]),
        (_VALID_PROBE.replace('"12.2"', '"12.x"'), ["'12.x'", "MAJOR.MINOR"]),
    ],
)
def test_bad_probe_files_exit_2_naming_the_file_and_problem(
    tmp_path: Path, content: str, needles: list[str]
) -> None:
    path = _probe_file(tmp_path, content)
    assert_usage_error(cudalock("resolve", "--probe", str(path)), "probe.json", *needles)


def test_missing_probe_file_exits_2(tmp_path: Path) -> None:
    assert_usage_error(
        cudalock("resolve", "--probe", str(tmp_path / "gone.json")), "gone.json", "does not exist"
    )


def _matrix_copy(tmp_path: Path) -> Path:
    directory = tmp_path / "matrix"
    shutil.copytree(default_matrix_dir(), directory)
    return directory


def test_user_matrix_with_a_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    matrix = _matrix_copy(tmp_path)
    torch_toml = matrix / "torch.toml"
    lines = torch_toml.read_text().splitlines()
    line_number = next(i for i, line in enumerate(lines, 1) if line.startswith("version = "))
    lines[line_number - 1] += " oops"
    torch_toml.write_text("\n".join(lines) + "\n")
    done = cudalock("resolve", *GPU_TARGET, "--matrix", str(matrix))
    assert_usage_error(done, "torch.toml", "not valid TOML", f"line {line_number}")


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        # A field of the wrong type: the file, which entry, which field, what it got.
        (
            ("torch.toml", 'cuda = "', 'cuda = 12 #"'),
            ["torch.toml", "[[release]] #1", "'cuda' must be a string"],
        ),
        # A torch version that is not a version at all.
        (
            ("torch.toml", 'version = "1.13.0"', 'version = "one.13"'),
            ["torch.toml", "[[release]] #1", "'one.13'", "PEP 440"],
        ),
        (
            ("deepspeed.toml", 'version = "0.14.0"', 'version = "0.14.0-final-final"'),
            ["deepspeed.toml", "[[release]] #1", "'0.14.0-final-final'", "PEP 440"],
        ),
    ],
)
def test_user_matrix_with_a_broken_entry_names_file_entry_and_problem(
    tmp_path: Path, edit: tuple[str, str, str], needles: list[str]
) -> None:
    file, old, new = edit
    matrix = _matrix_copy(tmp_path)
    text = (matrix / file).read_text()
    assert old in text
    (matrix / file).write_text(text.replace(old, new, 1))
    assert_usage_error(cudalock("resolve", *GPU_TARGET, "--matrix", str(matrix)), *needles)


def test_cudalock_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "cudalock.toml").write_text('[request]\ntorch = "2.1.0"\npython = \n')
    done = cudalock("bootstrap", *GPU_TARGET, "--format", "venv", cwd=tmp_path)
    assert_usage_error(done, "cudalock.toml:3:", "invalid TOML")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cudalock.toml"]


# -- report files: empty, binary, huge ----------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        (b"", ["the report is empty"]),
        (b"   \n\n\t\n", ["the report is empty"]),
        (bytes(range(256)) * 8, ["binary data, not text", "collect_env"]),
    ],
)
def test_empty_and_binary_reports_exit_2(
    tmp_path: Path, content: bytes, needles: list[str]
) -> None:
    report = tmp_path / "report.txt"
    report.write_bytes(content)
    assert_usage_error(cudalock("audit", "--report", str(report)), *needles)
    assert_usage_error(cudalock("audit", "--report", "-", stdin=content), *needles)


def test_a_huge_report_is_read_bounded_and_says_what_it_recognised(tmp_path: Path) -> None:
    # 40 MB of 4 KiB lines after a real first line: ten times the bound. Lines this long once
    # made one warning pattern quadratic (minutes); bounded reading alone did not help then.
    report = tmp_path / "huge.txt"
    with report.open("w") as handle:
        handle.write("PyTorch version: 2.1.0+cu121\nIs debug build: False\n")
        line = "x" * 4095 + "\n"
        handle.write(line * (10 * MAX_REPORT_CHARS // len(line)))
    done = cudalock("audit", "--report", str(report), *DRIVER, timeout=60)
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 1), done.stderr
    assert "torch 2.1.0+cu121" in done.stdout
    assert "recognised: collect_env" in done.stdout


def test_doctor_survives_empty_and_binary_logs(tmp_path: Path) -> None:
    for name, content in (("empty.log", b""), ("binary.log", bytes(range(256)) * 64)):
        log = tmp_path / name
        log.write_bytes(content)
        done = cudalock("doctor", "--exit-code", "-9", "--log", str(log))
        assert "Traceback" not in done.stderr
        assert done.returncode in (0, 1), done.stderr
        assert "SIGKILL" in done.stdout


def test_doctor_bad_exit_code_and_missing_log_exit_2(tmp_path: Path) -> None:
    assert_usage_error(cudalock("doctor", "--exit-code", "abc"), "'abc'", "expected e.g. -9")
    assert_usage_error(
        cudalock("doctor", "--exit-code", "-9", "--log", str(tmp_path / "no.log")),
        "no.log",
        "does not exist",
    )


# ---------------------------------------------------------------------------------------------
# Nothing satisfies: exit 1 with the explanation


def test_nothing_fits_an_ancient_driver_exits_1_with_the_reasons(tmp_path: Path) -> None:
    done = cudalock("resolve", "--driver-version", "390.48", "--compute-capability", "8.0")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    # Each rejected build says what it needs and what would fix it.
    assert re.search(r"CUDA \d+\.\d+ needs driver ≥ [\d.]+", done.stderr + done.stdout)
    assert "fix: Upgrade to driver ≥" in done.stderr + done.stdout


# ---------------------------------------------------------------------------------------------
# Files: existing outputs, unwritable directories, atomic writes


def test_existing_output_without_force_exits_2_naming_the_file(tmp_path: Path) -> None:
    args = ["bootstrap", *GPU_TARGET, "--torch", "==2.1.0", "--format", "venv", "-o", str(tmp_path)]
    # Offline the closure is not resolved (exit 3), and the environment files are written.
    assert cudalock(*args, "--offline").returncode == 3
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    done = cudalock(*args[:-2], "--python", "3.10", "-o", str(tmp_path))
    message = assert_usage_error(done, "already exists", "--force")
    assert str(tmp_path) in message
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_output_directory_under_a_regular_file_is_a_clear_error(tmp_path: Path) -> None:
    # Unlike permission bits (root ignores them), ENOTDIR stops root too: a real failure to
    # create the output directory, whoever runs the test.
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    done = cudalock("bootstrap", *GPU_TARGET, "--format", "venv", "-o", str(blocker / "out"))
    # A bad -o value (exit 2), found when bootstrap first reads DIR/cudalock.toml.
    assert_usage_error(done, str(blocker / "out"), "Not a directory")
    assert blocker.read_text() == "not a directory\n"


def test_write_atomic_replaces_by_rename_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    # A hard link to the old file keeps the old inode: after a rename it still holds "old",
    # which an in-place rewrite (open "w") would have changed.
    (tmp_path / "old-inode").hardlink_to(target)
    write_atomic(target, "new\n", mode=0o755)
    assert target.read_text() == "new\n"
    assert (tmp_path / "old-inode").read_text() == "old\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old-inode", "out.txt"]


def test_write_atomic_failure_is_environment_failure_and_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    (tmp_path / "dir-in-the-way").mkdir()
    (tmp_path / "dir-in-the-way" / "x").write_text("x")
    # Renaming a file over a non-empty directory fails after the temp file was written.
    with pytest.raises(EnvironmentFailure, match=r"cannot write .*dir-in-the-way"):
        write_atomic(tmp_path / "dir-in-the-way", "new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir-in-the-way", "out.txt"]
    assert exit_code_of(EnvironmentFailure("x")) == 3


def exit_code_of(error: Exception) -> int:
    return int(getattr(error, "exit_code", -1))


def test_write_group_is_all_or_nothing(tmp_path: Path) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("old a\n")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a directory should be\n")
    with pytest.raises(EnvironmentFailure):
        write_group({first: "new a\n", second: "new b\n", blocked / "c.txt": "new c\n"}, force=True)
    assert first.read_text() == "old a\n"  # restored after the third write failed
    assert not second.exists()  # created by this call, so removed again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "blocked"]


def test_write_group_refuses_before_writing_anything(tmp_path: Path) -> None:
    existing = tmp_path / "b.txt"
    existing.write_text("keep\n")
    with pytest.raises(UsageError, match=r"b\.txt already exists; pass --force"):
        write_group({tmp_path / "a.txt": "a", existing: "b"}, force=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.txt"]


def test_every_output_write_goes_through_fsutil() -> None:
    # Outputs people keep (scripts, locks, specs, the matrix, the bootstrap log) are written
    # through fsutil; the only other writes are scratch copies in temporary directories (lock's
    # uv project, the refreshed matrix loaded before it replaces the old one) and the null
    # device standing in for a closed stdout.
    allowed = {
        ("closure.py", ".write_text("),
        ("refresh.py", ".write_text("),
        ("main.py", 'open(os.devnull, "w"'),
    }
    writes = re.compile(
        r"\.write_text\(|\.write_bytes\(|open\([^)]*['\"][wax]b?['\"]|"
        r"log\.open\(|os\.fdopen\(fd"
    )
    found = set()
    for path in SRC.rglob("*.py"):
        if path.name in ("fsutil.py", "inspect_script.py"):
            continue
        for line in path.read_text().splitlines():
            match = writes.search(line)
            if match and not line.lstrip().startswith("#"):
                found.add((path.name, match.group(0)))
    assert found <= allowed, found - allowed


# ---------------------------------------------------------------------------------------------
# The audited interpreter: missing, not Python, dying by a signal (hangs: test_inspect_env)


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("make", "code", "needles"),
    [
        (lambda d: d / "missing-python", 2, ["missing-python", "does not exist"]),
        (lambda d: _script(d, "not-python", "echo 'hello, I am not python'"), 2, ["not-python"]),
        (lambda d: _script(d, "segfaults", "kill -SEGV $$"), 3, ["segfaults", "SIGSEGV"]),
        (lambda d: _script(d, "killed", "kill -KILL $$"), 3, ["killed", "SIGKILL"]),
    ],
)
def test_a_broken_interpreter_is_a_clear_error_not_a_crash(
    tmp_path: Path, make: object, code: int, needles: list[str]
) -> None:
    python = make(tmp_path)  # type: ignore[operator]
    done = cudalock("audit", "--python", str(python), "--no-gpu")
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    first = done.stderr.strip().splitlines()[0]
    assert first.startswith("cudalock: error: ")
    for needle in needles:
        assert needle in first


# ---------------------------------------------------------------------------------------------
# Hostile values never execute

#: Valid as a URL (only characters RFC 3986 allows; others are refused: tests/test_urls.py) and
#: hostile to a shell: a command substitution, command separators, a subshell, a background
#: operator and an unbalanced quote.
HOSTILE_INDEX = (
    "http://127.0.0.1:9/x$(touch$IFS'PWNED_A');touch$IFS'PWNED_B';(touch$IFS'PWNED_C')&'"
)


#: A framework git URL hostile to a shell (valid: no whitespace), and a requirement with a marker.
# $IFS, not ${IFS}: a "${" is refused before anything is written (uv would expand it).
HOSTILE_FRAMEWORK_URL = "git+https://x.example/r$(touch$IFS'PWNED_G');`touch$IFS'PWNED_H'`'\".git"


@pytest.mark.parametrize("kind", ["path", "url", "requirement"])
def test_install_sh_with_hostile_index_and_framework_runs_nothing_injected(
    tmp_path: Path, kind: str
) -> None:
    out = tmp_path / "out"
    if kind == "path":
        directory = tmp_path / "my fw $(touch PWNED_D); `touch PWNED_E` 'q\" ;touch PWNED_F"
        directory.mkdir()
        (directory / "pyproject.toml").write_text('[project]\nname = "fw"\nversion = "0"\n')
        framework = str(directory)
    elif kind == "url":
        framework = HOSTILE_FRAMEWORK_URL
    else:
        framework = 'llamafactory==0.9.1; os_name == "posix" and python_version >= "3.8"'
    done = cudalock(
        "bootstrap",
        *GPU_TARGET,
        "--torch",
        "==2.1.0",
        "--format",
        "venv",
        "--pytorch-index",
        HOSTILE_INDEX,
        "--framework",
        framework,
        "-o",
        str(out),
        "--offline",
    )
    # Offline the closure is not resolved (exit 3); install.sh is written all the same.
    assert done.returncode == 3, done.stderr
    # install.sh installs the lock files 'cudalock lock' writes beside it; stand-ins here.
    for name in ("pylock.toml", "pylock.first.toml", "uv-install.toml", "requirements.last.txt"):
        (out / name).write_text("# Generated by cudalock\n")
    (out / "requirements.lock.txt").write_text("torch==2.1.0+cu121 --hash=sha256:00\n")
    # A stand-in interpreter records the arguments it gets instead of installing anything;
    # the script then runs end to end exactly as a user would run it.
    calls = tmp_path / "calls.jsonl"
    fake = tmp_path / "fake-python"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(0o755)
    run = subprocess.run(
        ["bash", str(out / "install.sh")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**offline_env(), "PYTHON": str(fake), "CUDALOCK_INSTALLER": "pip"},
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    arguments = [arg for call in recorded for arg in call]
    # The hostile values reached pip verbatim, each as one argument.
    assert f"{HOSTILE_INDEX}/cu121" in arguments
    if kind != "requirement":  # a requirement framework is in the lock, not on a command line
        assert any(
            arg in (framework, f"-e{framework}") or arg.endswith(framework) for arg in arguments
        ), arguments
    # ...and no injected command ran, here or in the output directory, or anywhere under it.
    assert not list(tmp_path.rglob("PWNED*"))
    assert not list(Path.cwd().glob("PWNED*"))


HOSTILE_NAMES = [
    "my env",
    "a;b",
    "a$(id)",
    "a`id`",
    "it's",
    'say"hi"',
    "a\nb",
    "../up",
    "a/b",
    "-rf",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_invalid_conda_environment_names_are_refused(tmp_path: Path, name: str) -> None:
    # "--name=VALUE": argparse reads "--name -rf" as a missing value, before cudalock sees it.
    done = cudalock("bootstrap", *GPU_TARGET, f"--name={name}", "-o", str(tmp_path / "out"))
    assert_usage_error(done, "environment name")
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("fmt", ["conda", "venv", "uv"])
def test_shellcheck_passes_on_every_generated_script_with_hostile_values(
    tmp_path: Path, fmt: str
) -> None:
    framework = tmp_path / "fw $(x); `y` 'q\""
    framework.mkdir()
    (framework / "pyproject.toml").write_text('[project]\nname = "fw"\nversion = "0"\n')
    out = tmp_path / "out"
    done = cudalock(
        "bootstrap",
        *GPU_TARGET,
        "--torch",
        "==2.1.0",
        "--format",
        fmt,
        "--with",
        "deepspeed",
        "--pytorch-index",
        HOSTILE_INDEX,
        "--pypi-index",
        "https://user:pa$$w0rd@mirror.example/simple",
        "--framework",
        str(framework),
        "-o",
        str(out),
        "--offline",
    )
    assert done.returncode == 3, done.stderr  # offline: written without the lock
    scripts = [p for p in out.iterdir() if p.suffix == ".sh" or p.read_bytes().startswith(b"#!")]
    for script in scripts:
        checked = subprocess.run(
            [str(SHELLCHECK), "--severity=style", str(script)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert checked.returncode == 0, (script.name, checked.stdout)
        assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    if fmt != "uv":
        assert scripts, f"--format {fmt} wrote no script"


# -- index URLs: https only, credentials redacted ------------------------------------------


def test_plain_http_index_is_refused_unless_loopback_or_allowed(tmp_path: Path) -> None:
    base = ["bootstrap", *GPU_TARGET, "--torch", "==2.1.0", "--format", "venv"]
    insecure = "http://user:hunter2@mirror.example/simple"
    done = cudalock(*base, "--pypi-index", insecure, "-o", str(tmp_path / "a"))
    assert_usage_error(done, "plain http", "***@mirror.example")
    assert "hunter2" not in done.stderr + done.stdout
    assert not (tmp_path / "a").exists()
    allowed = cudalock(
        *base,
        "--pypi-index",
        insecure,
        "--allow-insecure-index",
        "--offline",
        "-o",
        str(tmp_path / "b"),
    )
    assert allowed.returncode == 3, allowed.stderr  # accepted; offline, nothing is locked
    assert "hunter2" not in allowed.stderr + allowed.stdout
    assert "hunter2" not in (tmp_path / "b" / "cudalock.toml").read_text()
    loopback = cudalock(
        *base, "--pypi-index", "http://127.0.0.1:9/simple", "--offline", "-o", str(tmp_path / "c")
    )
    assert loopback.returncode == 3, loopback.stderr
    assert "plain http" not in loopback.stderr  # accepted: only the closure is left to lock


@pytest.mark.parametrize(
    "url",
    [
        "ftp://mirror.example/simple",
        "file:///etc/passwd",
        "https://mirror.example/simple?x=1",
        "https:///nohost",
        "https://mirror.example/a b",
        "https://m.example/\nrm -rf /",
    ],
)
def test_malformed_index_urls_exit_2(tmp_path: Path, url: str) -> None:
    done = cudalock("resolve", *GPU_TARGET, "--pytorch-index", url)
    assert_usage_error(
        done,
        "--pytorch-index",
        "expected"
        if " " in url or "\n" in url or "://" not in url or url.startswith(("ftp", "file"))
        else "",
    )


# ---------------------------------------------------------------------------------------------
# Report and probe files are parsed as data only


DANGEROUS_CALLS = {"eval", "exec", "compile", "__import__"}


def test_no_code_evaluates_user_input() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else (func.attr if isinstance(func, ast.Attribute) else "")
            )
            owner = (
                func.value.id
                if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name))
                else ""
            )
            if name in DANGEROUS_CALLS and owner in ("", "builtins"):
                offenders.append(f"{path.name}:{node.lineno} {name}")
            if owner == "yaml" and name in ("load", "load_all", "unsafe_load", "full_load"):
                offenders.append(f"{path.name}:{node.lineno} yaml.{name}")
            if (
                name in ("loads", "load")
                and owner in ("pickle", "marshal", "shelve")
                and path.name != "load.py"
            ):
                offenders.append(f"{path.name}:{node.lineno} {owner}.{name}")
    # ast.literal_eval (reads literals only) is allowed; pickle only for the matrix cache.
    assert offenders == []


# ---------------------------------------------------------------------------------------------
# Property tests: parsers raise nothing but their documented error


PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.text())
def test_python_version_parser_raises_only_input_error(text: str) -> None:
    with contextlib.suppress(InputError):
        parse_python_version(text)


@PROPERTY
@given(st.text() | st.from_regex(r"[<>=!~,. 0-9a-z*+]{0,20}", fullmatch=True))
def test_torch_spec_parser_raises_only_input_error(text: str) -> None:
    with contextlib.suppress(InputError):
        parse_torch_spec(text)


@PROPERTY
@given(st.text() | st.from_regex(r"-?[0-9.e+]{0,12} ?[kKmMgGtTpPiIbB]{0,4}", fullmatch=True))
def test_size_and_parameter_parsers_raise_only_input_error(text: str) -> None:
    for parse in (parse_bytes, parse_param_count):
        with contextlib.suppress(InputError):
            assert parse(text) > 0


@PROPERTY
@given(
    st.text()
    | st.from_regex(r"(exitcode: |return code = )?-?[0-9]{0,5}|SIG[A-Z]{0,6}", fullmatch=True)
)
def test_exit_code_parser_raises_only_usage_error(text: str) -> None:
    with contextlib.suppress(UsageError):
        parse_exit_code(text)


LOG_LINES = st.sampled_from(
    [
        "Killed",
        "exitcode: -9",
        "Signal 9 (SIGKILL) received by PID 12",
        "torch.cuda.OutOfMemoryError: CUDA out of memory.",
        "Segmentation fault (core dumped)",
        "ERROR: Unexpected bus error encountered in worker.",
        "[INFO] world_size=8",
        "zero_optimization stage 3",
        "model_name_or_path: meta-llama/Llama-2-7b-hf",
        "Out of memory: Killed process 1234 (python) total-vm:1kB",
        "\x00\xff",
        "",
    ]
)


@PROPERTY
@given(st.lists(LOG_LINES | st.text(), max_size=30))
def test_training_log_scanner_never_raises(lines: list[str]) -> None:
    scan_training_log("\n".join(lines))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "zero_optimization",
                    "stage",
                    "offload_param",
                    "offload_optimizer",
                    "device",
                    "stage3_gather_16bit_weights_on_model_save",
                    "train_batch_size",
                ]
            )
            | st.text(max_size=6),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@PROPERTY
@given(
    st.dictionaries(st.sampled_from(["zero_optimization", "bf16", "x"]), JSON_VALUES, max_size=3)
)
def test_deepspeed_config_reader_never_raises_on_any_json_object(config: dict[str, object]) -> None:
    shape_from_deepspeed_config(config)


@PROPERTY
@given(st.binary(max_size=200))
def test_deepspeed_config_file_raises_only_input_error(
    tmp_path_factory: pytest.TempPathFactory, content: bytes
) -> None:
    path = tmp_path_factory.mktemp("ds") / "ds.json"
    path.write_bytes(content)
    with contextlib.suppress(InputError):
        read_deepspeed_config(path)


@PROPERTY
@given(
    st.text() | st.from_regex(r"(https?|ftp)://[^/]{0,12}/[ -~]{0,12}", fullmatch=True),
    st.booleans(),
)
def test_index_url_validator_raises_only_usage_error(url: str, insecure: bool) -> None:
    try:
        accepted = validate_index_url(url, flag="--pypi-index", allow_insecure=insecure)
    except UsageError as err:
        assert "\n" not in err.message or "\n" in url
        return
    # What it accepts cannot break out of a shell word or a requirements line.
    assert not any(ch.isspace() or ord(ch) < 32 for ch in accepted)
    assert accepted.startswith(("https://", "http://"))


@PROPERTY
@given(
    st.text(
        alphabet=st.characters(blacklist_characters="/@", blacklist_categories=["Zs", "Cc"]),
        min_size=3,
    )
)
def test_credentials_never_survive_redaction_in_an_error(secret: str) -> None:
    url = f"ftp://user:{secret}@mirror.example/simple"
    try:
        validate_index_url(url, flag="--pypi-index")
    except UsageError as err:
        # The secret may also be a piece of the message's own words ("htt" of "https://"):
        # what matters is that the message with the secret redacted says nothing more.
        shown = redact(err.message)
        assert shown.count(secret) <= redact_free_message().count(secret)
        assert f":{secret}@" not in err.message


def redact_free_message() -> str:
    """The message for the same mistake with no credentials at all."""
    try:
        validate_index_url("ftp://mirror.example/simple", flag="--pypi-index")
    except UsageError as err:
        return err.message.replace("ftp://mirror.example/simple", "ftp://***@mirror.example/simple")
    raise AssertionError("an ftp URL was accepted")


@pytest.mark.parametrize(
    "extra", [[], ["--json"], ["--torch", "==1.0"], ["--torch", "==1.0", "--json"]]
)
def test_resolve_never_prints_index_credentials(extra: list[str]) -> None:
    done = cudalock(
        "resolve",
        *GPU_TARGET,
        "--pytorch-index",
        "https://me:s3cr3t@t.example/whl",
        "--pypi-index",
        "https://me:s3cr3t@p.example/simple",
        *extra,
    )
    assert done.returncode in (0, 1), done.stderr
    assert "s3cr3t" not in done.stdout + done.stderr
    if done.returncode == 0:  # the plan names its index, without the secret
        assert "https://***@t.example/whl/cu" in done.stdout


def test_report_error_hides_url_credentials_whatever_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The last line of defence: cli.main prints every error through redact()."""
    from cudalock.cli.main import report_error

    report_error(
        UsageError(
            "cannot fetch https://alice:s3cret@mirror.example/whl/cu121",
            hint="check https://alice:s3cret@mirror.example",
        )
    )
    shown = capsys.readouterr().err
    assert "s3cret" not in shown
    assert "https://***@mirror.example/whl/cu121" in shown
