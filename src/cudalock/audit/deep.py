"""``audit --deep``: import torch and run a tiny CUDA kernel, in a child process.

The child may die (SIGSEGV, -11, is the classic sign of a build the driver or GPU cannot run, or
of mixed CUDA libraries) or hang; either becomes a finding instead of taking cudalock down. The
child reports its progress one stage at a time, so a crash names the stage it happened in.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudalock.audit.inspection import clean_directory, isolated_argv
from cudalock.errors import InputError
from cudalock.model import Finding
from cudalock.procs import ChildOutputTooLarge, ChildTimedOut, run, signal_name

__all__ = [
    "DeepResult",
    "deep_inspect",
]

#: The child prints a few lines; torch's warnings add a few more.
_LIMIT = 16 * 2**20

#: Runs inside the audited interpreter. Each stage is announced before it starts.
_CHILD = r"""
import json, sys
current = [""]
def stage(name):
    current[0] = name
    sys.stdout.write("STAGE " + name + "\n"); sys.stdout.flush()
result = {}
stage("import torch")
try:
    import torch
except BaseException as err:
    result["error"] = "%s: %s" % (type(err).__name__, err); result["stage"] = "import torch"
    sys.stdout.write("RESULT " + json.dumps(result) + "\n"); sys.exit(0)
