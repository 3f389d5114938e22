"""`cudalock lock`: a PEP 751 pylock.toml (and requirements.lock.txt) for the target, via uv.

Declared as a table (:class:`~cudalock.cli.flags.Command`): a well-formed command line runs
without typer. Standard library here; uv, packaging and the resolver are imported inside the
command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cudalock.cli.flags import Command, Flag
from cudalock.cli.options import TARGET_OPTIONS
from cudalock.cli.request_options import REQUEST_OPTIONS
from cudalock.resolve.request import RequestOptions
from cudalock.target.overrides import TargetOptions

if TYPE_CHECKING:
    pass

SPEC_FILE = "cudalock.toml"


def lock(*, output_dir: str, check: bool, upgrade: bool, spec: str | None,
         cache_dir: str | None, timeout: int, retries: int, force: bool, quiet: bool,
         json_output: bool, target_opts: TargetOptions, request_opts: RequestOptions) -> None:
    """Lock the whole dependency closure, every file pinned by URL and sha256.

    uv resolves for the target's platform and Python (not this machine's); torch and its
    family come only from the matching PyTorch index (an explicit index, so a same version on
    PyPI or a mirror cannot win), everything else from PyPI or --pypi-index. The lock records
    the cudalock and matrix versions, the target and the Plan; --check compares them with
    today's. Exit 3 on network failure, with the previous lock untouched.
    """
    from cudalock.cli.output import echo, emit_json, load_matrix_for
    from cudalock.env.spec import read_inputs
    from cudalock.lock.pylock import check_lock, make_lock
    from cudalock.resolve.search import resolve as resolve_plan
    from cudalock.target.overrides import targets_from_options

    out = Path(output_dir)
    inputs = read_inputs(request_opts, target_opts, spec_file=Path(spec) if spec else None,
                         output_dir=out)
    request, target_opts = inputs.request, inputs.target_options
    matrix = load_matrix_for(target_opts)
    targets = targets_from_options(target_opts, matrix)
    plan = resolve_plan(matrix, targets, request)
    if check:
        changes = check_lock(out, plan, request,
                             allow_insecure=request_opts.allow_insecure_index)
        if json_output:
            emit_json({"current": not changes, "lock": str(out / "pylock.toml"),
                       "changes": changes})
        elif changes:
            echo(f"{out / 'pylock.toml'} is not current:", err=True)
            for change in changes:
                echo(f"  - {change}", err=True)
            echo("run 'cudalock lock' (same flags) to regenerate it", err=True)
        else:
            echo(f"{out / 'pylock.toml'} is current")
        raise SystemExit(1 if changes else 0)

    def progress(line: str) -> None:
        if not quiet:
            echo(line, err=True)

    result = make_lock(
        plan, request, output_dir=out, upgrade=upgrade,
        allow_insecure=request_opts.allow_insecure_index,
        cache_dir=Path(cache_dir) if cache_dir else None, timeout_s=timeout, retries=retries,
        force=force, echo=progress,
    )
    if json_output:
        emit_json({"lock": str(result.lock_path), "requirements": str(result.requirements_path),
                   "packages": result.packages})
        return
    torch = result.packages.get("torch")
    echo(f"locked {len(result.packages)} packages (torch {torch}) for Python "
               f"{plan.python} on {plan.platform}: {result.lock_path}, "
               f"{result.requirements_path}")


COMMAND = Command(
    lock,
    flags=(
        Flag("output_dir", ("--output-dir", "-o"), "str", default=".",
             help="Where pylock.toml and requirements.lock.txt go."),
        Flag("check", ("--check",), "bool", default=False,
             help="Write nothing; exit 0 if the lock is current for the spec, the matrix and "
             "the target, 1 naming what changed (for CI)."),
        Flag("upgrade", ("--upgrade", "-U"), "bool", default=False,
             help="Re-resolve to the newest allowed versions (default: keep the versions "
             "already locked where still allowed)."),
        Flag("spec", ("--spec",), "str",
             help="Spec file with the Request and Target (default: ./cudalock.toml if "
             "present); flags override it."),
        Flag("cache_dir", ("--cache-dir",), "str",
             help="uv's download cache (default: uv's shared cache, so a second lock is fast)."),
        Flag("timeout", ("--timeout",), "int", default=60, minimum=1,
             help="Seconds uv waits on one HTTP request (UV_HTTP_TIMEOUT)."),
        Flag("retries", ("--retries",), "int", default=3, minimum=0,
             help="Times uv retries a failed request (UV_HTTP_RETRIES)."),
        Flag("force", ("--force",), "bool", default=False,
             help="Overwrite a pylock.toml / requirements.lock.txt cudalock did not write (its "
             "own are regenerated without it)."),
        Flag("quiet", ("--quiet", "-q"), "bool", default=False, help="No progress on stderr."),
        Flag("json_output", ("--json",), "bool", default=False,
             help="Print the result as JSON: {lock, requirements, packages} or, with --check, "
             "{current, lock, changes}."),
    ),
    groups=(REQUEST_OPTIONS, TARGET_OPTIONS),
)
