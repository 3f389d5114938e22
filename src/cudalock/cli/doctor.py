"""`cudalock doctor`: explain why a training run ended with -9 (SIGKILL) or -11 (SIGSEGV)."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path

from cudalock.cli.args import (
    add_json_flag,
    add_policy_arguments,
    add_target_arguments,
    compat_policy,
    epilog,
)
from cudalock.cli.inputs import given_targets, refuse_two_stdin_reads, target_options
from cudalock.cli.training import add_training_run_arguments, memory_options

DESCRIPTION = """\
Explain why a run ended with -9/137 (SIGKILL) or -11/139 (SIGSEGV), from evidence.

-9: kernel OOM-killer lines (kernel lines pasted into --log; dmesg, journalctl -k and
/var/log/kern.log of this machine when the run ran here), cgroup counters, slurmstepd's
oom-kill lines and a pod's OOMKilled state in --log (these decide an OOM whatever exit status
was seen), and the host memory the run needs (full fine-tuning, LoRA or QLoRA; the
training-run flags, or what the log says). -11: the environment audit (--report: the crashed
environment's collect_env or ds_report, on the machine it names and the Target flags give),
kernel segfault lines, /dev/shm; a torch built for a newer CUDA than the driver is named first
when the policy (--compat, as in resolve) refuses it.

This machine's kernel log, cgroup counters and /dev/shm count only for a run on this host: one
the log's hostnames, --host, the Slurm job's nodes or a --probe file's hostname name. Kernel
lines count only when they match the run: its time (the log's timestamps, the Slurm job, or
--since/--until), its host and the PIDs and program names the log reports; the others are
shown apart. With no evidence either way the verdict is "undetermined", with what would decide.

--slurm-job reads the job's Slurm accounting (sacct, scontrol) instead of a return code: an
OUT_OF_MEMORY step, a TIMEOUT, a segfault, with the #SBATCH --mem= the run needs."""

EXAMPLES = """\
  cudalock doctor --exit-code 137 --log train.log
  cudalock doctor --exit-code -9 --log train.log --since '2026-11-29 13:40' --host gpu-node-03
  cudalock doctor --slurm-job 884422 --params 7B --zero 2
  cudalock doctor --exit-code "exits with return code = -11" --python /envs/ft/bin/python
  cudalock doctor --exit-code -11 --report collect_env.txt --driver-version 535.104.05
  cudalock doctor --exit-code -9 --params 7B --zero 2 --gpus-per-node 8
  cudalock doctor --exit-code -9 --log train.log --finetuning qlora --probe node07.json"""

EXIT_CODES = """\
exit status:
  0  no problem found
  1  a problem was found (the verdict says which)
  2  usage error or bad input (a bad flag or value, an unreadable log, an unknown Slurm job)
  3  Slurm's commands are missing here, or sacct/scontrol did not answer"""


def timestamp(text: str) -> datetime:
    """An argparse ``type``: ``2026-11-29 13:40``, ``2026-11-29T13:40:05``, ``2026-11-29``, with
    an optional UTC offset; naive times are this machine's local time, as logs print them."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a date and time such as '2026-11-29 13:40', got {text!r}"
        ) from None
    return when.astimezone().replace(tzinfo=None) if when.tzinfo is not None else when


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = epilog(EXAMPLES, EXIT_CODES)
    parser.usage = "%(prog)s (--exit-code CODE | --slurm-job ID[.STEP]) [options]"
    # One of the two says how the run ended: the return code seen, or Slurm's record of it.
    ended = parser.add_mutually_exclusive_group(required=True)
    ended.add_argument(
        "--exit-code",
        metavar="CODE",
        help="The return code as you saw it: -9, 137, 'exitcode: -9', -11, "
        "139, 'exits with return code = -11'.",
    )
    ended.add_argument(
        "--slurm-job",
        metavar="ID[.STEP]",
        help="A Slurm job (or one step of it): read how it ended from sacct and scontrol; its "
        "time and nodes select the kernel evidence, its memory request is the limit checked.",
    )
    parser.add_argument(
        "--log",
        type=Path,
        metavar="FILE",
        help="The training log (torchrun / deepspeed / Trainer output; pasted dmesg lines are "
        "read too).",
    )
    parser.add_argument(
        "--since",
        type=timestamp,
        metavar="TIME",
        help="When the run started (local time, e.g. '2026-11-29 13:40'): kernel lines before "
        "it are not the run's. Default: from the log or the Slurm job.",
    )
    parser.add_argument(
        "--until",
        type=timestamp,
        metavar="TIME",
        help="When the run ended: kernel lines after it are not the run's.",
    )
    parser.add_argument(
        "--host",
        dest="hosts",
        action="append",
        metavar="NAME",
        help="A host the run ran on (repeatable); default: the hosts the log or the job names.",
    )
    add_json_flag(parser, "Print the result as JSON.")
    parser.add_argument(
        "--no-run",
        action="store_true",
        help="For -11: audit without initialising CUDA in a child process.",
    )
    parser.add_argument(
        "--python",
        type=Path,
        metavar="PATH",
        help="For -11: the interpreter of the environment that crashed (default: the active one).",
    )
    parser.add_argument(
        "--report",
        metavar="FILE|-",
        help="For -11: the crashed environment's collect_env, ds_report or llamafactory-cli env "
        "output ('-' reads stdin), audited instead of an interpreter here.",
    )
    add_policy_arguments(parser)
    add_target_arguments(parser)
    add_training_run_arguments(parser)


def run(args: argparse.Namespace) -> None:
    import signal

    from cudalock.cli.output import echo, emit_json
    from cudalock.doctor.logs import parse_exit_code
    from cudalock.doctor.render import render_report
    from cudalock.doctor.run import DoctorRequest, default_readers, run_doctor
    from cudalock.errors import UsageError
    from cudalock.request import Compat

    if args.since is not None and args.until is not None and args.since > args.until:
        raise UsageError(f"--since {args.since} is after --until {args.until}")
    if args.report is not None and args.python is not None:
        raise UsageError("give either --report (the crashed environment's report) or --python")
    if args.report is not None:
        refuse_two_stdin_reads(args.report, args)
    # The Target flags are read and checked as every command reads them (a bad value is exit 2
    # whatever the signal); none given, the runs load the shipped matrix only when they need it.
    options = target_options(args)
    given = (
        given_targets(args)
        if options.overrides_given or options.probe_files or options.matrix_dir is not None
        else None
    )
    report_text = None
    if args.report is not None:
        from cudalock.cli.audit import read_report

        report_text = read_report(args.report)
    memory_opts = memory_options(args)
    compat: Compat = "strict"
    # The policy judges the -11 audit alone: only then is a cudalock.toml here read (a Slurm
    # job's signal is known only once its accounting is read).
    segfault = args.exit_code is not None and (
        parse_exit_code(args.exit_code).signal == signal.SIGSEGV
    )
    if args.compat is not None or args.slurm_job is not None or segfault:
        compat, _ = compat_policy(args)
    request = DoctorRequest(
        exit_code=args.exit_code,
        slurm_job=args.slurm_job,
        since=args.since,
        until=args.until,
        hosts=tuple(args.hosts or ()),
        log_path=args.log,
        flags=memory_opts.hints(),
        training_config=memory_opts.training_config,
        model_path=memory_opts.model,
        deepspeed_config=memory_opts.deepspeed_config,
        host_memory_bytes=memory_opts.host_memory_bytes(),
        python=args.python,
        no_run=args.no_run,
        compat=compat,
        target=given,
        report_text=report_text,
        report_name="the report on stdin" if args.report == "-" else args.report,
    )
    report = run_doctor(request, default_readers())
    if args.json_output:
        emit_json(report.to_json())
    else:
        echo("\n".join(render_report(report)))
    raise SystemExit(report.exit_code)