result["version"] = getattr(torch, "__version__", None)
result["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
try:
    stage("torch.cuda.is_available()")
    result["available"] = bool(torch.cuda.is_available())
    if result["available"]:
        stage("CUDA initialisation")
        torch.cuda.init()
        result["arch_list"] = list(torch.cuda.get_arch_list())
        devices = []
        for index in range(torch.cuda.device_count()):
            stage("kernel on cuda:%d" % index)
            x = torch.arange(1024, device="cuda:%d" % index, dtype=torch.float32)
            value = float((x * 2).sum().item())
            torch.cuda.synchronize(index)
            devices.append({"index": index, "name": torch.cuda.get_device_name(index),
                            "capability": list(torch.cuda.get_device_capability(index)),
                            "kernel_ok": value == 1047552.0})
        result["devices"] = devices
except BaseException as err:
    result["error"] = "%s: %s" % (type(err).__name__, err)
    result["stage"] = current[0]
sys.stdout.write("RESULT " + json.dumps(result) + "\n")
"""


@dataclass(frozen=True)
class DeepResult:
    """What the child found: findings, plus the live arch list for the audit's arch check."""

    findings: tuple[Finding, ...]
    arch_list: tuple[str, ...] | None = None
    torch_version: str | None = None
    devices: tuple[dict[str, Any], ...] = ()


def deep_inspect(python: Path, timeout: float = 120) -> DeepResult:
    if not Path(python).exists():
        raise InputError(f"Python interpreter {str(python)!r} does not exist")
    # -X faulthandler: a crash prints the Python stack of the crashing thread on stderr.
    command = isolated_argv(python, _CHILD, options=("-X", "faulthandler"))
    try:
        # Its own process group, killed whole on a timeout: a hung CUDA initialisation may
        # have started helpers that would otherwise outlive the audit.
        with clean_directory() as empty:
            done = run(
                command,
                what="the torch check",
                timeout=timeout,
                cwd=Path(empty),
                env=dict(os.environ),
                output_limit=_LIMIT,
            )
    except OSError as failure:
        raise InputError(f"cannot run {str(python)!r}: {failure.strerror or failure}") from None
    except ChildTimedOut as stopped:
        stage = _last_stage(stopped.stdout)
        return DeepResult((_timeout_finding(python, timeout, stage, stopped.stderr),))
    except ChildOutputTooLarge:
        return DeepResult((_flood_finding(python),))
    out, errors = done.stdout, done.stderr
    stage = _last_stage(out)
    stderr_tail = _tail(errors)
    if done.returncode < 0:
        return DeepResult((_crash_finding(python, -done.returncode, stage, stderr_tail),))
    result = _result(out)
    if result is None:
        return DeepResult(
            (
                Finding(
                    code="torch-import-failed",
                    severity="error",
                    message=f"the torch check exited with status {done.returncode} during "
                    f"'{stage or 'start-up'}' without a result",
                    evidence=tuple(stderr_tail),
                    fix=(_reproduce(python),),
                ),
            )
        )
    return _judge(python, result, stderr_tail)


def _last_stage(out: bytes) -> str | None:
    stage = None
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith("STAGE "):
            stage = line[6:].strip()
    return stage


def _result(out: bytes) -> dict[str, Any] | None:
    for line in reversed(out.decode("utf-8", "replace").splitlines()):
        if line.startswith("RESULT "):
            try:
                value = json.loads(line[7:])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _tail(err: bytes, lines: int = 12) -> list[str]:
    text = err.decode("utf-8", "replace").strip().splitlines()
    return [line[:300] for line in text[-lines:]]


def _reproduce(python: Path) -> str:
    return (
        f"{shlex.quote(str(python))} -X faulthandler -c "
        f"{shlex.quote('import torch; torch.cuda.init(); print(torch.cuda.get_arch_list())')}"
    )


def _crash_finding(python: Path, number: int, stage: str | None, stderr_tail: list[str]) -> Finding:
    name = signal_name(number)
    return Finding(
        code="torch-import-crash",
        severity="error",
        message=f"the process was killed by {name} (return code -{number}) during "
        f"'{stage or 'interpreter start-up'}': torch crashes in this environment before "
        "any training code runs. The usual causes are a CUDA build the driver or GPU "
        "cannot run, mixed CUDA libraries, or a library on LD_LIBRARY_PATH shadowing "
        "the wheel's own; the other findings say which applies",
        evidence=(f"return code -{number} ({name})", f"stage: {stage or 'start-up'}", *stderr_tail),
        fix=(f"# reproduce with the Python stack printed:\n{_reproduce(python)}",),
    )


def _flood_finding(python: Path) -> Finding:
    return Finding(
        code="torch-import-failed",
        severity="error",
        message=f"the torch check wrote more than {_LIMIT // 2**20} MiB (it prints a few lines); "
        "it was stopped. Something in this environment floods stdout or stderr at import",
        evidence=(f"more than {_LIMIT // 2**20} MiB of output",),
        fix=(_reproduce(python),),
    )


def _timeout_finding(python: Path, timeout: float, stage: str | None, err: bytes) -> Finding:
    return Finding(
        code="torch-import-timeout",
        severity="error",
        message=f"importing torch / initialising CUDA did not finish within {timeout:g} s (stuck "
        f"in '{stage or 'interpreter start-up'}'); it was stopped. A hang at CUDA "
        "initialisation often means a driver/GPU problem (a GPU in a bad state, a "
        "persistence daemon, or the JIT compiling PTX for a GPU the build lacks)",
        evidence=(f"timeout {timeout:g} s", f"stage: {stage or 'start-up'}", *_tail(err)),
        fix=(
            f"# reproduce and watch where it waits:\n{_reproduce(python)}",
            "nvidia-smi   # does the driver itself answer?",
        ),
    )


def _text_or(value: object, default: str) -> str:
    return value if isinstance(value, str) and value else default


def _judge(python: Path, result: dict[str, Any], stderr_tail: list[str]) -> DeepResult:
    version = result.get("version") if isinstance(result.get("version"), str) else None
    arch = result.get("arch_list")
    arch_list = tuple(str(a) for a in arch) if isinstance(arch, list) else None
    listed = result.get("devices")
    # What an interpreter prints is not trusted to have the script's shape.
    devices = tuple(d for d in listed if isinstance(d, dict)) if isinstance(listed, list) else ()
    findings: list[Finding] = []
    error = result.get("error")
    if isinstance(error, str):
        stage = _text_or(result.get("stage"), "CUDA initialisation")
        code = "torch-import-failed" if stage == "import torch" else "cuda-init-failed"
        findings.append(
            Finding(
                code=code,
                severity="error",
                message=f"'{stage}' failed: {error[:500]}",
                evidence=(
                    f"torch {version}" if version else "torch not imported",
                    f"stage: {stage}",
                    *stderr_tail,
                ),
                fix=(_reproduce(python),),
            )
        )
    elif result.get("available") is False:
        findings.append(
            Finding(
                code="cuda-unavailable",
                severity="warning",
                message=f"torch {version} imports, but torch.cuda.is_available() is False: "
                "nothing runs on the GPU (see the driver and build findings, and torch's "
                "warnings below)",
                evidence=(f"torch.version.cuda = {result.get('cuda')!r}", *stderr_tail),
                fix=(_reproduce(python),),
            )
        )
    for device in devices:
        if device.get("kernel_ok") is False:
            findings.append(
                Finding(
                    code="cuda-init-failed",
                    severity="error",
                    message=f"a test kernel on cuda:{device.get('index')} returned a wrong result",
                    evidence=(json.dumps(device),),
                    fix=(_reproduce(python),),
                )
            )
    return DeepResult(tuple(findings), arch_list, version, devices)
