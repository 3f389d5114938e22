"""inspect_environment on real virtual environments: what it reads, and how it fails."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cudalock.audit.inspection import (
    default_python,
    inspect_environment,
    installed_from_document,
    platform_name,
    python_for_prefix,
    start_inspection,
)
from cudalock.errors import EnvironmentFailure, InputError
from tests.support.venvs import hide_cuda_toolkit, site_packages, standin_env


@pytest.fixture(autouse=True)
def _no_cuda_toolkit_of_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hide_cuda_toolkit(monkeypatch, tmp_path / "no-cuda-toolkit")


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def env_2_11(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # torch's __init__ here raises SystemExit: inspecting must never import it.
    return standin_env(tmp_path_factory, "pypi-2.11.0")


def test_reads_torch_version_file_not_just_metadata(env_2_11: Path) -> None:
    installed = inspect_environment(python=env_2_11)
    torch = installed.active_torch
    assert torch is not None
    assert torch.version == "2.11.0+cu130"  # from torch/version.py
    assert torch.cuda == "13.0"
    assert torch.git_version == "0" * 40
    assert installed.dist("torch") is not None
    assert installed.dist("torch").version == "2.11.0"  # type: ignore[union-attr]
    assert installed.dist("torchvision").version == "0.26.0"  # type: ignore[union-attr]
    assert installed.dist("cuda-toolkit").version == "13.0.2"  # type: ignore[union-attr]
    assert installed.dist("nvidia_cudnn_cu13").version == "9.19.0.56"  # type: ignore[union-attr]
    assert installed.python == str(env_2_11)
    assert installed.python_version == ".".join(map(str, sys.version_info[:3]))
    assert installed.platform == platform_name(sys.platform, os.uname().machine)
    assert installed.source == f"python:{env_2_11}"


def test_reads_deepspeed_build_info_without_importing_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    ds = inspect_environment(python=standin_env(tmp_path_factory, "deepspeed-no-torch")).deepspeed
    assert ds is not None
    assert ds.version == "0.12.3"
    assert ds.torch_version == "0.0" and ds.torch_cuda == "0.0"
    assert ds.built_without_torch
    assert ds.installed_ops == ()
    assert ds.accelerator == "cuda"


def test_prefix_names_the_environment_root(env_2_11: Path) -> None:
    root = env_2_11.parent.parent
    assert python_for_prefix(root) == env_2_11
    installed = inspect_environment(prefix=root)
    assert installed.active_torch is not None
    assert installed.active_torch.version == "2.11.0+cu130"


def test_default_is_the_active_virtual_env(env_2_11: Path) -> None:
    root = env_2_11.parent.parent
    assert default_python({"VIRTUAL_ENV": str(root), "PATH": ""}) == env_2_11
    assert default_python({"CONDA_PREFIX": str(root), "PATH": ""}) == env_2_11


def test_nvcc_on_path_and_cuda_home_in_cpp_extension_order(
    env_2_11: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path_bin = tmp_path / "path-cuda" / "bin"
    path_bin.mkdir(parents=True)
    _script(
        path_bin / "nvcc",
        "echo 'nvcc: NVIDIA (R) Cuda compiler driver'; "
        "echo 'Cuda compilation tools, release 12.1, V12.1.105'",
    )
    home = tmp_path / "cuda-11.8"
    (home / "bin").mkdir(parents=True)
    _script(home / "bin" / "nvcc", "echo 'Cuda compilation tools, release 11.8, V11.8.89'")
    monkeypatch.setenv("PATH", f"{path_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_HOME", str(home))
    installed = inspect_environment(python=env_2_11)
    by_origin = {n.origin: n for n in installed.nvcc}
    assert by_origin["CUDA_HOME"].version == "11.8.89"
    assert by_origin["PATH"].version == "12.1.105"
    # torch.utils.cpp_extension takes CUDA_HOME first: so do JIT-built DeepSpeed ops.
    assert installed.effective_nvcc is not None
    assert installed.effective_nvcc.origin == "CUDA_HOME"


def test_a_symlinked_nvcc_without_a_release_line_reads_its_toolkits_version_json(
    env_2_11: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /usr/bin/nvcc -> /usr/local/cuda-12.4/bin/nvcc: the version is the real toolkit's.
    toolkit = tmp_path / "cuda-12.4"
    (toolkit / "bin").mkdir(parents=True)
    _script(toolkit / "bin" / "nvcc", "echo 'nvcc: NVIDIA (R) Cuda compiler driver'")
    (toolkit / "version.json").write_text('{"cuda": {"version": "12.4.1"}}', encoding="utf-8")
    path_bin = tmp_path / "usr" / "bin"
    path_bin.mkdir(parents=True)
    (path_bin / "nvcc").symlink_to(toolkit / "bin" / "nvcc")
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.setenv("PATH", f"{path_bin}{os.pathsep}{os.environ['PATH']}")
    installed = inspect_environment(python=env_2_11)
    by_origin = {n.origin: n for n in installed.nvcc}
    assert by_origin["PATH"].version == "12.4.1"
    assert by_origin["PATH"].problem is None


def test_the_environments_own_nvcc_comes_before_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A conda environment with cuda-nvcc: bin/nvcc next to bin/python.
    root = tmp_path / "conda-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    _script(root / "bin" / "nvcc", "echo 'Cuda compilation tools, release 12.1, V12.1.105'")
    path_bin = tmp_path / "system" / "bin"
    path_bin.mkdir(parents=True)
    _script(path_bin / "nvcc", "echo 'Cuda compilation tools, release 13.0, V13.0.88'")
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.setenv("PATH", f"{path_bin}{os.pathsep}{os.environ['PATH']}")
    installed = inspect_environment(prefix=root)
    assert [(n.origin, n.version) for n in installed.nvcc][:2] == [
        ("prefix", "12.1.105"),
        ("PATH", "13.0.88"),
    ]


def test_cuda_home_without_nvcc_still_comes_first(env_2_11: Path, tmp_path: Path) -> None:
    installed = inspect_environment(python=env_2_11)
    first = installed.effective_nvcc
    assert first is not None
    assert first.origin == "CUDA_HOME" and first.version is None
    assert first.problem == "CUDA_HOME is set but has no bin/nvcc"
    assert first.path == str(tmp_path / "no-cuda-toolkit" / "bin" / "nvcc")


def test_cuda_libraries_on_ld_library_path_with_versions_from_file_names(
    env_2_11: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = tmp_path / "cuda-12.1" / "lib64"
    lib.mkdir(parents=True)
    (lib / "libnvJitLink.so.12.1.105").write_bytes(b"")
    (lib / "libnvJitLink.so.12").symlink_to("libnvJitLink.so.12.1.105")
    (lib / "libcudart.so.12").write_bytes(b"")  # only the soname: version "12"
    (lib / "libnotcuda.so.1").write_bytes(b"")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{lib}{os.pathsep}{tmp_path / 'missing'}")
    installed = inspect_environment(python=env_2_11)
    found = {library.name: library for library in installed.cuda_libraries}
    assert set(found) == {"libnvJitLink", "libcudart"}
    assert found["libnvJitLink"].version == "12.1.105"
    assert found["libcudart"].version == "12"
    assert found["libnvJitLink"].directory == str(lib)
    assert installed.ld_library_path == (str(lib), str(tmp_path / "missing"))


def test_two_torch_dist_infos_are_both_reported(tmp_path_factory: pytest.TempPathFactory) -> None:
    python = standin_env(tmp_path_factory, "duplicate-torch")
    installed = inspect_environment(python=python)
    versions = sorted(d.version or "" for d in installed.dists("torch"))
    assert versions == ["2.0.1+cu118", "2.1.0+cu121"]
    site = site_packages(python)
    assert {Path(d.location or "").parent for d in installed.dists("torch")} == {site.resolve()}
    # The package directory on disk is the one pip --target wrote last.
    assert installed.active_torch is not None
    assert installed.active_torch.version == "2.0.1+cu118"


def test_works_on_python_3_7() -> None:
    python37 = Path("/root/.pyenv/versions/3.7.16/bin/python3.7")
    if not python37.exists():
        pytest.skip("no Python 3.7 interpreter on this machine")
    installed = inspect_environment(python=python37)
    assert installed.python_version is not None
    assert installed.python_version.startswith("3.7.")
    assert installed.dist("pip") is not None


def test_missing_interpreter_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        inspect_environment(python=tmp_path / "nope" / "python")


def test_directory_is_an_input_error_that_suggests_bin_python(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        inspect_environment(python=tmp_path)


def test_prefix_without_python_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no Python interpreter in environment prefix"):
        inspect_environment(prefix=tmp_path)


def test_not_a_python_is_an_input_error(tmp_path: Path) -> None:
    fake = _script(tmp_path / "python", "echo hello")
    with pytest.raises(InputError, match="does not look like a Python interpreter"):
        inspect_environment(python=fake)


def test_not_executable_is_an_input_error(tmp_path: Path) -> None:
    plain = tmp_path / "python"
    plain.write_text("not a program")
    with pytest.raises(InputError):
        inspect_environment(python=plain)


def test_interpreter_that_fails_is_an_input_error_quoting_its_last_line(tmp_path: Path) -> None:
    fake = _script(tmp_path / "python", "echo 'ImportError: broken site' >&2; exit 1")
    with pytest.raises(InputError, match="ImportError: broken site"):
        inspect_environment(python=fake)


def test_hanging_interpreter_is_stopped_by_the_timeout(tmp_path: Path) -> None:
    fake = _script(tmp_path / "python", "exec sleep 30")
    started = time.monotonic()
    with pytest.raises(EnvironmentFailure, match="did not finish"):
        inspect_environment(python=fake, timeout=1)
    assert time.monotonic() - started < 10


def test_a_started_inspection_runs_while_the_caller_works_and_close_stops_it(
    tmp_path: Path, env_2_11: Path
) -> None:
    # audit starts the inspection, then loads the matrix and probes; the answer is the same.
    with start_inspection(python=env_2_11) as running:
        assert running.python == env_2_11
        time.sleep(0.2)  # the caller's own work
        assert running.installed() == inspect_environment(python=env_2_11)
    pid_file = tmp_path / "pid"
    fake = _script(tmp_path / "python", f"echo $$ > {pid_file}; exec sleep 30")
    started = time.monotonic()
    with (
        pytest.raises(RuntimeError, match="the audit failed"),
        start_inspection(python=fake, timeout=60),
    ):
        while not pid_file.exists():
            time.sleep(0.01)
        raise RuntimeError("the audit failed before reading the answer")
    assert not Path(f"/proc/{pid_file.read_text().strip()}").exists()  # stopped and reaped
    assert time.monotonic() - started < 10


def test_signal_killed_interpreter_names_the_signal(tmp_path: Path) -> None:
    fake = _script(tmp_path / "python", "kill -SEGV $$")
    with pytest.raises(EnvironmentFailure, match=r"SIGSEGV \(-11\)"):
        inspect_environment(python=fake)


def test_document_with_missing_fields_still_gives_a_value() -> None:
    installed = installed_from_document({"script_version": 1}, source="python:/x")
    assert installed.torch == () and installed.distributions == ()
    assert installed.deepspeed is None and installed.nvcc == ()
    odd = installed_from_document(
        {
            "script_version": 1,
            "python": "x",
            "torch": [1, {"version": 3}],
            "nvcc": "x",
            "distributions": [{"name": None}],
            "cuda_libraries": [{"name": "libcudart"}],
        },
        source="python:/x",
    )
    assert odd.torch[0].version is None
    assert odd.distributions == () and odd.cuda_libraries == ()


@pytest.mark.parametrize(
    ("system", "machine", "expected"),
    [
        ("linux", "x86_64", "linux-x86_64"),
        ("linux", "aarch64", "linux-aarch64"),
        ("win32", "AMD64", "windows-x86_64"),
        ("darwin", "arm64", "macos-arm64"),
        ("darwin", "x86_64", "macos-x86_64"),
        ("freebsd13", "amd64", None),
    ],
)
def test_platform_names(system: str, machine: str, expected: str | None) -> None:
    assert platform_name(system, machine) == expected


@pytest.mark.parametrize(
    "printed",
    [
        '{"version": "2.1.0", "devices": 5}',
        '{"version": 3, "devices": [1, "x", {"kernel_ok": false, "index": [1]}], "arch_list": 7}',
        '{"error": "boom", "stage": ["x"]}',
        '{"available": false, "cuda": {"a": 1}}',
        "[1, 2]",
    ],
)
def test_a_torch_check_answer_of_the_wrong_shape_is_read_without_a_crash(
    tmp_path: Path, printed: str
) -> None:
    from cudalock.audit.deep import deep_inspect

    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho 'RESULT {printed}'\n")
    python.chmod(0o755)
    result = deep_inspect(python, timeout=30)
    assert all(isinstance(device, dict) for device in result.devices)
    for finding in result.findings:
        assert isinstance(finding.message, str) and finding.message
