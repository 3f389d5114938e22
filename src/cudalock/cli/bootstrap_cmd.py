"""`cudalock bootstrap`: write (and with --create, build) the environment this machine can run."""

# No "from __future__ import annotations": typer reads these annotations through two
# decorators, so they must be real objects, not strings.
from pathlib import Path
from typing import Annotated

import typer

from cudalock.cli.options import TargetOptions, target_options
from cudalock.cli.request_options import RequestOptions, request_options

OUTPUT_PANEL = "Output"


@target_options
@request_options
def bootstrap(
    target_opts: TargetOptions,
    request_opts: RequestOptions,
    output_dir: Annotated[Path, typer.Option(
        "-o", "--output-dir", help="Directory for the files (and cudalock.toml).",
        rich_help_panel=OUTPUT_PANEL)] = Path("."),
    name: Annotated[str | None, typer.Option(
        "--name", help="Environment name (default: torch-VERSION-VARIANT).",
        rich_help_panel=OUTPUT_PANEL)] = None,
    output_format: Annotated[str | None, typer.Option(
        "--format", help="conda (environment.yml, default), venv (requirements.txt + "
        "install.sh) or uv (pyproject.toml).", rich_help_panel=OUTPUT_PANEL)] = None,
    create: Annotated[bool, typer.Option(
        "--create", help="Also build the environment (conda/mamba/micromamba, or a venv).",
        rich_help_panel=OUTPUT_PANEL)] = False,
    venv: Annotated[Path | None, typer.Option(
        "--venv", help="Where --format venv --create puts the environment (default "
        "DIR/.venv).", rich_help_panel=OUTPUT_PANEL)] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite existing output files.", rich_help_panel=OUTPUT_PANEL)] = False,
    json_output: Annotated[bool, typer.Option(
        "--json", help="Print the plan and the files written as JSON.")] = False,
) -> None:
    """Resolve the PyTorch stack for the target and write environment.yml, install.sh,
    constraints.txt and cudalock.toml (or build the environment with --create)."""
    import sys

    from cudalock.bootstrap import BootstrapOptions, run_bootstrap
    from cudalock.cli.common import emit_json

    def echo(line: str) -> None:
        # Progress goes to stderr so that --json output on stdout stays one document.
        typer.echo(line, err=json_output)

    options = BootstrapOptions(output_dir=output_dir, name=name, output_format=output_format,
                               create=create, venv=venv, force=force)
    result = run_bootstrap(target_opts, request_opts, options, echo)
    if json_output:
        import json

        from cudalock.urls import redact

        document = {
            "plan": result.plan.to_json(),
            "written": [str(path) for path in result.written],
            "environment": str(result.environment) if result.environment else None,
        }
        # Index URLs in the plan may carry credentials: never print them.
        emit_json(json.loads(redact(json.dumps(document))))
    sys.stdout.flush()
