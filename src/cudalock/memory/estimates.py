"""Host and GPU memory a DeepSpeed ZeRO run needs, and whether a host has it (pure arithmetic).

The model-state figures are DeepSpeed's own estimators, formula for formula
(``deepspeed/runtime/zero/stage_1_and_2.py:estimate_zero2_model_states_mem_needs`` and
``stage3.py:estimate_zero3_model_states_mem_needs``, 0.19.x, ``additional_buffer_factor=1.5``).
They cover model states only, so two checkpoint-save figures are added:

- ZeRO-1/2: HF Trainer / Accelerate's ``get_state_dict`` clones the full 16-bit weights into host
  RAM on every rank: ≈ gpus_per_node × 2 bytes × params on one node, on top of steady use.
- ZeRO-3 with ``stage3_gather_16bit_weights_on_model_save``: the consolidated 16-bit state dict
  lands in rank 0's host RAM: ≈ 2 bytes × params, on node 0 only.

and the troubleshooting rule of thumb for ZeRO-2: host RAM ≥ 1.5 × full 16-bit weight size ×
GPUs per node. No I/O here: the caller supplies the host's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from cudalock.errors import UsageError
from cudalock.memory.finetuning import BASE_BITS, Method, base_weight_bytes
from cudalock.memory.sizes import format_params, kubernetes_quantity
from cudalock.model import Finding
from cudalock.units import format_gib

__all__ = [
    "ADDITIONAL_BUFFER_FACTOR",
    "BYTES_16BIT",
    "RULE_OF_THUMB_FACTOR",
    "Alternative",
    "EstimatorRow",
    "HostMemory",
    "MemoryNeeds",
    "MemoryVerdict",
    "Phase",
    "TrainingSetup",
    "check_host_memory",
    "checkpoint_save_spike",
    "chosen_row",
    "estimate_zero2_model_states_mem_needs",
    "estimate_zero3_model_states_mem_needs",
    "estimator_table",
    "kubernetes_resources",
    "load_peak",
    "memory_needs",
    "rule_of_thumb",
]

ADDITIONAL_BUFFER_FACTOR = 1.5
BYTES_16BIT = 2
#: The rule of thumb's margin over the 16-bit weights each rank of a node copies at save time.
RULE_OF_THUMB_FACTOR = 1.5


# --- DeepSpeed's estimators, exactly ------------------------------------------------------------


def estimate_zero2_model_states_mem_needs(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    additional_buffer_factor: float = ADDITIONAL_BUFFER_FACTOR,
) -> tuple[int, int]:
    """DeepSpeed 0.19's ZeRO-2 estimator: ``(cpu_bytes_per_node, gpu_bytes_per_gpu)``."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem: float = 2 * total_params
        cpu_mem: float = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        # 2 = params_16bit; 18 = 2 grads_16bit + 4 grads_32bit + 4 params_32bit + 8 Adam states
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def estimate_zero3_model_states_mem_needs(
    total_params: int,
    largest_layer_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor: float = ADDITIONAL_BUFFER_FACTOR,
) -> tuple[int, int]:
    """DeepSpeed 0.19's ZeRO-3 estimator: ``(cpu_bytes_per_node, gpu_bytes_per_gpu)``."""
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    gpu_mem: float
    cpu_mem: float
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = (
                    total_params
                    * max(4 * num_gpus_per_node, 18 * gpus_factor)
                    * additional_buffer_factor
                )
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = (
                    total_params
                    * max(4 * num_gpus_per_node, 16 * gpus_factor)
                    * additional_buffer_factor
                )
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


