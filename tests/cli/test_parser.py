"""The argparse command line: help, usage errors, environment variables, repeated flags, values.

In-process through ``cudalock.cli.main.run`` (the function the ``cudalock`` script calls) for
speed, and through the console script where the process itself matters (Ctrl-C, completion).
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudalock.cli.inputs import matrix_dir, request_options, target_options
from cudalock.cli.main import COMMANDS, build_parser, run, terminal_columns
from cudalock.cli.training import memory_options
from cudalock.machine.overrides import TargetOptions
from cudalock.request import RequestOptions
from tests.support.cli import CUDALOCK, cudalock
from tests.support.index import offline_env

ENVIRONMENT_VARIABLES = (
    "CUDALOCK_DRIVER_VERSION",
    "CUDALOCK_DRIVER_CUDA",
    "CUDALOCK_MATRIX",
    "CUDALOCK_PYTORCH_INDEX",
    "CUDALOCK_PYPI_INDEX",
)

TARGET = (
    "Target (which machine)",
    [
        "--probe",
        "--driver-version",
        "--driver-cuda",
        "--no-gpu",
        "--compute-capability",
        "--gpu",
        "--platform",
        "--matrix",
    ],
)
REQUEST = (
    "Request (what to install)",
    [
        "--torch",
        "--python",
        "--cuda",
        "--compat",
        "--with",
        "--framework",
        "--pytorch-index",
        "--pypi-index",
        "--allow-insecure-index",
    ],
)
TRAINING_RUN = (
    "The training run (memory check)",
    [
        "--params",
        "--model",
        "--largest-layer-params",
        "--zero",
        "--gpus-per-node",
        "--nodes",
        "--offload-optimizer",
        "--offload-param",
        "--gather-16bit-weights",
        "--no-gather-16bit-weights",
        "--host-memory",
        "--deepspeed-config",
    ],
)
POLICY = ("Compatibility policy", ["--compat", "--spec"])
OUTPUT = ("Output", ["-o", "--output-dir", "--name", "--format", "--create", "--venv", "--force"])

#: Each command (and matrix subcommand): the flags its help must list, by group heading.
EXPECTED_GROUPS: dict[str, list[tuple[str, list[str]]]] = {
    "probe": [("Options", ["-h", "--help", "--json"]), TARGET],
    "resolve": [("Options", ["--json"]), REQUEST, TARGET],
    "bootstrap": [("Options", ["--json"]), OUTPUT, REQUEST, TARGET],
    "lock": [
        (
            "Options",
            [
                "-o",
                "--output-dir",
                "--check",
                "-U",
                "--upgrade",
                "--spec",
                "--cache-dir",
                "--timeout",
                "--retries",
                "--force",
                "-q",
                "--quiet",
                "--json",
            ],
        ),
        REQUEST,
        TARGET,
    ],
    "audit": [
        ("Options", ["--python", "--prefix", "--report", "--deep", "--deep-timeout", "--json"]),
        POLICY,
        TARGET,
    ],
    "doctor": [
        ("Options", ["--exit-code", "--log", "--json", "--no-run", "--python"]),
        POLICY,
        TRAINING_RUN,
    ],
    "memory": [("Options", ["--probe", "--json"]), TRAINING_RUN],
    "matrix": [("Commands", ["check", "show", "refresh"])],
    "matrix check": [("positional arguments", ["DIR"]), ("Options", ["--matrix"])],
    "matrix show": [
        ("Options", ["--torch", "--cuda", "--gpu", "--platform", "--json", "--matrix"])
    ],
    "matrix refresh": [("Options", ["--pypi-url", "--pytorch-index", "--dry-run", "--matrix"])],
}


@pytest.fixture(autouse=True)
def _no_cudalock_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ENVIRONMENT_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("COLUMNS", "100")


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``cudalock ARGS``, run in this process."""
    try:
        run(list(args))
        code = 0
    except SystemExit as exit_:
        assert isinstance(exit_.code, int), exit_.code
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def parse(*args: str) -> argparse.Namespace:
    """The command line parsed as ``run`` parses it, without running the command."""
    return build_parser([args[0]], with_flags=True).parse_args(list(args))


