"""DeepSpeed is built against the installed torch once per torch build: a second environment
with the same plan installs the wheel the first one built, ``--no-cache`` builds anew, and a
different torch build never gets it.

Real cudalock, uv, pip, venv and bash against the stand-in indexes of tests/e2e/test_lock.py;
DeepSpeed is a stand-in sdist with the torch probe of the real setup.py, which also writes a
line to ``$STANDIN_BUILD_LOG`` each time install.sh's build step makes a wheel of it against an
importable torch.
"""

from __future__ import annotations

import ast
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from cudalock.envfiles.render import build_script
from cudalock.lock.uv import find_uv
from tests.e2e.test_lock import REQUEST, TARGET, pypi_stand_ins, pytorch_stand_ins
from tests.support.cli import cudalock
from tests.support.index import IndexServer, offline_env, serve_indexes
from tests.support.realstack import Release, deepspeed_sdist

pytestmark = pytest.mark.slow

#: PyPI's build of the planned release: the same version without the +cu121 label (=== leaves
#: out the labelled files that == would also match).
TORCH = ["torch===2.1.0"]

BUILD_LOGGER = """
import os as _os
# Every build of the wheel, whichever installer runs it: install.sh's first step installs
# pylock.first.toml, which leaves DeepSpeed to the build step, so only that step builds it.
if torch_available and _os.environ.get("STANDIN_BACKEND_HOOK") == "build_wheel":
    with open(_os.environ["STANDIN_BUILD_LOG"], "a") as _log:
        _log.write(torch.__version__ + "\\n")
"""


def _deepspeed() -> object:
    release = Release(
        name="deepspeed",
        version="0.19.8",
        requires_dist=("torch", "packaging>=20.0"),
        provides_extra=(),
        requires_python=None,
        files=("deepspeed-0.19.8.tar.gz",),
    )
    standin = deepspeed_sdist(release, "deepspeed-0.19.8.tar.gz")
    files = dict(standin.files)
    files["setup.py"] += BUILD_LOGGER
    return replace(standin, files=files)


