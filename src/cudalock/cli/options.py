"""The Target flags, shared by every command that takes a Target (and the matrix), declared once.

``--probe``, ``--driver-version``, ``--driver-cuda``, ``--no-gpu``, ``--compute-capability``,
``--gpu``, ``--platform`` and ``--matrix``: a command adds :data:`TARGET_FLAGS` to its own and
reads their values as one :class:`TargetOptions` with :func:`target_options_from`. Standard
library only: commands read these without importing typer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cudalock.cli.flags import Flag, FlagGroup
from cudalock.target.overrides import TargetOptions

TARGET_PANEL = "Target (which machine)"


TARGET_FLAGS: tuple[Flag, ...] = (
    Flag("probe", ("--probe",), "paths", panel=TARGET_PANEL,
         help="Probe JSON written by 'cudalock probe --json' on another machine (repeat for a "
         "fleet)."),
    Flag("driver_version", ("--driver-version",), "str", envvar="CUDALOCK_DRIVER_VERSION",
         panel=TARGET_PANEL, help="Target NVIDIA driver version, e.g. 535.104.05."),
    Flag("driver_cuda", ("--driver-cuda",), "str", envvar="CUDALOCK_DRIVER_CUDA",
         panel=TARGET_PANEL, help="Highest CUDA version the target driver supports, e.g. 12.2."),
    Flag("no_gpu", ("--no-gpu",), "bool", default=False, panel=TARGET_PANEL,
         help="Target a machine without NVIDIA GPUs."),
    Flag("compute_capability", ("--compute-capability",), "strs", panel=TARGET_PANEL,
         help="A target GPU's compute capability, e.g. 8.6 (repeatable)."),
    Flag("gpu", ("--gpu",), "strs", panel=TARGET_PANEL,
         help="A target GPU by name, e.g. 'H100' or 'RTX 4090' (repeatable)."),
    Flag("platform", ("--platform",), "str", panel=TARGET_PANEL,
         help="linux-x86_64, linux-aarch64, windows-x86_64 or macos-arm64."),
    Flag("matrix", ("--matrix",), "path", envvar="CUDALOCK_MATRIX", panel=TARGET_PANEL,
         help="Use this compatibility matrix directory instead of the shipped one."),
)


def target_options_from(values: Mapping[str, Any]) -> TargetOptions:
    """The :class:`TargetOptions` for the values of :data:`TARGET_FLAGS` (by ``dest``)."""
    return TargetOptions(
        probe_files=tuple(values["probe"] or ()),
        driver_version=values["driver_version"],
        driver_cuda=values["driver_cuda"],
        no_gpu=values["no_gpu"],
        compute_capabilities=tuple(values["compute_capability"] or ()),
        gpu_names=tuple(values["gpu"] or ()),
        platform=values["platform"],
        matrix_dir=values["matrix"],
    )


#: The Target flags, handed to a command as ``target_opts: TargetOptions``.
TARGET_OPTIONS = FlagGroup("target_opts", TARGET_FLAGS, target_options_from)
