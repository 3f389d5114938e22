"""The training-run flags ``doctor`` and ``memory`` share, declared once, and their value type.

Standard library only at the top; the sizes and the ZeRO model are imported when read.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cudalock.cli.args import whole_number

if TYPE_CHECKING:
    from cudalock.doctor.diagnosis import SetupHints

TRAINING_RUN_GROUP = "The training run (memory check)"


def add_training_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The training-run flags, read back with :func:`memory_options`."""
    group = parser.add_argument_group(TRAINING_RUN_GROUP)
    group.add_argument("--params", metavar="COUNT", help="Model parameters: 7B, 7e9, 1.5T, 350M.")
    group.add_argument(
        "--model",
        type=Path,
        metavar="PATH",
        help="A Hugging Face config.json, model.safetensors.index.json, *.safetensors or model "
        "directory to count parameters from.",
    )
    group.add_argument(
        "--largest-layer-params",
        metavar="COUNT",
        help="Parameters of the largest layer (ZeRO-3's GPU figure), e.g. 131M.",
    )
    group.add_argument(
        "--zero",
        type=whole_number,
        metavar="STAGE",
        help="ZeRO stage: 2 or 3 (1 is checked with the ZeRO-2 formulas).",
    )
    group.add_argument(
        "--gpus-per-node",
        type=whole_number,
        metavar="N",
        help="GPUs (ranks) per node; default: this machine's GPU count.",
    )
    group.add_argument(
        "--nodes", type=whole_number, metavar="N", help="Number of nodes (default 1)."
    )
    group.add_argument(
        "--offload-optimizer", metavar="cpu|none", help="Optimizer offload (default none)."
    )
    group.add_argument(
        "--offload-param", metavar="cpu|none", help="Parameter offload (default none; ZeRO-3 only)."
    )
    # Neither given (None) means "assumed true", as DeepSpeed's default configs have it.
    group.add_argument(
        "--gather-16bit-weights",
        action=argparse.BooleanOptionalAction,
        help="ZeRO-3: stage3_gather_16bit_weights_on_model_save (default: assumed true).",
    )
    group.add_argument(
        "--host-memory",
        metavar="SIZE",
        help="Host RAM to compare with instead of this machine's: 512GB, 64GiB, 64Gi, 2TiB.",
    )
    group.add_argument(
        "--deepspeed-config",
        type=Path,
        metavar="FILE",
        help="The run's DeepSpeed config JSON (ZeRO stage, offload, gathering).",
    )


def _offload(flag: str, value: str | None) -> bool | None:
    from cudalock.errors import UsageError

    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("cpu", "none"):
        return lowered == "cpu"
    if lowered == "nvme":
        raise UsageError(
            f"{flag} nvme is not modelled (DeepSpeed's estimator covers cpu and "
            "none); expected cpu or none"
        )
    raise UsageError(f"{flag} {value!r} is not understood; expected cpu or none")


@dataclass(frozen=True)
class MemoryOptions:
    """The training-run flags as given (None: not given)."""

    params: str | None = None
    model: Path | None = None
    largest_layer_params: str | None = None
    zero: int | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    offload_optimizer: str | None = None
    offload_param: str | None = None
    gather_16bit_weights: bool | None = None
    host_memory: str | None = None
    deepspeed_config: Path | None = None

    def hints(self) -> SetupHints:
        """The flags about the run, checked and parsed (not --model or --deepspeed-config)."""
        from cudalock.doctor.diagnosis import SetupHints
        from cudalock.errors import UsageError
        from cudalock.memory.sizes import parse_param_count

        zero, gpus, nodes = self.zero, self.gpus_per_node, self.nodes
        if zero is not None and zero not in (1, 2, 3):
            raise UsageError(f"--zero {zero} is not supported; expected 2 or 3")
        if gpus is not None and gpus < 1:
            raise UsageError(f"--gpus-per-node {gpus} must be at least 1")
        if nodes is not None and nodes < 1:
            raise UsageError(f"--nodes {nodes} must be at least 1")
        params, largest = self.params, self.largest_layer_params
        return SetupHints(
            params=parse_param_count(params) if params is not None else None,
            params_source=f"--params {params}" if params is not None else None,
            largest_layer_params=parse_param_count(largest) if largest is not None else None,
            zero_stage=zero,
            gpus_per_node=gpus,
            nodes=nodes,
            offload_optimizer=_offload("--offload-optimizer", self.offload_optimizer),
            offload_param=_offload("--offload-param", self.offload_param),
            gather_16bit_weights=self.gather_16bit_weights,
        )

    def host_memory_bytes(self) -> int | None:
        from cudalock.memory.sizes import parse_bytes

        return parse_bytes(self.host_memory) if self.host_memory is not None else None


def memory_options(args: argparse.Namespace) -> MemoryOptions:
    """The training-run flags of a command line parsed with :func:`add_training_run_arguments`."""
    return MemoryOptions(
        params=args.params,
        model=args.model,
        largest_layer_params=args.largest_layer_params,
        zero=args.zero,
        gpus_per_node=args.gpus_per_node,
        nodes=args.nodes,
        offload_optimizer=args.offload_optimizer,
        offload_param=args.offload_param,
        gather_16bit_weights=args.gather_16bit_weights,
        host_memory=args.host_memory,
        deepspeed_config=args.deepspeed_config,
    )
