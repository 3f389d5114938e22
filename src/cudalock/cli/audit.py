"""`cudalock audit`: what in an environment (or a pasted report) will crash on the target.

Standard library here. The audit never imports torch; ``--deep`` imports it only in a child
process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cudalock.cli.args import (
    add_json_flag,
    add_policy_arguments,
    add_target_arguments,
    compat_policy,
    epilog,
    number,
)
from cudalock.cli.inputs import compute_inputs, given_targets, refuse_two_stdin_reads

if TYPE_CHECKING:
    from cudalock.audit.runner import AuditOutcome

DESCRIPTION = """\
Find what will crash this environment on the target: driver too old for the build, missing GPU
kernels, CPU builds, mixed CUDA builds, duplicate torch installs, DeepSpeed built without torch,
nvcc mismatches, shadowing libraries.

The audited interpreter runs a small standard-library script (it never imports torch); --deep
also initialises CUDA in a child process. --report audits pasted collect_env, ds_report,
llamafactory-cli env, pip freeze / pip list / conda list output, nvidia-smi and the error lines of
PyTorch, DeepSpeed and the loader against the driver and GPUs it names; a file in which nothing
is recognised is refused (exit 2). A fix is printed only after it is checked: applied to the
environment in hand and audited again, it leaves no error.

