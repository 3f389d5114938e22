"""`cudalock lock`: a PEP 751 pylock.toml (and requirements.lock.txt) for the target, via uv.

Standard library here; uv, packaging and the resolver are imported when the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cudalock.cli.args import (
    add_json_flag,
    add_request_arguments,
    add_spec_argument,
    add_target_arguments,
    epilog,
    number,
)
from cudalock.cli.inputs import Inputs, compute_inputs

if TYPE_CHECKING:
    from cudalock.model import Plan

DESCRIPTION = """\
Lock the whole dependency closure, every file pinned by URL and sha256, resolved once by uv as
'cudalock bootstrap' resolves it.

uv resolves for the target's platform and Python (not this machine's); torch and its family
come only from the matching PyTorch index (an explicit index, so a same version on PyPI or a
mirror cannot win), also a family package only a framework asks for (torchaudio); each
--framework is asked for with the extras that declare its torch requirement, so the version
chosen accepts the planned torch; everything else comes from PyPI or --pypi-index. Writes
pylock.toml, requirements.lock.txt and requirements.last.txt (pip: everything, then DeepSpeed
built against the installed torch) and uv-install.toml (uv pip sync --config-file
uv-install.toml pylock.toml). The request comes from DIR/cudalock.toml (or --spec), with the
flags given applied over it. The lock records the cudalock and matrix versions, the target and
the Plan; --check compares them with today's."""

EXAMPLES = """\
  cudalock lock --driver-version 535.104.05 --compute-capability 8.0 --torch 2.1.0 --python 3.11
  cudalock lock             # again: keeps locked versions where still allowed
  cudalock lock --check     # for CI"""