@dataclass
class Cache:
    server: IndexServer
    root: Path

    @property
    def builds(self) -> list[str]:
        log = self.root / "builds.log"
        return log.read_text().splitlines() if log.exists() else []

    @property
    def env(self) -> dict[str, str]:
        (self.root / "no-cuda").mkdir(exist_ok=True)
        return offline_env() | {
            "CUDALOCK_WHEEL_CACHE": str(self.root / "wheels"),
            "STANDIN_BUILD_LOG": str(self.root / "builds.log"),
            # This machine's CUDA toolkit (if any) is not the plan's: the audit would object.
            "CUDA_HOME": str(self.root / "no-cuda"),
        }

    def bootstrap(self, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
        pytorch, pypi = self.server
        done = cudalock(
            "bootstrap",
            "-o",
            str(self.root / name),
            "--format",
            "venv",
            "--create",
            *TARGET,
            *REQUEST,
            "--pytorch-index",
            pytorch,
            "--pypi-index",
            pypi,
            *extra,
            env=self.env,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def build_step(
        self, name: str, requirements: str, *, installer: str = "uv"
    ) -> subprocess.CompletedProcess[str]:
        """install.sh's build step, run alone in environment ``name`` with ``installer``."""
        python = self.root / name / ".venv" / "bin" / "python"
        uv = find_uv() if installer == "uv" else ""
        done = subprocess.run(
            [str(python), "-", installer, uv, requirements, "--index-url", self.server.pypi_url],
            input=build_script(),
            text=True,
            capture_output=True,
            cwd=self.root / name,
            env=self.env | {"PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def torch_info(self, name: str) -> dict[str, object]:
        python = self.root / name / ".venv" / "bin" / "python"
        code = (
            "import importlib.util, pathlib; s = importlib.util.find_spec('deepspeed'); "
            "print(pathlib.Path(s.submodule_search_locations[0], "
            "'git_version_info_installed.py').read_text())"
        )
        text = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, check=True
        ).stdout
        for line in text.splitlines():
            if line.startswith("torch_info="):
                info = ast.literal_eval(line.removeprefix("torch_info="))
                assert isinstance(info, dict)
                return info
        raise AssertionError(text)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cache]:
    root = tmp_path_factory.mktemp("wheel-cache")
    pypi = [s for s in pypi_stand_ins() if s.name != "deepspeed"] + [_deepspeed()]
    with serve_indexes(
        root / "index",
        pytorch={"cu121": pytorch_stand_ins()},
        pypi=pypi,  # type: ignore[arg-type]
    ) as server:
        yield Cache(server, root)


def test_the_first_environment_builds_deepspeed_and_keeps_the_wheel(cache: Cache) -> None:
    done = cache.bootstrap("first")
    assert cache.builds == ["2.1.0+cu121"]
    assert (
        "building against the installed torch"
        in (cache.root / "first" / "cudalock-bootstrap.log").read_text()
    )
    kept = list((cache.root / "wheels").glob("*/deepspeed-0.19.8-*.whl"))
    assert len(kept) == 1, done.stdout
    key = (kept[0].parent / "key.txt").read_text()
    assert "torch=2.1.0+cu121\n" in key and "torch-cuda=12.1\n" in key
    assert cache.torch_info("first")["version"] == "2.1"


def test_a_second_environment_with_the_same_torch_build_reuses_it(cache: Cache) -> None:
    before = cache.builds
    cache.bootstrap("second")
    assert cache.builds == before, "DeepSpeed was built again for the same torch"
    log = (cache.root / "second" / "cudalock-bootstrap.log").read_text()
    assert "reusing deepspeed-0.19.8-py3-none-any.whl" in log
    assert cache.torch_info("second") == cache.torch_info("first")


def test_no_cache_builds_anew(cache: Cache) -> None:
    before = cache.builds
    cache.bootstrap("third", "--no-cache")
    assert cache.builds == [*before, "2.1.0+cu121"]
    assert (
        "building without the wheel cache"
        in (cache.root / "third" / "cudalock-bootstrap.log").read_text()
    )
    assert len(list((cache.root / "wheels").glob("*/*.whl"))) == 1


def test_another_torch_build_never_gets_the_wheel(cache: Cache) -> None:
    # The same release without the +cu121 label (PyPI's build): another torch build.
    before = cache.builds
    env_dir = cache.root / "second"
    python = env_dir / ".venv" / "bin" / "python"
    pypi = cache.server.pypi_url
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--force-reinstall", "-i", pypi, *TORCH],
        check=True,
        capture_output=True,
        env=cache.env,
    )
    done = cache.build_step("second", "requirements.last.txt", installer="pip")
    assert "building against the installed torch" in done.stdout
    assert cache.builds == [*before, "2.1.0"]
    assert len(list((cache.root / "wheels").glob("*/*.whl"))) == 2


def test_uv_builds_and_keeps_only_a_whole_set_of_wheels(cache: Cache) -> None:
    # uv builds what it is given with a cache of the build's own and keeps the wheels it built
    # there; a pinned wheel it merely downloads (packaging) leaves none, so nothing is kept,
    # and the environment is installed all the same.
    env_dir = cache.root / "first"
    locked = (env_dir / "requirements.lock.txt").read_text().splitlines()
    start = next(i for i, line in enumerate(locked) if line.startswith("packaging=="))
    (env_dir / "wheel-only.txt").write_text("\n".join(locked[start : start + 2]) + "\n")
    keys_before = sorted(path.name for path in (cache.root / "wheels").iterdir())
    done = cache.build_step("first", "wheel-only.txt")
    assert "building against the installed torch" in done.stdout
    assert "not kept: uv left no wheel of packaging" in done.stdout
    assert sorted(path.name for path in (cache.root / "wheels").iterdir()) == keys_before


def test_uv_reinstalls_a_kept_wheel_only_over_an_installed_build(cache: Cache) -> None:
    # A fresh environment has no DeepSpeed before this step: a plain install, without uv's
    # --reinstall (which costs a fresh look at the interpreter). Run again where one is
    # installed (perhaps built against another torch), it is replaced.
    log = (cache.root / "second" / "cudalock-bootstrap.log").read_text()
    lines = log.splitlines()
    after = lines.index("cudalock: reusing deepspeed-0.19.8-py3-none-any.whl")
    reuse = next(line for line in lines[after:] if line.startswith("+ "))
    assert "--reinstall" not in reuse
    done = cache.build_step("second", "requirements.last.txt")
    assert "reusing deepspeed-0.19.8-py3-none-any.whl" in done.stdout
    assert any(
        line.startswith("+ ") and line.rstrip().endswith("--reinstall ...")
        for line in done.stdout.splitlines()
    ), done.stdout
