"""Inputs as people type them, through the real console script, in every command that takes
them: a driver branch (``570``), a GPU name as written (``RTX5090``, ``4090``, ``A6000``,
``Titan V``), a ``--torch`` pasted from pip (``2.9.1+cu128``), and CUDA versions as ``X.Y``.

Expectations by hand from the shipped matrix: R570's first release in the driver table is
570.26 (CUDA 12.8), R550's 550.54.14 (CUDA 12.4); an RTX 5090 is 12.0, an RTX 4090 8.9, an
RTX A6000 8.6, a TITAN V 7.0; torch 2.9.1 has a cu128 build for linux-x86_64.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import cudalock

FREEZE = "torch==2.9.1+cu128\ntorchvision==0.24.1+cu128\n"


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return cudalock(*args, cwd=cwd)


@pytest.mark.parametrize(
    ("written", "name", "cc"),
    [
        ("RTX5090", "GeForce RTX 5090", "12.0"),
        ("5090", "GeForce RTX 5090", "12.0"),
        ("4090", "GeForce RTX 4090", "8.9"),
        ("rtx-4090", "GeForce RTX 4090", "8.9"),
        ("A6000", "NVIDIA RTX A6000", "8.6"),
        ("Titan V", "NVIDIA TITAN V", "7.0"),
        ("A100 80GB", "NVIDIA A100", "8.0"),
        ("H100 SXM", "NVIDIA H100", "9.0"),
    ],
)
def test_gpu_names_as_people_write_them(
    known_matrix_dir: Path, written: str, name: str, cc: str
) -> None:
    result = run(
        "probe", "--matrix", known_matrix_dir, "--driver-version", "570", "--gpu", written, "--json"
    )
    assert result.returncode == 0, result.stderr
    (gpu,) = json.loads(result.stdout)["gpus"]
    assert (gpu["name"], gpu["compute_capability"]) == (name, cc)


def test_an_unknown_gpu_points_at_the_gpu_list(known_matrix_dir: Path) -> None:
    result = run("resolve", "--matrix", known_matrix_dir, "--gpu", "H10")
    assert result.returncode == 2
    assert "unknown GPU 'H10'" in result.stderr
    hint = next(line for line in result.stderr.splitlines() if line.startswith("hint: "))
    assert "'cudalock matrix show --gpus'" in hint
    assert hint.removeprefix("hint: ")[0].isupper() and hint.endswith(".")
    listed = run("matrix", "show", "--matrix", known_matrix_dir, "--gpus", "--json")
    assert listed.returncode == 0, listed.stderr
    gpus = {g["name"]: g for g in json.loads(listed.stdout)["gpus"]}
    assert "4090" in gpus["GeForce RTX 4090"]["names"]
    assert gpus["NVIDIA TITAN V"]["compute_capability"] == "7.0"
    text = run("matrix", "show", "--matrix", known_matrix_dir, "--gpus").stdout
    assert "GeForce RTX 5090" in text and "--gpu RTX 5090, 5090" in text


@pytest.mark.parametrize("flag", ["--cuda", "--driver-cuda"])
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("12", "12 is a CUDA major, not a version"),
        ("12.1.1", "a patch level does not change which builds run: give 12.1"),
    ],
)
def test_cuda_versions_are_major_minor_for_every_flag(
    known_matrix_dir: Path, flag: str, value: str, why: str
) -> None:
    # 12 and 12.1.1 are refused alike, each with the reason and what to give.
    result = run(
        "resolve", "--matrix", known_matrix_dir, "--driver-version", "570.86.15", flag, value
    )
    assert result.returncode == 2
    assert (
        f"invalid CUDA version {value!r} for {flag}: expected MAJOR.MINOR like 12.1"
        in result.stderr
    )
    assert why in result.stderr
    assert "Traceback" not in result.stderr


def test_a_pasted_torch_build_means_that_build(known_matrix_dir: Path, tmp_path: Path) -> None:
    flags = ["--matrix", str(known_matrix_dir), "--driver-version", "570", "--gpu", "RTX5090"]
    resolved = run("resolve", *flags, "--torch", "2.9.1+cu128", "--json")
    assert resolved.returncode == 0, resolved.stderr
    plan = json.loads(resolved.stdout)
    assert plan["packages"][0]["version"] == "2.9.1+cu128"
    clash = run("resolve", *flags, "--torch", "2.9.1+cu128", "--cuda", "12.6")
    assert clash.returncode == 2
    assert "--torch 2.9.1+cu128 names the 12.8 build, but --cuda 12.6" in clash.stderr
    # bootstrap records the release and its CUDA; lock reads the same inputs (offline here: it
    # gets as far as the closure).
    written = run(
        "bootstrap", "-o", "out", "--offline", *flags, "--torch", "2.9.1+cu128", cwd=tmp_path
    )
    spec = (tmp_path / "out" / "cudalock.toml").read_text()
    assert 'torch = "==2.9.1"' in spec and 'cuda = "12.8"' in spec, written.stderr
    locked = run("lock", "-o", "lock", "--offline", *flags, "--torch", "2.9.1+cu128", cwd=tmp_path)
    assert locked.returncode == 3, locked.stderr
    assert "no torch release" not in locked.stderr


@pytest.mark.parametrize("command", ["audit", "doctor"])
def test_audit_and_doctor_take_a_branch_and_a_gpu_as_written(
    known_matrix_dir: Path, tmp_path: Path, command: str
) -> None:
    report = tmp_path / "freeze.txt"
    report.write_text(FREEZE)
    extra = ["--exit-code", "-11", "--no-run"] if command == "doctor" else []
    result = run(
        command, "--matrix", known_matrix_dir, *extra, "--report", report,
        "--driver-version", "550", "--gpu", "4090",
    )  # fmt: skip
    # 550 is R550 (CUDA 12.4): the cu128 build is newer than the driver.
    assert result.returncode == 1, result.stderr
    assert "CUDA 12.4" in result.stdout and "driver 550" in result.stdout
    assert "no NVIDIA driver" not in result.stdout
