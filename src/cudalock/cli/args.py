"""Argument groups several commands share, each declared once, and the value types they read.

The Target flags (which machine) and the Request flags (what to install) are added to a command's
parser as one argument group each; :mod:`cudalock.cli.inputs` reads them back, with the
environment, into the core's value types. Standard library only at the top: every command
imports this module, and ``cudalock resolve`` must start fast.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cudalock.defaults import SPEC_FILE
from cudalock.platforms import PLATFORMS

if TYPE_CHECKING:
    from cudalock.request import Compat

#: The platform names, for help texts.
PLATFORM_HELP = "One of " + ", ".join(platform.name for platform in PLATFORMS) + "."

TARGET_GROUP = "Target (which machine)"
REQUEST_GROUP = "Request (what to install)"
POLICY_GROUP = "Compatibility policy"
OUTPUT_GROUP = "Output"

#: Exit statuses, as every command's epilog states them.
EXIT_CODES = """\
exit status:
  0  success
  1  problems found, or nothing satisfies the request
  2  usage error or bad input (a bad flag or value, a malformed file)
  3  the environment failed (network, permissions, disk)"""


def epilog(examples: str, exit_codes: str = EXIT_CODES) -> str:
    """A command's epilog: its examples, then its exit statuses (by default the common ones)."""
    return f"examples:\n{examples}\n\n{exit_codes}"


