"""`cudalock memory`: the host RAM and GPU memory a DeepSpeed ZeRO run needs, and if it fits."""

from __future__ import annotations

import argparse
from pathlib import Path

from cudalock.cli.args import add_json_flag, epilog
from cudalock.cli.training import add_training_run_arguments, memory_options

DESCRIPTION = """\
Host RAM and GPU memory a DeepSpeed ZeRO run needs, and whether this host has it.

DeepSpeed's own estimator formulas (tables in GiB), plus the checkpoint-save spike (ZeRO-2:
every rank copies the 16-bit weights to host RAM) and the rule of thumb host RAM >= 1.5 x 16-bit
weights x GPUs per node, compared with this host's RAM and cgroup limit (or --host-memory, or
the host in a --probe file)."""

EXAMPLES = """\
  cudalock memory --params 7B --zero 2 --gpus-per-node 8 --host-memory 256GiB
  cudalock memory --model ./Llama-2-7b-hf --zero 3 --probe node07.json --json"""

EXIT_CODES = """\
exit status:
  0  the host has enough memory
  1  it falls short (by how much, and what would fit)
  2  usage error or bad input (a bad flag or value, an unreadable model or config)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = epilog(EXAMPLES, EXIT_CODES)
    parser.add_argument(
        "--probe",
        dest="probe_file",
        type=Path,
        metavar="FILE",
        help="Compare with the host in this probe JSON ('cudalock probe --json' "
        "written on the training node) instead of this machine.",
    )
    add_json_flag(parser, "Print the result as JSON.")
    add_training_run_arguments(parser)


def run(args: argparse.Namespace) -> None:
    from cudalock.cli.output import echo, emit_json
    from cudalock.doctor.diagnosis import SetupHints, build_setup, merge_hints
    from cudalock.doctor.run import host_memory_from, read_deepspeed_config, smallest_gpu_memory
    from cudalock.errors import UsageError
    from cudalock.memory.estimates import check_host_memory, memory_needs
    from cudalock.memory.render import render_verdict

    memory_opts = memory_options(args)
    probe_file: Path | None = args.probe_file
    flags = memory_opts.hints()
    model, deepspeed_config = memory_opts.model, memory_opts.deepspeed_config
    if memory_opts.params is not None and model is not None:
        raise UsageError("give either --params or --model, not both")
    sources = [flags]
    if model is not None:
        from cudalock.memory.model_size import read_model_size

        size = read_model_size(model)
        sources.append(SetupHints.from_model_size(size))
    if deepspeed_config is not None:
        sources.append(SetupHints.from_shape(read_deepspeed_config(deepspeed_config)))
    if memory_opts.training_config is not None:
        from cudalock.doctor.run import read_training_config

        tuning = read_training_config(memory_opts.training_config)
        sources.append(SetupHints.from_finetuning(tuning, str(memory_opts.training_config)))
    hints = merge_hints(*sources)
    if hints.params is None:
        raise UsageError("the model size is missing; pass --params 7B (or 7e9) or --model PATH")
    host_override = memory_opts.host_memory_bytes()
    target = None
    if probe_file is not None:
        from cudalock.machine.probefiles import read_probe_file

        target = read_probe_file(probe_file)
    elif host_override is None or hints.gpus_per_node is None:
        from cudalock.machine.probe import probe_machine

        target = probe_machine()
    default_gpus = len(target.gpus) if target is not None and target.gpus else 1
    setup, notes = build_setup(hints, default_gpus)
    assert setup is not None
    source = f"probe file {probe_file}" if probe_file is not None else "/proc/meminfo and cgroup"
    host = host_memory_from(target.host if target else None, host_override, source)
    verdict = check_host_memory(memory_needs(setup), host, smallest_gpu_memory(target))
    if args.json_output:
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
