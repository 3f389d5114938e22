"""The Target: the machine an environment is for, probed here, read from probe files written
elsewhere, or described by flags."""

from cudalock.machine.overrides import (
    TargetOptions,
    apply_overrides,
    gpu_model_named,
    targets_from_options,
)
from cudalock.machine.probe import probe_machine
from cudalock.machine.probefiles import read_probe_file, read_probe_files, target_from_json

__all__ = [
    "TargetOptions",
    "apply_overrides",
    "gpu_model_named",
    "probe_machine",
    "read_probe_file",
    "read_probe_files",
    "target_from_json",
    "targets_from_options",
]
