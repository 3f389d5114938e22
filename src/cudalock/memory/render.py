"""Memory needs and verdicts as text for people, in GiB as DeepSpeed prints them."""

from __future__ import annotations

from cudalock.memory.estimates import MemoryNeeds, MemoryVerdict
from cudalock.memory.sizes import format_params
from cudalock.units import format_gib

__all__ = [
    "render_needs",
    "render_verdict",
]


def render_needs(needs: MemoryNeeds) -> list[str]:
    """DeepSpeed-style report: the estimator table (GiB = 2**30 bytes), then the host phases."""
    setup = needs.setup
    lines = [
        "Estimated memory needed for params, optim states and gradients for a:",
        f"HW: Setup with {setup.nodes} node{'s' if setup.nodes > 1 else ''}, "
        f"{setup.gpus_per_node} GPU{'s' if setup.gpus_per_node > 1 else ''} per node.",
    ]
    model = f"SW: Model with {format_params(setup.params)} total params"
    if setup.zero_stage == 3:
        largest = (
            "unknown"
            if setup.largest_layer_params is None
            else format_params(setup.largest_layer_params)
        )
        model += f", {largest} largest layer params"
    lines.append(model + f" (ZeRO-{setup.zero_stage}).")
    if setup.source:
        lines.append(f"    (parameter count from {setup.source})")
    if setup.adapter:
        lines.append(
            f"    ({'QLoRA' if setup.method == 'qlora' else 'LoRA'}: the table is for the "
            f"{format_params(setup.optimised_params)} trainable parameters; each GPU also holds "
            f"the frozen {setup.base_bits}-bit base, {format_gib(needs.frozen_gpu_bytes)}: "
            f"{format_gib(needs.gpu_required_bytes)} per GPU in all)"
        )
    lines.append(
        "  per CPU   |  per GPU  |   Options          (GiB = 2**30 bytes; DeepSpeed "
        "prints these as GB)"
    )
    for row in needs.table:
        marker = "  <- this run" if row == needs.chosen else ""
        lines.append(row.line().rstrip() + marker)
    lines.append("")
    lines.append("Host RAM per node:")
    for phase in needs.phases:
        lines.append(f"  {format_gib(phase.bytes, 9)}  {phase.name}: {phase.explanation}")
    lines.append(f"  {format_gib(needs.host_required_bytes, 9)}  needed (the largest of these)")
    for note in needs.notes:
        lines.append(f"Note: {note}")
    return lines


def render_verdict(verdict: MemoryVerdict) -> list[str]:
    lines = render_needs(verdict.needs)
    lines.append("")
    lines.append(f"This host: {verdict.host.describe()}")
    if verdict.gpu_memory_bytes is not None:
        lines.append(f"Smallest GPU: {format_gib(verdict.gpu_memory_bytes)}")
    if verdict.alternatives:
        lines.append("Alternatives (host RAM per node / per GPU):")
        for alt in verdict.alternatives:
            fit = {True: "fits", False: "does not fit", None: "not compared"}[alt.fits_host]
            lines.append(
                f"  {format_gib(alt.needs.host_required_bytes, 9)} / "
                f"{format_gib(alt.needs.gpu_required_bytes, 7)}  {alt.change} "
                f"[host: {fit}]"
            )
    lines.append(
        f"Kubernetes pod: requests.memory={verdict.kubernetes['requests.memory']}, "
        f"limits.memory={verdict.kubernetes['limits.memory']}"
    )
    return lines
