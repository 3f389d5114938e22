"""``cudalock matrix check | show | refresh``: validate, read and update the compatibility matrix.

Import-light: typer and the standard library here; the matrix code is imported in each command.
"""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="Inspect, check and refresh the compatibility matrix.", no_args_is_help=True)

_MATRIX_OPTION = typer.Option(
    None, "--matrix", envvar="CUDALOCK_MATRIX",
    help="Use this compatibility matrix directory instead of the shipped one.",
)


_DIRECTORY_ARGUMENT = typer.Argument(
    None, help="Matrix directory to check (default: --matrix, CUDALOCK_MATRIX, or the shipped "
    "matrix).", show_default=False,
)


@app.command("check")
def check(
    directory: Path | None = _DIRECTORY_ARGUMENT,
    matrix_dir: Path | None = _MATRIX_OPTION,
) -> None:
    """Validate a matrix directory: schema, sorted versions, cross references, duplicates.

    Prints one line per problem (file: entry: problem). Exit 0 when the matrix is sound,
    1 when problems were found, 2 when it cannot be loaded at all.
    """
    from cudalock.matrix.check import check_matrix_dir
    from cudalock.matrix.load import matrix_dir_from

    chosen = matrix_dir_from(directory or matrix_dir)
    problems = check_matrix_dir(chosen)
    for problem in problems:
        typer.echo(str(problem))
    if problems:
        typer.echo(f"{len(problems)} problem(s) in {chosen}", err=True)
        raise typer.Exit(1)
    typer.echo(f"matrix {chosen}: OK")


@app.command("show")
def show(
    torch: str | None = typer.Option(
        None, "--torch", help="A torch version (2.11.0), series (2.11) or specifier (>=2.10).",
    ),
    cuda: str | None = typer.Option(None, "--cuda", help="Only builds of this CUDA version "
                                    "(X.Y)."),
    gpu: str | None = typer.Option(
        None, "--gpu", help="Only builds whose kernels run on this GPU (an NVML name such as "
        "'NVIDIA GeForce RTX 5090' or a matrix name such as 'RTX 5090').",
    ),
    platform: str | None = typer.Option(
        None, "--platform", help="linux-x86_64, linux-aarch64, windows-x86_64, macos-arm64 or "
        "macos-x86_64.",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
    matrix_dir: Path | None = _MATRIX_OPTION,
) -> None:
    """Print the torch builds of the matrix as a table, filtered by torch, CUDA, GPU, platform."""
    from cudalock.cli.output import emit_json
    from cudalock.errors import UsageError
    from cudalock.matrix.check import PLATFORMS
    from cudalock.matrix.load import load_matrix
    from cudalock.matrix.show import render_table, rows_as_json, select_rows
    from cudalock.resolve.request import parse_torch_spec
    from cudalock.target.overrides import gpu_model_named
    from cudalock.versions import format_cc, parse_cuda_version

    matrix = load_matrix(matrix_dir)
    torch_spec = parse_torch_spec(torch) if torch else None
    try:
        cuda_version = parse_cuda_version(cuda) if cuda else None
    except UsageError as err:
        raise UsageError(f"--cuda: {err.message}") from None
    if platform is not None and platform not in PLATFORMS:
        raise UsageError(f"--platform {platform!r}: expected one of {', '.join(PLATFORMS)}")
    model = gpu_model_named(gpu, matrix) if gpu else None
    rows = select_rows(matrix, torch=torch_spec, cuda=cuda_version,
                       gpu_cc=model.compute_capability if model else None, platform=platform)
    if json_output:
        emit_json({
            "matrix_version": matrix.matrix_version,
            "gpu": None if model is None else {
                "name": model.name,
                "compute_capability": format_cc(model.compute_capability),
                "architecture": model.architecture,
            },
            "builds": rows_as_json(rows),
        })
        return
    typer.echo(f"matrix {matrix.matrix_version} (schema {matrix.schema_version})")
    if model is not None:
        typer.echo(f"GPU: {model.name}, compute capability {format_cc(model.compute_capability)}"
                   f" ({model.architecture}); builds whose kernels run on it:")
    if not rows:
        typer.echo("no build matches these filters")
        raise typer.Exit(1)
    typer.echo(render_table(rows))


@app.command("refresh")
def refresh(
    pypi_url: str = typer.Option(
        "https://pypi.org/simple", "--pypi-url",
        help="PEP 691 simple index for torch, torchvision and torchaudio (a mirror works).",
    ),
    pytorch_index: str = typer.Option(
        "https://download.pytorch.org/whl", "--pytorch-index",
        help="Base URL of the PyTorch index (<base>/<variant>/torch/ are PEP 503 pages).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would change; write "
                                 "nothing."),
    matrix_dir: Path | None = _MATRIX_OPTION,
) -> None:
    """Update torch.toml from PyPI and the PyTorch index, printing what changed.

    Reads releases, dates, requires-python, CPython tags (PyPI JSON simple API) and which
    variants the index publishes per release (PEP 503 pages). Architecture lists, cuDNN and
    NCCL are not read from there and are left as they are. Comments and layout are preserved.
    """
    from cudalock.matrix.load import matrix_dir_from
    from cudalock.matrix.refresh import refresh_matrix

    result = refresh_matrix(matrix_dir_from(matrix_dir), pypi_url=pypi_url,
                            pytorch_index=pytorch_index, write=not dry_run)
    typer.echo(result.diff if result.diff else "torch.toml is up to date")
    if result.diff:
        verb = "would change" if dry_run else "updated"
        typer.echo(f"{verb}: {result.summary}", err=True)
