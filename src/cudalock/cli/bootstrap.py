"""`cudalock bootstrap`: write (and with --create, build) the environment the target can run."""

from __future__ import annotations

import argparse
from pathlib import Path

from cudalock.cli.args import (
    OUTPUT_GROUP,
    add_json_flag,
    add_request_arguments,
    add_spec_argument,
    add_target_arguments,
    epilog,
)
from cudalock.cli.inputs import compute_inputs

DESCRIPTION = """\
Resolve the PyTorch stack for the target (as 'cudalock resolve' does), resolve its whole closure
once with uv (as 'cudalock lock' does: the torch family pinned and routed to its index, every
--framework and --with package fitted to that torch), and write environment.yml,
environment.conda-lock.yml, install.sh, constraints.txt, the lock files (pylock.toml,
requirements.lock.txt, requirements.last.txt, uv-install.toml) and cudalock.toml into the output
directory, or with --create also build the environment (with uv) from exactly that closure.

An existing cudalock.toml there is read first (flags override it) and updated, keeping its
comments. Existing files are not overwritten without --force."""

EXAMPLES = """\
  cudalock bootstrap -o env/ --framework 'llamafactory==0.9.5' --with deepspeed
  cudalock bootstrap -o env/ --framework transformers --framework peft --framework trl
  cudalock bootstrap -o env/ --format venv --create --torch 2.1.0 --python 3.11
  cudalock bootstrap -o env/ --format uv
  cudalock bootstrap -o env/ --format pixi --create"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = epilog(EXAMPLES)
    add_json_flag(parser, "Print the plan and the files written as JSON.")
    output = parser.add_argument_group(OUTPUT_GROUP)
    output.add_argument(
        "-o",
        "--output-dir",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="Directory for the files (and cudalock.toml); default: here.",
    )
    output.add_argument(
        "--name", metavar="NAME", help="Environment name (default: torch-VERSION-VARIANT)."
    )
    output.add_argument(
        "--format",
        dest="output_format",
        metavar="FORMAT",
        help="conda (environment.yml, default), venv (requirements.txt + "
        "install.sh), uv (pyproject.toml) or pixi (pixi.toml).",
    )
    output.add_argument(
        "--create",
        action="store_true",
        help="Also build the environment: with micromamba, mamba or conda (the first on "
        "PATH), else py-rattler (pip install 'cudalock[conda]'); or a venv.",
    )
    output.add_argument(
        "--venv",
        type=Path,
        metavar="DIR",
        help="Where --create puts the environment: the venv (default DIR/.venv), or the conda "
        "prefix (default: the --name environment of conda/mamba/micromamba, DIR/.conda-env "
        "with py-rattler).",
    )
    output.add_argument("--force", action="store_true", help="Overwrite existing output files.")
    output.add_argument(
        "--no-cache",
        action="store_true",
        dest="no_cache",
        help="With --create, build DeepSpeed (and anything else built against torch) anew "
        "instead of reusing wheels an earlier build made against the same torch build, CUDA "
        "and Python (kept in $CUDALOCK_WHEEL_CACHE, default ~/.cache/cudalock/wheels).",
    )
    output.add_argument(
        "--offline",
        action="store_true",
        help="Read no index: the closure is resolved from uv's cache alone; when that is not "
        "enough, the other files are written and the exit status is 3 (lock later with "
        "'cudalock lock').",
    )
    add_spec_argument(output)
    add_request_arguments(parser)
    add_target_arguments(parser)


def run(args: argparse.Namespace) -> None:
    import sys

    from cudalock.cli.output import echo, emit_json, live_line
    from cudalock.envfiles.bootstrap import BootstrapOptions, run_bootstrap
    from cudalock.fsutil import output_lock
    from cudalock.lock import UvOptions

    json_output: bool = args.json_output

    def progress(line: str) -> None:
        # Progress goes to stderr so that --json output on stdout stays one document.
        echo(line, err=json_output)

    options = BootstrapOptions(
        output_dir=args.output_dir,
        name=args.name,
        output_format=args.output_format,
        create=args.create,
        no_cache=args.no_cache,
        venv=args.venv,
        force=args.force,
        uv=UvOptions(allow_insecure=args.allow_insecure_index, offline=args.offline),
    )
    # One bootstrap (or lock) at a time per directory: two would mix their files.
    with output_lock(args.output_dir, command="cudalock bootstrap"):
        inputs = compute_inputs(args, read_spec=True)
        assert inputs.spec is not None  # read_spec
        result = run_bootstrap(
            inputs.spec,
            inputs.matrix,
            inputs.targets,
            options,
            progress,
            live_line(err=json_output),
        )
    if json_output:
        document = {
            "plan": result.plan.to_json(),
            "written": [str(path) for path in result.written],
            "environment": str(result.environment) if result.environment else None,
            "closure": result.closure.to_json() if result.closure else None,
        }
        emit_json(document)  # which hides the index URLs' credentials
    sys.stdout.flush()
