"""Plans and resolver failures in words, for people (the JSON form is ``Plan.to_json``)."""

from __future__ import annotations

from collections.abc import Sequence

from cudalock.errors import Unsatisfiable
from cudalock.model import Plan, Rejection
from cudalock.versions import format_cuda

__all__ = [
    "render_plan",
    "render_rejections",
    "render_unsatisfiable",
    "unsatisfiable_json",
]


def render_plan(plan: Plan, bootstrap_command: str | None = None) -> str:
    """What was chosen, from where, why, what was not, and the command that bootstraps it."""
    cuda = f"CUDA {format_cuda(plan.cuda)}" if plan.cuda else "CPU only"
    cudnn = f", cuDNN {plan.cudnn}" if plan.cudnn else ""
    lines = [
        f"torch {plan.torch_pin.version}  ({cuda}{cudnn})  Python {plan.python}  {plan.platform}",
        f"matrix {plan.matrix_version}, compat {plan.compat}",
        "",
        "Packages:",
    ]
    width = max(len(p.requirement) for p in plan.packages)
    for pin in plan.packages:
        lines.append(f"  {pin.requirement.ljust(width)}  from {pin.index_url or 'PyPI'}")
    lines += ["", "Why:"]
    lines += [f"  - {sentence}" for sentence in plan.explanation]
    if plan.rejected:
        lines += ["", "Not chosen (newest first):"]
        lines += render_rejections(plan.rejected)
    if bootstrap_command:
        lines += ["", "Bootstrap it:", f"  {bootstrap_command}"]
    return "\n".join(lines)


def render_rejections(rejected: Sequence[Rejection]) -> list[str]:
    lines = []
    for rejection in rejected:
        lines.append(f"  - {rejection.reason}")
        if rejection.fix:
            lines.append(f"    fix: {rejection.fix}")
    return lines


def render_unsatisfiable(error: Unsatisfiable) -> str:
    """The nearest candidates and their fixes, shown under the one-line error."""
    rejected = [r for r in error.rejected if isinstance(r, Rejection)]
    if not rejected:
        return ""
    return "\n".join(["Nearest candidates (newest first):", *render_rejections(rejected)])


def unsatisfiable_json(error: Unsatisfiable) -> dict[str, object]:
    """The documented ``--json`` failure object: ``{"error", "hint", "rejected"}``."""
    return {
        "error": error.message,
        "hint": error.hint,
        "rejected": [r.to_json() for r in error.rejected if isinstance(r, Rejection)],
    }
