"""cudalock benchmarks: each figure measured side by side with what users run instead.

    python benchmarks/run.py [--repeat N] [--quick] [--only NAME]...

Every pair is run alternately (A B, then B A, ...) after one unmeasured warm-up of each, and the
table in ``benchmarks/RESULTS.md`` reports the medians, their ratio and the goal. Each figure is
written with the exact command that produced it, relative to the repository root, so anyone can
rerun it. In-process figures run in a fresh interpreter through this script's ``--child`` mode,
which prints its timings as JSON.

Only the standard library is imported here: the runner may run under any Python 3.10+, and it
drives the cudalock installed in ``--venv`` (default: the running venv, else ``.venv``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORK = ROOT / "benchmarks" / ".work"
DEFAULT_OUTPUT = ROOT / "benchmarks" / "RESULTS.md"
DEFAULT_REPEAT = 10
QUICK_REPEAT = 3
FLEET_SIZE = 10_000
TORCH_VERSION = "2.13.0"  # the CPU build pip takes from this machine's disk (no CUDA download)
RESOLVE_ARGS = ("resolve", "--driver-version", "535.104.05", "--python", "3.11", "--json")


# --------------------------------------------------------------------------------------------
# Results


@dataclass
class Series:
    """One side of a comparison: the exact command and its wall-clock samples (seconds)."""

    label: str
    command: str
    samples: list[float] = field(default_factory=list)
    #: The largest resident set size of each measured run, in bytes.
    peak_rss: list[int] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def record(self, elapsed: float, peak_rss: int) -> None:
        self.samples.append(elapsed)
        self.peak_rss.append(peak_rss)


@dataclass
class Figure:
    name: str
    what: str
    compared_with: str
    goal: str
    series: list[Series] = field(default_factory=list)
    #: The figure the goal is about: a ratio (×) or a time (seconds).
    value: float | None = None
    unit: str = "×"
    met: bool | None = None
    notes: list[str] = field(default_factory=list)
    #: For a figure that misses its goal: what stands between them, from measured parts.
    between: str | None = None
    #: The median and baseline columns as shown, where they are not the series' medians.
    columns: tuple[str, str] | None = None
    skipped: str | None = None
    error: str | None = None


class CaseSkipped(Exception):
    """A prerequisite is missing (e.g. no real torch and ``--no-setup``)."""


class CaseFailed(Exception):
    """A measured command did not do its job (wrong exit status, bad output)."""


@dataclass
class Context:
    venv: Path
    work: Path
    repeat: int
    setup: bool
    fleet_size: int
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def cudalock(self) -> Path:
        return self.venv / "bin" / "cudalock"


def shown(path: Path | str) -> str:
    """A path as the recorded command shows it: relative to the repository root if inside it."""
    path = Path(path)
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def command_text(argv: Sequence[str | Path], cwd: Path = ROOT) -> str:
    """The command as one shell line run from ``cwd`` (paths relative to it)."""

    def text(arg: str | Path) -> str:
        if not isinstance(arg, Path):
            return arg
        return shown(arg) if cwd == ROOT else os.path.relpath(Path(arg).absolute(), cwd)

    return shlex.join(text(a) for a in argv)


def child_env() -> dict[str, str]:
    """The environment measured commands run in.

    Byte-code writing is allowed (a user's installed package has its .pyc files; an editable
    install writes them on first run), and no CUDALOCK_* variable leaks in from the shell.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("CUDALOCK_")
    }
    return env


