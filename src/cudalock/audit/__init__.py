"""The audit: what in an installed environment (or a pasted report of one) will crash on a
Target, found without importing torch; ``--deep`` imports it in a child process."""

from cudalock.audit.checks import audit, has_errors, sort_findings
from cudalock.audit.inspection import start_inspection
from cudalock.audit.installed import Installed
from cudalock.audit.reports import ParsedReport, parse_report
from cudalock.audit.runner import AuditOutcome, audit_findings, audit_live, audit_report

__all__ = [
    "AuditOutcome",
    "Installed",
    "ParsedReport",
    "audit",
    "audit_findings",
    "audit_live",
    "audit_report",
    "has_errors",
    "parse_report",
    "sort_findings",
    "start_inspection",
]
