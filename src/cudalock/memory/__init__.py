"""Memory: what a DeepSpeed ZeRO run needs in host and GPU memory (DeepSpeed's own estimator
formulas plus the checkpoint-save spike), and whether a host has it. Pure arithmetic."""

from cudalock.memory.estimates import (
    HostMemory,
    MemoryNeeds,
    MemoryVerdict,
    TrainingSetup,
    check_host_memory,
    memory_needs,
)
from cudalock.memory.model_size import ModelSize, read_model_size
from cudalock.memory.sizes import parse_bytes, parse_param_count
from cudalock.units import format_gib

__all__ = [
    "HostMemory",
    "MemoryNeeds",
    "MemoryVerdict",
    "ModelSize",
    "TrainingSetup",
    "check_host_memory",
    "format_gib",
    "memory_needs",
    "parse_bytes",
    "parse_param_count",
    "read_model_size",
]
