"""`cudalock doctor` (explain -9 / -11) and `cudalock memory` (host RAM for a ZeRO run).

Both declared as tables (:class:`~cudalock.cli.flags.Command`), sharing the training-run flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudalock.cli.flags import Command, Flag, FlagGroup

if TYPE_CHECKING:
    from cudalock.cli.flags import Kind
    from cudalock.doctor.diagnosis import SetupHints

MEMORY_PANEL = "The training run (memory check)"



def _memory_flag(dest: str, names: str, kind: Kind, help: str) -> Flag:
    return Flag(dest, tuple(names.split()), kind, help=help, panel=MEMORY_PANEL)


MEMORY_FLAGS: tuple[Flag, ...] = (
    _memory_flag("params", "--params", "str", "Model parameters: 7B, 7e9, 1.5T, 350M."),
    _memory_flag("model", "--model", "path", "A Hugging Face config.json, "
                 "model.safetensors.index.json, *.safetensors or model directory to count "
                 "parameters from."),
    _memory_flag("largest_layer_params", "--largest-layer-params", "str", "Parameters of the "
                 "largest layer (ZeRO-3's GPU figure), e.g. 131M."),
    _memory_flag("zero", "--zero", "int", "ZeRO stage: 2 or 3 (1 is checked with the ZeRO-2 "
                 "formulas)."),
    _memory_flag("gpus_per_node", "--gpus-per-node", "int", "GPUs (ranks) per node; default: "
                 "this machine's GPU count."),
    _memory_flag("nodes", "--nodes", "int", "Number of nodes (default 1)."),
    _memory_flag("offload_optimizer", "--offload-optimizer", "str", "cpu or none (default "
                 "none)."),
    _memory_flag("offload_param", "--offload-param", "str", "cpu or none (default none; ZeRO-3 "
                 "only)."),
    # typer's on/off pair; None (neither given) means "assumed true".
    _memory_flag("gather_16bit_weights", "--gather-16bit-weights/--no-gather-16bit-weights",
                 "bool", "ZeRO-3: stage3_gather_16bit_weights_on_model_save (default: assumed "
                 "true)."),
    _memory_flag("host_memory", "--host-memory", "str", "Host RAM to compare with instead of "
                 "this machine's: 512GB, 64GiB, 64Gi, 2TiB."),
    _memory_flag("deepspeed_config", "--deepspeed-config", "path", "The run's DeepSpeed config "
                 "JSON (ZeRO stage, offload, gathering)."),
)
JSON_FLAG = Flag("json_output", ("--json",), "bool", default=False,
                 help="Print the result as JSON.")


def _offload(flag: str, value: str | None) -> bool | None:
    from cudalock.errors import UsageError

    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("cpu", "none"):
        return lowered == "cpu"
    if lowered == "nvme":
        raise UsageError(f"{flag} nvme is not modelled (DeepSpeed's estimator covers cpu and "
                         "none); expected cpu or none")
    raise UsageError(f"{flag} {value!r} is not understood; expected cpu or none")


@dataclass(frozen=True)
class MemoryOptions:
    """The training-run flags doctor and memory share, as given (None: not given)."""

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


def memory_options_from(values: Mapping[str, Any]) -> MemoryOptions:
    """The :class:`MemoryOptions` for the values of :data:`MEMORY_FLAGS` (by ``dest``)."""
    return MemoryOptions(**{flag.dest: values[flag.dest] for flag in MEMORY_FLAGS})


#: The training-run flags, handed to doctor and memory as ``memory_opts: MemoryOptions``.
MEMORY_OPTIONS = FlagGroup("memory_opts", MEMORY_FLAGS, memory_options_from)


def doctor(*, exit_code: str, log: Path | None, json_output: bool, no_run: bool,
           python: Path | None, memory_opts: MemoryOptions) -> None:
    """Explain why a run ended with -9/137 (SIGKILL) or -11/139 (SIGSEGV), from evidence.

    -9: kernel OOM-killer lines (dmesg, journalctl -k, /var/log/kern.log), cgroup counters,
    launcher lines in --log, and the host memory the ZeRO run needs. -11: the environment audit,
    kernel segfault lines, /dev/shm. Exit 1 when a problem is found, 0 otherwise.
    """
    from cudalock.cli.output import echo, emit_json
    from cudalock.doctor.render import render_report
    from cudalock.doctor.run import DoctorRequest, default_readers, run_doctor

    request = DoctorRequest(
        exit_code=exit_code,
        log_path=log,
        flags=memory_opts.hints(),
        model_path=memory_opts.model,
        deepspeed_config=memory_opts.deepspeed_config,
        host_memory_bytes=memory_opts.host_memory_bytes(),
        python=python,
        no_run=no_run,
    )
    report = run_doctor(request, default_readers())
    if json_output:
        emit_json(report.to_json())
    else:
        echo("\n".join(render_report(report)))
    raise SystemExit(report.exit_code)


DOCTOR = Command(
    doctor,
    flags=(
        Flag("exit_code", ("--exit-code",), "str", required=True,
             help="The return code as you saw it: -9, 137, 'exitcode: -9', -11, 139, 'exits "
             "with return code = -11'."),
        Flag("log", ("--log",), "path",
             help="The training log (torchrun / deepspeed / Trainer output)."),
        JSON_FLAG,
        Flag("no_run", ("--no-run",), "bool", default=False,
             help="For -11: audit without initialising CUDA in a child process."),
        Flag("python", ("--python",), "path",
             help="For -11: the interpreter of the environment that crashed (default: the "
             "active one)."),
    ),
    groups=(MEMORY_OPTIONS,),
)


def memory(*, probe_file: Path | None, json_output: bool, memory_opts: MemoryOptions) -> None:
    """Host RAM and GPU memory a DeepSpeed ZeRO run needs, and whether this host has it.

    DeepSpeed's own estimator formulas (tables in GiB), plus the checkpoint-save spike (ZeRO-2:
    every rank copies the 16-bit weights to host RAM) and the rule of thumb host RAM >= 1.5 x
    16-bit weights x GPUs per node. Exit 0 when the host has enough, 1 when it falls short.
    """
    from cudalock.cli.output import echo, emit_json
    from cudalock.doctor.diagnosis import SetupHints, build_setup, merge_hints
    from cudalock.doctor.run import host_memory_from, read_deepspeed_config, smallest_gpu_memory
    from cudalock.errors import UsageError
    from cudalock.memory.estimates import check_host_memory, memory_needs
    from cudalock.memory.render import render_verdict

    flags = memory_opts.hints()
    model, deepspeed_config = memory_opts.model, memory_opts.deepspeed_config
    if memory_opts.params is not None and model is not None:
        raise UsageError("give either --params or --model, not both")
    sources = [flags]
    if model is not None:
        from cudalock.memory.model_size import read_model_size

        size = read_model_size(model)
        sources.append(SetupHints(params=size.params, params_source=size.source,
                                  largest_layer_params=size.largest_layer_params))
    if deepspeed_config is not None:
        sources.append(SetupHints.from_shape(read_deepspeed_config(deepspeed_config)))
    hints = merge_hints(*sources)
    if hints.params is None:
        raise UsageError("the model size is missing; pass --params 7B (or 7e9) or --model PATH")
    host_override = memory_opts.host_memory_bytes()
    target = None
    if probe_file is not None:
        from cudalock.target.overrides import read_probe_file

        target = read_probe_file(probe_file)
    elif host_override is None or hints.gpus_per_node is None:
        from cudalock.target.probe import probe_machine

        target = probe_machine()
    default_gpus = len(target.gpus) if target is not None and target.gpus else 1
    setup, notes = build_setup(hints, default_gpus)
    assert setup is not None
    source = f"probe file {probe_file}" if probe_file is not None else "/proc/meminfo and cgroup"
    host = host_memory_from(target.host if target else None, host_override, source)
    verdict = check_host_memory(memory_needs(setup), host, smallest_gpu_memory(target))
    if json_output:
        document = verdict.to_json()
        document["assumed"] = notes
        emit_json(document)
    else:
        from cudalock.doctor.render import render_findings

        lines = render_verdict(verdict)
        lines.extend(f"Assumed: {note}" for note in notes)
        lines.append("")
        lines.extend(render_findings(verdict.findings))
        echo("\n".join(lines))
    raise SystemExit(1 if any(f.severity == "error" for f in verdict.findings) else 0)


MEMORY = Command(
    memory,
    flags=(
        Flag("probe_file", ("--probe",), "path",
             help="Compare with the host in this probe JSON ('cudalock probe --json' written "
             "on the training node) instead of this machine."),
        JSON_FLAG,
    ),
    groups=(MEMORY_OPTIONS,),
)