def call(argv: Sequence[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """Every process the runner starts: its own fixed argv, never a shell."""
    return subprocess.run([str(a) for a in argv], **kwargs)  # noqa: S603


#: Runs one measured command and writes its wall-clock time and peak RSS to a file. A child's
#: peak RSS as the kernel counts it starts from its parent's size at the spawn, so the command is
#: started from this small process, not from the runner (which grows while it works).
MEASURE = """\
import json, os, sys, time
out, argv = sys.argv[1], sys.argv[2:]
started = time.perf_counter()
pid = os.posix_spawnp(argv[0], argv, os.environ)
_, status, usage = os.wait4(pid, 0)
elapsed = time.perf_counter() - started
with open(out, "w") as handle:
    json.dump([elapsed, usage.ru_maxrss * 1024], handle)  # Linux counts KiB
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_timed(
    argv: Sequence[str | Path], env: dict[str, str], ok: Sequence[int] = (0,), cwd: Path = ROOT
) -> tuple[float, subprocess.CompletedProcess[bytes], int]:
    """Run ``argv`` to the end: its wall-clock time, its result, and its peak RSS in bytes."""
    with tempfile.NamedTemporaryFile(suffix=".json") as measured:
        done = call(
            [sys.executable, "-c", MEASURE, measured.name, *argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        try:
            elapsed, peak = json.loads(Path(measured.name).read_text())
        except ValueError:
            elapsed, peak = math.nan, 0
    if done.returncode not in ok:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise CaseFailed(f"`{command_text(argv)}` exited {done.returncode}: " + " | ".join(tail))
    return float(elapsed), done, int(peak)


def run_timed_lines(
    argv: Sequence[str | Path], env: dict[str, str], cwd: Path = ROOT
) -> tuple[float, int, list[tuple[float, str]]]:
    """:func:`run_timed` for a command whose output says where it is: its wall-clock time, its
    peak RSS and each line it printed (stdout and stderr) with the seconds since its start."""
    with tempfile.NamedTemporaryFile(suffix=".json") as measured:
        started = time.monotonic()
        with subprocess.Popen(  # noqa: S603 - the runner's own fixed argv
            [sys.executable, "-c", MEASURE, measured.name, *map(str, argv)],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as child:
            assert child.stdout is not None
            lines = [(time.monotonic() - started, line.rstrip("\n")) for line in child.stdout]
        try:
            elapsed, peak = json.loads(Path(measured.name).read_text())
        except ValueError:
            elapsed, peak = math.nan, 0
    if child.returncode != 0:
        tail = " | ".join(line for _t, line in lines[-5:])
        raise CaseFailed(f"`{command_text(argv)}` exited {child.returncode}: {tail}")
    return float(elapsed), int(peak), lines


def compare(
    ctx: Context,
    a: Series,
    a_argv: Sequence[str | Path],
    b: Series,
    b_argv: Sequence[str | Path],
    *,
    a_ok: Sequence[int] = (0,),
    b_ok: Sequence[int] = (0,),
    check_a: Callable[[subprocess.CompletedProcess[bytes]], None] | None = None,
) -> None:
    """Warm up each once, then alternate A/B (and B/A) ``ctx.repeat`` times."""
    _, first, _ = run_timed(a_argv, ctx.env, a_ok)
    if check_a is not None:
        check_a(first)
    run_timed(b_argv, ctx.env, b_ok)
    for round_ in range(ctx.repeat):
        pairs = [(a, a_argv, a_ok), (b, b_argv, b_ok)]
        if round_ % 2:
            pairs.reverse()
        for series, argv, ok in pairs:
            elapsed, _, peak = run_timed(argv, ctx.env, ok)
            series.record(elapsed, peak)


def child_json(
    ctx: Context, args: Sequence[str | Path], env: dict[str, str] | None = None
) -> dict[str, Any]:
    argv: list[str | Path] = [ctx.python, Path(__file__), "--child", *args]
    _, done, _ = run_timed(argv, ctx.env if env is None else env)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# --------------------------------------------------------------------------------------------
# Case 1: start-up of `cudalock resolve`


def case_resolve_startup(ctx: Context, fig: Figure) -> None:
    a_argv: list[str | Path] = [ctx.cudalock, *RESOLVE_ARGS]
    b_argv: list[str | Path] = [ctx.python, "-c", "pass"]
    a = Series("cudalock resolve", command_text(a_argv))
    b = Series("python -c pass", command_text(b_argv))
    fig.series = [a, b]

    def check(done: subprocess.CompletedProcess[bytes]) -> None:
        try:
            json.loads(done.stdout)
        except ValueError:
            raise CaseFailed("`cudalock resolve --json` did not print JSON") from None

    compare(ctx, a, a_argv, b, b_argv, check_a=check)
    fig.value = a.median / b.median
    fig.met = fig.value <= 10
    breakdown, medians = startup_breakdown(ctx, a.median)
    fig.notes.append(breakdown)
    fig.notes.append(import_breakdown(ctx))
    if not fig.met:
        fig.between = startup_between(medians, a.median, b.median, 10)


#: Start-up, built up import by import: each step adds to the one before (cumulative).
STARTUP_STEPS = (
    ("the interpreter alone", "pass"),
    (
        "+ the standard library cudalock itself needs (re, enum, typing, dataclasses, pathlib, "
        "json)",
        "import re, enum, typing, dataclasses, pathlib, json",
    ),
    (
        "+ `cudalock.cli.main` and the resolve command module (argparse, the shared flag groups)",
        "import cudalock.cli.main, cudalock.cli.resolve",
    ),
    (
        "+ `cudalock.resolve`, `cudalock.resolve.explain`, `cudalock.machine.overrides` "
        "(packaging, the model, the matrix types)",
        "import cudalock.resolve, cudalock.resolve.explain, cudalock.machine.overrides",
    ),
    (
        "+ `cudalock.machine.probe` (the live probe that the overrides apply to; pynvml only where "
        "libnvidia-ml loads)",
        "import cudalock.machine.probe",
    ),
    (
        "+ `load_matrix()` (the TOML files, parsed and typed)",
        "from cudalock.matrix.load import load_matrix; load_matrix()",
    ),
)


#: What `cudalock resolve --driver-version 535.104.05 --python 3.11 --json` does, as library
#: calls (the target flags as a plain namespace): the command's cost without the CLI layer.
WITHOUT_CLI = """\
import json, sys
from types import SimpleNamespace
from cudalock.matrix.load import load_matrix
from cudalock.resolve import make_request, resolve
from cudalock.machine.overrides import targets_from_options

flags = SimpleNamespace(
    probe_files=(),
    driver_version="535.104.05",
    driver_cuda=None,
    no_gpu=False,
    compute_capabilities=(),
    gpu_names=(),
    platform=None,
    matrix_dir=None,
)
matrix = load_matrix()
plan = resolve(matrix, targets_from_options(flags, matrix), make_request(python="3.11"))
sys.stdout.write(json.dumps(plan.to_json(), indent=2) + "\\n")
"""


def startup_breakdown(ctx: Context, whole: float) -> tuple[str, list[float]]:
    """Medians of ``python -c`` running the imports up to each step, alternating the steps:
    the note, and the medians (one per :data:`STARTUP_STEPS`, cumulative)."""
    steps = list(STARTUP_STEPS)
    programs = [
        "; ".join(code for _label, code in steps[: i + 1] if code != "pass") or "pass"
        for i in range(len(steps))
    ]
    samples: list[list[float]] = [[] for _ in steps]
    for round_ in range(ctx.repeat):
        order = list(range(len(steps)))
        if round_ % 2:
            order.reverse()
        for i in order:
            elapsed, _, _ = run_timed([ctx.python, "-c", programs[i]], ctx.env)
            samples[i].append(elapsed)
    medians = [statistics.median(s) for s in samples]
    rows = [
        f"| {label} | {medians[i] * 1000:.1f} | "
        f"{(medians[i] - (medians[i - 1] if i else 0)) * 1000:+.1f} |"
        for i, (label, _code) in enumerate(steps)
    ]
    rows.append(
        f"| the whole `cudalock resolve` command (figure above) | {whole * 1000:.1f} | "
        f"{(whole - medians[-1]) * 1000:+.1f} |"
    )
    library = [run_timed([ctx.python, "-c", WITHOUT_CLI], ctx.env)[0] for _ in range(ctx.repeat)]
    rows.append(
        f"| the same Plan from library calls, no CLI at all (below) | "
        f"{statistics.median(library) * 1000:.1f} | |"
    )
    text = (
        "Where the start-up goes: each line is the median wall time of "
        f'`{shown(ctx.python)} -c "<the imports of this line and those above>"`, '
        f"{ctx.repeat} runs each, alternating; the last column is what the line adds.\n\n"
        "| imports | ms | adds |\n|---|---:|---:|\n"
        + "\n".join(rows)
        + "\n\nThe command line is read by argparse; `cudalock.cli.main` builds the parser for "
        "the command named (importing that command's module alone) and each command imports "
        "the core it uses when it runs. The last line is the same work as library calls, no CLI "
        "at all: "
        f"`{shown(ctx.python)} -c` running\n\n```python\n{WITHOUT_CLI}```"
    )
    return text, medians


def startup_between(medians: list[float], whole: float, bare: float, goal: float) -> str:
    """What stands between ``resolve``'s start-up and ``goal``× ``python -c pass``: each step of
    :data:`STARTUP_STEPS` by what it adds, largest first."""
    allowed = goal * bare
    adds = [
        (label.removeprefix("+ "), medians[i] - (medians[i - 1] if i else 0.0))
        for i, (label, _code) in enumerate(STARTUP_STEPS)
        if i
    ]
    adds.append(("the command itself, beyond those imports and the load", whole - medians[-1]))
    largest = "; ".join(
        f"{label}: {fmt_seconds(seconds)}"
        for label, seconds in sorted(adds, key=lambda item: -item[1])
        if seconds > 0
    )
    return (
        f"The goal allows {fmt_seconds(allowed)} ({goal:g}× the bare interpreter's "
        f"{fmt_seconds(bare)}); `resolve` takes {fmt_seconds(whole)}, "
        f"{fmt_seconds(whole - allowed)} more. What each part adds, largest first (from the "
        f"start-up table in its notes): {largest}."
    )


def import_breakdown(ctx: Context) -> str:
    """Where start-up goes, by top-level import (``-X importtime`` adds its own overhead)."""
    argv: list[str | Path] = [ctx.python, "-X", "importtime", ctx.cudalock, *RESOLVE_ARGS]
    done = call(argv, cwd=ROOT, env=ctx.env, capture_output=True, check=False)
    totals: dict[str, int] = {}
    for line in done.stderr.decode(errors="replace").splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match and match.group(3) == " ":  # one space: imported by the program itself
            package = match.group(4).split(".")[0]
            totals[package] = totals.get(package, 0) + int(match.group(2))
    biggest = sorted(totals.items(), key=lambda kv: -kv[1])[:12]
    rows = "\n".join(f"| `{name}` | {us / 1000:.1f} |" for name, us in biggest)
    return (
        f"Imports by top-level package, from `{command_text(argv)}` (cumulative ms under "
        f"`-X importtime`, which inflates them; {sum(totals.values()) / 1000:.1f} ms in all):\n\n"
        f"| package | ms |\n|---|---:|\n{rows}"
    )


# --------------------------------------------------------------------------------------------
# Case 2: `cudalock audit` vs `python -m torch.utils.collect_env` on a venv with real torch


def torch_venv(ctx: Context) -> Path:
    """A venv with the real torch (CPU build from this machine's disk), made once and kept."""
    venv = ctx.work / "torch-venv"
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import importlib.metadata as m; print(m.version('torch'))"]
    if python.exists():
        found = call(probe, capture_output=True, text=True, check=False)
        if found.returncode == 0 and found.stdout.startswith(TORCH_VERSION):
            return venv
    if not ctx.setup:
        raise CaseSkipped(f"no venv with real torch at {shown(venv)} (run without --no-setup)")
    base = getattr(sys, "_base_executable", sys.executable)
    print(f"  creating {shown(venv)} with torch=={TORCH_VERSION} (once; takes a while)", flush=True)
    call([base, "-m", "venv", "--clear", venv], check=True)
    # pip, not uv: pip's configuration on this machine finds the CPU build on disk; uv would
    # download a multi-gigabyte CUDA build.
    call([python, "-m", "pip", "install", "--quiet", f"torch=={TORCH_VERSION}"], check=True)
    return venv


def case_audit(ctx: Context, fig: Figure) -> None:
    venv = torch_venv(ctx)
    target_python = venv / "bin" / "python"
    a_argv: list[str | Path] = [ctx.cudalock, "audit", "--python", target_python, "--json"]
    b_argv: list[str | Path] = [target_python, "-m", "torch.utils.collect_env"]
    a = Series("cudalock audit", command_text(a_argv))
    b = Series("collect_env", command_text(b_argv))
    fig.series = [a, b]

    def check(done: subprocess.CompletedProcess[bytes]) -> None:
        try:
            report = json.loads(done.stdout)
        except ValueError:
            raise CaseFailed("`cudalock audit --json` did not print JSON") from None
        if TORCH_VERSION not in json.dumps(report):
            raise CaseFailed(f"`cudalock audit --json` does not mention torch {TORCH_VERSION}")

    # audit exits 1 when it finds problems; the time is what matters here.
    compare(ctx, a, a_argv, b, b_argv, a_ok=(0, 1), check_a=check)
    fig.value = b.median / a.median
    fig.unit = "× faster"
    fig.met = fig.value >= 15
    parts = audit_parts(ctx, target_python)
    fig.notes.append(
        "Where the audit's time goes (medians of as many runs as the figure's): "
        + "; ".join(f"{label} {fmt_seconds(seconds)}" for label, seconds in parts.items())
        + ". The inspection is started before cudalock imports what judges its answer, so the "
        "two overlap."
    )
    if not fig.met:
        fig.between = audit_between(parts, a.median, b.median, 15)


def audit_parts(ctx: Context, target_python: Path) -> dict[str, float]:
    """The parts of ``cudalock audit`` measured alone: both interpreters' bare start, and the
    inspection of the target environment (in process, ``--child audit-inspection``)."""
    commands: dict[str, Callable[[], float]] = {
        "cudalock's interpreter starting and exiting": lambda: run_timed(
            [ctx.python, "-c", "pass"], ctx.env
        )[0],
        "the audited interpreter starting and exiting": lambda: run_timed(
            [target_python, "-B", "-c", "pass"], ctx.env
        )[0],
        "the inspection of the audited environment (its interpreter started, reading every "
        "package's metadata)": lambda: float(
            child_json(ctx, ["audit-inspection", str(target_python)])["inspection"]
        ),
    }
    runs: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(ctx.repeat):
        for label, measure in commands.items():
            runs[label].append(measure())
    return {label: statistics.median(samples) for label, samples in runs.items()}


def child_audit_inspection(python: str) -> dict[str, Any]:
    from cudalock.audit.inspection import inspect_environment

    started = time.perf_counter()
    installed = inspect_environment(Path(python))
    return {"inspection": time.perf_counter() - started, "packages": len(installed.distributions)}


def audit_between(parts: dict[str, float], ours: float, theirs: float, goal: float) -> str:
    """What stands between the audit and ``goal``× faster than collect_env, in its parts."""
    allowed = theirs / goal
    listed = "; ".join(f"{label} {fmt_seconds(seconds)}" for label, seconds in parts.items())
    inspection = list(parts.values())[-1]
    return (
        f"The goal allows {fmt_seconds(allowed)} (collect_env's {fmt_seconds(theirs)} / "
        f"{goal:g}); the audit takes {fmt_seconds(ours)}, {fmt_seconds(ours - allowed)} more. "
        f"Measured alone: {listed}. The inspection is started first and runs beside "
        "cudalock's own imports; the audit's remaining "
        f"{fmt_seconds(max(0.0, ours - inspection))} beyond the inspection are cudalock's "
        "start-up, the imports it waits on, judging the answer against the matrix and printing it."
    )


# --------------------------------------------------------------------------------------------
# Case 3: `cudalock lock` of a real fine-tuning stack (second run, warm cache) vs `uv pip compile`

#: The stack locked and installed: llamafactory 0.9.5 with its metrics extra and DeepSpeed, on
#: torch 2.8.0 for an A100 whose driver (570.86.15) runs CUDA 12.8: the recorded closure of
#: 150+ packages that tests/support/realstack.py serves on 127.0.0.1.
STACK_TORCH = "2.8.0"
STACK_FRAMEWORK = "llamafactory[metrics]==0.9.5"
STACK_ARGS = (
    "--driver-version",
    "570.86.15",
    "--gpu",
    "A100",
    "--platform",
    "linux-x86_64",
    "--torch",
    STACK_TORCH,
    "--python",
    "3.11",
    "--framework",
    STACK_FRAMEWORK,
    "--with",
    "deepspeed",
)
#: The real sizes of torch 2.8.0's wheel and of the nvidia-* and triton wheels it pins (3.7 GB
#: together), read from PyPI; the time-to-environment stand-ins carry them divided by SCALE, in
#: random (incompressible) bytes: transfers and installs weigh what they do for real, scaled to
#: what a 2-core benchmark machine runs ten times in reasonable time.
REAL_WHEEL_SIZES = ROOT / "benchmarks" / "real_wheel_sizes.json"
SCALE = 8


def scaled_payloads() -> dict[tuple[str, str], int]:
    """(package, version) → payload bytes of its stand-in wheels."""
    wheels = json.loads(REAL_WHEEL_SIZES.read_text(encoding="utf-8"))["wheels"]
    return {(name, wheel["version"]): wheel["size"] // SCALE for name, wheel in wheels.items()}


def offline(env: dict[str, str]) -> dict[str, str]:
    """No pip/uv configuration of this machine, no CUDALOCK_* variables: only the given indexes."""
    clean = {k: v for k, v in env.items() if not k.startswith(("PIP_", "UV_", "CUDALOCK_"))}
    clean.update(
        {
            "UV_NO_CONFIG": "1",
            "UV_PYTHON_DOWNLOADS": "never",
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
    )
    return clean


def find_uv(ctx: Context) -> Path:
    uv = ctx.venv / "bin" / "uv"
    if uv.exists():
        return uv
    found = shutil.which("uv")
    if found is None:
        raise CaseSkipped("no uv (pip install uv)")
    return Path(found)


def stack_plan(ctx: Context, index_args: Sequence[str]) -> dict[str, Any]:
    """cudalock's plan for the stack: the torch family and DeepSpeed it pins, as JSON."""
    _, done, _ = run_timed([ctx.cudalock, "resolve", *STACK_ARGS, *index_args, "--json"], ctx.env)
    plan: dict[str, Any] = json.loads(done.stdout)
    return plan


def uv_project(plan: dict[str, Any], framework: str, pytorch_index: str) -> str:
    """The pyproject.toml a uv user writes for the same stack: the torch family pinned to the
    planned build and routed to its index (explicit, so PyPI's torch cannot win), the framework
    and DeepSpeed as cudalock pins them."""
    pins = {p["name"]: p["version"] for p in plan["packages"]}
    family = [name for name in ("torch", "torchvision", "torchaudio") if name in pins]
    paired = {p["name"]: p["version"] for p in plan.get("paired", [])}
    # llamafactory requires torchaudio: routed and pinned like the rest of the family.
    for name, version in paired.items():
        if name not in pins:
            pins[name] = version
            family.append(name)
    dependencies = [f"{name}=={version}" for name, version in pins.items()] + [framework]
    variant_index = f"{pytorch_index}/{plan['torch']['variant']}"
    return "\n".join(
        [
            "[project]",
            'name = "finetune-env"',
            'version = "0"',
            'requires-python = ">=3.11"',
            "dependencies = [" + ", ".join(json.dumps(d) for d in dependencies) + "]",
            "",
            "[tool.uv.sources]",
            *(f'{name} = {{ index = "pytorch" }}' for name in family),
            "",
            "[[tool.uv.index]]",
            'name = "pytorch"',
            f'url = "{variant_index}"',
            "explicit = true",
            "",
        ]
    )


def uv_compile_argv(uv: Path, pypi_url: str, cache: Path) -> list[str | Path]:
    """``uv pip compile`` of the ``pyproject.toml`` in its working directory into a hashed
    ``pylock.toml``, for the target the lock figures plan for."""
    return [
        uv,
        "pip",
        "compile",
        "pyproject.toml",
        "--default-index",
        pypi_url,
        "--python-version",
        "3.11",
        "--python-platform",
        "x86_64-manylinux_2_28",
        "--format",
        "pylock.toml",
        "--generate-hashes",
        "--quiet",
        "-o",
        "pylock.toml",
        "--cache-dir",
        cache,
    ]


Side = tuple[Series, Sequence[str | Path], Path]


def measure_alternately(ctx: Context, env: dict[str, str], first: Side, second: Side) -> None:
    """Record ``ctx.repeat`` runs of each side, alternating which goes first; the second side
    runs once unmeasured before, so both start with the cache warm."""
    run_timed(second[1], env, cwd=second[2])
    for round_ in range(ctx.repeat):
        order = [first, second] if round_ % 2 == 0 else [second, first]
        for series, argv, cwd in order:
            elapsed, _, peak = run_timed(argv, env, cwd=cwd)
            series.record(elapsed, peak)


def case_lock(ctx: Context, fig: Figure) -> None:
    """Both sides use one warm uv cache and the same stand-in indexes."""
    uv = find_uv(ctx)
    sys.path.insert(0, str(ROOT))
    from tests.support.realstack import serve_real_stack

    base = ctx.work / "lock"
    if base.exists():
        shutil.rmtree(base)
    cache = base / "uv-cache"
    ours, theirs = base / "cudalock", base / "uv"
    ours.mkdir(parents=True)
    theirs.mkdir()
    env = offline(ctx.env) | {"CUDA_HOME": str(fake_toolkit(base, "12.8"))}
    with serve_real_stack(base / "served") as server:
        index_args = ("--pytorch-index", server.pytorch_url, "--pypi-index", server.pypi_url)
        a_argv: list[str | Path] = [
            ctx.cudalock,
            "lock",
            *STACK_ARGS,
            *index_args,
            "--cache-dir",
            cache,
            "--quiet",
            "--output-dir",
            ours,
        ]
        # The first lock fills the cache and writes the lock the measured runs start from.
        run_timed(a_argv, env)
        plan = stack_plan(ctx, index_args)
        (theirs / "pyproject.toml").write_text(
            uv_project(plan, STACK_FRAMEWORK, server.pytorch_url), encoding="utf-8"
        )
        b_argv = uv_compile_argv(uv, server.pypi_url, cache)
        a = Series("cudalock lock (second run)", command_text(a_argv))
        b = Series(
            "uv pip compile",
            f"cd {shown(theirs)} && {command_text(b_argv, cwd=theirs)}",
        )
        fig.series = [a, b]
        measure_alternately(ctx, env, (a, a_argv, ROOT), (b, b_argv, theirs))
        profile = lock_profile(ctx, a_argv, env)
    ours_lock = (ours / "pylock.toml").read_text(encoding="utf-8")
    theirs_lock = (theirs / "pylock.toml").read_text(encoding="utf-8")
    if f"{STACK_TORCH}+cu128" not in ours_lock:
        raise CaseFailed(f"the lock does not pin torch {STACK_TORCH}+cu128")
    count = ours_lock.count("[[packages]]")
    fig.value = a.median / b.median
    fig.met = fig.value <= 1.3
    fig.notes.append(
        f"The closure has {count} packages (uv's own lock of the same input: "
        f"{theirs_lock.count('[[packages]]')}); pylock.toml is {len(ours_lock) // 1024} KiB. "
        "The indexes are the recorded real stack served on 127.0.0.1 by the runner "
        "(tests/support/realstack.py); the uv side compiles the `pyproject.toml` a uv user "
        f"writes for the same stack (kept in `{shown(theirs)}`): the torch family pinned to the "
        "planned build and routed to its index, the framework and DeepSpeed as cudalock pins them."
    )
    fig.notes.append(lock_breakdown(profile, a.median))
    if not fig.met:
        fig.between = lock_between(profile, fig, 1.3)


#: The vllm request of the kernels recording: vllm 0.6.6.post1 (pins torch 2.5.1 and xformers
#: 0.0.28.post3) on an A100 whose driver (530.30.02) runs CUDA 12.1.
VLLM_FRAMEWORK = "vllm==0.6.6.post1"
VLLM_ARGS = (
    "--driver-version",
    "530.30.02",
    "--gpu",
    "A100",
    "--platform",
    "linux-x86_64",
    "--python",
    "3.11",
    "--framework",
    VLLM_FRAMEWORK,
)
#: What ``uv pip compile --torch-backend cu121`` routes to the PyTorch index for this request
#: (the packages of its closure the variant index builds). uv's --torch-backend reads only
#: download.pytorch.org (the URLs are compiled into uv), so against the stand-in index the uv
#: side states the same routing as explicit sources.
VLLM_TORCH_BACKEND_ROUTED = ("torch", "torchvision", "xformers")


def torch_backend_project(pytorch_index: str) -> str:
    """The uv project that does what ``--torch-backend cu121`` does for the vllm request."""
    dependencies = [VLLM_FRAMEWORK, *VLLM_TORCH_BACKEND_ROUTED]
    return "\n".join(
        [
            "[project]",
            'name = "vllm-env"',
            'version = "0"',
            'requires-python = ">=3.11"',
            "dependencies = [" + ", ".join(json.dumps(d) for d in dependencies) + "]",
            "",
            "[tool.uv.sources]",
            *(f'{name} = {{ index = "pytorch" }}' for name in VLLM_TORCH_BACKEND_ROUTED),
            "",
            "[[tool.uv.index]]",
            'name = "pytorch"',
            f'url = "{pytorch_index}/cu121"',
            "explicit = true",
            "",
        ]
    )


def case_lock_vllm(ctx: Context, fig: Figure) -> None:
    """cudalock lock of the vllm request against uv pip compile routed as --torch-backend
    cu121 routes it; one warm uv cache, the same stand-in indexes."""
    import dataclasses

    uv = find_uv(ctx)
    sys.path.insert(0, str(ROOT))
    from tests.support.realstack import KERNELS_RECORDING, load_recording, serve_real_stack

    recording = load_recording(KERNELS_RECORDING)
    cu121 = dataclasses.replace(recording.torch_build("2.5.1"), variant="cu121", cuda="12.1")
    base = ctx.work / "lock-vllm"
    if base.exists():
        shutil.rmtree(base)
    cache = base / "uv-cache"
    ours, theirs = base / "cudalock", base / "uv"
    ours.mkdir(parents=True)
    theirs.mkdir()
    env = offline(ctx.env)
    with serve_real_stack(base / "served", recording, extra_builds=[cu121]) as server:
        index_args = ("--pytorch-index", server.pytorch_url, "--pypi-index", server.pypi_url)
        a_argv: list[str | Path] = [
            ctx.cudalock,
            "lock",
            *VLLM_ARGS,
            *index_args,
            "--allow-insecure-index",
            "--cache-dir",
            cache,
            "--quiet",
            "--output-dir",
            ours,
        ]
        run_timed(a_argv, env)
        (theirs / "pyproject.toml").write_text(
            torch_backend_project(server.pytorch_url), encoding="utf-8"
        )
        b_argv = uv_compile_argv(uv, server.pypi_url, cache)
        a = Series("cudalock lock (second run)", command_text(a_argv))
        b = Series(
            "uv pip compile (routed as --torch-backend cu121)",
            f"cd {shown(theirs)} && {command_text(b_argv, cwd=theirs)}",
        )
        fig.series = [a, b]
        measure_alternately(ctx, env, (a, a_argv, ROOT), (b, b_argv, theirs))
        profile = lock_profile(ctx, a_argv, env)
    ours_lock = (ours / "pylock.toml").read_text(encoding="utf-8")
    theirs_lock = (theirs / "pylock.toml").read_text(encoding="utf-8")
    for pin in ("2.5.1+cu121", "0.0.28.post3+cu121"):
        if pin not in ours_lock:
            raise CaseFailed(f"the lock does not pin {pin}")
    fig.value = a.median / b.median
    fig.met = fig.value <= 1.5
    fig.notes.append(
        f"The closure has {ours_lock.count('[[packages]]')} packages (uv's: "
        f"{theirs_lock.count('[[packages]]')}). The indexes are the recorded vllm closure "
        "(tests/fixtures/closures/kernels-stack.json) served on 127.0.0.1. `uv pip compile "
        "--torch-backend cu121` reads only download.pytorch.org (its URLs are compiled into "
        "uv), so the uv side routes what that flag routes for this request (torch, "
        "torchvision, xformers) to the stand-in cu121 index as explicit sources. cudalock "
        "also fits vllm's transformers to torch 2.5.1 (its 'torch' extra), which uv does not: "
        "uv's lock holds a transformers whose torch extra needs torch 2.6."
    )
    fig.notes.append(lock_breakdown(profile, a.median))
    if not fig.met:
        fig.between = lock_between(profile, fig, 1.5)


#: What a lock spends its time on: the parts are functions the main thread calls one after the
#: other (none inside another), each replaced for one run by a wrapper that adds up its
#: wall-clock time: (label, module, attribute path).
LOCK_PARTS = (
    ("the inputs: flags, spec, the matrix, the target", "cudalock.cli.lock", "compute_inputs"),
    (
        "the plan, torch chosen with the frameworks' releases",
        "cudalock.lock.python",
        "plan_with_frameworks",
    ),
    ("uv's version", "cudalock.lock.closure", "uv_version"),
    (
        "before uv: the frameworks' metadata, the variant index's project list",
        "cudalock.lock.closure",
        "_Fitter.prepare",
    ),
    ("uv's runs (`uv pip compile`)", "cudalock.lock.closure", "run_uv"),
    ("reading uv's pylock.toml (tomllib)", "cudalock.lock.closure", "read_toml_lock"),
    (
        "after uv: the closure's torch extras and CUDA builds (cached metadata)",
        "cudalock.lock.closure",
        "_Fitter.review",
    ),
    ("the lock files made from it, validated", "cudalock.lock.files", "lock_texts"),
    ("writing the files", "cudalock.lock.files", "write_outputs"),
)
#: What ``cudalock lock`` imports before it does anything (the command line imports it lazily).
LOCK_MODULES = (
    "cudalock.cli.lock",
    "cudalock.cli.output",
    "cudalock.envfiles.spec",
    "cudalock.lock",
    "cudalock.resolve",
    "cudalock.machine",
)


def child_lock_profile(args: list[str]) -> dict[str, Any]:
    """``cudalock lock ARGS`` in this process, with the parts in ``LOCK_PARTS`` timed by
    wall clock (a profiler would slow the Python parts and not uv's): where its time goes."""
    import importlib

    started = time.perf_counter()
    from cudalock.cli.main import run

    cli_imported = time.perf_counter()
    for name in LOCK_MODULES:
        importlib.import_module(name)
    imported = time.perf_counter()
    parts: dict[str, float] = {}
    calls: dict[str, int] = {}

    def timed(label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            begun = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                parts[label] = parts.get(label, 0.0) + time.perf_counter() - begun
                calls[label] = calls.get(label, 0) + 1

        return wrapper

    for label, module_name, path in LOCK_PARTS:
        owner: Any = importlib.import_module(module_name)
        *outer, attribute = path.split(".")
        for name in outer:
            owner = getattr(owner, name)
        setattr(owner, attribute, timed(label, getattr(owner, attribute)))
    # The command's own output would mix with this child's JSON on stdout.
    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
        run(args)
    finished = time.perf_counter()
    return {
        "cli-import": cli_imported - started,
        "import": imported - cli_imported,
        "run": finished - imported,
        "parts": parts,
        "calls": calls,
    }


@dataclass(frozen=True)
class LockProfile:
    """Where one lock's time goes, measured beside the figure's runs."""

    #: ``python -c pass`` of the same interpreter: start-up and exit, with no cudalock at all.
    python: float
    cli_import: float
    imports: float
    run: float
    parts: dict[str, float]
    calls: dict[str, int]

    def rows(self, whole: float) -> list[tuple[str, float, str]]:
        """(part, seconds, calls) adding up to ``whole``, the figure's median."""
        rows = [
            ("Python's start-up and exit (`python -c pass`, measured alongside)", self.python, ""),
            ("importing the command line", self.cli_import, ""),
            ("importing what `lock` uses", self.imports, ""),
        ]
        for label, _module, _path in LOCK_PARTS:
            if label in self.parts:
                rows.append((label, self.parts[label], str(self.calls[label])))
        rows.append(("everything else in the run", self.run - sum(self.parts.values()), ""))
        rows.append(
            (
                "the rest of the process's median (exit, and run-to-run variation)",
                whole - self.python - self.cli_import - self.imports - self.run,
                "",
            )
        )
        return rows


def lock_profile(ctx: Context, argv: Sequence[str | Path], env: dict[str, str]) -> LockProfile:
    """``ctx.repeat`` more locks, in process with their parts timed, alternating with Python's
    bare start-up: each part's median, like the figure's."""
    bare, runs = [], []
    for _ in range(ctx.repeat):
        bare.append(run_timed([ctx.python, "-c", "pass"], env)[0])
        runs.append(child_json(ctx, ["lock-profile", *argv[1:]], env))

    def median(key: str) -> float:
        return float(statistics.median(run[key] for run in runs))

    labels = {label for run in runs for label in run["parts"]}
    return LockProfile(
        python=statistics.median(bare),
        cli_import=median("cli-import"),
        imports=median("import"),
        run=median("run"),
        parts={
            label: statistics.median(run["parts"].get(label, 0.0) for run in runs)
            for label in labels
        },
        calls=runs[-1]["calls"],
    )


def lock_breakdown(profile: LockProfile, whole: float) -> str:
    rows = [
        "Where `cudalock lock` spends its time (as many more runs as the figure's, in process, "
        "their parts timed by wall clock, each part's median; beside them `python -c pass` of "
        "the same interpreter; the last row is what the figure's median holds beyond them):",
        "",
        "| part | time | calls |",
        "|---|---:|---:|",
        *(
            f"| {label} | {fmt_signed(seconds)} | {calls} |"
            for label, seconds, calls in profile.rows(whole)
        ),
        f"| the figure's median | {fmt_seconds(whole)} | |",
    ]
    return "\n".join(rows)


def lock_between(profile: LockProfile, fig: Figure, goal_ratio: float) -> str:
    """What stands between a lock figure and its goal, in measured parts."""
    ours, theirs = fig.series[0].median, fig.series[1].median
    allowed = goal_ratio * theirs
    uv_runs = profile.parts.get("uv's runs (`uv pip compile`)", 0.0)
    floor = profile.python + uv_runs
    fixed = floor + profile.cli_import + profile.imports
    own = sorted(
        ((label, seconds) for label, seconds, _calls in profile.rows(ours)[3:-1]),
        key=lambda item: -item[1],
    )
    largest = "; ".join(
        f"{label} {fmt_seconds(seconds)}" for label, seconds in own if "uv's runs" not in label
    )
    return (
        f"The goal allows {fmt_seconds(allowed)} ({goal_ratio}× uv's {fmt_seconds(theirs)}); the "
        f"lock takes {fmt_seconds(ours)}. Python's start-up and exit alone take "
        f"{fmt_seconds(profile.python)} and the `uv pip compile` the lock runs "
        f"{fmt_seconds(uv_runs)}: {fmt_seconds(floor)}, {floor / allowed:.2f}× the allowance, "
        "before cudalock does anything. Its imports add "
        f"{fmt_seconds(profile.cli_import + profile.imports)} ({fmt_seconds(fixed)} together). "
        f"What remains, {fmt_seconds(max(0.0, ours - fixed))}, is cudalock's own work, largest "
        f"first: {largest}."
    )


def fake_toolkit(base: Path, cuda: str) -> Path:
    """A CUDA toolkit of torch's CUDA whose nvcc answers its version: the audit after
    ``--create`` compares nvcc with torch, and this machine's own toolkit is not under test."""
    toolkit = base / f"cuda-{cuda}"
    nvcc = toolkit / "bin" / "nvcc"
    if not nvcc.exists():
        nvcc.parent.mkdir(parents=True, exist_ok=True)
        nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {cuda}, V{cuda}.1'\n")
        nvcc.chmod(0o755)
    return toolkit


# --------------------------------------------------------------------------------------------
# Case: the time from nothing to a working environment


def case_time_to_env(ctx: Context, fig: Figure) -> None:
    """Three ways to the same environment, each from an empty cache (cold) and again with the
    cache the first run filled (warm): cudalock bootstrap --create; the procedure by hand that
    troubleshooting guides give (venv, torch from its index, the framework --no-deps, its
    remaining dependencies, DeepSpeed last); uv venv + uv pip install of the same pins."""
    uv = find_uv(ctx)
    sys.path.insert(0, str(ROOT))
    from tests.support.realstack import serve_real_stack

    base = ctx.work / "time-to-env"
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    env = offline(ctx.env) | {"CUDA_HOME": str(fake_toolkit(base, "12.8"))}
    payloads = scaled_payloads()
    with serve_real_stack(base / "served", payloads=payloads) as server:
        index_args = ("--pytorch-index", server.pytorch_url, "--pypi-index", server.pypi_url)
        variant_index = f"{server.pytorch_url}/cu128"
        # The pins every side installs: cudalock's lock of the stack.
        pins_dir = base / "pins"
        run_timed([ctx.cudalock, "lock", *STACK_ARGS, *index_args, "--quiet", "-o", pins_dir], env)
        pins = locked_pins(pins_dir)
        procedures = {
            "cudalock": lambda root, cache: bootstrap_procedure(ctx, root, cache, index_args),
            "by hand": lambda root, cache: by_hand_procedure(
                ctx, root, cache, pins, server.pypi_url, variant_index
            ),
            "uv": lambda root, cache: uv_procedure(
                uv, ctx, root, cache, pins, server.pypi_url, variant_index
            ),
        }
        series = {
            (name, temperature): Series(f"{name}, {temperature} cache", "")
            for name in procedures
            for temperature in ("cold", "warm")
        }
        commands: dict[tuple[str, str], list[list[str | Path]]] = {}
        #: Seconds per phase of bootstrap's runs, and per step of uv's.
        phases: dict[str, dict[str, list[float]]] = {"cold": {}, "warm": {}}
        uv_steps: dict[str, list[list[float]]] = {"cold": [], "warm": []}
        for round_ in range(ctx.repeat):
            names = list(procedures)
            if round_ % 2:
                names.reverse()
            for name in names:
                root = base / f"{name.replace(' ', '-')}-{round_}"
                cache = root / "cache"
                root.mkdir(parents=True)
                for temperature in ("cold", "warm"):
                    where = root / temperature
                    steps = procedures[name](where, cache)
                    commands.setdefault((name, temperature), steps)
                    elapsed, peak, times = 0.0, 0, []
                    for argv in steps:
                        if name == "cudalock":
                            seconds, rss, lines = run_timed_lines(argv, env, cwd=root)
                            for label, spent in bootstrap_phases(lines, seconds).items():
                                phases[temperature].setdefault(label, []).append(spent)
                        else:
                            seconds, _, rss = run_timed(argv, env, cwd=root)
                        times.append(seconds)
                        elapsed += seconds
                        peak = max(peak, rss)
                    if name == "uv":
                        uv_steps[temperature].append(times)
                    series[(name, temperature)].record(elapsed, peak)
                shutil.rmtree(root)
    for key, one in series.items():
        one.command = " && ".join(command_text(argv) for argv in commands[key])
    fig.series = [series[("cudalock", "cold")], series[("by hand", "cold")]] + [
        one for key, one in series.items() if key not in (("cudalock", "cold"), ("by hand", "cold"))
    ]
    by_hand = {
        t: series[("cudalock", t)].median / series[("by hand", t)].median for t in ("cold", "warm")
    }
    against_uv = {
        t: series[("cudalock", t)].median / series[("uv", t)].median for t in ("cold", "warm")
    }
    fig.value = max(by_hand.values())
    fig.met = (
        all(r <= 1 / 3 for r in by_hand.values())
        and against_uv["warm"] <= 1.1
        and against_uv["cold"] <= 1.2
    )
    fig.notes.append(
        "Medians (cold / warm cache): "
        + "; ".join(
            f"{name} {fmt_seconds(series[(name, 'cold')].median)} / "
            f"{fmt_seconds(series[(name, 'warm')].median)}"
            for name in procedures
        )
        + f". cudalock takes {by_hand['cold']:.2f}× / {by_hand['warm']:.2f}× the time of the "
        "procedure by hand (goal ≤ 0.33×, i.e. at least 3× faster) and "
        f"{against_uv['cold']:.2f}× / {against_uv['warm']:.2f}× uv's (goals ≤ 1.2× / ≤ 1.1×). "
        "The figure "
        "is the larger ratio to the procedure by hand."
    )
    if not fig.met:
        medians = {key: one.median for key, one in series.items()}
        by_hand_text = "; ".join(
            f"{t} cache: {fmt_seconds(medians[('cudalock', t)])} against "
            f"{fmt_seconds(medians[('by hand', t)])} by hand ({by_hand[t]:.2f}×, goal ≤ 0.33×)"
            for t in ("cold", "warm")
        )
        fig.between = (
            f"Against the procedure by hand: {by_hand_text}. Against uv: "
            + time_to_env_between(phases, uv_steps, medians)
        )
    fig.notes.append(
        f"All three install the same {len(pins)} pins (cudalock's lock of the stack) from the "
        "recorded real stack served on 127.0.0.1; torch and the nvidia-* and triton wheels it "
        f"pins carry 1/{SCALE} of their real sizes ({REAL_WHEEL_SIZES.name}) in incompressible "
        f"bytes, {sum(payloads.values()) / 2**20:.0f} MiB together; the cold run of each starts "
        "with empty pip/uv (and cudalock wheel) caches, the warm run reuses them. cudalock's "
        "time includes resolving the closure, writing the files, building or reusing DeepSpeed "
        "and auditing the new environment."
    )


#: The phases of ``bootstrap --create``, each begun by the first line that matches (its own
#: account of what it does, one line per phase without a terminal); a phase ends where the
#: next begins, the last where the process ends.
BOOTSTRAP_PHASES = (
    ("start-up, the inputs and the plan", None),
    ("the closure: uv resolves, cudalock fits", r"cudalock: resolving the closure"),
    ("writing the files", r"closure: "),
    # Made beside the closure (--python is given): what is left to wait for once the files
    # are written.
    ("the venv, waited for after the files", r"environment: creating"),
    # Downloaded into uv's cache beside the closure, and the rest once the files are written:
    # what is left to wait for of each (absent when that download was done by then).
    ("the torch and CUDA wheels downloaded ahead, waited for", r"environment: waiting for the t"),
    ("the other wheels downloaded ahead, waited for", r"environment: waiting for the other"),
    ("installing the locked closure (uv)", r"\s*step \d+/\d+: the locked closure"),
    ("building DeepSpeed against the installed torch", r"\s*step \d+/\d+: DeepSpeed"),
    ("`uv pip check` and the verify script", r"\s*step \d+/\d+: check the installed"),
    ("auditing the new environment", r"installed with "),
)
#: The steps of :func:`uv_procedure`, in order.
UV_STEPS = ("`uv venv`", "`uv pip install` of the pins", "DeepSpeed against the installed torch")


def bootstrap_phases(lines: Sequence[tuple[float, str]], elapsed: float) -> dict[str, float]:
    """Seconds per phase of one ``bootstrap --create`` run (phases it did not print: absent)."""
    begun: list[tuple[str, float]] = [(BOOTSTRAP_PHASES[0][0], 0.0)]
    for label, pattern in BOOTSTRAP_PHASES[1:]:
        assert pattern is not None
        found = next((t for t, line in lines if re.match(pattern, line)), None)
        if found is not None:
            begun.append((label, found))
    ends = [t for _label, t in begun[1:]] + [elapsed]
    return {label: end - start for (label, start), end in zip(begun, ends, strict=True)}


#: bootstrap's phases that the uv procedure has no counterpart of (it installs given pins).
BOOTSTRAP_EXTRA_PHASES = (
    "start-up, the inputs and the plan",
    "the closure: uv resolves, cudalock fits",
    "writing the files",
    "`uv pip check` and the verify script",
    "auditing the new environment",
)


def time_to_env_between(
    phases: dict[str, dict[str, list[float]]],
    uv_steps: dict[str, list[list[float]]],
    medians: dict[tuple[str, str], float],
) -> str:
    """What stands between bootstrap and uv's time, warm and cold: bootstrap's phases beside
    the uv procedure's steps, medians of the runs."""
    parts = []
    for temperature, goal in (("warm", 1.1), ("cold", 1.2)):
        ours, theirs = medians[("cudalock", temperature)], medians[("uv", temperature)]
        # In the order they happen; a phase some runs did not print (a download done before
        # it was waited for) took no time in those.
        seen = phases[temperature]
        runs = len(seen[BOOTSTRAP_PHASES[0][0]])
        spent = {
            label: statistics.median([*seen[label], *[0.0] * (runs - len(seen[label]))])
            for label, _pattern in BOOTSTRAP_PHASES
            if label in seen
        }
        extra = sum(spent.get(label, 0.0) for label in BOOTSTRAP_EXTRA_PHASES)
        shown = "; ".join(f"{label} {fmt_seconds(seconds)}" for label, seconds in spent.items())
        steps = "; ".join(
            f"{label} {fmt_seconds(statistics.median(run[i] for run in uv_steps[temperature]))}"
            for i, label in enumerate(UV_STEPS)
        )
        parts.append(
            f"{temperature} cache: the goal allows {fmt_seconds(goal * theirs)} ({goal}× uv's "
            f"{fmt_seconds(theirs)}: {fmt_seconds((goal - 1) * theirs)} more than uv), and "
            f"bootstrap takes {fmt_seconds(ours)}. What it does that uv's procedure does not "
            f"(planning, locking, writing the files, the checks and the audit) takes "
            f"{fmt_seconds(extra)} of it. Its phases: {shown}. uv's steps: {steps}."
        )
    return " ".join(parts)


def locked_pins(directory: Path) -> dict[str, str]:
    """name → version of every package in a lock's requirements files (the last file: DeepSpeed)."""
    pins: dict[str, str] = {}
    for name in ("requirements.lock.txt", "requirements.last.txt"):
        for line in (directory / name).read_text(encoding="utf-8").splitlines():
            match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
            if match:
                pins[match.group(1)] = match.group(2)
    return pins


def bootstrap_procedure(
    ctx: Context, where: Path, cache: Path, index_args: Sequence[str]
) -> list[list[str | Path]]:
    return [
        [
            "env",
            f"UV_CACHE_DIR={cache / 'uv'}",
            f"PIP_CACHE_DIR={cache / 'pip'}",
            f"CUDALOCK_WHEEL_CACHE={cache / 'cudalock-wheels'}",
            ctx.cudalock,
            "bootstrap",
            "-o",
            where,
            "--format",
            "venv",
            "--create",
            *STACK_ARGS,
            *index_args,
        ]
    ]


FAMILY = ("torch", "torchvision", "torchaudio")


def by_hand_procedure(
    ctx: Context, where: Path, cache: Path, pins: dict[str, str], pypi: str, variant_index: str
) -> list[list[str | Path]]:
    """The recipe the guides give, with the same pins: each step resolves what it installs."""
    pip: list[str | Path] = [
        where / "bin" / "python",
        "-m",
        "pip",
        "install",
        "--cache-dir",
        cache / "pip",
    ]
    family = [f"{name}=={pins[name]}" for name in FAMILY if name in pins]
    framework = next(name for name in pins if name.startswith("llamafactory"))
    rest = [
        f"{name}=={version}"
        for name, version in pins.items()
        if name not in (*FAMILY, framework, "deepspeed")
    ]
    constraints = where.parent / f"{where.name}-constraints.txt"
    constraints.parent.mkdir(parents=True, exist_ok=True)
    constraints.write_text("".join(f"{pin}\n" for pin in family), encoding="utf-8")
    return [
        [ctx.python, "-m", "venv", where],
        [*pip, *family, "--index-url", variant_index, "--extra-index-url", pypi],
        [*pip, "--no-deps", f"{framework}=={pins[framework]}", "--index-url", pypi],
        [*pip, *rest, "-c", constraints, "--index-url", pypi, "--extra-index-url", variant_index],
        [
            *pip,
            "--no-build-isolation",
            "--no-deps",
            f"deepspeed=={pins['deepspeed']}",
            "--index-url",
            pypi,
        ],
    ]


def uv_procedure(
    uv: Path,
    ctx: Context,
    where: Path,
    cache: Path,
    pins: dict[str, str],
    pypi: str,
    variant_index: str,
) -> list[list[str | Path]]:
    """uv venv + uv pip install of the same pins, DeepSpeed last without build isolation."""
    install: list[str | Path] = [
        uv,
        "pip",
        "install",
        "--python",
        where / "bin" / "python",
        "--cache-dir",
        cache / "uv",
    ]
    everything = [f"{name}=={version}" for name, version in pins.items() if name != "deepspeed"]
    return [
        [uv, "venv", "--python", ctx.python, where, "--cache-dir", cache / "uv"],
        [
            *install,
            "--no-deps",
            *everything,
            "--index-url",
            pypi,
            "--extra-index-url",
            variant_index,
            "--index-strategy",
            "unsafe-best-match",
        ],
        [
            *install,
            "--no-deps",
            "--no-build-isolation",
            f"deepspeed=={pins['deepspeed']}",
            "--index-url",
            pypi,
        ],
    ]


# --------------------------------------------------------------------------------------------
# Case: doctor on a 256 MiB training log

#: The size of the log doctor reads whole (its limit: the last 256 MiB of a log).
BIG_LOG_BYTES = 256 * 2**20
#: Memory doctor may use on any input (the bound docs/security-and-limits.md promises for
#: unbounded inputs).
MEMORY_BOUND = 2**30
DOCTOR_ARGS = ("--host-memory", "256GiB", "--params", "7B", "--zero", "2", "--gpus-per-node", "8")


def big_log(ctx: Context) -> Path:
    """A 256 MiB torchrun log: ranks' progress lines, a ZeRO-2 setup, and a SIGKILL at the end."""
    path = ctx.work / "big-train.log"
    if path.exists() and path.stat().st_size >= BIG_LOG_BYTES:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    step = (
        "[rank{rank}]: {{'loss': 1.2345, 'grad_norm': 0.5678, 'learning_rate': 1e-05, "
        "'epoch': 0.{step:05d}}}\n"
    )
    with path.open("w", encoding="utf-8") as handle:
        handle.write("[INFO] DeepSpeed ZeRO stage 2, world size 8, model Llama-2-7b-hf\n")
        written, number = 0, 0
        while written < BIG_LOG_BYTES:
            line = step.format(rank=number % 8, step=number % 100_000)
            handle.write(line)
            written += len(line)
            number += 1
        handle.write(
            "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
            "local_rank: 3 (pid: 4242) of binary: /usr/bin/python\n"
        )
    return path


def case_doctor_big_log(ctx: Context, fig: Figure) -> None:
    log = big_log(ctx)
    a_argv: list[str | Path] = [
        ctx.cudalock,
        "doctor",
        "--exit-code",
        "-9",
        "--log",
        log,
        *DOCTOR_ARGS,
        "--json",
    ]
    b_argv: list[str | Path] = ["grep", "-c", "-E", "exitcode|Killed|out of memory", log]
    a = Series("cudalock doctor", command_text(a_argv))
    b = Series("grep for the evidence", command_text(b_argv))
    fig.series = [a, b]
    compare(ctx, a, a_argv, b, b_argv, a_ok=(0, 1))
    fig.value = float(max(a.peak_rss))
    fig.unit = "B"
    fig.met = fig.value <= MEMORY_BOUND
    fig.notes.append(
        f"The log is {BIG_LOG_BYTES // 2**20} MiB of rank progress lines ending in torchrun's "
        "`exitcode: -9` line, generated once in the work directory. The figure is the peak RSS of "
        f"the cudalock process; doctor took {a.median / b.median:.1f}× grep's time over the same "
        "file."
    )


# --------------------------------------------------------------------------------------------
# Case 4: loading the shipped matrix


def case_matrix_load(ctx: Context, fig: Figure) -> None:
    """The first load in a fresh interpreter is what every command pays; measured per process."""
    argv: list[str | Path] = [ctx.python, Path(__file__), "--child", "matrix-load"]
    first = Series("first load_matrix() in a fresh process", command_text(argv))
    again = Series("further load_matrix() calls in the same process", command_text(argv))
    fig.series = [first, again]
    child_json(ctx, ["matrix-load"])  # warm-up (and builds any precompiled cache)
    for _ in range(2 * ctx.repeat):
        result = child_json(ctx, ["matrix-load"])
        first.samples.append(result["first"])
        again.samples.extend(result["again"])
    fig.value = first.median
    fig.unit = "s"
    fig.met = fig.value <= 0.010
    if not fig.met:
        parts = [child_json(ctx, ["matrix-load-parts"]) for _ in range(ctx.repeat)]
        medians = {key: statistics.median(part[key] for part in parts) for key in parts[0]}
        fig.between = (
            f"The goal allows 10 ms; the first load takes {fmt_seconds(first.median)}. "
            f"Reading and hashing the matrix files takes {fmt_seconds(medians['read'])}, "
            f"taking the typed matrix kept from an earlier run {fmt_seconds(medians['typed'])}; "
            f"typing it from its parse, when nothing is kept, would take "
            f"{fmt_seconds(medians['build'])}."
        )


def child_matrix_load_parts() -> dict[str, float]:
    """The first load's parts, timed one by one in a fresh process."""
    from cudalock.matrix import load as matrix_load
    from cudalock.matrix.model import MATRIX_FILES

    directory = matrix_load.default_matrix_dir()
    names = (*MATRIX_FILES, *matrix_load._present(directory))
    started = time.perf_counter()
    files = {name: matrix_load._read_matrix_file(directory / name) for name in names}
    key = matrix_load._typed_key(directory, files)
    read = time.perf_counter() - started
    started = time.perf_counter()
    matrix_load._typed_before(key)
    typed = time.perf_counter() - started
    raw = {name: matrix_load._parsed(directory / name, data) for name, data in files.items()}
    started = time.perf_counter()
    matrix_load.build_matrix(raw, directory, text_checked=True)
    return {"read": read, "typed": typed, "build": time.perf_counter() - started}


def child_matrix_load() -> dict[str, Any]:
    from cudalock.matrix import load_matrix

    started = time.perf_counter()
    matrix = load_matrix()
    first = time.perf_counter() - started
    again = []
    for _ in range(20):
        started = time.perf_counter()
        load_matrix()
        again.append(time.perf_counter() - started)
    return {
        "first": first,
        "again": again,
        "matrix_version": matrix.matrix_version,
        "torch_releases": len(matrix.torch_releases),
    }


# --------------------------------------------------------------------------------------------
# Case 5: resolving a fleet of probe files


def case_fleet(ctx: Context, fig: Figure) -> None:
    fleet = ctx.work / f"fleet-{ctx.fleet_size}"
    if not (fleet / "done").exists():
        child_json(ctx, ["make-fleet", str(fleet), str(ctx.fleet_size)])
    argv: list[str | Path] = [ctx.python, Path(__file__), "--child", "fleet", fleet]
    floor_argv: list[str | Path] = [ctx.python, Path(__file__), "--child", "fleet-floor", fleet]
    ours = Series(f"cudalock: read {ctx.fleet_size:,} probe files + resolve", command_text(argv))
    floor = Series("stdlib only: open + json.loads of the same files", command_text(floor_argv))
    fig.series = [ours, floor]
    fig.what = f"resolving a fleet of {ctx.fleet_size:,} probe files' Targets (in process)"
    child_json(ctx, ["fleet", fleet])  # warm-up (page cache, byte code)
    result: dict[str, Any] = {}
    parts: dict[str, list[float]] = {}
    for round_ in range(ctx.repeat):
        pairs = [(ours, "fleet"), (floor, "fleet-floor")]
        if round_ % 2:
            pairs.reverse()
        for series, kind in pairs:
            measured = child_json(ctx, [kind, fleet])
            series.samples.append(measured["seconds"])
            if kind == "fleet":
                result = measured
                for part, seconds in measured["parts"].items():
                    parts.setdefault(part, []).append(seconds)
    fig.value = ours.median
    fig.unit = "s"
    fig.met = fig.value <= 1.0
    if not fig.met:
        fig.between = fleet_between(
            {part: statistics.median(times) for part, times in parts.items()}, floor.median
        )
    fig.notes.append(
        f"Chose `{result.get('chosen')}` for the fleet ({result.get('files')} files, "
        f"{result.get('gpus')} GPUs). The files are written by `Target.to_json` (the schema of "
        "`cudalock probe --json`): nodes with 1, 2, 4 or 8 GPUs of five models and drivers "
        "535-580. The stdlib line is a floor for reading the same bytes, for scale; it has no "
        "goal."
    )


def fleet_between(parts: dict[str, float], floor: float) -> str:
    """What stands between the fleet figure and its goal: its parts, beside the stdlib's
    reading of the same files."""
    return (
        "Its parts (medians of the same runs): loading the matrix "
        f"{fmt_seconds(parts['matrix'])}; reading the probe files into Targets "
        f"{fmt_seconds(parts['read'])}, of which opening the files and json.loads alone (the "
        f"stdlib line, measured alternately) take {fmt_seconds(floor)} and checking each "
        "document's fields and typing its Target the rest; resolving the Plan for all of them "
        f"{fmt_seconds(parts['resolve'])}."
    )


#: (driver, driver's max CUDA, GPU name, compute capability): a mixed fleet.
FLEET_NODES = (
    ("535.104.05", "12.2", "NVIDIA A100-SXM4-80GB", "8.0"),
    ("550.54.15", "12.4", "NVIDIA H100 80GB HBM3", "9.0"),
    ("545.23.08", "12.3", "NVIDIA GeForce RTX 4090", "8.9"),
    ("570.86.10", "12.8", "NVIDIA A10G", "8.6"),
    ("580.65.06", "13.0", "NVIDIA L4", "8.9"),
)


def child_make_fleet(directory: Path, size: int) -> dict[str, Any]:
    """Probe files written with the real Target.to_json, as `cudalock probe --json` does."""
    from cudalock.model import Gpu, Host, Target
    from cudalock.versions import DriverVersion, parse_compute_capability, parse_cuda_version

    directory.mkdir(parents=True, exist_ok=True)
    for number in range(size):
        driver, cuda, gpu, cc = FLEET_NODES[number % len(FLEET_NODES)]
        count = (1, 2, 4, 8)[number % 4]
        target = Target(
            platform="linux-x86_64",
            driver_version=DriverVersion(driver),
            driver_cuda=parse_cuda_version(cuda),
            gpus=tuple(
                Gpu(
                    name=gpu,
                    compute_capability=parse_compute_capability(cc),
                    index=i,
                    uuid=f"GPU-{number:08x}-{i:04x}-4000-8000-000000000000",
                    memory_total_bytes=80 * 2**30,
                )
                for i in range(count)
            ),
            host=Host(
                os="linux",
                arch="x86_64",
                glibc="2.35",
                memory_total_bytes=1024 * 2**30,
                hostname=f"node{number:05d}",
            ),
            name=f"node{number:05d}",
            source="nvml",
        )
        (directory / f"node{number:05d}.json").write_text(json.dumps(target.to_json()))
    (directory / "done").write_text(str(size))
    return {"files": size}


def child_fleet_floor(directory: Path) -> dict[str, Any]:
    paths = sorted(directory.glob("*.json"))
    started = time.perf_counter()
    documents = [json.loads(path.read_bytes()) for path in paths]
    return {"seconds": time.perf_counter() - started, "files": len(documents)}


def child_fleet(directory: Path) -> dict[str, Any]:
    """Read every probe file of the fleet and resolve one Plan for all of them."""
    from cudalock.machine import read_probe_files
    from cudalock.matrix import load_matrix
    from cudalock.resolve import make_request, resolve

    paths = sorted(directory.glob("*.json"))
    started = time.perf_counter()
    matrix = load_matrix()
    loaded = time.perf_counter()
    targets = read_probe_files(paths)
    read = time.perf_counter()
    plan = resolve(matrix, targets, make_request(python="3.11"))
    seconds = time.perf_counter() - started
    torch = plan.torch_pin
    return {
        "seconds": seconds,
        "parts": {
            "matrix": loaded - started,
            "read": read - loaded,
            "resolve": started + seconds - read,
        },
        "files": len(paths),
        "chosen": torch.requirement,
        "gpus": sum(len(t.gpus) for t in targets),
    }


# --------------------------------------------------------------------------------------------
# Report


CASES: dict[str, tuple[str, str, str, Callable[[Context, Figure], None]]] = {
    "resolve-startup": (
        "`cudalock resolve --driver-version 535.104.05 --python 3.11 --json` (whole process)",
        "`python -c pass` (same interpreter)",
        "≤ 10× its time",
        case_resolve_startup,
    ),
    "audit": (
        "`cudalock audit --python VENV/bin/python --json` on a venv with real torch "
        f"{TORCH_VERSION}",
        "`VENV/bin/python -m torch.utils.collect_env`",
        "≥ 15× faster",
        case_audit,
    ),
    "lock": (
        "`cudalock lock` of a real fine-tuning stack (llamafactory + DeepSpeed, 100+ packages), "
        "second run, warm cache",
        "`uv pip compile` of the same stack with the same index routing",
        "≤ 1.3× its time",
        case_lock,
    ),
    "lock-vllm": (
        "`cudalock lock --framework vllm==0.6.6.post1` on an A100 with a CUDA 12.1 driver "
        "(torch, xformers from the cu121 index; 140+ packages), second run, warm cache",
        "`uv pip compile` routed as `--torch-backend cu121` routes the same request",
        "≤ 1.5× its time",
        case_lock_vllm,
    ),
    "time-to-env": (
        "from nothing to a working environment of that stack: `cudalock bootstrap --format venv "
        "--create`, cold and warm cache",
        "the procedure by hand (venv, pip install torch from its index, the framework --no-deps, "
        "its dependencies, DeepSpeed) and `uv venv` + `uv pip install` of the same pins",
        "≥ 3× faster than by hand, ≤ 1.2× uv's time cold, ≤ 1.1× warm",
        case_time_to_env,
    ),
    "matrix-load": (
        "loading the shipped matrix: first `cudalock.matrix.load.load_matrix()` in a fresh process",
        "(baseline column: later calls in the same process; no goal)",
        "≤ 10 ms",
        case_matrix_load,
    ),
    "fleet-resolve": (
        f"resolving a fleet of {FLEET_SIZE:,} probe files' Targets (in process)",
        "(baseline column: stdlib open + json.loads of the same files; no goal)",
        "≤ 1 s",
        case_fleet,
    ),
    "doctor-big-log": (
        "`cudalock doctor --exit-code -9 --log LOG` on a 256 MiB training log: peak memory",
        "`grep -c` over the same log (time, for scale)",
        "peak RSS ≤ 1 GiB",
        case_doctor_big_log,
    ),
}
CHEAP_CASES = ("resolve-startup", "matrix-load", "fleet-resolve")


#: The figures whose peak memory is a figure of its own (issue 27: lock's and bootstrap's):
#: figure name → (what, the label of the series measured, the label of the one compared).
MEMORY_FIGURES = {
    "lock": (
        "peak memory of `cudalock lock` (figure lock's runs)",
        "cudalock lock (second run)",
        "uv pip compile",
    ),
    "lock-vllm": (
        "peak memory of `cudalock lock --framework vllm` (figure lock-vllm's runs)",
        "cudalock lock (second run)",
        "uv pip compile (routed as --torch-backend cu121)",
    ),
    "time-to-env": (
        "peak memory of `cudalock bootstrap --create`, cold cache (figure time-to-env's runs)",
        "cudalock, cold cache",
        "uv, cold cache",
    ),
}


def memory_figures(figures: Sequence[Figure]) -> list[Figure]:
    """Peak memory of the commands issue 27 asks it of, as figures of their own: the largest
    resident set size of the process and of every process it waited for (uv, pip, the build),
    from ``wait4``, beside what the compared command peaked at. No goal: reported."""
    derived = []
    for fig in figures:
        if fig.name not in MEMORY_FIGURES or fig.skipped or fig.error:
            continue
        what, ours_label, theirs_label = MEMORY_FIGURES[fig.name]
        by_label = {series.label: series for series in fig.series if series.peak_rss}
        ours, theirs = by_label.get(ours_label), by_label.get(theirs_label)
        if ours is None or theirs is None:
            continue
        peak, base = max(ours.peak_rss), max(theirs.peak_rss)
        derived.append(
            Figure(
                name=f"{fig.name}-memory",
                what=what,
                compared_with=f"{theirs.label}: its peak",
                goal="reported (no goal)",
                value=float(peak),
                unit="B",
                met=None,
                columns=(fmt_bytes(peak), fmt_bytes(base)),
                notes=[
                    f"The largest resident set size of `{ours.label}` over its "
                    f"{len(ours.peak_rss)} runs, counting every process it waited for (uv, pip, "
                    f"a build), from `wait4`; `{theirs.label}` peaked at {fmt_bytes(base)}."
                ],
            )
        )
    return derived


def fmt_seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_signed(seconds: float) -> str:
    """A part that can come out below zero (a difference of medians) keeps its sign."""
    return f"−{fmt_seconds(-seconds)}" if seconds < 0 else fmt_seconds(seconds)


def fmt_bytes(size: int) -> str:
    return f"{size / 2**20:.0f} MiB" if size < 2**30 else f"{size / 2**30:.2f} GiB"


def fmt_value(fig: Figure) -> str:
    if fig.value is None:
        return "—"
    if fig.unit == "B":
        return fmt_bytes(int(fig.value))
    if fig.unit == "s":
        return fmt_seconds(fig.value)
    return f"{fig.value:.2f}{fig.unit}"


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 2**20:.1f} GiB"
                break
    except OSError:
        pass
    return {
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "RAM": ram,
        "OS": platform.platform(),
        "Python": "",
    }


def venv_python_version(ctx: Context) -> str:
    done = call(
        [ctx.python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{done.stdout.strip()} ({shown(ctx.python)})"


def git_revision() -> str:
    try:
        head: str = call(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty: str = call(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" with uncommitted changes" if dirty.strip() else "")


def load_average() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def render(figures: list[Figure], ctx: Context, invocation: str, load_before: str) -> str:
    info = machine()
    info["Python"] = venv_python_version(ctx)
    info["load average (1, 5, 15 min)"] = f"{load_before} before the run, {load_average()} after"
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmark results",
        "",
        f"Written by `{invocation}` on {now}, at commit {git_revision()}.",
        f"Each pair ran alternately (A B, then B A, ...) {ctx.repeat} times after one unmeasured",
        "warm-up of each; figures are medians of wall-clock time. Commands run from the",
        "repository root with byte-code writing allowed and no `CUDALOCK_*` variables set.",
        "Wall-clock times depend on what else the machine is doing: the load average below says",
        "how busy it was; the ratios, measured alternately, are the steadier figures.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in info.items()),
        "",
        "## Figures",
        "",
        "| # | what | compared with | median | baseline median | figure | goal | met |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for number, fig in enumerate(figures, start=1):
        if fig.skipped or fig.error:
            status = "skipped (see below)" if fig.skipped else "error (see below)"
            lines.append(
                f"| {number} | {fig.what} | {fig.compared_with} | — | — | — | "
                f"{fig.goal} | {status} |"
            )
            continue
        main = fmt_seconds(fig.series[0].median) if fig.series else "—"
        base = fmt_seconds(fig.series[1].median) if len(fig.series) > 1 else "—"
        if fig.columns is not None:
            main, base = fig.columns
        met = "reported" if fig.met is None else "met" if fig.met else "**not met**"
        lines.append(
            f"| {number} | {fig.what} | {fig.compared_with} | {main} | {base} | "
            f"{fmt_value(fig)} | {fig.goal} | {met} |"
        )
    missed = [(n, fig) for n, fig in enumerate(figures, start=1) if fig.met is False]
    if missed:
        lines += ["", "## What stands between each missed goal and its figure", ""]
        for number, fig in missed:
            lines.append(
                f"- **{number}. {fig.name}**: "
                + (fig.between or "this run measured no breakdown of it (see its notes below).")
            )
    peaks = [
        (f"{fig.name}: {fig.series[0].label}", max(fig.series[0].peak_rss))
        for fig in figures
        if fig.series and fig.series[0].peak_rss and not (fig.skipped or fig.error)
    ]
    if peaks:
        lines += [
            "",
            "## Peak memory",
            "",
            "The largest resident set size of the measured cudalock process over its runs "
            "(`ru_maxrss` from `wait4`).",
            "",
            "| figure: command | peak RSS |",
            "|---|---:|",
            *(f"| {what} | {fmt_bytes(peak)} |" for what, peak in peaks),
        ]
    lines += ["", "## Commands and samples", ""]
    for number, fig in enumerate(figures, start=1):
        lines += [f"### {number}. {fig.name}", ""]
        if fig.skipped:
            lines += [f"Skipped: {fig.skipped}", ""]
        if fig.error:
            lines += [f"Error: {fig.error}", ""]
        for series in fig.series:
            if not series.samples:
                continue
            peak = f", peak RSS {fmt_bytes(max(series.peak_rss))}" if series.peak_rss else ""
            lines += [
                f"- {series.label}: `{series.command}`  ",
                f"  median {fmt_seconds(series.median)}, min {fmt_seconds(min(series.samples))}, "
                f"max {fmt_seconds(max(series.samples))}, n = {len(series.samples)}{peak}",
            ]
        if fig.value is not None and fig.met is not None:
            lines += [
                "",
                f"Figure: {fmt_value(fig)} (goal {fig.goal}): {'met' if fig.met else 'not met'}.",
            ]
        for note in fig.notes:
            lines += ["", note]
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Entry points


def child_main(args: list[str]) -> None:
    """``--child KIND ...``: one in-process measurement in this fresh interpreter, as JSON."""
    kind, rest = args[0], args[1:]
    if kind == "matrix-load":
        result = child_matrix_load()
    elif kind == "matrix-load-parts":
        result = child_matrix_load_parts()
    elif kind == "audit-inspection":
        result = child_audit_inspection(rest[0])
    elif kind == "make-fleet":
        result = child_make_fleet(Path(rest[0]), int(rest[1]))
    elif kind == "fleet":
        result = child_fleet(Path(rest[0]))
    elif kind == "fleet-floor":
        result = child_fleet_floor(Path(rest[0]))
    elif kind == "lock-profile":
        result = child_lock_profile(rest)
    else:
        raise SystemExit(f"unknown child measurement {kind!r}")
    sys.stdout.write(json.dumps(result) + "\n")


def default_venv() -> Path:
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix)
    return ROOT / ".venv"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(
        prog="python benchmarks/run.py",
        description="Measure cudalock side by side with what users run instead; write "
        "benchmarks/RESULTS.md.",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help=f"measured runs of each command (default {DEFAULT_REPEAT})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_REPEAT} repetitions (unless --repeat is given)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=list(CASES),
        metavar="NAME",
        help=f"run only this case (repeatable): {', '.join(CASES)}",
    )
    parser.add_argument(
        "--venv",
        type=Path,
        default=default_venv(),
        help="the venv whose cudalock is measured (default: this one, or .venv)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=DEFAULT_WORK,
        help="cache for the torch venv, the fleet files and the lock inputs",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help="where to write the results table (default benchmarks/RESULTS.md)",
    )
    parser.add_argument(
        "--no-setup",
        action="store_true",
        help="skip cases whose expensive prerequisites (a venv with real torch) "
        "are not already in the work dir",
    )
    parser.add_argument("--fleet-size", type=int, default=FLEET_SIZE, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)

    if options.repeat is not None and options.repeat < 1:
        parser.error("--repeat must be at least 1")
    repeat = options.repeat or (QUICK_REPEAT if options.quick else DEFAULT_REPEAT)
    venv = options.venv.absolute()
    if not (venv / "bin" / "cudalock").exists():
        parser.error(f"no cudalock in {venv} (install it: pip install -e .)")
    work = options.work_dir.absolute()
    work.mkdir(parents=True, exist_ok=True)
    ctx = Context(
        venv=venv,
        work=work,
        repeat=repeat,
        setup=not options.no_setup,
        fleet_size=options.fleet_size,
        env=child_env(),
    )

    figures: list[Figure] = []
    load_before = load_average()
    for name in options.only or list(CASES):
        what, compared_with, goal, case = CASES[name]
        fig = Figure(name=name, what=what, compared_with=compared_with, goal=goal)
        print(f"{name} ...", flush=True)
        try:
            case(ctx, fig)
        except CaseSkipped as why:
            fig.skipped = str(why)
        except (CaseFailed, subprocess.CalledProcessError) as err:
            fig.error = str(err)
        figures.append(fig)
        print(
            f"  {fig.skipped or fig.error or fmt_value(fig) + ' (goal ' + fig.goal + ')'}",
            flush=True,
        )

    figures += memory_figures(figures)
    invocation = shlex.join(["python", "benchmarks/run.py", *argv])
    output = options.output.absolute()
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(figures, ctx, invocation, load_before) + "\n", encoding="utf-8")
    print(f"wrote {shown(output)}")
    return 1 if any(f.error for f in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
