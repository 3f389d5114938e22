"""``cudalock matrix check | show | refresh``: validate, read and update the compatibility matrix.

Standard library here; the matrix code is imported when a subcommand runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cudalock.cli.args import (
    PLATFORM_HELP,
    add_json_flag,
    add_matrix_argument,
    epilog,
    help_and_exit,
)
from cudalock.defaults import DEFAULT_PYPI_INDEX, DEFAULT_PYTORCH_INDEX

if TYPE_CHECKING:
    from cudalock.matrix import Matrix

DESCRIPTION = "Check, show and refresh the compatibility matrix (compat_matrix/*.toml)."

EXAMPLES = """\
  cudalock matrix check [DIR]
  cudalock matrix show --gpu "RTX 5090" --cuda 12.8
  cudalock matrix refresh --dry-run"""

CHECK_DESCRIPTION = """\
Validate a matrix directory: schema, sorted versions, cross references, duplicates.

Prints one line per problem (file: entry: problem)."""

CHECK_EXIT_CODES = """\
exit status:
  0  the matrix is sound
  1  problems were found
  2  the matrix cannot be loaded at all"""

SHOW_DESCRIPTION = """\
Print the torch builds of the matrix as a table, filtered by torch, CUDA, GPU and platform."""

SHOW_EXIT_CODES = """\
exit status:
  0  builds printed
  1  no build matches the filters
  2  usage error or bad input (a bad filter, an unknown GPU, a broken matrix)"""

REFRESH_DESCRIPTION = """\
Update the matrix from PyPI and the PyTorch index, printing what changed as a diff.