# --- the run being checked ----------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingSetup:
    """A ZeRO run: model size, stage, cluster shape and offload choices."""

    params: int
    zero_stage: int = 2
    gpus_per_node: int = 1
    nodes: int = 1
    offload_optimizer: bool = False
    offload_param: bool = False
    #: Needed for ZeRO-3's GPU figure (4 bytes × the largest layer); None: unknown, counted as 0.
    largest_layer_params: int | None = None
    #: ZeRO-3 only: model built under ``deepspeed.zero.Init`` (HF from_pretrained does this).
    zero_init: bool = True
    #: ZeRO-3 only: ``stage3_gather_16bit_weights_on_model_save`` (the save-time spike on rank 0).
    gather_16bit_weights: bool = True
    #: Where the numbers came from, in words ("--params 7B", "config.json (estimate)", ...).
    source: str = ""
    #: Full fine-tuning, LoRA or QLoRA (:mod:`cudalock.memory.finetuning`).
    method: Method = "full"
    #: The parameters that train (LoRA: the adapter's); None with full fine-tuning (all do).
    trainable_params: int | None = None
    #: Bits the frozen base is stored in (QLoRA: 4).
    base_bits: int = 16

    def __post_init__(self) -> None:
        if self.params <= 0:
            raise UsageError(f"parameter count {self.params} must be more than zero")
        if self.trainable_params is not None and not 0 < self.trainable_params <= self.params:
            raise UsageError(
                f"trainable parameters {self.trainable_params} must be more than zero and at "
                f"most the model's {self.params}"
            )
        if self.base_bits not in BASE_BITS:
            raise UsageError(f"a {self.base_bits}-bit base is not modelled; expected 16, 8 or 4")
        if self.zero_stage not in (1, 2, 3):
            raise UsageError(f"ZeRO stage {self.zero_stage} is not supported; expected 1, 2 or 3")
        if self.gpus_per_node < 1:
            raise UsageError(f"--gpus-per-node {self.gpus_per_node} must be at least 1")
        if self.nodes < 1:
            raise UsageError(f"--nodes {self.nodes} must be at least 1")
        if self.offload_param and self.zero_stage != 3:
            raise UsageError(
                "--offload-param cpu needs ZeRO-3 (stages 1 and 2 do not offload "
                "parameters); use --zero 3 or --offload-param none"
            )
        if self.largest_layer_params is not None and self.largest_layer_params < 0:
            raise UsageError("the largest layer's parameter count cannot be negative")

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def weights_16bit_bytes(self) -> int:
        return BYTES_16BIT * self.params

    @property
    def adapter(self) -> bool:
        """LoRA or QLoRA: the base is frozen and only the adapter trains."""
        return self.method != "full"

    @property
    def optimised_params(self) -> int:
        """The parameters with gradients and optimizer states: what DeepSpeed's estimator
        partitions (ZeRO partitions the states of trainable parameters only)."""
        if self.adapter and self.trainable_params is not None:
            return self.trainable_params
        return self.params

    @property
    def base_bytes(self) -> int:
        """The model's weights as the run holds them: 16-bit, or QLoRA's 4-bit base."""
        return base_weight_bytes(self.params, self.base_bits if self.adapter else 16)

    def describe(self) -> str:
        offload = []
        if self.offload_optimizer:
            offload.append("optimizer")
        if self.offload_param:
            offload.append("parameters")
        parts = [
            f"ZeRO-{self.zero_stage}",
            f"{format_params(self.params)} params",
            *(
                (
                    f"{'QLoRA' if self.method == 'qlora' else 'LoRA'} with "
                    f"{format_params(self.optimised_params)} trainable, "
                    f"{self.base_bits}-bit base",
                )
                if self.adapter
                else ()
            ),
            f"{self.nodes} node{'s' if self.nodes > 1 else ''} × {self.gpus_per_node} "
            f"GPU{'s' if self.gpus_per_node > 1 else ''}",
            "offload " + " + ".join(offload) + " to CPU" if offload else "no offload",
        ]
        if self.zero_stage == 3:
            parts.append(
                "16-bit weights gathered at save"
                if self.gather_16bit_weights
                else "16-bit weights not gathered at save"
            )
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "largest_layer_params": self.largest_layer_params,
            "zero_stage": self.zero_stage,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "offload_optimizer": "cpu" if self.offload_optimizer else "none",
            "offload_param": "cpu" if self.offload_param else "none",
            "zero_init": self.zero_init,
            "gather_16bit_weights": self.gather_16bit_weights,
            "source": self.source,
            "method": self.method,
            "trainable_params": self.optimised_params,
            "base_bits": self.base_bits if self.adapter else 16,
        }


