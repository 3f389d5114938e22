"""Doctor: why a run ended with -9 (SIGKILL) or -11 (SIGSEGV), from the evidence that belongs
to the run, with the commands that fix it."""

from cudalock.doctor.diagnosis import DoctorReport, diagnose
from cudalock.doctor.render import render_findings, render_report
from cudalock.doctor.run import DoctorRequest, MachineReaders, default_readers, run_doctor

__all__ = [
    "DoctorReport",
    "DoctorRequest",
    "MachineReaders",
    "default_readers",
    "diagnose",
    "render_findings",
    "render_report",
    "run_doctor",
]