def help_sections(text: str) -> dict[str, str]:
    """A help text's sections by heading ("Options", "Target (which machine)", ...)."""
    sections: dict[str, str] = {}
    heading = ""
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
            sections[heading] = ""
        elif heading:
            sections[heading] += line + "\n"
    return sections


def listed_flags(section: str) -> set[str]:
    """Flags and positional names at the start of the section's entries."""
    found: set[str] = set()
    for line in section.splitlines():
        entry = re.match(r"^ {2,4}(\S.*?)(?: {2,}|$)", line)
        if entry:
            found.update(part.split()[0] for part in entry.group(1).split(", "))
    return found


# ---------------------------------------------------------------------------------------------
# Help


@pytest.mark.parametrize("command", sorted(EXPECTED_GROUPS))
def test_every_command_help_lists_its_flags_in_their_groups(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    code, out, err = cli(capsys, *command.split(), "--help")
    assert code == 0 and err == ""
    assert out.startswith(f"usage: cudalock {command} ")
    sections = help_sections(out)
    for heading, flags in EXPECTED_GROUPS[command]:
        assert heading in sections, (heading, list(sections))
        missing = set(flags) - listed_flags(sections[heading])
        assert not missing, (heading, missing, sections[heading])
    assert f"cudalock {command}" in sections["examples"]
    assert re.search(r"^  0 .*\n(.*\n)*  2 ", sections["exit status"], re.MULTILINE)


def test_every_flag_a_parser_knows_is_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser(COMMANDS, with_flags=True)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        code, out, _ = cli(capsys, name, "--help")
        assert code == 0
        for action in command._actions:
            for flag in action.option_strings:
                assert re.search(rf"(^|[ ,]){re.escape(flag)}\b", out), (name, flag)


def test_help_lists_every_command_in_order_with_its_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = cli(capsys, "--help")
    assert code == 0
    commands = help_sections(out)["Commands"]
    found = [re.search(rf"^    {name}\b", commands, re.MULTILINE) for name in COMMANDS]
    positions = [match.start() if match else -1 for match in found]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), commands
    for name, (_module, summary) in COMMANDS.items():
        first_words = " ".join(summary.split()[:4])
        assert first_words in " ".join(commands.split()), (name, summary)
    assert "130  interrupted" in out


def test_no_command_prints_the_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys)
    assert code == 2 and out == ""
    assert err.startswith("usage: cudalock ") and "Commands:" in err
    code, out, err = cli(capsys, "matrix")
    assert code == 2 and out == ""
    assert err.startswith("usage: cudalock matrix ") and "refresh" in err


def test_environment_variables_are_named_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    _, resolve_help, _ = cli(capsys, "resolve", "--help")
    _, show_help, _ = cli(capsys, "matrix", "show", "--help")
    flat = " ".join(resolve_help.split())
    for variable in ENVIRONMENT_VARIABLES:
        assert f"${variable}" in flat, variable
    assert "$CUDALOCK_MATRIX" in " ".join(show_help.split())


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "--version")
    assert code == 0 and err == ""
    assert re.fullmatch(r"cudalock \d+\.\d+\.\d+\S*, matrix \S+ \(schema \d+\)\n", out), out


