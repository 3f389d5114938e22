"""The audit's edge: inspect (or parse), optionally run the deep check, then judge.

``audit.audit`` is pure; this module does the I/O around it for the CLI and for ``doctor``
(``audit_findings(python, deep, compat)`` fits doctor's ``AuditRunner``). Every entry point
takes the compatibility policy (``compat``, as ``resolve --compat``) the audit judges with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudalock.audit.checks import audit, sort_findings
from cudalock.audit.checks import has_errors as _has_errors
from cudalock.audit.inspection import start_inspection
from cudalock.audit.installed import Installed
from cudalock.machine import probe_machine
from cudalock.matrix import Matrix, load_matrix
from cudalock.model import Finding, Target, flag_assumptions
from cudalock.request import Compat

if TYPE_CHECKING:
    from cudalock.audit.inspection import RunningInspection
    from cudalock.audit.reports import ParsedReport
    from cudalock.machine.overrides import GivenTargets

__all__ = [
    "AuditOutcome",
    "audit_findings",
    "audit_live",
    "audit_report",
    "judge",
]


@dataclass(frozen=True)
class AuditOutcome:
    findings: tuple[Finding, ...]
    installed: Installed
    targets: tuple[Target, ...]
    report: ParsedReport | None = None
    #: The compatibility policy the findings were judged with.
    compat: Compat = "strict"

    @property
    def has_errors(self) -> bool:
        return _has_errors(self.findings)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "findings": [f.to_json() for f in self.findings],
            "compat": self.compat,
            "target": self.targets[0].to_json() if self.targets else None,
            "installed": self.installed.to_json(),
        }
        if len(self.targets) > 1:
            document["targets"] = [t.to_json() for t in self.targets]
        if self.report is not None:
            document["report"] = self.report.to_json()
        return document


def judge(
    installed: Installed,
    targets: Sequence[Target],
    matrix: Matrix,
    *,
    driver_known: bool = True,
    extra: Sequence[Finding] = (),
    compat: Compat = "strict",
) -> tuple[Finding, ...]:
    """Audit against every target under policy ``compat``; a finding that several targets
    share is listed once. What the Target flags left to be derived (a driver branch's CUDA) is
    a ``target-assumed`` note, as resolve states it."""
    findings: list[Finding] = list(extra)
    for target in targets:
        for finding in audit(installed, target, matrix, driver_known=driver_known, compat=compat):
            if finding not in findings:
                findings.append(finding)
    findings.extend(Finding("target-assumed", "info", note) for note in flag_assumptions(targets))
    return tuple(sort_findings(findings))


def audit_live(
    targets: Sequence[Target],
    matrix: Matrix,
    inspection: RunningInspection,
    *,
    deep: bool = False,
    deep_timeout: float = 120,
    compat: Compat = "strict",
) -> AuditOutcome:
    """Judge a live environment from its ``inspection`` (started by the caller, see
    ``start_inspection``, so that it runs while the caller probes); torch is never imported
    unless ``deep``, then in a child."""
    installed = inspection.installed()
    extra: list[Finding] = []
    if deep:
        from cudalock.audit.deep import deep_inspect

        interpreter = Path(installed.python) if installed.python else inspection.python
        result = deep_inspect(interpreter, deep_timeout)
        extra.extend(result.findings)
        if result.arch_list:
            installed = replace(installed, arch_list=result.arch_list)
    findings = judge(installed, targets, matrix, extra=extra, compat=compat)
    return AuditOutcome(findings, installed, tuple(targets), compat=compat)


def audit_report(
    report: ParsedReport,
    given: GivenTargets | None = None,
    *,
    compat: Compat = "strict",
) -> AuditOutcome:
    """Audit a parsed report on the machine it names, with the Target flags ``given`` (read by
    the same pipeline as every command's) replacing the fields they give; ``--probe`` files
    replace the report's machine altogether. No flags: the shipped matrix, the report's
    machine."""
    # A live audit never parses a report: the parser loads only here.
    from cudalock.audit.reports import report_target

    matrix = given.matrix if given is not None else load_matrix()
    targets = (
        given.targets(lambda: report_target(report, matrix))
        if given is not None
        else (report_target(report, matrix),)
    )
    driver_known = report.driver_known or (given is not None and given.driver_given)
    findings = judge(report.installed, targets, matrix, driver_known=driver_known, compat=compat)
    return AuditOutcome(findings, report.installed, targets, report, compat=compat)


def audit_findings(
    python: Path | None, deep: bool, compat: Compat, given: GivenTargets | None = None
) -> Sequence[Finding]:
    """doctor's ``AuditRunner``: audit ``python``'s environment (default: the active one) on
    this machine as probed now (or the machine the Target flags ``given`` describe), under
    policy ``compat``."""

    with start_inspection(python=python) as inspection:  # runs while we probe
        if given is None:
            matrix = load_matrix()
            targets: Sequence[Target] = [probe_machine(matrix=matrix)]
        else:
            matrix, targets = given.matrix, given.targets()
        return audit_live(targets, matrix, inspection, deep=deep, compat=compat).findings
