"""Every input form through every command: a GPU name as people write it and a driver branch,
given to probe, resolve, bootstrap, lock, audit (a pasted report and a live environment) and
doctor, each read the same way: the same compute capability, the same CUDA for the driver, the
branch stated as an assumption, and (for the commands that plan) the same torch build.

Expectations by hand from the known matrix (tests/support/known_matrix.py): R570's first release
in the driver table is 570.26 (CUDA 12.8), R550's 550.54.14 (CUDA 12.4); an RTX 5090 is compute
capability 12.0, an RTX 4090 8.9, an RTX A6000 8.6, a TITAN V 7.0, an A100 8.0, an H100 9.0.
torch 2.7.1 has cu118, cu126 and cu128 builds; cu128 is the only one with kernels for 12.0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cudalock.tomlfile import tomllib
from tests.support.cli import cudalock
from tests.support.index import IndexServer, serve_indexes
from tests.support.wheels import torch_standin


@dataclass(frozen=True)
class Form:
    """A Target as a user types it, and what every command must read from it."""

    driver: str
    gpu: str
    #: The CUDA the driver branch supports, and the branch's first release in the table.
    cuda: str
    first_release: str
    #: The GPU's compute capability, and the torch 2.7.1 build resolve chooses for the pair.
    cc: str
    build: str

    @property
    def flags(self) -> list[str]:
        return ["--driver-version", self.driver, "--gpu", self.gpu]

    @property
    def assumption(self) -> str:
        return (
            f"driver {self.driver} is taken as the R{self.driver} branch, every release of "
            f"which supports CUDA {self.cuda} ({self.first_release} is its first release in the "
            "matrix's driver table)"
        )


FORMS = [
    Form("570", "RTX5090", "12.8", "570.26", "12.0", "2.7.1+cu128"),
    Form("570", "4090", "12.8", "570.26", "8.9", "2.7.1+cu126"),
    Form("570", "A6000", "12.8", "570.26", "8.6", "2.7.1+cu126"),
    Form("570", "Titan V", "12.8", "570.26", "7.0", "2.7.1+cu126"),
    Form("570", "A100 80GB", "12.8", "570.26", "8.0", "2.7.1+cu126"),
    Form("570", "H100 SXM", "12.8", "570.26", "9.0", "2.7.1+cu126"),
    Form("550", "H100 SXM", "12.4", "550.54.14", "9.0", "2.7.1+cu118"),
]
IDS = [f"{form.driver}-{form.gpu.replace(' ', '_')}" for form in FORMS]
REQUEST = ["--torch", "2.7.1", "--with", "none", "--python", "3.11"]


@dataclass(frozen=True)
class Reading:
    """What a command made of the Target flags."""

    driver_cuda: str | None
    ccs: tuple[str, ...]
    assumed: bool


def read_target(target: dict[str, object], assumptions: list[str], form: Form) -> Reading:
    gpus = target["gpus"]
    assert isinstance(gpus, list)
    cuda = target["driver_cuda"]
    return Reading(
        cuda if isinstance(cuda, str) else None,
        tuple(str(gpu["compute_capability"]) for gpu in gpus),
        any(form.assumption in text for text in assumptions),
    )


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = cudalock(*args, cwd=cwd)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """torch 2.7.1's three CUDA builds, each on its variant's index, as download.pytorch.org."""
    pytorch = {
        variant: [torch_standin(f"2.7.1+{variant}", cuda)]
        for variant, cuda in (("cu118", "11.8"), ("cu126", "12.6"), ("cu128", "12.8"))
    }
    with serve_indexes(tmp_path_factory.mktemp("forms"), pytorch=pytorch) as server:
        yield server


def indexes(server: IndexServer) -> list[str]:
    return ["--pytorch-index", server.pytorch_url, "--pypi-index", server.pypi_url]


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_probe_reads_the_form(known_matrix_dir: Path, form: Form) -> None:
    done = run("probe", "--matrix", known_matrix_dir, *form.flags, "--json")
    assert done.returncode == 0, done.stderr
    target = json.loads(done.stdout)
    assert read_target(target, target["notes"], form) == Reading(form.cuda, (form.cc,), True)


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_resolve_reads_the_form(known_matrix_dir: Path, form: Form) -> None:
    done = run("resolve", "--matrix", known_matrix_dir, *form.flags, *REQUEST, "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    (target,) = plan["targets"]
    reading = read_target(target, plan["explanation"], form)
    assert reading == Reading(form.cuda, (form.cc,), True)
    assert plan["packages"][0]["version"] == form.build


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_audit_of_a_report_reads_the_form(
    known_matrix_dir: Path, tmp_path: Path, form: Form
) -> None:
    report = tmp_path / "freeze.txt"
    # The environment of the build resolve chooses for the form: on the machine the form names
    # it is clean. The cu128 build is not on R550 (CUDA 12.4), nor on a TITAN V (no sm_70).
    report.write_text(f"torch=={form.build}\n")
    done = run("audit", "--matrix", known_matrix_dir, "--report", report, *form.flags, "--json")
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    notes = [f["message"] for f in outcome["findings"] if f["code"] == "target-assumed"]
    assert read_target(outcome["target"], notes, form) == Reading(form.cuda, (form.cc,), True)
    report.write_text("torch==2.7.1+cu128\n")
    newer = run("audit", "--matrix", known_matrix_dir, "--report", report, *form.flags)
    runs = form.driver == "570" and form.cc != "7.0"
    assert newer.returncode == (0 if runs else 1), newer.stdout


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_live_audit_reads_the_form(known_matrix_dir: Path, form: Form) -> None:
    # The environment audited is this test's own (no torch): only the Target is read here.
    done = run(
        "audit", "--matrix", known_matrix_dir, "--python", sys.executable, *form.flags, "--json"
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    notes = [f["message"] for f in outcome["findings"] if f["code"] == "target-assumed"]
    assert read_target(outcome["target"], notes, form) == Reading(form.cuda, (form.cc,), True)


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_doctor_reads_the_form(known_matrix_dir: Path, tmp_path: Path, form: Form) -> None:
    report = tmp_path / "freeze.txt"
    report.write_text(f"torch=={form.build}\n")
    done = run(
        "doctor", "--exit-code", "-11", "--no-run", "--matrix", known_matrix_dir,
        "--report", report, *form.flags, "--json",
    )  # fmt: skip
    document = json.loads(done.stdout)
    messages = {f["code"]: f["message"] for f in document["findings"]}
    assert messages["target-assumed"] == form.assumption + (
        "; give the full version (nvidia-smi's 'Driver Version') or --driver-cuda if that is not so"
    )
    # The machine the crashed environment was judged on, named as audit names it.
    audited = messages["segfault-report-audited"]
    assert f"driver {form.driver} (CUDA {form.cuda})" in audited
    assert f"({form.cc})" in audited


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_bootstrap_plans_and_records_the_form(
    known_matrix_dir: Path, tmp_path: Path, index: IndexServer, form: Form
) -> None:
    args = ["--matrix", str(known_matrix_dir), *form.flags, *REQUEST, *indexes(index)]
    done = run("bootstrap", "-o", "out", "--format", "venv", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"Assumed: {form.assumption}" in done.stdout
    out = tmp_path / "out"
    assert f"torch=={form.build}" in (out / "requirements.txt").read_text()
    assert _recorded_target(out) == {
        "driver_version": form.driver,
        "driver_cuda": form.cuda,
        "compute_capabilities": [form.cc],
        "platform": "linux-x86_64",
    }


# A lock resolves with uv: three forms, one per torch build, keep it short.
@pytest.mark.parametrize("form", [FORMS[0], FORMS[3], FORMS[6]], ids=[IDS[0], IDS[3], IDS[6]])
def test_lock_pins_and_remembers_the_form(
    known_matrix_dir: Path, tmp_path: Path, index: IndexServer, form: Form
) -> None:
    args = ["--matrix", str(known_matrix_dir), *form.flags, *REQUEST, *indexes(index)]
    done = run("lock", "-o", "out", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    lock = tomllib.loads((out / "pylock.toml").read_text())
    assert {p["name"]: p["version"] for p in lock["packages"]}["torch"] == form.build
    assert _recorded_target(out)["compute_capabilities"] == [form.cc]
    # The form is remembered as given: the check with no flags finds the lock current.
    check = run("lock", "-o", "out", "--matrix", known_matrix_dir, "--check", cwd=tmp_path)
    assert check.returncode == 0, check.stderr


def _recorded_target(out: Path) -> dict[str, object]:
    target = tomllib.loads((out / "cudalock.toml").read_text())["target"]
    assert isinstance(target, dict)
    return target


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--gpu", "H10"],
            "cudalock: error: unknown GPU 'H10': not in the matrix's GPU table; did you mean "
            "'NVIDIA H100', 'NVIDIA H20', 'NVIDIA A10'?",
        ),
        (["--driver-version", "570", "--driver-cuda", "12"], "invalid CUDA version '12'"),
    ],
    ids=["unknown-gpu", "cuda-major"],
)
def test_a_bad_form_is_the_same_usage_error_in_every_command(
    known_matrix_dir: Path, tmp_path: Path, flags: list[str], message: str
) -> None:
    report = tmp_path / "freeze.txt"
    report.write_text("torch==2.7.1+cu128\n")
    commands = [
        ["probe"],
        ["resolve"],
        ["bootstrap", "-o", str(tmp_path / "b"), "--offline"],
        ["lock", "-o", str(tmp_path / "l"), "--offline"],
        ["audit", "--report", str(report)],
        ["audit", "--python", sys.executable],
        # doctor reads the flags whatever the signal: a -9 too, not only the -11 audit.
        ["doctor", "--exit-code", "-9"],
        ["doctor", "--exit-code", "-11", "--no-run", "--report", str(report)],
    ]
    errors = set()
    for command in commands:
        done = run(*command, "--matrix", known_matrix_dir, *flags, cwd=tmp_path)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        (error,) = [line for line in done.stderr.splitlines() if line.startswith("cudalock: ")]
        assert message in error, (command, error)
        errors.add(error)
    assert len(errors) == 1, errors
    assert not (tmp_path / "b").exists() and not (tmp_path / "l").exists()