Judged with the compatibility policy resolve uses (--compat, else the spec's, else strict): under
strict a torch built for a newer CUDA than the driver is an error even where NVIDIA's
minor-version compatibility may let it start."""

EXAMPLES = """\
  cudalock audit
  cudalock audit --python ~/venvs/train/bin/python --deep
  cudalock audit --prefix "$CONDA_PREFIX" --json
  python -m torch.utils.collect_env | cudalock audit --report -
  cudalock audit --report issue.txt --compat minor"""

EXIT_CODES = """\
exit status:
  0  no error-level finding
  1  at least one error-level finding
  2  usage error or bad input (a bad flag, a missing interpreter, an unreadable report)
  3  the audited interpreter hung or was killed"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = epilog(EXAMPLES, EXIT_CODES)
    parser.add_argument(
        "--python",
        type=Path,
        metavar="PATH",
        help="Audit the environment of this interpreter (default: the active "
        "VIRTUAL_ENV / CONDA_PREFIX, else python3 on PATH).",
    )
    parser.add_argument(
        "--prefix",
        type=Path,
        metavar="DIR",
        help="Audit the conda environment (or venv) rooted here.",
    )
    parser.add_argument(
        "--report",
        metavar="FILE|-",
        help="Audit pasted report text instead: collect_env, ds_report or "
        "llamafactory-cli env output ('-' reads stdin).",
    )
    parser.add_argument(
        "--deep",
        action="store_true",
        help="Also import torch, initialise CUDA and run a tiny kernel in a "
        "child process; a crash (-11) or hang becomes a finding.",
    )
    parser.add_argument(
        "--deep-timeout",
        type=number(float, 1),
        default=120.0,
        metavar="SECONDS",
        help="Seconds the --deep child may take (default %(default)s).",
    )
    add_json_flag(
        parser,
        'Print {"findings": [...], "compat": ..., "target": {...}, "installed": {...}}.',
    )
    add_policy_arguments(parser)
    add_target_arguments(parser)


def run(args: argparse.Namespace) -> None:
    from cudalock.cli.output import echo, emit_json
    from cudalock.errors import UsageError

    python: Path | None = args.python
    prefix: Path | None = args.prefix
    report: str | None = args.report
    deep: bool = args.deep
    if report is not None and (python is not None or prefix is not None or deep):
        raise UsageError(
            "--report audits pasted text: it cannot be combined with --python, --prefix or --deep"
        )
    if python is not None and prefix is not None:
        raise UsageError("give either --python or --prefix, not both")
    if report is not None:
        compat, policy_source = compat_policy(args)
        refuse_two_stdin_reads(report, args)
        # The Target flags are read and checked as every command reads them; they apply to
        # the machine the report names (or the --probe files replace it).
        given = given_targets(args)
        from cudalock.audit.reports import parse_report, require_recognised
        from cudalock.audit.runner import audit_report

        parsed = require_recognised(parse_report(read_report(report)))
        outcome = audit_report(parsed, given, compat=compat)
    else:
        from cudalock.audit.inspection import start_inspection

        # The audited interpreter reads its environment while this one loads the matrix and
        # probes the machine: on two cores the audit then takes about as long as the slower.
        with start_inspection(python=python, prefix=prefix) as inspection:
            compat, policy_source = compat_policy(args)
            from cudalock.audit.runner import audit_live

            inputs = compute_inputs(args, with_request=False)
            outcome = audit_live(
                inputs.targets,
                inputs.matrix,
                inspection,
                deep=deep,
                deep_timeout=args.deep_timeout,
                compat=compat,
            )
    if args.json_output:
        emit_json(outcome.to_json())
    else:
        echo(render(outcome, policy_source))
    if outcome.has_errors:
        raise SystemExit(1)


def read_report(source: str) -> str:
    """The report text from FILE or stdin ('-'), bounded and checked for binary data."""
    from cudalock.audit.reports import MAX_REPORT_CHARS, decode_report
    from cudalock.fsutil import read_head, read_stream

    limit = MAX_REPORT_CHARS * 4  # UTF-8 uses up to 4 bytes per character
    if source == "-":
        # Whatever the user pipes in (a pipe, a file, even a device) is read up to the limit.
        data, _cut = read_stream(sys.stdin.buffer, limit=limit)
    else:
        # A FIFO or a device named as the report is refused at once (it could block or never end).
        data, _cut = read_head(Path(source), limit=limit, what="report file")
    return decode_report(data)


_HEADINGS = (("error", "Errors"), ("warning", "Warnings"), ("info", "Notes"))


def render(outcome: AuditOutcome, policy_source: str) -> str:
    """The findings for people: grouped by severity, each with its evidence and fix;
    ``policy_source`` says where the compatibility policy came from."""
    import textwrap

    installed = outcome.installed
    lines = [
        f"Environment: {installed.source.removeprefix('python:')}"
        + (f" (Python {installed.python_version})" if installed.python_version else "")
    ]
    torch = installed.active_torch
    if torch is not None:
        cuda = (
            f"CUDA {torch.cuda}"
            if torch.cuda
            else ("CUDA unknown" if not torch.cuda_known else "CPU build")
        )
        lines.append(f"  torch {torch.version} ({cuda})")
    if outcome.report is not None:
        from cudalock.audit.reports import MESSAGES  # loaded already: the report was read

        read = outcome.report.formats or ((MESSAGES,) if installed.messages else ())
        lines.append(f"  recognised: {', '.join(read) or 'nothing'}")
    lines.extend(f"Target: {target.name}: {target.describe()}" for target in outcome.targets)
    lines.append(f"Policy: --compat {outcome.compat} ({policy_source})")
    counts = {
        severity: sum(1 for f in outcome.findings if f.severity == severity)
        for severity, _ in _HEADINGS
    }
    for severity, heading in _HEADINGS:
        group = [f for f in outcome.findings if f.severity == severity]
        if not group:
            continue
        lines.append("")
        lines.append(f"{heading} ({len(group)}):")
        for finding in group:
            lines.extend(
                textwrap.wrap(
                    f"[{finding.code}] {finding.message}",
                    width=98,
                    initial_indent="  ",
                    subsequent_indent="    ",
                )
            )
            for item in finding.evidence:
                lines.append(f"    - {item}")
            if finding.fix:
                lines.append("    fix:")
                lines.extend(f"      {line}" for fix in finding.fix for line in fix.splitlines())
    lines.append("")
    if not outcome.findings:
        lines.append("No problems found.")
    lines.append(
        f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)."
    )
    return "\n".join(lines)