# ---------------------------------------------------------------------------------------------
# Usage errors: exit 2, "usage: ..." then one "cudalock CMD: error: ..." line naming the problem


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["resolve", "--jsn"], "unrecognized arguments: --jsn"),
        (["resolve", "--js"], "unrecognized arguments: --js"),  # never abbreviated
        (["resolve", "extra"], "unrecognized arguments: extra"),
        (["probe", "--driver-version"], "argument --driver-version: expected one argument"),
        (["resolve", "--torch", "--json"], "argument --torch: expected one argument"),
        (["bootstrap", "-o"], "argument -o/--output-dir: expected one argument"),
        (
            ["lock", "--timeout", "abc"],
            "argument --timeout: expected a whole number, at least 1, got 'abc'",
        ),
        (["lock", "--timeout", "0"], "argument --timeout: expected a whole number, at least 1"),
        (["lock", "--retries", "-1"], "argument --retries: expected a whole number, at least 0"),
        (["lock", "--timeout", "2.5"], "argument --timeout: expected a whole number"),
        (
            ["audit", "--deep-timeout", "0.5"],
            "argument --deep-timeout: expected a number, at least 1, got '0.5'",
        ),
        (["audit", "--deep-timeout", "nan"], "argument --deep-timeout: expected a number"),
        (["audit", "--deep-timeout", "inf"], "argument --deep-timeout: expected a number"),
        (["memory", "--zero", "three"], "argument --zero: expected a whole number, got 'three'"),
        (["doctor", "--json"], "one of the arguments --exit-code --slurm-job is required"),
        (["doctor", "--exit-code", "-9", "--nodes", "x"], "argument --nodes: expected a whole"),
        (["audit", "--json=yes"], "argument --json: ignored explicit argument 'yes'"),
        (["matrix", "show", "--gpu"], "argument --gpu: expected one argument"),
        (["matrix", "check", "a", "b"], "unrecognized arguments: b"),
    ],
)
def test_usage_errors_exit_2_with_usage_and_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    code, out, err = cli(capsys, *args)
    assert code == 2 and out == ""
    lines = err.splitlines()
    prog = "cudalock " + (" ".join(args[:2]) if args[0] == "matrix" else args[0])
    assert len(lines) == 2, err
    assert lines[0].startswith(f"usage: {prog} "), err
    assert lines[1].startswith(f"{prog}: error: "), err
    assert named in lines[1], err


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("resolv", "cudalock: error: unknown command 'resolv'; did you mean 'resolve'?"),
        ("memroy", "cudalock: error: unknown command 'memroy'; did you mean 'memory'?"),
        (
            "zzz",
            "cudalock: error: unknown command 'zzz'; expected one of probe, resolve, "
            "bootstrap, lock, audit, doctor, memory, matrix",
        ),
    ],
)
def test_an_unknown_command_is_named_with_the_nearest(
    capsys: pytest.CaptureFixture[str], word: str, expected: str
) -> None:
    code, _, err = cli(capsys, word, "--json")
    assert code == 2
    assert err.splitlines() == ["usage: cudalock [--version] COMMAND [options]", expected]


def test_an_unknown_matrix_command_lists_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "matrix", "shwo")
    assert code == 2
    assert "invalid choice: 'shwo' (choose from 'check', 'show', 'refresh')" in err


def test_cudalock_errors_keep_their_own_one_line_report(capsys: pytest.CaptureFixture[str]) -> None:
    # Parsed fine, refused by the core: one line and the core's exit status, no usage.
    code, out, err = cli(capsys, "probe", "--driver-version", "abc")
    assert code == 2 and out == ""
    assert err.startswith("cudalock: error: invalid NVIDIA driver version 'abc'")
    assert "usage:" not in err


# ---------------------------------------------------------------------------------------------
# Values read into the core's types


def test_target_flags_read_into_target_options(tmp_path: Path) -> None:
    args = parse(
        "resolve",
        "--probe",
        "a.json",
        "--probe",
        "b.json",
        "--driver-version",
        "535.1",
        "--driver-version=550.54.14",  # the last counts
        "--driver-cuda",
        "12.4",
        "--no-gpu",
        "--compute-capability",
        "8.0",
        "--compute-capability=9.0",
        "--gpu",
        "H100",
        "--gpu",
        "RTX 4090",
        "--platform",
        "linux-aarch64",
        "--matrix",
        str(tmp_path),
    )
    assert target_options(args) == TargetOptions(
        probe_files=(Path("a.json"), Path("b.json")),
        driver_version="550.54.14",
        driver_cuda="12.4",
        no_gpu=True,
        compute_capabilities=("8.0", "9.0"),
        gpu_names=("H100", "RTX 4090"),
        platform="linux-aarch64",
        matrix_dir=tmp_path,
    )


def test_nothing_given_is_the_defaults() -> None:
    for command in ("probe", "resolve", "bootstrap", "lock", "audit"):
        assert target_options(parse(command)) == TargetOptions(), command
    for command in ("resolve", "bootstrap", "lock"):
        assert request_options(parse(command)) == RequestOptions(), command


