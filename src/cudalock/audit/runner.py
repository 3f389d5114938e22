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
from cudalock.audit.deep import deep_inspect
from cudalock.audit.inspection import start_inspection
from cudalock.audit.installed import Installed
from cudalock.audit.reports import report_target
from cudalock.machine import probe_machine
from cudalock.machine.overrides import apply_overrides, overrides_from_options
from cudalock.machine.probefiles import read_probe_files
from cudalock.matrix import Matrix, load_matrix
from cudalock.model import Finding, Target
from cudalock.request import Compat

if TYPE_CHECKING:
    from cudalock.audit.inspection import RunningInspection
    from cudalock.audit.reports import ParsedReport
    from cudalock.machine import TargetOptions

__all__ = [
    "AuditOutcome",
    "audit_findings",
    "audit_live",
    "audit_report",
    "judge",
    "report_targets",
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
    share is listed once."""
    findings: list[Finding] = list(extra)
    for target in targets:
        for finding in audit(installed, target, matrix, driver_known=driver_known, compat=compat):
            if finding not in findings:
                findings.append(finding)
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
        interpreter = Path(installed.python) if installed.python else inspection.python
        result = deep_inspect(interpreter, deep_timeout)
        extra.extend(result.findings)
        if result.arch_list:
            installed = replace(installed, arch_list=result.arch_list)
    findings = judge(installed, targets, matrix, extra=extra, compat=compat)
    return AuditOutcome(findings, installed, tuple(targets), compat=compat)


def report_targets(
    report: ParsedReport, matrix: Matrix, options: TargetOptions | None = None
) -> tuple[tuple[Target, ...], bool]:
    """The targets a report is judged on, and whether the driver is known.

    The report's own driver and GPUs, with any override flags replacing the fields they give;
    ``--probe`` files replace the report's machine altogether.
    """

    if options is not None and options.probe_files:
        overrides = overrides_from_options(options, matrix)
        targets = read_probe_files(options.probe_files)
        return tuple(apply_overrides(t, overrides, matrix) for t in targets), True
    base = report_target(report, matrix)
    if options is None or not options.overrides_given:
        return (base,), report.driver_known
    overrides = overrides_from_options(options, matrix)
    driver_given = overrides.driver_version is not None or overrides.driver_cuda is not None
    target = apply_overrides(base, overrides, matrix)
    return (target,), report.driver_known or driver_given or overrides.no_gpu


def audit_report(
    report: ParsedReport,
    matrix: Matrix,
    options: TargetOptions | None = None,
    *,
    compat: Compat = "strict",
) -> AuditOutcome:
    """Audit a parsed report on the machine it names (or the one the flags describe)."""
    targets, driver_known = report_targets(report, matrix, options)
    findings = judge(report.installed, targets, matrix, driver_known=driver_known, compat=compat)
    return AuditOutcome(findings, report.installed, targets, report, compat=compat)


def audit_findings(
    python: Path | None, deep: bool, compat: Compat, options: TargetOptions | None = None
) -> Sequence[Finding]:
    """doctor's ``AuditRunner``: audit ``python``'s environment (default: the active one) on
    this machine as probed now (or the machine the Target flags ``options`` describe), under
    policy ``compat``."""

    with start_inspection(python=python) as inspection:  # runs while we probe
        if options is None:
            matrix = load_matrix()
            targets = [probe_machine(matrix=matrix)]
        else:
            from cudalock.machine.overrides import targets_from_options

            matrix = load_matrix(options.matrix_dir)
            targets = targets_from_options(options, matrix)
        return audit_live(targets, matrix, inspection, deep=deep, compat=compat).findings
