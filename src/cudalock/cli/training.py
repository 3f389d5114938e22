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
    from cudalock.memory.finetuning import Method

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
    group.add_argument(
        "--finetuning",
        metavar="full|lora|qlora",
        help="How the run trains (default: what the log or --training-config says, else full): "
        "LoRA trains an adapter on a frozen 16-bit base, QLoRA on a 4-bit one.",
    )
    group.add_argument(
        "--lora-rank", type=whole_number, metavar="R", help="LoRA rank (r, lora_rank, lora_r)."
    )
    group.add_argument(
        "--lora-target",
        metavar="MODULES",
        help="LoRA's target modules, comma-separated (q_proj,v_proj), or 'all' for every linear "
        "layer (default: all); with --model the trainable count is figured from them.",
    )
    group.add_argument(
        "--trainable-params",
        metavar="COUNT",
        help="Trainable parameters of a LoRA/QLoRA run, as PEFT prints them: 4194304 or 4.2M.",
    )
    group.add_argument(
        "--quantization-bit",
        type=whole_number,
        metavar="4|8",
        help="The frozen base's bits (LLaMA-Factory's quantization_bit; 4 is QLoRA).",
    )
    group.add_argument(
        "--training-config",
        type=Path,
        metavar="FILE",
        help="The run's fine-tuning config: a LLaMA-Factory or axolotl YAML, or PEFT's "
        "adapter_config.json (or the adapter's directory): method, rank, targets, bits.",
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
    finetuning: str | None = None
    lora_rank: int | None = None
    lora_target: str | None = None
    trainable_params: str | None = None
    quantization_bit: int | None = None
    training_config: Path | None = None

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
        method = self._method()
        trainable = self.trainable_params
        return SetupHints(
            method=method,
            trainable_params=parse_param_count(trainable) if trainable is not None else None,
            trainable_source=f"--trainable-params {trainable}" if trainable is not None else None,
            base_bits=self.quantization_bit,
            lora_rank=self.lora_rank,
            lora_targets=tuple(t.strip() for t in self.lora_target.split(",") if t.strip())
            if self.lora_target
            else None,
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

    def _method(self) -> Method | None:
        """--finetuning, checked against the other adapter flags; None: not said."""
        from cudalock.errors import UsageError
        from cudalock.memory.finetuning import METHODS

        given = self.finetuning.strip().lower() if self.finetuning is not None else None
        method = next((m for m in METHODS if m == given), None)
        if given is not None and method is None:
            raise UsageError(
                f"--finetuning {self.finetuning!r} is not understood; expected full, lora or qlora"
            )
        bits = self.quantization_bit
        if bits is not None and bits not in (4, 8):
            raise UsageError(f"--quantization-bit {bits} is not modelled; expected 4 or 8")
        adapter_flags = [
            flag
            for flag, value in (
                ("--lora-rank", self.lora_rank),
                ("--lora-target", self.lora_target),
                ("--trainable-params", self.trainable_params),
                ("--quantization-bit", bits),
            )
            if value is not None
        ]
        if method == "full" and adapter_flags:
            raise UsageError(
                f"--finetuning full trains every parameter; {', '.join(adapter_flags)} describe "
                "a LoRA/QLoRA run (--finetuning lora or qlora)"
            )
        if self.lora_rank is not None and self.lora_rank < 1:
            raise UsageError(f"--lora-rank {self.lora_rank} must be at least 1")
        if method is None and adapter_flags:
            method = "qlora" if bits == 4 else "lora"
        if method == "lora" and bits == 4:
            method = "qlora"
        return method

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
        finetuning=args.finetuning,
        lora_rank=args.lora_rank,
        lora_target=args.lora_target,
        trainable_params=args.trainable_params,
        quantization_bit=args.quantization_bit,
        training_config=args.training_config,
    )