@dataclass(frozen=True)
class EstimatorRow:
    """One line of DeepSpeed's ``per CPU | per GPU | Options`` table."""

    cpu_bytes: int
    gpu_bytes: int
    offload_optimizer: bool
    offload_param: bool | None = None  # None: ZeRO-2 rows have no such option
    zero_init: bool | None = None

    def options(self) -> str:
        """DeepSpeed's options: ``offload_param=none, offload_optimizer=cpu , zero_init=1``."""
        optimizer = f"offload_optimizer={'cpu ' if self.offload_optimizer else 'none'}"
        if self.offload_param is None:
            return optimizer
        param = f"offload_param={'cpu ' if self.offload_param else 'none'}"
        return f"{param}, {optimizer}, zero_init={int(bool(self.zero_init))}"

    def line(self) -> str:
        cpu, gpu = format_gib(self.cpu_bytes, 7), format_gib(self.gpu_bytes, 6)
        return f" {cpu} | {gpu} | {self.options()}"

    def to_json(self) -> dict[str, Any]:
        return {
            "per_cpu_bytes": self.cpu_bytes,
            "per_gpu_bytes": self.gpu_bytes,
            "offload_optimizer": "cpu" if self.offload_optimizer else "none",
            "offload_param": (
                None if self.offload_param is None else "cpu" if self.offload_param else "none"
            ),
            "zero_init": self.zero_init,
        }


def estimator_table(setup: TrainingSetup) -> tuple[EstimatorRow, ...]:
    """Every row DeepSpeed's ``*_all_cold`` estimator prints for this model and cluster."""
    rows: list[EstimatorRow] = []
    if setup.zero_stage in (1, 2):
        for cpu_offload in (True, False):
            cpu, gpu = estimate_zero2_model_states_mem_needs(
                setup.optimised_params, setup.gpus_per_node, setup.nodes, cpu_offload
            )
            rows.append(EstimatorRow(cpu, gpu, cpu_offload))
        return tuple(rows)
    largest = setup.largest_layer_params or 0
    for cpu_offload in (True, False):
        for offload_params in (True, False):
            if not cpu_offload and offload_params:
                continue  # DeepSpeed's estimator has no such row
            for zero_init in (True, False):
                cpu, gpu = estimate_zero3_model_states_mem_needs(
                    setup.optimised_params,
                    largest,
                    setup.gpus_per_node,
                    setup.nodes,
                    cpu_offload,
                    offload_params,
                    zero_init,
                )
                rows.append(EstimatorRow(cpu, gpu, cpu_offload, offload_params, zero_init))
    return tuple(rows)


def chosen_row(setup: TrainingSetup) -> EstimatorRow:
    """The estimator row for the setup's own options."""
    for row in estimator_table(setup):
        if row.offload_optimizer != setup.offload_optimizer:
            continue
        if row.offload_param is None:
            return row
        # Without optimizer offload DeepSpeed's estimator only knows offload_param=none.
        wanted_param = setup.offload_param if setup.offload_optimizer else False
        if row.offload_param == wanted_param and row.zero_init == setup.zero_init:
            return row
    raise AssertionError("estimator_table covers every option combination")  # pragma: no cover


# --- what the host must hold ---------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """A moment of the run and the host RAM (per node) it needs."""

    name: str
    bytes: int
    explanation: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "explanation": self.explanation}


@dataclass(frozen=True)
class MemoryNeeds:
    setup: TrainingSetup
    table: tuple[EstimatorRow, ...]
    chosen: EstimatorRow
    save_spike_bytes: int
    phases: tuple[Phase, ...]
    notes: tuple[str, ...] = ()
    #: LoRA / QLoRA: the frozen base each GPU holds beside the trainable states.
    frozen_gpu_bytes: int = 0

    @property
    def host_required_bytes(self) -> int:
        return max(phase.bytes for phase in self.phases)

    @property
    def deciding_phase(self) -> Phase:
        return max(self.phases, key=lambda phase: phase.bytes)

    @property
    def gpu_required_bytes(self) -> int:
        return self.chosen.gpu_bytes + self.frozen_gpu_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "setup": self.setup.to_json(),
            "deepspeed_estimator": [row.to_json() for row in self.table],
            "chosen": self.chosen.to_json(),
            "per_gpu_bytes": self.gpu_required_bytes,
            "save_spike_bytes": self.save_spike_bytes,
            "phases": [phase.to_json() for phase in self.phases],
            "host_required_bytes": self.host_required_bytes,
            "notes": list(self.notes),
        }


def checkpoint_save_spike(setup: TrainingSetup) -> int:
    """Extra host RAM on the busiest node while a 16-bit model is saved.

    With LoRA the same copy is made: the Trainer takes the whole model's state dict from
    DeepSpeed (frozen base included) before PEFT writes only the adapter's part of it."""
    if setup.zero_stage in (1, 2):
        return setup.gpus_per_node * setup.base_bytes
    return setup.base_bytes if setup.gather_16bit_weights else 0