def number(kind: type[int] | type[float], minimum: float) -> Callable[[str], float]:
    """An argparse ``type`` reading a finite number ≥ ``minimum``; its error names the form.

    argparse prefixes the message with the flag: "argument --timeout: expected ...".
    """
    noun = "a whole number" if kind is int else "a number"

    def convert(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < minimum:
            shown = int(minimum) if float(minimum).is_integer() else minimum
            raise argparse.ArgumentTypeError(f"expected {noun}, at least {shown}, got {text!r}")
        return value

    return convert


def whole_number(text: str) -> int:
    """An argparse ``type`` for any integer (the command checks its range and says why)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def help_and_exit(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], None]:
    """What runs for a command line that names no command: the parser's help on stderr, exit 2."""

    def show_help(args: argparse.Namespace) -> None:
        import sys

        parser.print_help(sys.stderr)
        raise SystemExit(2)

    return show_help


def add_json_flag(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--json", dest="json_output", action="store_true", help=help)


# --------------------------------------------------------------------------------------------
# Target: which machine


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """The Target flags, read back with :func:`cudalock.cli.inputs.target_options`."""
    group = parser.add_argument_group(
        TARGET_GROUP, "No flag: this machine. Flags given replace the probed values field by field."
    )
    group.add_argument(
        "--probe",
        dest="probe_files",
        action="append",
        type=Path,
        metavar="FILE",
        help="Probe JSON written by 'cudalock probe --json' on another machine (repeat for a "
        "fleet); '-' reads several from stdin, e.g. from srun ... cudalock probe --json-lines.",
    )
    group.add_argument(
        "--driver-version",
        metavar="VERSION",
        help="Target NVIDIA driver version, e.g. 535.104.05, or a branch such as 570 (the "
        "CUDA every release of it supports) (default: $CUDALOCK_DRIVER_VERSION, else this "
        "machine's).",
    )
    group.add_argument(
        "--driver-cuda",
        metavar="X.Y",
        help="Highest CUDA version the target driver supports, e.g. 12.2 (default: "
        "$CUDALOCK_DRIVER_CUDA, else the driver's).",
    )
    group.add_argument(
        "--no-gpu", action="store_true", help="Target a machine without NVIDIA GPUs."
    )
    group.add_argument(
        "--compute-capability",
        dest="compute_capabilities",
        action="append",
        metavar="X.Y",
        help="A target GPU's compute capability, e.g. 8.6 (repeatable).",
    )
    group.add_argument(
        "--gpu",
        dest="gpu_names",
        action="append",
        metavar="NAME",
        help="A target GPU by name as people write it, e.g. 'H100', 'RTX 4090', RTX5090, 4090 "
        "(repeatable; 'cudalock matrix show --gpus' lists them).",
    )
    group.add_argument("--platform", metavar="PLATFORM", help=PLATFORM_HELP)
    add_matrix_argument(group)


SPEC_HELP = (
    f"The spec with the Request and Target to start from (default: {SPEC_FILE} in the output "
    "directory, if there); the flags given replace its values."
)


def add_spec_argument(parser: argparse._ActionsContainer, help: str = SPEC_HELP) -> None:
    """``--spec FILE``: bootstrap and lock read it as one
    (:func:`cudalock.cli.inputs.compute_inputs`); audit and doctor read its policy
    (:func:`compat_policy`)."""
    parser.add_argument("--spec", type=Path, metavar="FILE", help=help)


def add_matrix_argument(parser: argparse._ActionsContainer) -> None:
    """``--matrix DIR`` (or CUDALOCK_MATRIX): a matrix directory instead of the shipped one."""
    parser.add_argument(
        "--matrix",
        dest="matrix_dir",
        type=Path,
        metavar="DIR",
        help="Use this compatibility matrix directory (default: $CUDALOCK_MATRIX, else the "
        "shipped one).",
    )


# --------------------------------------------------------------------------------------------
# Request: what to install


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """The Request flags, read back with :func:`cudalock.cli.inputs.request_options`.

    Values not given stay None, so a spec file (``cudalock.toml``) can fill them.
    """
    group = parser.add_argument_group(REQUEST_GROUP)
    group.add_argument(
        "--torch",
        metavar="SPEC",
        help="torch version or specifier: 2.1.0, '>=2.1,<2.4', or a build as pip prints it, "
        "2.9.1+cu128 (default: the newest that fits).",
    )
    group.add_argument(
        "--python",
        metavar="X.Y",
        help="Python version of the environment, e.g. 3.11 (default: the newest the chosen "
        "torch supports).",
    )
    group.add_argument(
        "--cuda",
        metavar="X.Y",
        help="Pin the CUDA build, e.g. 12.1, or cpu (default: the newest build for the "
        "driver's own CUDA major).",
    )
    add_compat_argument(group)
    group.add_argument(
        "--with",
        dest="with_packages",
        action="append",
        metavar="PACKAGE",
        help="Companion package, e.g. torchaudio or 'deepspeed>=0.15' (repeatable; adds to "
        "torchvision; 'none' drops it).",
    )
    group.add_argument(
        "--framework",
        dest="frameworks",
        action="append",
        metavar="REQUIREMENT",
        help="Fine-tuning framework: a requirement (llamafactory==0.9.5), a local path "
        "(installed editable) or a VCS URL (repeatable: transformers, peft, trl, ... are "
        "resolved together).",
    )
    group.add_argument(
        "--pytorch-index",
        metavar="URL",
        help="PyTorch index base URL; the build variant (/cu121) is appended (default: "
        "$CUDALOCK_PYTORCH_INDEX, else https://download.pytorch.org/whl).",
    )
    group.add_argument(
        "--pypi-index",
        metavar="URL",
        help="PyPI-compatible simple index URL for everything else (default: "
        "$CUDALOCK_PYPI_INDEX, else pip's own).",
    )
    group.add_argument(
        "--allow-insecure-index",
        action="store_true",
        help="Accept plain http index URLs to hosts other than loopback.",
    )


def add_compat_argument(group: argparse._ActionsContainer) -> None:
    """``--compat strict|minor``: the policy resolve chooses with and audit/doctor judge with."""
    group.add_argument(
        "--compat",
        metavar="MODE",
        help="strict (default: CUDA build ≤ driver CUDA) or minor (NVIDIA minor-version "
        "compatibility).",
    )


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """``--compat`` and ``--spec`` for the commands that judge an environment (audit, doctor),
    read back with :func:`compat_policy`."""
    group = parser.add_argument_group(
        POLICY_GROUP,
        "The policy resolve chooses with: under strict a build newer than the driver's CUDA is "
        "an error.",
    )
    add_compat_argument(group)
    add_spec_argument(
        group,
        help=f"A {SPEC_FILE} whose [request] compat applies when --compat is not given "
        f"(default: ./{SPEC_FILE}, if there).",
    )


def compat_policy(args: argparse.Namespace) -> tuple[Compat, str]:
    """The policy a command line parsed with :func:`add_policy_arguments` asks for, and where
    it came from, in words: ``--compat``, else the spec's ``[request] compat`` (``--spec FILE``,
    else ``./cudalock.toml`` when there), else strict."""
    from cudalock.errors import InputError
    from cudalock.request import parse_compat

    given: str | None = args.compat
    if given is not None:
        return parse_compat(given), "from the command line"
    spec_file: Path | None = args.spec
    path = spec_file if spec_file is not None else Path(SPEC_FILE)
    if spec_file is None and not path.is_file():
        return "strict", "the default"
    from cudalock.envfiles.spec import read_spec

    spec = read_spec(path)
    if spec is None:
        raise InputError(f"spec file {path} does not exist")
    recorded = spec.request.compat
    return parse_compat(recorded) if recorded else "strict", f"from {path}"
