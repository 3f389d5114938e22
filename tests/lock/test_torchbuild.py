"""sdists whose build reads the installed torch: found from their files before uv runs, or from
uv's own words when its isolated build fails."""

from __future__ import annotations

import io
import tarfile
import zipfile

from cudalock.lock.torchbuild import needs_torch_to_build, read_sdist
from cudalock.lock.uvinput import LockInput, uv_compile_args

#: uv 0.13's stderr when an sdist's setup.py imports torch in an isolated build (trimmed
#: traceback), as the end-to-end tests see it from the stand-in sdist.
UV_FAILURE = """error: Failed to build `kernelpkg==1.0`
  cause: The build backend returned an error
  cause: Call to `standin_backend.prepare_metadata_for_build_wheel` failed (exit status: 1)

         [stderr]
         Traceback (most recent call last):
           File "setup.py", line 2, in <module>
             import torch
         ModuleNotFoundError: No module named 'torch'

hint: This error likely indicates that `kernelpkg@1.0` depends on `torch`, but doesn't declare \
it as a build dependency. If `kernelpkg` is a first-party package, consider adding `torch` to \
its `build-system.requires`.
"""

#: axolotl 0.9.2's setup.py, the lines that read the installed torch (its sdist on PyPI).
AXOLOTL_SETUP = """from importlib.metadata import PackageNotFoundError, version

from setuptools import find_packages, setup

            try:
                torch_version = version("torch")
            except PackageNotFoundError:
                torch_version = "2.6.0"  # default to torch 2.6
            _install_requires.append(f"torch=={torch_version}")
"""
#: axolotl 0.9.2's pyproject.toml build-system table.
AXOLOTL_PYPROJECT = """[build-system]
requires = ["setuptools>=64", "wheel", "setuptools_scm>=8", "packaging==23.2"]
build-backend = "setuptools.build_meta"
"""


def sdist(files: dict[str, str], base: str = "pkg-1.0", kind: str = "tar.gz") -> bytes:
    buffer = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, text in files.items():
                archive.writestr(f"{base}/{name}", text)
        return buffer.getvalue()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_uvs_failure_names_the_package_whose_build_needs_torch() -> None:
    assert needs_torch_to_build(UV_FAILURE) == ("kernelpkg", "1.0")
    without_hint = UV_FAILURE.split("hint:")[0]
    assert needs_torch_to_build(without_hint) == ("kernelpkg", "1.0")
    other = "error: Failed to build `foo==1.0`\n  ModuleNotFoundError: No module named 'numpy'\n"
    assert needs_torch_to_build(other) is None


def test_axolotls_setup_reads_the_installed_torch_and_its_build_tools_are_kept() -> None:
    data = sdist({"setup.py": AXOLOTL_SETUP, "pyproject.toml": AXOLOTL_PYPROJECT})
    found = read_sdist(data, "axolotl-0.9.2.tar.gz")
    assert found.reason == 'its setup.py reads the installed torch (version("torch"))'
    assert found.build_requires == (
        "setuptools>=64",
        "wheel",
        "setuptools_scm>=8",
        "packaging==23.2",
    )


def test_an_import_of_torch_or_a_build_requirement_on_it_is_found() -> None:
    imports = sdist(
        {"setup.py": "import os\nfrom torch.utils.cpp_extension import BuildExtension\n"}
    )
    found = read_sdist(imports, "pkg-1.0.tar.gz")
    assert found.reason is not None and found.build_requires == ("setuptools>=40.8.0",)
    pyproject = '[build-system]\nrequires = ["setuptools", "torch>=2.1"]\n'
    found = read_sdist(sdist({"pyproject.toml": pyproject}, kind="zip"), "pkg-1.0.zip")
    assert found.reason == "its build-system requires torch>=2.1"
    assert found.build_requires == ("setuptools",)


def test_a_plain_sdist_is_not_built_against_torch() -> None:
    plain = sdist(
        {
            "setup.py": "from setuptools import setup\nsetup(install_requires=['torch'])\n",
            # Files below the top level (a vendored test) are not the build's.
            "tests/setup.py": "import torch\n",
        }
    )
    assert read_sdist(plain, "pkg-1.0.tar.gz").reason is None
    assert read_sdist(b"not an archive", "pkg-1.0.tar.gz").reason is None


def test_uv_prepares_them_beside_the_locked_torch_keyed_by_it() -> None:
    inp = LockInput(
        requirements=("torch==2.5.1+cu121", "axolotl==0.9.2"),
        routes=(),
        default_index="https://pypi.org/simple",
        python="3.11",
        platform="linux-x86_64",
        python_platform="x86_64-manylinux_2_28",
    )
    args = uv_compile_args(
        "uv",
        inp,
        upgrade=False,
        cache_dir=None,
        no_build_isolation=("axolotl",),
        build_python="/scratch/torch-build/venv/bin/python",
    )
    assert args[args.index("--no-build-isolation-package") + 1] == "axolotl"
    # uv's cached metadata of an isolated build (torch "2.6.0") is not reused.
    assert args[args.index("--config-settings-package") + 1] == (
        "axolotl:cudalock-torch=2.5.1+cu121"
    )
    assert args[args.index("--python") + 1] == "/scratch/torch-build/venv/bin/python"