def rule_of_thumb(setup: TrainingSetup) -> int:
    """Host RAM ≥ 1.5 × full 16-bit weight size × GPUs per node (the ZeRO-2 save copies)."""
    return int(RULE_OF_THUMB_FACTOR * setup.base_bytes * setup.gpus_per_node)


def load_peak(setup: TrainingSetup) -> int:
    """Host RAM while the model loads: every rank on a node materialises the 16-bit weights
    before moving them to its GPU (QLoRA quantizes them on the way). ZeRO-3's zero.Init
    partitions the model as it is built, so no rank holds it whole (0 here)."""
    if setup.zero_stage == 3 and setup.zero_init:
        return 0
    return setup.gpus_per_node * setup.weights_16bit_bytes


def memory_needs(setup: TrainingSetup) -> MemoryNeeds:
    table = estimator_table(setup)
    chosen = chosen_row(setup)
    spike = checkpoint_save_spike(setup)
    offloaded = setup.offload_optimizer or setup.offload_param
    # With offload DeepSpeed's CPU figure is held for the whole run; without, it is the start-up
    # peak (every rank builds the model on the CPU) and little stays on the host afterwards.
    steady = chosen.cpu_bytes if offloaded else 0
    trained = (
        f" of the {format_params(setup.optimised_params)} trainable parameters"
        if setup.adapter
        else ""
    )
    phases = [
        Phase(
            "model states (DeepSpeed estimator)",
            chosen.cpu_bytes,
            f"held for the whole run (offloaded states{trained})"
            if offloaded
            else f"peak while the ranks build the model{trained} on the CPU, freed once it "
            "moves to GPUs",
        ),
    ]
    loading = load_peak(setup)
    if loading:
        phases.append(
            Phase(
                "model load",
                steady + loading,
                f"every one of the {setup.gpus_per_node} ranks on a node materialises the "
                f"16-bit weights ({format_gib(setup.weights_16bit_bytes)}) in host RAM before "
                "they move to its GPU",
            )
        )
    what = "16-bit weights" if not setup.adapter else f"{setup.base_bits}-bit base weights"
    if setup.zero_stage in (1, 2):
        phases.append(
            Phase(
                "checkpoint save",
                steady + spike,
                f"every one of the {setup.gpus_per_node} ranks on a node copies the full {what} "
                f"({format_gib(setup.base_bytes)}) into host RAM"
                + (
                    ", the frozen base included (PEFT then writes only the adapter)"
                    if setup.adapter
                    else ""
                ),
            )
        )
        phases.append(
            Phase(
                "rule of thumb",
                rule_of_thumb(setup),
                f"1.5 × full {what} size × GPUs per node",
            )
        )
    elif setup.gather_16bit_weights:
        phases.append(
            Phase(
                "checkpoint save",
                steady + spike,
                f"rank 0 gathers the full {what} "
                f"({format_gib(setup.base_bytes)}) into its host RAM (node 0 only)",
            )
        )
    notes: list[str] = [
        "Model states only, as DeepSpeed estimates them: activations, DataLoader workers, CUDA "
        "contexts and pinned buffers come on top.",
    ]
    if setup.zero_stage == 1:
        notes.append(
            "ZeRO-1 uses DeepSpeed's ZeRO-2 estimator here; ZeRO-1 keeps full gradients "
            "on every GPU, so its real per-GPU need is higher."
        )
    if setup.zero_stage == 3 and setup.largest_layer_params is None:
        notes.append(
            "The largest layer is unknown (pass --largest-layer-params or --model): the "
            "ZeRO-3 per-GPU figure leaves out its 4 bytes × largest-layer params."
        )
    if setup.zero_stage == 3 and setup.offload_param and not setup.offload_optimizer:
        notes.append(
            "DeepSpeed's estimator has no row for offload_param=cpu without "
            "offload_optimizer; the figures are its offload_param=none row."
        )
    if setup.zero_stage == 3 and not setup.gather_16bit_weights:
        notes.append(
            "Without stage3_gather_16bit_weights_on_model_save the 16-bit model is not "
            "saved; recovering it later with zero_to_fp32.py needs 4 bytes × params "
            f"({format_gib(4 * setup.params)}) of host RAM."
        )
    frozen = 0
    if setup.adapter:
        # ZeRO-3 partitions every parameter, frozen ones too; stages 1 and 2 keep the whole
        # base on each GPU.
        frozen = setup.base_bytes // (setup.total_gpus if setup.zero_stage == 3 else 1)
        notes.append(
            f"{'QLoRA' if setup.method == 'qlora' else 'LoRA'}: DeepSpeed's figures are for the "
            f"{format_params(setup.optimised_params)} trainable parameters; each GPU also holds "
            f"the frozen {setup.base_bits}-bit base ({format_gib(frozen)})."
        )
    return MemoryNeeds(
        setup, table, chosen, spike, tuple(phases), tuple(notes), frozen_gpu_bytes=frozen
    )


