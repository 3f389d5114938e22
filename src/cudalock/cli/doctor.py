"""`cudalock doctor`: explain why a training run ended with -9 (SIGKILL) or -11 (SIGSEGV)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cudalock.cli.args import add_json_flag, add_policy_arguments, compat_policy, epilog
from cudalock.cli.training import add_training_run_arguments, memory_options

DESCRIPTION = """\
Explain why a run ended with -9/137 (SIGKILL) or -11/139 (SIGSEGV), from evidence.

-9: kernel OOM-killer lines (dmesg, journalctl -k, /var/log/kern.log), cgroup counters, launcher
lines in --log, and the host memory the ZeRO run needs (the training-run flags, or what the log
says). -11: the environment audit, kernel segfault lines, /dev/shm; a torch built for a newer
CUDA than the driver is named first when the policy (--compat, as in resolve) refuses it."""

EXAMPLES = """\
  cudalock doctor --exit-code 137 --log train.log
  cudalock doctor --exit-code "exits with return code = -11" --python /envs/ft/bin/python
  cudalock doctor --exit-code -9 --params 7B --zero 2 --gpus-per-node 8"""

EXIT_CODES = """\
exit status:
  0  no problem found
  1  a problem was found (the verdict says which)
  2  usage error or bad input (a bad flag or value, an unreadable log)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = epilog(EXAMPLES, EXIT_CODES)
    parser.usage = "%(prog)s --exit-code CODE [options]"
    parser.add_argument(
        "--exit-code",
        required=True,
        metavar="CODE",
        help="The return code as you saw it: -9, 137, 'exitcode: -9', -11, "
        "139, 'exits with return code = -11' (required).",
    )
    parser.add_argument(
        "--log",
        type=Path,
        metavar="FILE",
        help="The training log (torchrun / deepspeed / Trainer output).",
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
    add_policy_arguments(parser)
    add_training_run_arguments(parser)


def run(args: argparse.Namespace) -> None:
    import signal

    from cudalock.cli.output import echo, emit_json
    from cudalock.doctor.logs import parse_exit_code
    from cudalock.doctor.render import render_report
    from cudalock.doctor.run import DoctorRequest, default_readers, run_doctor
    from cudalock.model import Compat

    memory_opts = memory_options(args)
    compat: Compat = "strict"
    # The policy judges the -11 audit alone: only then is a cudalock.toml here read.
    if args.compat is not None or parse_exit_code(args.exit_code).signal == signal.SIGSEGV:
        compat, _ = compat_policy(args)
    request = DoctorRequest(
        exit_code=args.exit_code,
        log_path=args.log,
        flags=memory_opts.hints(),
        model_path=memory_opts.model,
        deepspeed_config=memory_opts.deepspeed_config,
        host_memory_bytes=memory_opts.host_memory_bytes(),
        python=args.python,
        no_run=args.no_run,
        compat=compat,
    )
    report = run_doctor(request, default_readers())
    if args.json_output:
        emit_json(report.to_json())
    else:
        echo("\n".join(render_report(report)))
    raise SystemExit(report.exit_code)
