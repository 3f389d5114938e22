"""The inputs of a command, computed once: :func:`compute_inputs`.

Precedence, the same for every command and every value (this is the one place it is decided):

1. **flags** given on the command line (a flag given twice counts once, the last; repeatable
   flags add up);
2. the **environment**: ``CUDALOCK_DRIVER_VERSION``, ``CUDALOCK_DRIVER_CUDA``,
   ``CUDALOCK_MATRIX``, ``CUDALOCK_PYTORCH_INDEX``, ``CUDALOCK_PYPI_INDEX``, each counting only
   when set and not empty;
3. **cudalock.toml** (``--spec FILE``, else ``DIR/cudalock.toml`` of ``-o DIR``), read by
   ``bootstrap`` and ``lock`` only: each Request value not given above is taken from it; the
   Target parts not given above (the driver, the GPUs, the platform) come from its
   ``[target]``, and ``--probe`` replaces that whole. ``resolve`` reads none: it answers for
   the flags and this machine, as a question asked, not a plan regenerated;
4. the **probe**: ``--probe FILE`` documents, else this machine, read only for what the values
   above leave open (the driver and the GPUs given, or ``--no-gpu``: no driver or GPU is
   probed, only the host);
5. the **defaults** (torchvision, strict compatibility, the shipped matrix, the public
   indexes).

resolve, bootstrap, lock, probe and the live audit take their targets from
:func:`compute_inputs`; ``audit --report`` and ``doctor``, whose machine is the one a report
names (or, for doctor, only the probe files' nodes), read the same Target flags by the same
code with :func:`given_targets` and lay them over that machine.

Standard library only at the top, like every command module: the core is imported when a
command computes its inputs.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cudalock.envfiles.spec import Inputs as SpecInputs
    from cudalock.machine.overrides import GivenTargets, TargetOptions
    from cudalock.matrix import Matrix
    from cudalock.model import Target
    from cudalock.request import Request, RequestOptions

__all__ = [
    "Inputs",
    "compute_inputs",
    "given_targets",
    "matrix_dir",
    "refuse_two_stdin_reads",
    "request_options",
    "target_options",
]


def _environment(environ: Mapping[str, str], variable: str) -> str | None:
    """A variable counts only when set and not empty (``X=`` in a profile is "not given")."""
    return environ.get(variable) or None


def matrix_dir(flags: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Path | None:
    """``--matrix DIR``, else ``CUDALOCK_MATRIX``, else None (the shipped matrix)."""
    given: Path | None = flags.matrix_dir
    if given is not None:
        return given
    matrix = _environment(os.environ if environ is None else environ, "CUDALOCK_MATRIX")
    return Path(matrix) if matrix is not None else None


def target_options(
    flags: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> TargetOptions:
    """The Target flags of a command line, the environment filling what they leave out."""
    from cudalock.machine.overrides import TargetOptions

    env = os.environ if environ is None else environ
    return TargetOptions(
        probe_files=tuple(flags.probe_files or ()),
        driver_version=flags.driver_version or _environment(env, "CUDALOCK_DRIVER_VERSION"),
        driver_cuda=flags.driver_cuda or _environment(env, "CUDALOCK_DRIVER_CUDA"),
        no_gpu=flags.no_gpu,
        compute_capabilities=tuple(flags.compute_capabilities or ()),
        gpu_names=tuple(flags.gpu_names or ()),
        platform=flags.platform,
        matrix_dir=matrix_dir(flags, env),
    )


def request_options(
    flags: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> RequestOptions:
    """The Request flags of a command line, the environment filling what they leave out."""
    from cudalock.request import RequestOptions

    env = os.environ if environ is None else environ
    return RequestOptions(
        torch=flags.torch,
        python=flags.python,
        cuda=flags.cuda,
        compat=flags.compat,
        with_packages=tuple(flags.with_packages) if flags.with_packages else None,
        frameworks=tuple(flags.frameworks) if flags.frameworks else None,
        pytorch_index=flags.pytorch_index or _environment(env, "CUDALOCK_PYTORCH_INDEX"),
        pypi_index=flags.pypi_index or _environment(env, "CUDALOCK_PYPI_INDEX"),
        allow_insecure_index=flags.allow_insecure_index,
    )


@dataclass(frozen=True)
class Inputs:
    """What a command works on, every source laid over the next (see the module docstring)."""

    # The names are the core's types: imported only for type checking (the core loads later).

    matrix: Matrix
    targets: tuple[Target, ...]
    request: Request
    #: The Target values as used: flags, environment and the spec's ``[target]``.
    target_options: TargetOptions
    #: The Target and Request values the flags and the environment gave, before the spec.
    target_given: TargetOptions
    request_given: RequestOptions
    #: The Target values read and checked, the probe files read: what ``targets`` came from.
    targets_read: GivenTargets
    #: What cudalock.toml contributed (None for commands that read none).
    spec: SpecInputs | None = None


def given_targets(
    flags: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> GivenTargets:
    """The Target flags and the environment, read and checked as :func:`compute_inputs` reads
    them, for a command that decides later which machine they apply to (doctor: the report's,
    this one's, or only the probe files')."""
    return _read_targets(target_options(flags, environ))


def _read_targets(options: TargetOptions) -> GivenTargets:
    """The matrix the options name, the overrides checked against it, the probe files read."""
    from cudalock.machine.overrides import read_target_options
    from cudalock.matrix.load import load_matrix

    return read_target_options(options, load_matrix(options.matrix_dir))


def compute_inputs(
    flags: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    *,
    read_spec: bool = False,
    with_request: bool = True,
) -> Inputs:
    """The matrix, the targets and the request of a command line (``read_spec``: lay the flags
    over cudalock.toml, as bootstrap and lock do; ``with_request`` False: a command without
    Request flags, such as probe and audit, gets the default Request). Relative framework paths
    count from ``cwd`` (default: the current directory)."""
    from cudalock.request import RequestOptions

    targets_given = target_options(flags, environ)
    request_given = request_options(flags, environ) if with_request else RequestOptions()
    spec: SpecInputs | None = None
    if read_spec:
        from cudalock.envfiles.spec import read_inputs

        spec = read_inputs(
            request_given,
            targets_given,
            spec_file=flags.spec,
            output_dir=flags.output_dir,
            cwd=cwd,
        )
        request, targets_used = spec.request, spec.target_options
    else:
        request, targets_used = request_given.to_request(cwd=cwd), targets_given
    read = _read_targets(targets_used)
    return Inputs(
        read.matrix, read.targets(), request, targets_used, targets_given, request_given, read, spec
    )


def refuse_two_stdin_reads(report: str, args: argparse.Namespace) -> None:
    """``--report -`` with ``--probe -``: both would read stdin; a usage error (exit 2)."""
    from cudalock.errors import UsageError

    if report == "-" and any(str(path) == "-" for path in target_options(args).probe_files):
        raise UsageError(
            "--report - and --probe - both read stdin",
            hint="Save one of them to a file and give its path.",
        )
