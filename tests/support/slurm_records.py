"""sacct and scontrol output recorded on a real cluster (tests/fixtures/slurm/), read back.

Each file starts with comments naming the job, the command and the Slurm version that produced it.
"""

from __future__ import annotations

from pathlib import Path

from cudalock.doctor.slurm import (
    SACCT_FIELDS,
    AccountingRecord,
    JobAccounting,
    parse_sacct,
    parse_scontrol_job,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def recorded_fields(text: str) -> tuple[str, ...]:
    """The --format= of the recorded command, from the file's ``# Command:`` comment."""
    for line in text.splitlines():
        if line.startswith("# Command:") and "--format=" in line:
            return tuple(line.split("--format=", 1)[1].split()[0].split(","))
    return SACCT_FIELDS


def without_comments(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def recorded_sacct(name: str) -> tuple[AccountingRecord, ...]:
    text = (FIXTURES / f"{name}.sacct.txt").read_text()
    return parse_sacct(without_comments(text), recorded_fields(text))


def recorded_scontrol(name: str) -> AccountingRecord | None:
    return parse_scontrol_job(without_comments((FIXTURES / f"{name}.scontrol.txt").read_text()))


def recorded(name: str, *, controller: bool = True) -> JobAccounting:
    """A job as read on the cluster; ``controller=False``: after scontrol forgot it."""
    records = recorded_sacct(name)
    return JobAccounting(
        records[0].job_id, records, recorded_scontrol(name) if controller else None
    )
