"""`cudalock resolve`: the torch stack the target can run, and why.

Standard library here; the matrix, the resolver and the probe are imported when the command
runs (no requests, tomlkit or torch on this path).
"""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

from cudalock.cli.args import (
    add_json_flag,
    add_request_arguments,
    add_target_arguments,
    epilog,
)
from cudalock.cli.inputs import compute_inputs

if TYPE_CHECKING:
    from cudalock.machine.overrides import TargetOptions
    from cudalock.request import RequestOptions

DESCRIPTION = """\
Choose torch, its CUDA build, torchvision and friends for the target, and say why.

The newest torch release matching --torch built for the driver's own CUDA major (an older
major only when none fits; --cuda pins one; a CUDA toolkit on the target decides when the stack
compiles CUDA), with a build the driver can run (--compat) whose kernels cover every GPU;
several --probe files resolve one plan for the whole fleet. Prints the chosen stack, why, the
best alternative passed over, the candidates rejected and what would make them fit, and the
'cudalock bootstrap' command for the same inputs."""

EXAMPLES = """\
  cudalock resolve --driver-version 570.86.15 --gpu "RTX 5090"
  cudalock resolve --probe a.json --probe b.json --json
  cudalock resolve --torch '>=2.4' --python 3.11 --with deepspeed --compat minor"""

EXIT_CODES = """\
exit status:
  0  a stack fits
  1  nothing fits: the nearest candidates, why each was rejected and what would fix it
  2  usage error or bad input (a bad flag or value, a malformed probe file or matrix)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = epilog(EXAMPLES, EXIT_CODES)
    add_json_flag(
        parser,
        "Print the Plan as JSON (the documented, stable object); when nothing "
        'fits, {"error", "hint", "rejected"} and exit 1.',
    )
    add_request_arguments(parser)
    add_target_arguments(parser)


def run(args: argparse.Namespace) -> None:
    from cudalock.cli.output import echo, emit_json
    from cudalock.errors import Unsatisfiable
    from cudalock.resolve.explain import render_plan, render_unsatisfiable, unsatisfiable_json
    from cudalock.resolve.search import resolve as resolve_plan

    inputs = compute_inputs(args)  # resolve reads no cudalock.toml: see cudalock.cli.inputs
    # The plan keeps index credentials (bootstrap writes them into the files that need them);
    # echo and emit_json never show them.
    try:
        if inputs.request.frameworks:
            # Frameworks take part in choosing torch: their releases are read from the index.
            from cudalock.lock.closure import UvOptions, closure_verifier
            from cudalock.lock.frameworks import plan_with_frameworks
            from cudalock.lock.http import cache_disabled
            from cudalock.lock.uvinput import default_index_of

            allow_insecure = inputs.request_given.allow_insecure_index
            # A refusal's next step is resolved with uv before it is named.
            verify = closure_verifier(
                UvOptions(pypi_index=inputs.request.pypi_index, allow_insecure=allow_insecure),
                inputs.matrix,
            )

            plan, _frameworks = plan_with_frameworks(
                inputs.matrix,
                inputs.targets,
                inputs.request,
                default_index=default_index_of(inputs.request, allow_insecure=allow_insecure),
                use_cache=not cache_disabled(),
                verify=verify,
            )
        else:
            plan = resolve_plan(inputs.matrix, inputs.targets, inputs.request)
    except Unsatisfiable as err:
        if args.json_output:
            emit_json(unsatisfiable_json(err))
            raise SystemExit(err.exit_code) from None
        details = render_unsatisfiable(err)
        if details:
            # The one-line error and hint come from cli.main; the candidates go first, above it.
            echo(details, err=True)
        raise
    if args.json_output:
        emit_json(plan.to_json())
        return
    command = bootstrap_command(inputs.target_given, inputs.request_given)
    echo(render_plan(plan, command))


def bootstrap_command(target_opts: TargetOptions, request_opts: RequestOptions) -> str:
    """``cudalock bootstrap`` with the flags this resolve was given, shell-quoted."""
    argv = ["cudalock", "bootstrap"]
    for path in target_opts.probe_files:
        argv += ["--probe", str(path)]
    pairs: list[tuple[str, str | None]] = [
        ("--driver-version", target_opts.driver_version),
        ("--driver-cuda", target_opts.driver_cuda),
        ("--platform", target_opts.platform),
    ]
    argv += [item for flag, value in pairs if value for item in (flag, value)]
    if target_opts.no_gpu:
        argv.append("--no-gpu")
    for cc in target_opts.compute_capabilities:
        argv += ["--compute-capability", cc]
    for name in target_opts.gpu_names:
        argv += ["--gpu", name]
    if target_opts.matrix_dir is not None:
        argv += ["--matrix", str(target_opts.matrix_dir)]
    request_pairs: list[tuple[str, str | None]] = [
        ("--torch", request_opts.torch),
        ("--python", request_opts.python),
        ("--cuda", request_opts.cuda),
        ("--compat", request_opts.compat),
        ("--pytorch-index", request_opts.pytorch_index),
        ("--pypi-index", request_opts.pypi_index),
    ]
    argv += [item for flag, value in request_pairs if value for item in (flag, value)]
    for package in request_opts.with_packages or ():
        argv += ["--with", package]
    for framework in request_opts.frameworks or ():
        argv += ["--framework", framework]
    if request_opts.allow_insecure_index:
        argv.append("--allow-insecure-index")
    return " ".join(_quote(arg) for arg in argv)


def _quote(arg: str) -> str:
    from cudalock.urls import redact

    return shlex.quote(redact(arg))
