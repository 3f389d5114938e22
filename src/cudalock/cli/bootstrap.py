"""`cudalock bootstrap`: write (and with --create, build) the environment this machine can run.

Declared as a table (:class:`~cudalock.cli.flags.Command`): a well-formed command line runs
without typer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudalock.cli.flags import Command, Flag
from cudalock.cli.options import TARGET_OPTIONS
from cudalock.cli.request_options import REQUEST_OPTIONS
from cudalock.resolve.request import RequestOptions
from cudalock.target.overrides import TargetOptions

if TYPE_CHECKING:
    from cudalock.cli.flags import Kind

OUTPUT_PANEL = "Output"


def bootstrap(*, target_opts: TargetOptions, request_opts: RequestOptions, output_dir: Path,
              name: str | None, output_format: str | None, create: bool, venv: Path | None,
              force: bool, json_output: bool) -> None:
    """Resolve the PyTorch stack for the target and write environment.yml, install.sh,
    constraints.txt and cudalock.toml (or build the environment with --create)."""
    import sys

    from cudalock.cli.output import echo, emit_json
    from cudalock.env.bootstrap import BootstrapOptions, run_bootstrap

    def progress(line: str) -> None:
        # Progress goes to stderr so that --json output on stdout stays one document.
        echo(line, err=json_output)

    options = BootstrapOptions(output_dir=output_dir, name=name, output_format=output_format,
                               create=create, venv=venv, force=force)
    result = run_bootstrap(target_opts, request_opts, options, progress)
    if json_output:

        from cudalock.urls import redact_json

        document = {
            "plan": result.plan.to_json(),
            "written": [str(path) for path in result.written],
            "environment": str(result.environment) if result.environment else None,
        }
        # Index URLs in the plan may carry credentials: never print them.
        emit_json(redact_json(document))
    sys.stdout.flush()


def _output(dest: str, names: tuple[str, ...], kind: Kind, help: str, default: Any = None) -> Flag:
    return Flag(dest, names, kind, help=help, default=default, panel=OUTPUT_PANEL)


COMMAND = Command(
    bootstrap,
    flags=(
        _output("output_dir", ("-o", "--output-dir"), "path", default=Path("."),
                help="Directory for the files (and cudalock.toml)."),
        _output("name", ("--name",), "str",
                help="Environment name (default: torch-VERSION-VARIANT)."),
        _output("output_format", ("--format",), "str",
                help="conda (environment.yml, default), venv (requirements.txt + install.sh) "
                "or uv (pyproject.toml)."),
        _output("create", ("--create",), "bool", default=False,
                help="Also build the environment (conda/mamba/micromamba, or a venv)."),
        _output("venv", ("--venv",), "path",
                help="Where --format venv --create puts the environment (default DIR/.venv)."),
        _output("force", ("--force",), "bool", default=False,
                help="Overwrite existing output files."),
        Flag("json_output", ("--json",), "bool", default=False,
             help="Print the plan and the files written as JSON."),
    ),
    groups=(REQUEST_OPTIONS, TARGET_OPTIONS),
)