def test_request_flags_read_into_request_options() -> None:
    args = parse(
        "bootstrap",
        "--torch",
        ">=2.4",
        "--python",
        "3.10",
        "--python",
        "3.11",
        "--cuda",
        "12.1",
        "--compat",
        "minor",
        "--with",
        "torchaudio",
        "--with=deepspeed>=0.15",
        "--framework",
        "transformers[torch]",
        "--framework=peft",
        "--pytorch-index",
        "https://mirror/whl",
        "--pypi-index",
        "https://mirror/simple",
        "--allow-insecure-index",
    )
    # --framework adds up, as --with does.
    assert request_options(args) == RequestOptions(
        torch=">=2.4",
        python="3.11",
        cuda="12.1",
        compat="minor",
        with_packages=("torchaudio", "deepspeed>=0.15"),
        frameworks=("transformers[torch]", "peft"),
        pytorch_index="https://mirror/whl",
        pypi_index="https://mirror/simple",
        allow_insecure_index=True,
    )


def test_command_values_have_their_types() -> None:
    lock = parse("lock", "-o", "out", "--timeout", "5", "--retries", "0", "-U", "-q")
    assert (lock.output_dir, lock.timeout, lock.retries) == (Path("out"), 5, 0)
    assert lock.upgrade is True and lock.quiet is True and lock.check is False
    assert (parse("lock").timeout, parse("lock").retries) == (60, 3)
    audit = parse("audit", "--deep-timeout", "2.5", "--report", "-")
    assert audit.deep_timeout == 2.5 and audit.report == "-"
    assert parse("audit").deep_timeout == 120.0
    bootstrap = parse("bootstrap", "--output-dir", "env", "--format", "venv", "--create")
    assert bootstrap.output_dir == Path("env") and bootstrap.output_format == "venv"
    assert parse("bootstrap").output_dir == Path(".")


def test_values_that_start_with_a_dash() -> None:
    # Exit codes as people paste them: "-9", "-11", "exitcode: -9".
    assert parse("doctor", "--exit-code", "-9").exit_code == "-9"
    assert parse("doctor", "--exit-code", "-11", "--json").exit_code == "-11"
    assert parse("doctor", "--exit-code=-11").exit_code == "-11"
    assert parse("audit", "--report", "-").report == "-"


def test_training_run_flags_and_the_on_off_pair() -> None:
    args = parse(
        "memory",
        "--params",
        "7B",
        "--zero",
        "3",
        "--gpus-per-node",
        "8",
        "--nodes",
        "2",
        "--offload-optimizer",
        "cpu",
        "--no-gather-16bit-weights",
        "--host-memory",
        "256GiB",
        "--model",
        "m",
        "--deepspeed-config",
        "ds.json",
    )
    options = memory_options(args)
    assert (options.params, options.zero, options.gpus_per_node, options.nodes) == ("7B", 3, 8, 2)
    assert options.offload_optimizer == "cpu" and options.offload_param is None
    assert options.gather_16bit_weights is False
    assert options.model == Path("m") and options.deepspeed_config == Path("ds.json")
    assert options.host_memory == "256GiB"
    on = parse("doctor", "--exit-code", "137", "--gather-16bit-weights")
    assert memory_options(on).gather_16bit_weights is True
    assert memory_options(parse("doctor", "--exit-code", "137")).gather_16bit_weights is None


# ---------------------------------------------------------------------------------------------
# Environment variables: used when the flag is absent; the flag wins; empty counts as unset


@pytest.mark.parametrize(
    ("variable", "flag", "read"),
    [
        ("CUDALOCK_DRIVER_VERSION", "--driver-version", lambda a: target_options(a).driver_version),
        ("CUDALOCK_DRIVER_CUDA", "--driver-cuda", lambda a: target_options(a).driver_cuda),
        ("CUDALOCK_MATRIX", "--matrix", lambda a: target_options(a).matrix_dir),
        ("CUDALOCK_PYTORCH_INDEX", "--pytorch-index", lambda a: request_options(a).pytorch_index),
        ("CUDALOCK_PYPI_INDEX", "--pypi-index", lambda a: request_options(a).pypi_index),
    ],
)
def test_environment_variables(
    monkeypatch: pytest.MonkeyPatch, variable: str, flag: str, read: object
) -> None:
    assert callable(read)
    as_read = Path if variable == "CUDALOCK_MATRIX" else str
    monkeypatch.setenv(variable, "from-env")
    assert read(parse("lock")) == as_read("from-env")
    assert read(parse("lock", flag, "from-flag")) == as_read("from-flag")
    monkeypatch.setenv(variable, "")
    assert read(parse("lock")) is None


