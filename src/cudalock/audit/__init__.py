"""The audit: what in an installed environment (or a pasted report of one) will crash on a
Target, found without importing torch; ``--deep`` imports it in a child process.

The names below are imported when first used: ``cudalock audit`` starts the audited
interpreter first and loads the checks while it runs, and a live audit never needs the report
parsers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cudalock.audit.checks import audit, has_errors, sort_findings
    from cudalock.audit.inspection import start_inspection
    from cudalock.audit.installed import Installed
    from cudalock.audit.reports import ParsedReport, parse_report
    from cudalock.audit.runner import AuditOutcome, audit_findings, audit_live, audit_report

#: Each public name and the module that defines it.
_MODULES = {
    "audit": "checks",
    "has_errors": "checks",
    "sort_findings": "checks",
    "start_inspection": "inspection",
    "Installed": "installed",
    "ParsedReport": "reports",
    "parse_report": "reports",
    "AuditOutcome": "runner",
    "audit_findings": "runner",
    "audit_live": "runner",
    "audit_report": "runner",
}

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


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
