"""The audit: what in an installed environment (or a pasted report of one) will crash on a
Target, found without importing torch; ``--deep`` imports it in a child process.

The package exports nothing itself: each name is imported from the module that holds it
(``checks``: the checks and :func:`~cudalock.audit.checks.audit`; ``inspection``: the live
environment; ``reports``: pasted reports; ``runner``: an audit end to end). So ``cudalock
audit`` starts the audited interpreter before the checks load, and a live audit never loads
the report parsers.
"""
