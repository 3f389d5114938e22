"""``uv build`` of the checkout: the sdist builds, and the wheel built from it holds every module
of ``src/cudalock`` and the data cudalock reads at run time (``compat_matrix/``, ``templates/``).

Built without build isolation (hatchling is a test dependency), so no index is needed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.index import offline_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")


def _tracked(*paths: str) -> list[str]:
    """Files git tracks under ``paths`` (what a clean checkout holds)."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--", *paths],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in listed.splitlines() if line]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert UV is not None, "uv is a dependency of cudalock"
    out = tmp_path_factory.mktemp("dist")
    env = offline_env() | {"UV_PYTHON": sys.executable}
    done = subprocess.run(
        [UV, "build", "--offline", "--no-build-isolation", "--out-dir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_the_sdist_holds_the_sources_the_tests_and_the_docs(built: Path) -> None:
    (sdist,) = built.glob("cudalock-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    missing = [
        path
        for path in _tracked("src/cudalock", "compat_matrix", "templates", "docs", "README.md")
        if path not in names
    ]
    assert missing == []
    assert not [name for name in names if ":" in name]  # archive member names any tool takes


def test_the_wheel_holds_every_module_and_the_shipped_data(built: Path) -> None:
    (wheel,) = built.glob("cudalock-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    modules = [
        path.removeprefix("src/")
        for path in _tracked("src/cudalock")
        if path.endswith((".py", "py.typed"))
    ]
    data = [f"cudalock/_data/{path}" for path in _tracked("compat_matrix", "templates")]
    assert modules and data
    assert [path for path in [*modules, *data] if path not in names] == []
