"""`cudalock resolve`: the torch stack the target can run, and why.

Declared as a table (:class:`~cudalock.cli.flags.Command`), so a well-formed command line runs
without typer. Standard library here; the matrix, the resolver and the probe are imported
inside the command (no requests, tomlkit, rich or torch on this path).
"""

from __future__ import annotations

import shlex

from cudalock.cli.flags import Command, Flag
from cudalock.cli.options import TARGET_OPTIONS
from cudalock.cli.request_options import REQUEST_OPTIONS
from cudalock.resolve.request import RequestOptions
from cudalock.target.overrides import TargetOptions


def resolve(*, json_output: bool, target_opts: TargetOptions,
            request_opts: RequestOptions) -> None:
    """Choose torch, its CUDA build, torchvision and friends for the target, and say why.

    The newest torch release matching --torch with a build the driver can run (--compat) whose
    kernels cover every GPU; several --probe files resolve one plan for the whole fleet.
    Exit 1 when nothing fits, naming the nearest candidates and what would fix them.
    """
    from cudalock.cli.output import echo, emit_json, load_matrix_for
    from cudalock.errors import Unsatisfiable
    from cudalock.resolve.explain import render_plan, render_unsatisfiable, unsatisfiable_json
    from cudalock.resolve.search import resolve as resolve_plan
    from cudalock.target.overrides import targets_from_options
    from cudalock.urls import redact

    request = request_opts.to_request(base=None)
    matrix = load_matrix_for(target_opts)
    targets = targets_from_options(target_opts, matrix)
    # The plan keeps index credentials (bootstrap writes them into the files that need them);
    # what resolve prints never shows them.
    try:
        plan = resolve_plan(matrix, targets, request)
    except Unsatisfiable as err:
        if json_output:
            emit_json(_redacted(unsatisfiable_json(err)))
            raise SystemExit(err.exit_code) from None
        details = render_unsatisfiable(err)
        if details:
            # The one-line error and hint come from cli.main; the candidates go first, above it.
            echo(redact(details), err=True)
        raise
    if json_output:
        emit_json(_redacted(plan.to_json()))
        return
    echo(redact(render_plan(plan, bootstrap_command(target_opts, request_opts))))


COMMAND = Command(
    resolve,
    flags=(
        Flag("json_output", ("--json",), "bool", default=False,
             help="Print the Plan as JSON (the documented, stable object); when nothing fits, "
             "{\"error\", \"hint\", \"rejected\"} and exit 1."),
    ),
    groups=(REQUEST_OPTIONS, TARGET_OPTIONS),
)


def _redacted(document: object) -> object:
    """``document`` (JSON data) with the credentials of every URL in its strings redacted."""
    from cudalock.urls import redact_json

    return redact_json(document)


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
        ("--framework", request_opts.framework),
        ("--pytorch-index", request_opts.pytorch_index),
        ("--pypi-index", request_opts.pypi_index),
    ]
    argv += [item for flag, value in request_pairs if value for item in (flag, value)]
    for package in request_opts.with_packages or ():
        argv += ["--with", package]
    if request_opts.allow_insecure_index:
        argv.append("--allow-insecure-index")
    return " ".join(_quote(arg) for arg in argv)


def _quote(arg: str) -> str:
    from cudalock.urls import redact

    return shlex.quote(redact(arg))