# --- comparing with the host ---------------------------------------------------------------------


@dataclass(frozen=True)
class HostMemory:
    """What this node can give the run: RAM and the cgroup (container) limit, either unknown."""

    total_bytes: int | None = None
    cgroup_limit_bytes: int | None = None
    source: str = ""

    @property
    def available_bytes(self) -> int | None:
        known = [v for v in (self.total_bytes, self.cgroup_limit_bytes) if v is not None]
        return min(known) if known else None

    @property
    def limited_by_cgroup(self) -> bool:
        return self.cgroup_limit_bytes is not None and (
            self.total_bytes is None or self.cgroup_limit_bytes < self.total_bytes
        )

    def describe(self) -> str:
        parts = []
        if self.total_bytes is not None:
            parts.append(f"RAM {format_gib(self.total_bytes)}")
        if self.cgroup_limit_bytes is not None:
            parts.append(f"cgroup limit {format_gib(self.cgroup_limit_bytes)}")
        text = ", ".join(parts) if parts else "unknown"
        return f"{text} ({self.source})" if self.source else text

    def to_json(self) -> dict[str, Any]:
        return {
            "total_bytes": self.total_bytes,
            "cgroup_limit_bytes": self.cgroup_limit_bytes,
            "available_bytes": self.available_bytes,
            "source": self.source,
        }


@dataclass(frozen=True)
class Alternative:
    """Another configuration of the same run, and what it would need."""

    label: str
    change: str
    needs: MemoryNeeds
    fits_host: bool | None
    fits_gpu: bool | None

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "change": self.change,
            "host_required_bytes": self.needs.host_required_bytes,
            "per_gpu_bytes": self.needs.gpu_required_bytes,
            "fits_host": self.fits_host,
            "fits_gpu": self.fits_gpu,
        }


@dataclass(frozen=True)
class MemoryVerdict:
    needs: MemoryNeeds
    host: HostMemory
    gpu_memory_bytes: int | None
    #: True: the host has enough; False: short; None: host memory unknown.
    host_enough: bool | None
    gpu_enough: bool | None
    alternatives: tuple[Alternative, ...]
    findings: tuple[Finding, ...]
    kubernetes: dict[str, str] = field(default_factory=dict)

    @property
    def shortfall_bytes(self) -> int:
        available = self.host.available_bytes
        if available is None:
            return 0
        return max(0, self.needs.host_required_bytes - available)

    def to_json(self) -> dict[str, Any]:
        return {
            "needs": self.needs.to_json(),
            "host": self.host.to_json(),
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "host_enough": self.host_enough,
            "gpu_enough": self.gpu_enough,
            "shortfall_bytes": self.shortfall_bytes,
            "alternatives": [alt.to_json() for alt in self.alternatives],
            "kubernetes": self.kubernetes,
            "findings": [finding.to_json() for finding in self.findings],
        }


def _fits(need: int, have: int | None) -> bool | None:
    return None if have is None else need <= have


def _alternatives(
    setup: TrainingSetup, host: HostMemory, gpu_memory: int | None
) -> tuple[Alternative, ...]:
    candidates: list[tuple[str, str, TrainingSetup]] = []
    if setup.zero_stage in (1, 2):
        candidates.append(
            (
                "zero3-gathered",
                'ZeRO-3 with "stage3_gather_16bit_weights_on_model_save": true (only rank 0 holds '
                "the 16-bit copy at save)",
                replace(setup, zero_stage=3, zero_init=True, gather_16bit_weights=True),
            )
        )
    elif not setup.gather_16bit_weights:
        candidates.append(
            (
                "zero3-gathered",
                'set "stage3_gather_16bit_weights_on_model_save": true to save a usable 16-bit '
                "model",
                replace(setup, gather_16bit_weights=True),
            )
        )
    if setup.offload_optimizer:
        candidates.append(
            (
                "no-optimizer-offload",
                '"offload_optimizer": {"device": "none"} (optimizer states move back to the GPUs)',
                replace(setup, offload_optimizer=False, offload_param=False),
            )
        )
    else:
        candidates.append(
            (
                "optimizer-offload",
                '"offload_optimizer": {"device": "cpu"} (frees GPU memory, costs host RAM)',
                replace(setup, offload_optimizer=True),
            )
        )
    alternatives = []
    for label, change, alt_setup in candidates:
        needs = memory_needs(alt_setup)
        alternatives.append(
            Alternative(
                label,
                change,
                needs,
                _fits(needs.host_required_bytes, host.available_bytes),
                _fits(needs.gpu_required_bytes, gpu_memory),
            )
        )
    return tuple(alternatives)


