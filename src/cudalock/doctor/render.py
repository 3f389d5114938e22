"""Doctor's findings and report as text for people (the JSON form is DoctorReport.to_json)."""

from __future__ import annotations

from collections.abc import Sequence

from cudalock.doctor.diagnosis import DoctorReport
from cudalock.doctor.matching import RunScope
from cudalock.memory.render import render_verdict
from cudalock.model import Finding

__all__ = [
    "render_findings",
    "render_report",
]


def render_findings(findings: Sequence[Finding]) -> list[str]:
    lines: list[str] = []
    for finding in findings:
        lines.append(f"[{finding.severity}] {finding.code}: {finding.message}")
        for item in finding.evidence:
            lines.append(f"    evidence: {item}")
        for item in finding.fix:
            lines.append(f"    fix: {item}")
    return lines


def render_report(report: DoctorReport) -> list[str]:

    status = report.exit
    if report.slurm is not None:
        head = f"{status.raw}: {status.form.removeprefix('Slurm accounting: ')}"
    else:
        head = f"Return code {status.raw}: {status.name} ({status.form})"
    lines = [head, f"Verdict: {report.summary}"]
    lines.extend(_scope_lines(report.scope))
    lines.append("")
    lines.extend(render_findings(report.findings))
    if report.memory is not None:
        lines.append("")
        lines.append("Memory check:")
        lines.extend("  " + line if line else "" for line in render_verdict(report.memory))
    for note in report.setup_notes:
        lines.append(f"Assumed: {note}")
    return lines


def _scope_lines(scope: RunScope | None) -> list[str]:
    """What the kernel evidence was matched against, when anything was known."""
    if scope is None:
        return []
    lines: list[str] = []
    if scope.knows_time:
        lines.append(f"Run window: {scope.describe_window()}")
    if scope.hosts:
        lines.append(f"Run hosts: {', '.join(scope.hosts)} ({scope.hosts_from})")
    return lines
