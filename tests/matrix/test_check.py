"""`cudalock matrix check`: the shipped matrix is sound; broken copies name file and entry."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudalock.errors import InputError
from cudalock.matrix import default_matrix_dir, load_matrix
from cudalock.matrix.check import Problem, check_matrix, check_matrix_dir
from tests.support.cli import cudalock

SHIPPED = default_matrix_dir()


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    target = tmp_path / "matrix"
    shutil.copytree(SHIPPED, target)
    return target


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert text.count(old) >= count, f"{old!r} not in {path.name}"
    path.write_text(text.replace(old, new, count))


def test_shipped_matrix_has_no_problems() -> None:
    assert check_matrix(load_matrix(SHIPPED)) == []


def test_cli_passes_on_shipped_matrix() -> None:
    done = cudalock("matrix", "check", SHIPPED)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK" in done.stdout


def test_unknown_cuda_variant(copy: Path) -> None:
    # A cu127 build: there is no CUDA 12.7 toolkit (NVIDIA skipped it).
    edit(
        copy / "torch.toml", 'variant = "cu126"\ncuda = "12.6"', 'variant = "cu127"\ncuda = "12.7"'
    )
    problems = check_matrix_dir(copy)
    assert any(
        p.file == "torch.toml"
        and "build 'cu127'" in p.entry
        and "CUDA 12.7 is not in the CUDA table" in p.problem
        for p in problems
    ), problems


def test_variant_name_and_cuda_disagree(copy: Path) -> None:
    edit(
        copy / "torch.toml", 'variant = "cu118"\ncuda = "11.8"', 'variant = "cu118"\ncuda = "11.7"'
    )
    problems = check_matrix_dir(copy)
    assert any("does not match variant cu118" in p.problem for p in problems), problems


def test_unsorted_releases(copy: Path) -> None:
    text = (copy / "torch.toml").read_text()
    first, second = (
        text.index('[[release]]\nversion = "1.13.0"'),
        text.index('[[release]]\nversion = "1.13.1"'),
    )
    third = text.index('[[release]]\nversion = "2.0.0"')
    swapped = text[:first] + text[second:third] + text[first:second] + text[third:]
    (copy / "torch.toml").write_text(swapped)
    problems = check_matrix_dir(copy)
    assert (
        Problem(
            "torch.toml",
            "[[release]] version = '1.13.0'",
            "out of order: comes after '1.13.1' (entries must be sorted by version, oldest first)",
        )
        in problems
    )


def test_duplicate_release(copy: Path) -> None:
    edit(copy / "torch.toml", 'version = "2.1.1"', 'version = "2.1.0"')
    problems = check_matrix_dir(copy)
    assert Problem("torch.toml", "[[release]] version = '2.1.0'", "duplicate entry") in problems


def test_duplicate_build_on_one_platform(copy: Path) -> None:
    # 2.11.0 lists cu128 for Linux x86_64 and separately for aarch64; move the x86_64 one to
    # aarch64 so that (cu128, linux-aarch64) appears twice.
    text = (copy / "torch.toml").read_text()
    start = text.index('version = "2.11.0"')
    x86 = text.index('variant = "cu128"', start)
    plat = text.index('platforms = ["linux-x86_64"]', x86)
    text = (
        text[:plat]
        + 'platforms = ["linux-aarch64"]'
        + text[plat + len('platforms = ["linux-x86_64"]') :]
    )
    (copy / "torch.toml").write_text(text)
    problems = check_matrix_dir(copy)
    assert any(
        p.entry.startswith("[[release]] version = '2.11.0' build 'cu128'")
        and "cu128 on linux-aarch64 is listed twice" in p.problem
        for p in problems
    ), problems


def test_arch_the_toolkit_cannot_compile(copy: Path) -> None:
    # sm_60 in a CUDA 13.0 build: CUDA 13.0 removed Pascal (cuda.toml arch_support 13.0).
    text = (copy / "torch.toml").read_text()
    start = text.index('version = "2.14.1"')
    at = text.index('variant = "cu130"\ncuda = "13.0"', start)
    sass = text.index('sass = ["7.5"', at)
    text = text[:sass] + 'sass = ["6.0", "7.5"' + text[sass + len('sass = ["7.5"') :]
    (copy / "torch.toml").write_text(text)
    problems = check_matrix_dir(copy)
    assert any(
        "2.14.1" in p.entry
        and "'cu130'" in p.entry
        and p.problem.startswith("sass 6.0 cannot be compiled by CUDA 13.0")
        for p in problems
    ), problems


def test_pypi_default_without_build(copy: Path) -> None:
    edit(copy / "torch.toml", 'linux-x86_64 = "cu117"', 'linux-x86_64 = "cu119"')
    problems = check_matrix_dir(copy)
    assert (
        Problem(
            "torch.toml",
            "[[release]] version = '1.13.0'",
            "pypi_default linux-x86_64 = 'cu119' names no build of this release on linux-x86_64",
        )
        in problems
    )


def test_missing_torchvision_pair(copy: Path) -> None:
    edit(copy / "torch.toml", 'torchvision = "0.16.1"\n', "")
    problems = check_matrix_dir(copy)
    assert (
        Problem(
            "torch.toml", "[[release]] version = '2.1.1'", "no torchvision paired with this release"
        )
        in problems
    )


def test_torchvision_going_backwards(copy: Path) -> None:
    edit(copy / "torch.toml", 'torchvision = "0.16.1"', 'torchvision = "0.15.0"')
    problems = check_matrix_dir(copy)
    assert any(
        p.entry == "[[release]] version = '2.1.1'"
        and "torchvision 0.15.0 does not follow" in p.problem
        for p in problems
    ), problems


def test_unverified_names_unknown_field(copy: Path) -> None:
    edit(copy / "torch.toml", 'unverified = ["sass", "ptx"]', 'unverified = ["sas"]')
    problems = check_matrix_dir(copy)
    assert any(
        "unverified names 'sas'" in p.problem and p.file == "torch.toml" for p in problems
    ), problems


def test_unsorted_toolkits_and_duplicate_gpu(copy: Path) -> None:
    edit(copy / "cuda.toml", 'version = "10.0.130"', 'version = "10.3.0"')
    edit(copy / "gpus.toml", 'name = "NVIDIA A30"', 'name = "NVIDIA A10 / A10G"')
    problems = check_matrix_dir(copy)
    assert any(
        p.file == "cuda.toml"
        and p.entry == "[[toolkit]] version = '10.1.105'"
        and "out of order" in p.problem
        for p in problems
    ), problems
    assert Problem("gpus.toml", "[[gpu]] name = 'NVIDIA A10 / A10G'", "duplicate entry") in problems


def test_bad_date_is_a_problem_and_a_bad_requires_python_is_refused_on_load(copy: Path) -> None:
    edit(copy / "torch.toml", 'date = "2022-12-15"', 'date = "2022-13-15"')
    problems = check_matrix_dir(copy)
    assert (
        Problem(
            "torch.toml", "[[release]] version = '1.13.1'", "date '2022-13-15' is not YYYY-MM-DD"
        )
        in problems
    )
    # A specifier the resolver would have to parse is checked when the matrix loads.
    edit(copy / "torch.toml", 'requires_python = ">=3.7.0"', 'requires_python = "3.7+"')
    with pytest.raises(InputError, match=r"\[\[release\]\] #1 .*'3\.7\+', not a PEP 440 specifier"):
        check_matrix_dir(copy)


def test_deepspeed_rules_must_not_overlap(copy: Path) -> None:
    edit(copy / "deepspeed.toml", 'deepspeed = ">=0.16.4,<0.17.2"', 'deepspeed = ">=0.16.4"')
    problems = check_matrix_dir(copy)
    assert any(
        p.file == "deepspeed.toml"
        and p.entry == "[[release]] version = '0.18.0'"
        and "several [[cuda_check]] rules" in p.problem
        for p in problems
    ), problems


def test_cli_reports_file_and_entry_and_exits_1(copy: Path) -> None:
    edit(copy / "torch.toml", 'linux-x86_64 = "cu117"', 'linux-x86_64 = "cu119"')
    done = cudalock("matrix", "check", copy)
    assert done.returncode == 1
    assert (
        "torch.toml: [[release]] version = '1.13.0': pypi_default linux-x86_64 = 'cu119' "
        "names no build of this release on linux-x86_64"
    ) in done.stdout.splitlines()
    assert re.search(r"\d+ problem\(s\) in ", done.stderr)


def test_cli_unloadable_matrix_exits_2(copy: Path) -> None:
    edit(copy / "torch.toml", 'status = "verified"', 'status = "probably"')
    done = cudalock("matrix", "check", copy)
    assert done.returncode == 2
    assert "torch.toml: [[release]] #1 (version = '1.13.0')" in done.stderr
    assert "Traceback" not in done.stderr
    (copy / "gpus.toml").unlink()
    done = cudalock("matrix", "check", copy)
    assert done.returncode == 2 and "gpus.toml" in done.stderr and "missing" in done.stderr


def test_cli_uses_cudalock_matrix_env(copy: Path) -> None:
    edit(copy / "torch.toml", 'linux-x86_64 = "cu117"', 'linux-x86_64 = "cu119"')
    done = subprocess.run(
        [sys.executable, "-m", "cudalock", "matrix", "check"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "CUDALOCK_MATRIX": str(copy)},
    )
    assert done.returncode == 1 and "cu119" in done.stdout


# --------------------------------------------------------------------------------------------
# cuda_builds.toml


def test_package_builds_are_read_with_their_sources() -> None:
    matrix = load_matrix(SHIPPED)
    xformers = matrix.package_build("xformers", "0.0.31")
    assert xformers is not None
    assert (xformers.cuda, xformers.torch, xformers.cuda_version) == (
        "12.8",
        "2.7.1+cu126",
        (12, 8),
    )
    assert "xformers-0.0.31-cp39-abi3-manylinux_2_28_x86_64.whl" in xformers.provenance.source[0]
    vllm = matrix.package_build("vllm", "0.10.1.1")
    assert vllm is not None
    # The wheel names only the CUDA major (libcudart.so.12): no minor is made up.
    assert (vllm.cuda, vllm.cuda_major, vllm.cuda_version, vllm.torch) == ("12", 12, None, "2.7.1")


def test_a_matrix_without_cuda_builds_loads_with_none(copy: Path) -> None:
    (copy / "cuda_builds.toml").unlink()
    matrix = load_matrix(copy)
    assert matrix.package_builds == ()
    assert check_matrix(matrix) == []


def test_package_build_of_another_major_than_its_torch_label(copy: Path) -> None:
    edit(
        copy / "cuda_builds.toml",
        'cuda = "12.8"\ntorch = "2.7.1+cu126"',
        'cuda = "11.8"\ntorch = "2.7.1+cu126"',
    )
    problems = check_matrix_dir(copy)
    assert [p.problem for p in problems if p.file == "cuda_builds.toml"] == [
        "built for CUDA 11.8 against torch 2.7.1+cu126, a build of another CUDA major"
    ]


def test_package_builds_out_of_order_and_without_source(copy: Path) -> None:
    path = copy / "cuda_builds.toml"
    edit(path, 'version = "0.0.30"', 'version = "0.0.99"')
    problems = check_matrix_dir(copy)
    assert any(
        p.file == "cuda_builds.toml"
        and "xformers 0.0.31" in p.entry
        and "out of order" in p.problem
        for p in problems
    ), problems
    text = path.read_text()
    path.write_text(re.sub(r'\nsource = "[^"\n]*"\n', "\n", text, count=1))
    with pytest.raises(InputError, match=r"cuda_builds.toml.*missing 'source'"):
        load_matrix(copy)


def test_package_build_cuda_must_be_a_cuda_version(copy: Path) -> None:
    edit(copy / "cuda_builds.toml", 'cuda = "12.8"', 'cuda = "cu128"')
    with pytest.raises(InputError, match=r"'cuda' must be MAJOR.MINOR or MAJOR, got 'cu128'"):
        load_matrix(copy)