def kubernetes_resources(needs: MemoryNeeds) -> dict[str, str]:
    """Pod memory sizes: requests = limits (Guaranteed QoS), rounded up to whole Gi."""
    quantity = kubernetes_quantity(needs.host_required_bytes)
    return {"requests.memory": quantity, "limits.memory": quantity}


def check_host_memory(
    needs: MemoryNeeds, host: HostMemory, gpu_memory_bytes: int | None = None
) -> MemoryVerdict:
    """Compare the run's needs with the host (and, if known, the smallest GPU's memory)."""
    setup = needs.setup
    available = host.available_bytes
    required = needs.host_required_bytes
    host_enough = _fits(required, available)
    gpu_enough = _fits(needs.gpu_required_bytes, gpu_memory_bytes)
    alternatives = _alternatives(setup, host, gpu_memory_bytes)
    kube = kubernetes_resources(needs)
    findings: list[Finding] = []
    phase = needs.deciding_phase
    evidence = (
        *(f"{p.name}: {format_gib(p.bytes)} per node ({p.explanation})" for p in needs.phases),
        f"host: {host.describe()}",
    )
    if host_enough is None:
        findings.append(
            Finding(
                "host-memory-unknown",
                "warning",
                f"{setup.describe()} needs about {format_gib(required)} of host RAM per node; this "
                "host's memory could not be read, so it was not compared.",
                evidence,
                ("pass --host-memory, e.g. --host-memory 512GiB",),
            )
        )
    elif host_enough:
        findings.append(
            Finding(
                "host-memory-enough",
                "info",
                f"{setup.describe()} needs about {format_gib(required)} of host RAM per node "
                f"({phase.name}); this host has {format_gib(available or 0)}.",
                evidence,
            )
        )
    else:
        assert available is not None
        shortfall = required - available
        where = "the container/cgroup limit" if host.limited_by_cgroup else "host RAM"
        fixes = [
            f"give each node at least {format_gib(required)} of RAM "
            f"({format_gib(shortfall)} more than {where} allows now)"
        ]
        for alt in alternatives:
            if alt.fits_host and alt.fits_gpu is not False:
                fixes.append(
                    f"or: {alt.change}: needs {format_gib(alt.needs.host_required_bytes)}"
                    f" of host RAM and {format_gib(alt.needs.gpu_required_bytes)} per GPU"
                )
        fixes.append(
            f"Kubernetes: resources: {{requests: {{memory: {kube['requests.memory']}}}, "
            f"limits: {{memory: {kube['limits.memory']}}}}}"
        )
        findings.append(
            Finding(
                "host-memory-short",
                "error",
                f"{setup.describe()} needs about {format_gib(required)} of host RAM per node at "
                f"'{phase.name}'; {where} gives {format_gib(available)}: "
                f"{format_gib(shortfall)} short. The kernel's OOM killer sends SIGKILL (-9) when "
                "that happens.",
                evidence,
                tuple(fixes),
            )
        )
    if gpu_enough is False:
        assert gpu_memory_bytes is not None
        fixes = [f"or: {alt.change}" for alt in alternatives if alt.fits_gpu]
        findings.append(
            Finding(
                "gpu-memory-short",
                "error",
                f"{setup.describe()} needs about {format_gib(needs.gpu_required_bytes)} per GPU "
                "for "
                f"model states alone; the GPU has {format_gib(gpu_memory_bytes)}.",
                (needs.chosen.line().strip(),),
                ("use more GPUs (the partitioned states shrink with the GPU count)", *fixes),
            )
        )
    return MemoryVerdict(
        needs, host, gpu_memory_bytes, host_enough, gpu_enough, alternatives, tuple(findings), kube
    )
