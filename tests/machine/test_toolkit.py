"""The CUDA toolkit the probe records: found where torch's cpp_extension would look, its version
read from ``nvcc --version`` or from the toolkit's version.json."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from cudalock.machine.host import find_cuda_toolkit


def make_toolkit(home: Path, *, version_json: str | None, nvcc_says: str | None) -> Path:
    """A toolkit directory with a bin/nvcc that prints ``nvcc_says`` (a real executable)."""
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    release = (
        f"echo 'Cuda compilation tools, release {nvcc_says}, V{nvcc_says}.105'"
        if nvcc_says
        else "exit 1"
    )
    nvcc.write_text(f"#!/bin/sh\n{release}\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    if version_json is not None:
        (home / "version.json").write_text(json.dumps({"cuda": {"version": version_json}}))
    return nvcc


def test_cuda_home_with_version_json(tmp_path: Path) -> None:
    nvcc = make_toolkit(tmp_path / "cuda-12.1", version_json="12.1.1", nvcc_says=None)
    assert find_cuda_toolkit({"CUDA_HOME": str(tmp_path / "cuda-12.1")}) == ("12.1", str(nvcc))


def test_nvcc_version_when_there_is_no_version_json(tmp_path: Path) -> None:
    nvcc = make_toolkit(tmp_path / "cuda", version_json=None, nvcc_says="12.4")
    assert find_cuda_toolkit({"CUDA_PATH": str(tmp_path / "cuda")}) == ("12.4", str(nvcc))


def test_nvcc_says_the_version_when_version_json_disagrees(tmp_path: Path) -> None:
    # A toolkit whose nvcc was upgraded alone (conda's cuda-nvcc over a 12.1 install): builds
    # run this nvcc, so its release is the toolkit's version, as the audit reads it too.
    nvcc = make_toolkit(tmp_path / "cuda", version_json="12.1.1", nvcc_says="12.4")
    assert find_cuda_toolkit({"CUDA_HOME": str(tmp_path / "cuda")}) == ("12.4", str(nvcc))


def test_nvcc_on_path(tmp_path: Path) -> None:
    nvcc = make_toolkit(tmp_path / "tk", version_json="11.8.0", nvcc_says="11.8")
    assert find_cuda_toolkit({"PATH": str(nvcc.parent)}) == ("11.8", str(nvcc))


def test_a_cuda_home_without_nvcc_hides_the_rest(tmp_path: Path) -> None:
    # As in cpp_extension: a CUDA_HOME that is set is used as given, even when it is empty.
    other = make_toolkit(tmp_path / "tk", version_json="12.1.0", nvcc_says="12.1")
    (tmp_path / "empty").mkdir()
    environ = {"CUDA_HOME": str(tmp_path / "empty"), "PATH": str(other.parent)}
    assert find_cuda_toolkit(environ) is None


def test_an_nvcc_that_says_no_version_is_no_toolkit(tmp_path: Path) -> None:
    make_toolkit(tmp_path / "tk", version_json=None, nvcc_says=None)
    assert find_cuda_toolkit({"CUDA_HOME": str(tmp_path / "tk")}) is None