def test_cudalock_matrix_reaches_the_matrix_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDALOCK_MATRIX", "/somewhere")
    for sub in ("check", "show", "refresh"):
        assert matrix_dir(parse("matrix", sub)) == Path("/somewhere")
        assert matrix_dir(parse("matrix", sub, "--matrix", "here")) == Path("here")


def test_an_environment_variable_drives_a_real_run() -> None:
    done = cudalock(
        "probe",
        "--json",
        "--compute-capability",
        "8.0",
        env=offline_env() | {"CUDALOCK_DRIVER_VERSION": "535.104.05"},
    )
    assert done.returncode == 0, done.stderr
    assert '"driver_version": "535.104.05"' in done.stdout


# ---------------------------------------------------------------------------------------------
# The process: Ctrl-C, completion


def _blocked_reading_stdin(pid: int) -> bool:
    try:
        return "pipe_read" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux /proc")
def test_ctrl_c_exits_130_with_one_line() -> None:
    with subprocess.Popen(
        [str(CUDALOCK), "audit", "--report", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        deadline = time.monotonic() + 60
        while not _blocked_reading_stdin(child.pid):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 130
    assert (out, err) == ("", "cudalock: interrupted\n")


@pytest.fixture(scope="module")
def completion_script(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    done = cudalock("--print-completion", "bash")
    assert done.returncode == 0, done.stderr
    path = tmp_path_factory.mktemp("completion") / "cudalock.bash"
    path.write_text(done.stdout)
    yield path


def test_completion_script_is_valid_bash(completion_script: Path) -> None:
    subprocess.run(["bash", "-n", str(completion_script)], check=True, timeout=60)
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which(
        "shellcheck"
    )
    if shellcheck:
        subprocess.run([shellcheck, "--shell=bash", str(completion_script)], check=True, timeout=60)


def complete(script: Path, words: list[str], cwd: Path | None = None) -> list[str]:
    """What bash offers for the last of ``words`` (``cudalock ...``), one per line."""
    program = (
        f"source {script}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        "_cudalock\n"
        "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    done = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, cwd=cwd, timeout=60, check=True
    )
    return [line for line in done.stdout.splitlines() if line]


def test_completion_offers_commands_flags_and_files(
    completion_script: Path, tmp_path: Path
) -> None:
    assert complete(completion_script, ["cudalock", ""]) == [
        *COMMANDS,
        "-h",
        "--help",
        "--version",
        "--print-completion",
    ]
    assert complete(completion_script, ["cudalock", "re"]) == ["resolve"]
    assert complete(completion_script, ["cudalock", "resolve", "--dri"]) == [
        "--driver-version",
        "--driver-cuda",
    ]
    assert complete(completion_script, ["cudalock", "doctor", "--gath"]) == [
        "--gather-16bit-weights"
    ]
    assert complete(completion_script, ["cudalock", "matrix", ""])[:3] == [
        "check",
        "show",
        "refresh",
    ]
    assert complete(completion_script, ["cudalock", "matrix", "show", "--j"]) == ["--json"]
    (tmp_path / "node.json").write_text("{}")
    assert complete(completion_script, ["cudalock", "resolve", "--probe", "no"], cwd=tmp_path) == [
        "node.json"
    ]
    assert complete(completion_script, ["cudalock", "resolve", "--torch", ""]) == []
    assert complete(completion_script, ["cudalock", "--print-completion", ""]) == ["bash"]
    assert complete(completion_script, ["cudalock", "matrix", "check", "no"], cwd=tmp_path) == [
        "node.json"
    ]


@pytest.mark.parametrize("columns", [None, "120", "0", "wide", "-5"])
def test_help_is_as_wide_as_shutil_says_the_terminal_is(
    columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert terminal_columns() == shutil.get_terminal_size().columns