Reads torch releases, dates, requires-python, CPython tags and the PyPI build's CUDA (PyPI JSON
simple API, PEP 658 metadata), the torchvision/torchaudio release pinning each torch, which
variants the index publishes per release (PEP 503 pages), and new DeepSpeed releases with their
torch requirement and op-builder CUDA allow-list (metadata and sdist). What only a person can
verify is written as unverified with a note: the arch lists of a new build (copied from the
nearest older release), the driver minimum of a new CUDA version (left out). Comments and
layout are preserved; run 'cudalock matrix check' on the result."""

#: What a matrix subcommand runs.
Subcommand = Callable[[argparse.Namespace], None]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = epilog(EXAMPLES)
    parser.usage = "%(prog)s COMMAND [options]"
    subcommands = parser.add_subparsers(title="Commands", metavar="COMMAND")

    check_parser = subcommands.add_parser(
        "check",
        prog=f"{parser.prog} check",
        help="Validate a matrix directory.",
        description=CHECK_DESCRIPTION,
        epilog=epilog(
            "  cudalock matrix check\n  cudalock matrix check ./compat_matrix", CHECK_EXIT_CODES
        ),
        usage="%(prog)s [DIR] [options]",
    )
    check_parser.add_argument(
        "directory",
        nargs="?",
        type=Path,
        metavar="DIR",
        help="Matrix directory to check (default: --matrix, CUDALOCK_MATRIX, or the shipped "
        "matrix).",
    )
    add_matrix_argument(check_parser)
    check_parser.set_defaults(subcommand=check)

    show_parser = subcommands.add_parser(
        "show",
        prog=f"{parser.prog} show",
        help="Print the torch builds as a table, filtered.",
        description=SHOW_DESCRIPTION,
        epilog=epilog(
            '  cudalock matrix show --gpu "RTX 5090" --cuda 12.8\n'
            "  cudalock matrix show --torch 2.11 --platform linux-x86_64 --json",
            SHOW_EXIT_CODES,
        ),
        usage="%(prog)s [options]",
    )
    show_parser.add_argument(
        "--torch",
        metavar="SPEC",
        help="A torch version (2.11.0), series (2.11) or specifier (>=2.10).",
    )
    show_parser.add_argument("--cuda", metavar="X.Y", help="Only builds of this CUDA version.")
    show_parser.add_argument(
        "--gpu",
        metavar="NAME",
        help="Only builds whose kernels run on this GPU (an NVML name such as 'NVIDIA GeForce "
        "RTX 5090' or a matrix name such as 'RTX 5090').",
    )
    show_parser.add_argument(
        "--platform",
        metavar="PLATFORM",
        help=PLATFORM_HELP,
    )
    show_parser.add_argument(
        "--gpus",
        action="store_true",
        help="List the GPUs the matrix knows: compute capability, architecture and the names "
        "--gpu takes for each.",
    )
    add_json_flag(show_parser, "Print the rows as JSON.")
    add_matrix_argument(show_parser)
    show_parser.set_defaults(subcommand=show)

    refresh_parser = subcommands.add_parser(
        "refresh",
        prog=f"{parser.prog} refresh",
        help="Update the matrix from PyPI and the PyTorch index.",
        description=REFRESH_DESCRIPTION,
        epilog=epilog(
            "  cudalock matrix refresh --dry-run\n"
            "  cudalock matrix refresh --matrix ./compat_matrix"
        ),
        usage="%(prog)s [options]",
    )
    refresh_parser.add_argument(
        "--pypi-url",
        default=DEFAULT_PYPI_INDEX,
        metavar="URL",
        help="PEP 691 simple index for torch, torchvision, torchaudio and deepspeed (a mirror "
        "works; default %(default)s).",
    )
    refresh_parser.add_argument(
        "--pytorch-index",
        default=DEFAULT_PYTORCH_INDEX,
        metavar="URL",
        help="Base URL of the PyTorch index (<base>/<variant>/torch/ are PEP 503 pages; "
        "default %(default)s).",
    )
    refresh_parser.add_argument(
        "--allow-insecure-index",
        action="store_true",
        help="Allow plain-http index URLs on hosts other than loopback.",
    )
    refresh_parser.add_argument(
        "--dry-run", action="store_true", help="Print what would change; write nothing."
    )
    add_matrix_argument(refresh_parser)
    refresh_parser.set_defaults(subcommand=refresh)

    # 'cudalock matrix' alone: what there is to run.
    parser.set_defaults(subcommand=help_and_exit(parser))


def run(args: argparse.Namespace) -> None:
    subcommand: Subcommand = args.subcommand
    subcommand(args)


def check(args: argparse.Namespace) -> None:
    from cudalock.cli.inputs import matrix_dir
    from cudalock.cli.output import echo
    from cudalock.matrix.check import check_matrix_dir
    from cudalock.matrix.load import matrix_dir_from

    chosen = matrix_dir_from(args.directory or matrix_dir(args))
    problems = check_matrix_dir(chosen)
    for problem in problems:
        echo(str(problem))
    if problems:
        echo(f"{len(problems)} problem(s) in {chosen}", err=True)
        raise SystemExit(1)
    echo(f"matrix {chosen}: OK")


def show(args: argparse.Namespace) -> None:
    from cudalock.cli.inputs import matrix_dir
    from cudalock.cli.output import echo, emit_json
    from cudalock.errors import UsageError
    from cudalock.machine.overrides import gpu_model_named
    from cudalock.matrix.load import load_matrix
    from cudalock.matrix.show import render_table, rows_as_json, select_rows
    from cudalock.platforms import platform_named
    from cudalock.request import parse_torch_spec
    from cudalock.versions import format_cc, parse_cuda_flag

    torch: str | None = args.torch
    cuda: str | None = args.cuda
    gpu: str | None = args.gpu
    platform: str | None = args.platform
    matrix = load_matrix(matrix_dir(args))
    if args.gpus:
        _show_gpus(matrix, json_output=args.json_output)
        return
    torch_spec = parse_torch_spec(torch) if torch else None
    try:
        cuda_version = parse_cuda_flag(cuda, "--cuda") if cuda else None
    except UsageError as err:
        raise UsageError(f"--cuda: {err.message}") from None
    if platform is not None:
        platform = platform_named(platform).name
    model = gpu_model_named(gpu, matrix) if gpu else None
    rows = select_rows(
        matrix,
        torch=torch_spec,
        cuda=cuda_version,
        gpu_cc=model.compute_capability if model else None,
        platform=platform,
    )
    if args.json_output:
        emit_json(
            {
                "matrix_version": matrix.matrix_version,
                "gpu": None
                if model is None
                else {
                    "name": model.name,
                    "compute_capability": format_cc(model.compute_capability),
                    "architecture": model.architecture,
                },
                "builds": rows_as_json(rows),
            }
        )
        return
    echo(f"matrix {matrix.matrix_version} (schema {matrix.schema_version})")
    if model is not None:
        echo(
            f"GPU: {model.name}, compute capability {format_cc(model.compute_capability)}"
            f" ({model.architecture}); builds whose kernels run on it:"
        )
    if not rows:
        echo("no build matches these filters")
        raise SystemExit(1)
    echo(render_table(rows))


def _show_gpus(matrix: Matrix, *, json_output: bool) -> None:
    """The GPU table: what --gpu takes, and each model's compute capability with its source."""
    from cudalock.cli.output import echo, emit_json
    from cudalock.versions import format_cc

    if json_output:
        emit_json(
            {
                "matrix_version": matrix.matrix_version,
                "gpus": [
                    {
                        "name": gpu.name,
                        "compute_capability": format_cc(gpu.compute_capability),
                        "architecture": gpu.architecture,
                        "names": [*gpu.match, *gpu.aliases],
                        "status": gpu.provenance.status,
                        "source": list(gpu.provenance.source),
                    }
                    for gpu in matrix.gpus
                ],
            }
        )
        return
    echo(f"matrix {matrix.matrix_version}: {len(matrix.gpus)} GPUs (--gpu takes any name shown)")
    ordered = sorted(matrix.gpus, key=lambda g: (g.compute_capability, g.name))
    width = max(len(g.name) for g in ordered)
    for gpu in ordered:
        names = ", ".join(dict.fromkeys([*gpu.match, *gpu.aliases]))
        unverified = "" if gpu.provenance.verified else "  (unverified)"
        echo(
            f"  {gpu.name:<{width}}  {format_cc(gpu.compute_capability):>4}  "
            f"{gpu.architecture}; --gpu {names}{unverified}"
        )


def refresh(args: argparse.Namespace) -> None:
    from cudalock.cli.inputs import matrix_dir
    from cudalock.cli.output import echo
    from cudalock.matrix.load import matrix_dir_from
    from cudalock.matrix.refresh import refresh_matrix

    result = refresh_matrix(
        matrix_dir_from(matrix_dir(args)),
        pypi_url=args.pypi_url,
        pytorch_index=args.pytorch_index,
        allow_insecure=args.allow_insecure_index,
        write=not args.dry_run,
    )
    echo(result.diff if result.diff else "the matrix is up to date")
    for line in result.unread:
        echo(f"not recorded: {line}", err=True)
    if result.diff:
        verb = "would change" if args.dry_run else "updated"
        echo(f"{verb}: {result.summary}", err=True)
