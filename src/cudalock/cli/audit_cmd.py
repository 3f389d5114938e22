"""`cudalock audit`: what in an environment (or a pasted report) will crash on the target.

Import-light: typer and the standard library here. The audit never imports torch; ``--deep``
imports it only in a child process.
"""

# No "from __future__ import annotations": typer reads these annotations through the
# @target_options decorator, so they must be real objects, not strings.
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cudalock.cli.options import TargetOptions, target_options

if TYPE_CHECKING:
    from cudalock.audit_env import AuditOutcome


@target_options
def audit(
    python: Annotated[Path | None, typer.Option(
        "--python", help="Audit the environment of this interpreter "
        "(default: the active VIRTUAL_ENV / CONDA_PREFIX, else python3 on PATH).",
    )] = None,
    prefix: Annotated[Path | None, typer.Option(
        "--prefix", help="Audit the conda environment (or venv) rooted here.",
    )] = None,
    report: Annotated[str | None, typer.Option(
        "--report", metavar="FILE|-", help="Audit pasted report text instead: "
        "collect_env, ds_report or llamafactory-cli env output ('-' reads stdin).",
    )] = None,
    deep: bool = typer.Option(
        False, "--deep", help="Also import torch, initialise CUDA and run a tiny kernel in a "
        "child process; a crash (-11) or hang becomes a finding.",
    ),
    deep_timeout: float = typer.Option(
        120.0, "--deep-timeout", min=1.0, help="Seconds the --deep child may take.",
    ),
    json_output: bool = typer.Option(
        False, "--json", help='Print {"findings": [...], "target": {...}, "installed": {...}}.',
    ),
    *,
    target_opts: TargetOptions,
) -> None:
    """Find what will crash this environment on the target: driver too old for the build,
    missing GPU kernels, CPU builds, mixed CUDA builds, duplicate torch installs, DeepSpeed
    built without torch, nvcc mismatches, shadowing libraries.

    Exit 0 when no error-level finding, 1 otherwise.
    """
    from cudalock.cli.common import emit_json, load_matrix_for
    from cudalock.errors import UsageError

    if report is not None and (python is not None or prefix is not None or deep):
        raise UsageError("--report audits pasted text: it cannot be combined with --python, "
                         "--prefix or --deep")
    if python is not None and prefix is not None:
        raise UsageError("give either --python or --prefix, not both")
    matrix = load_matrix_for(target_opts)
    if report is not None:
        from cudalock.audit_env import audit_report
        from cudalock.reports import parse_report

        outcome = audit_report(parse_report(read_report(report)), matrix, target_opts)
    else:
        from cudalock.audit_env import audit_live
        from cudalock.targets import targets_from_options

        targets = targets_from_options(target_opts, matrix)
        outcome = audit_live(targets, matrix, python=python, prefix=prefix, deep=deep,
                             deep_timeout=deep_timeout)
    if json_output:
        emit_json(outcome.to_json())
    else:
        typer.echo(render(outcome))
    if outcome.has_errors:
        raise typer.Exit(1)


def read_report(source: str) -> str:
    """The report text from FILE or stdin ('-'), bounded and checked for binary data."""
    from cudalock.errors import InputError
    from cudalock.reports import MAX_REPORT_CHARS, decode_report

    limit = MAX_REPORT_CHARS * 4  # UTF-8 uses up to 4 bytes per character
    if source == "-":
        data = sys.stdin.buffer.read(limit)
    else:
        path = Path(source)
        try:
            with path.open("rb") as handle:
                data = handle.read(limit)
        except FileNotFoundError:
            raise InputError(f"report file {source!r} does not exist") from None
        except IsADirectoryError:
            raise InputError(f"report file {source!r} is a directory") from None
        except OSError as err:
            raise InputError(f"report file {source!r} cannot be read: "
                             f"{err.strerror or err}") from None
    return decode_report(data)


_HEADINGS = (("error", "Errors"), ("warning", "Warnings"), ("info", "Notes"))


def render(outcome: "AuditOutcome") -> str:
    """The findings for people: grouped by severity, each with its evidence and fix."""
    import textwrap

    from cudalock.versions import format_cc, format_cuda

    installed = outcome.installed
    lines = [f"Environment: {installed.source.removeprefix('python:')}"
             + (f" (Python {installed.python_version})" if installed.python_version else "")]
    torch = installed.active_torch
    if torch is not None:
        cuda = f"CUDA {torch.cuda}" if torch.cuda else ("CUDA unknown" if not torch.cuda_known
                                                         else "CPU build")
        lines.append(f"  torch {torch.version} ({cuda})")
    if outcome.report is not None:
        lines.append(f"  recognised: {', '.join(outcome.report.formats) or 'nothing'}")
    for target in outcome.targets:
        driver = (f"driver {target.driver_version or '?'} (CUDA "
                  f"{format_cuda(target.driver_cuda) if target.driver_cuda else '?'})"
                  if target.has_driver else "no NVIDIA driver known")
        described = [g.name + (f" ({format_cc(g.compute_capability)})"
                               if g.compute_capability else "") for g in target.gpus]
        gpus = ", ".join(f"{described.count(d)} × {d}" if described.count(d) > 1 else d
                         for d in dict.fromkeys(described)) or "no GPUs"
        lines.append(f"Target: {target.name}: {driver}; {gpus}")
    counts = {severity: sum(1 for f in outcome.findings if f.severity == severity)
              for severity, _ in _HEADINGS}
    for severity, heading in _HEADINGS:
        group = [f for f in outcome.findings if f.severity == severity]
        if not group:
            continue
        lines.append("")
        lines.append(f"{heading} ({len(group)}):")
        for finding in group:
            lines.extend(textwrap.wrap(f"[{finding.code}] {finding.message}", width=98,
                                       initial_indent="  ", subsequent_indent="    "))
            for item in finding.evidence:
                lines.append(f"    - {item}")
            if finding.fix:
                lines.append("    fix:")
                lines.extend(f"      {line}" for fix in finding.fix for line in fix.splitlines())
    lines.append("")
    if not outcome.findings:
        lines.append("No problems found.")
    lines.append(f"{counts['error']} error(s), {counts['warning']} warning(s), "
                 f"{counts['info']} note(s).")
    return "\n".join(lines)
