"""`cudalock probe`: what this machine (or the machine the Target flags describe) is."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from cudalock.cli.args import add_json_flag, add_target_arguments, epilog
from cudalock.cli.inputs import compute_inputs

if TYPE_CHECKING:
    from cudalock.model import Target

DESCRIPTION = """\
Report the Target: NVIDIA driver, its maximum CUDA version, GPUs and the host.

Sources, in order: NVML, the kernel module's version files, nvidia-smi. No NVIDIA driver is not
an error: the Target is CPU-only. The Target flags describe a machine you are not on; --probe
reads another machine's JSON."""

EXAMPLES = """\
  cudalock probe
  cudalock probe --json > node.json
  srun -p gpu -N 4 --ntasks-per-node=1 cudalock probe --json-lines | cudalock resolve --probe -
  cudalock probe --json --driver-version 535.104.05 --compute-capability 9.0"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = epilog(EXAMPLES)
    add_json_flag(
        parser,
        "Print the Target as JSON (schema_version 1; a list when several --probe files are given).",
    )
    parser.add_argument(
        "--json-lines",
        action="store_true",
        help="Print each Target as one line of compact JSON: run on every node with srun "
        "--ntasks-per-node=1 and pipe into 'cudalock resolve --probe -' for a fleet plan.",
    )
    add_target_arguments(parser)


def run(args: argparse.Namespace) -> None:
    from cudalock.cli.output import echo, emit_json

    inputs = compute_inputs(args, with_request=False)
    targets = inputs.targets
    if args.json_lines:
        import json

        # One write per document: srun interleaves its tasks' output only between lines.
        for target in targets:
            sys.stdout.write(json.dumps(target.to_json(), separators=(",", ":")) + "\n")
        return
    if args.json_output:
        documents = [t.to_json() for t in targets]
        emit_json(documents[0] if len(documents) == 1 else documents)
        return
    echo("\n\n".join(summary(t) for t in targets))


def summary(target: Target) -> str:
    """The Target for people, one fact per line."""
    from cudalock.machine.probe import describe_memory, format_gpu
    from cudalock.versions import format_cuda

    lines = [
        f"Target: {target.name}  (source: {target.source})",
        f"  platform      {target.platform}",
    ]
    if target.driver_version is None and target.driver_cuda is None:
        lines.append("  driver        no NVIDIA driver found (CPU-only target)")
    else:
        version = str(target.driver_version) if target.driver_version else "unknown version"
        cuda = format_cuda(target.driver_cuda) if target.driver_cuda else "unknown"
        lines.append(f"  driver        {version}  (max CUDA {cuda})")
    if target.gpus:
        for position, gpu in enumerate(target.gpus):
            label = "GPUs" if position == 0 else ""
            lines.append(f"  {label:<12}  {format_gpu(gpu)}")
    else:
        lines.append("  GPUs          none")
    host = target.host
    system = " ".join(p for p in (host.os, host.arch) if p) or "unknown"
    glibc = f"glibc {host.glibc}" if host.glibc else "no glibc"
    lines.append(
        f"  host          {system}, {glibc}"
        + (f", hostname {host.hostname}" if host.hostname else "")
    )
    lines.append(f"  RAM           {describe_memory(host.memory_total_bytes)}")
    limit = host.cgroup_memory_limit_bytes
    lines.append(f"  cgroup limit  {describe_memory(limit) if limit is not None else 'none'}")
    toolkit = (
        f"CUDA {host.cuda_toolkit}"
        + (f"  ({host.cuda_toolkit_path})" if host.cuda_toolkit_path else "")
        if host.cuda_toolkit
        else "none found"
    )
    lines.append(f"  CUDA toolkit  {toolkit}")
    if target.notes:
        lines.append("  notes:")
        lines.extend(f"    - {note}" for note in target.notes)
    return "\n".join(lines)