EXIT_CODES = """\
exit status:
  0  locked (with --check: the lock is current)
  1  nothing satisfies the request, e.g. no release of a framework accepts the planned torch
     (with --check: the lock is not current, and what changed)
  2  usage error or bad input (a bad flag or value, a malformed cudalock.toml)
  3  network failure after the retries, --offline without enough in uv's cache, or an index
     without the planned build; the previous lock is left untouched"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = epilog(EXAMPLES, EXIT_CODES)
    parser.add_argument(
        "-o",
        "--output-dir",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="Where the lock files go (default: here).",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="Write nothing; exit 0 if the lock is current for the spec, the "
        "matrix and the target, 1 naming what changed (for CI).",
    )
    parser.add_argument(
        "-U",
        "--upgrade",
        action="store_true",
        help="Re-resolve to the newest allowed versions (default: keep the "
        "versions already locked where still allowed).",
    )
    add_spec_argument(parser)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="uv's download cache (default: uv's shared cache, so a second lock is fast).",
    )
    parser.add_argument(
        "--timeout",
        type=number(int, 1),
        default=60,
        metavar="SECONDS",
        help="Seconds uv waits on one HTTP request (UV_HTTP_TIMEOUT; default %(default)s).",
    )
    parser.add_argument(
        "--retries",
        type=number(int, 0),
        default=3,
        metavar="N",
        help="Times uv retries a failed request (UV_HTTP_RETRIES; default %(default)s).",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="Overwrite lock files (pylock.toml, requirements.lock.txt, "
        "requirements.last.txt, uv-install.toml) cudalock did not write (its own are "
        "regenerated without it).",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="Read no index: uv resolves from its cache alone (exit 3 when that is not enough).",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="No progress on stderr.")
    add_json_flag(
        parser,
        "Print the result as JSON: {lock, requirements, packages} or, with "
        "--check, {current, lock, changes}.",
    )
    add_request_arguments(parser)
    add_target_arguments(parser)


def run(args: argparse.Namespace) -> None:

    from cudalock.cli.output import echo, emit_json
    from cudalock.errors import UsageError
    from cudalock.fsutil import output_lock
    from cudalock.lock import UvOptions, check_framework_paths, check_lock, make_lock
    from cudalock.lock.files import recorded_python_in
    from cudalock.lock.python import plan_for_recorded_python, planner

    out: Path = args.output_dir
    if out.exists() and not out.is_dir():  # before any work: uv would run for nothing
        raise UsageError(f"-o {str(out)!r} is not a directory; expected the lock's directory")
    json_output: bool = args.json_output
    quiet: bool = args.quiet
    inputs = compute_inputs(args, read_spec=True)
    request, request_opts = inputs.request, inputs.request_given
    check_framework_paths(request.frameworks)
    options = UvOptions(
        pypi_index=request.pypi_index,
        allow_insecure=request_opts.allow_insecure_index,
        cache_dir=args.cache_dir,
        timeout_s=args.timeout,
        retries=args.retries,
        upgrade=args.upgrade,
        offline=args.offline,
    )
    # Without --python, the closure decides the Python (the newest it installs on): plans for
    # older ones are made the same way.
    plan_at = planner(inputs.matrix, inputs.targets, request, options)
    plan = plan_at(None)
    if args.check:
        # The Python the lock chose is what today's inputs are compared with.
        plan = plan_for_recorded_python(
            plan, request, plan_at, inputs.matrix, recorded_python_in(out)
        )
        changes = check_lock(out, plan, request, allow_insecure=request_opts.allow_insecure_index)
        if json_output:
            emit_json(
                {"current": not changes, "lock": str(out / "pylock.toml"), "changes": changes}
            )
        elif changes:
            echo(f"{out / 'pylock.toml'} is not current:", err=True)
            for change in changes:
                echo(f"  - {change}", err=True)
            echo("hint: Run 'cudalock lock' (same flags) to regenerate it.", err=True)
        else:
            echo(f"{out / 'pylock.toml'} is current")
        raise SystemExit(1 if changes else 0)

    def progress(line: str) -> None:
        if not quiet:
            echo(line, err=True)

    # Two locks into one directory could leave a pylock.toml and a requirements.lock.txt from
    # different runs: a second run exits 3, naming the one that holds the directory.
    with output_lock(out, command="cudalock lock"):
        result = make_lock(
            plan,
            request,
            output_dir=out,
            options=options,
            force=args.force,
            echo=progress,
            matrix=inputs.matrix,
            also=_remembered(inputs, plan, out),
            replan=plan_at,
        )
    plan = result.plan
    if json_output:
        emit_json(
            {
                "lock": str(result.lock_path),
                "requirements": str(result.requirements_path),
                "packages": result.packages,
                "python": plan.python,
                "python_reason": plan.python_reason,
            }
        )
        return
    torch = result.packages.get("torch")
    echo(
        f"locked {len(result.packages)} packages (torch {torch}) for Python "
        f"{plan.python} on {plan.platform}: {result.lock_path}, {result.requirements_path}"
    )
    if request.python is None:
        echo(f"  {plan.python_reason}")


def _remembered(inputs: Inputs, plan: Plan, out: Path) -> dict[Path, str]:
    """``out/cudalock.toml`` recording the inputs, as bootstrap records them, when a Target or
    Request flag (or its environment variable) was given: so ``lock --check`` and a plain
    ``lock`` afterwards keep the plan this lock was made for. Nothing without such flags."""
    from cudalock.defaults import SPEC_FILE
    from cudalock.envfiles.spec import OutputSpec, Spec, TargetSummary, update_spec
    from cudalock.request import RequestOptions

    target, request = inputs.target_given, inputs.request_given
    flags_given = (
        target.overrides_given
        or bool(target.probe_files)
        or request != RequestOptions(allow_insecure_index=request.allow_insecure_index)
    )
    if not flags_given:
        return {}
    read = inputs.spec
    spec = Spec(
        request=RequestOptions.of(inputs.request),
        target=TargetSummary.of(plan),
        output=read.spec.output if read is not None and read.spec is not None else OutputSpec(),
    )
    path = out / SPEC_FILE
    existing = path if path.exists() or read is None else read.spec_path
    return {path: update_spec(existing, spec, read)}
