"""Real fine-tuning stacks end to end: the closure resolved once, installed exactly, every way.

Against the recorded real closure (``real_stack``: llamafactory, transformers, peft, trl,
accelerate, datasets, DeepSpeed as a real-shaped sdist, the torch family on a stand-in PyTorch
index), the real cudalock CLI with real uv, pip and venvs:

- ``bootstrap --create`` for llamafactory 0.9.5 + DeepSpeed on torch 2.8.0+cu128 (130+
  packages, a lock larger than a pipe buffer): llamafactory requires torchaudio, which must come
  from the PyTorch index with torch's label, and DeepSpeed must record the installed torch;
- every other install path — install.sh with pip, ``uv pip sync`` of pylock.toml, pip from
  pylock.toml, ``uv sync`` of the ``--format uv`` project — gives the same environment;
- ``--framework`` repeated resolves transformers, peft, trl, accelerate and datasets together,
  to the versions real uv picked on real PyPI, transformers fitted through its ``torch`` extra;
- a framework whose every matching release needs a newer torch is exit 1, naming the newest
  release that fits and the torch the newest would need.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from cudalock.envfiles.wheelsahead import DOWNLOAD as DOWNLOAD_AHEAD
from cudalock.envfiles.wheelsahead import REST_DOWNLOAD as DOWNLOAD_REST
from cudalock.tomlfile import tomllib
from tests.support.cli import cudalock
from tests.support.index import IndexServer, offline_env
from tests.support.realstack import Recording, TorchBuild, load_recording, pinned_requirements

pytestmark = pytest.mark.slow

UV = Path(sys.executable).with_name("uv")
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
#: A pipe buffer on Linux: a child writing more than this to an unread pipe blocks.
PIPE_BUFFER = 64 * 1024
TARGET = ["--gpu", "A100", "--platform", "linux-x86_64"]
#: The drivers that make the shipped matrix choose the recorded builds.
DRIVER = {"2.5.1": "550.54.14", "2.8.0": "570.86.15"}
LLAMAFACTORY = "llamafactory[metrics]==0.9.5"


@dataclass(frozen=True)
class Stack:
    """One bootstrap of the real closure, and what it needs to be installed again."""

    root: Path
    out: Path
    env: dict[str, str]
    build: TorchBuild
    indexes: list[str]
    #: Requests for each wheel's path while bootstrap ran.
    downloads: Counter[str]


def environment(root: Path, cuda: str) -> dict[str, str]:
    """Offline (no pip/uv configuration), with a uv cache of its own, and a CUDA toolkit of
    torch's CUDA: this host's own toolkit is not part of the environment under test."""
    toolkit = root / f"cuda-{cuda}"
    nvcc = toolkit / "bin" / "nvcc"
    if not nvcc.exists():
        nvcc.parent.mkdir(parents=True)
        nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {cuda}, V{cuda}.1'\n")
        nvcc.chmod(0o755)
    env = {k: v for k, v in offline_env().items() if k != "UV_NO_CACHE"}
    env.update({"UV_CACHE_DIR": str(root / "uv-cache"), "CUDA_HOME": str(toolkit)})
    return env


def request(server: IndexServer, torch: str, *extra: str) -> list[str]:
    return [
        "--driver-version",
        DRIVER[torch],
        *TARGET,
        "--torch",
        torch,
        "--python",
        PYTHON,
        "--pytorch-index",
        server.pytorch_url,
        "--pypi-index",
        server.pypi_url,
        *extra,
    ]


@pytest.fixture(scope="module")
def recording() -> Recording:
    return load_recording()


@pytest.fixture(scope="module")
def created(
    real_stack: IndexServer, recording: Recording, tmp_path_factory: pytest.TempPathFactory
) -> Stack:
    """``bootstrap --format venv --create`` of llamafactory 0.9.5 + DeepSpeed on torch 2.8.0."""
    root = tmp_path_factory.mktemp("real-stack-e2e")
    build = recording.torch_build("2.8.0")
    env = environment(root, build.cuda)
    args = request(real_stack, "2.8.0", "--framework", LLAMAFACTORY, "--with", "deepspeed")
    before = Counter(real_stack.requested("*.whl"))
    done = cudalock(
        "bootstrap",
        "-o",
        "out",
        "--format",
        "venv",
        "--create",
        *args,
        cwd=root,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    downloads = Counter(real_stack.requested("*.whl")) - before
    indexes = ["--index-url", real_stack.pypi_url]
    indexes += ["--extra-index-url", f"{real_stack.pytorch_url}/{build.variant}"]
    return Stack(
        root=root, out=root / "out", env=env, build=build, indexes=indexes, downloads=downloads
    )


def run(
    argv: Sequence[str | os.PathLike[str]], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def installed(python: Path) -> dict[str, str]:
    """Every distribution in the environment (pip, the installer itself, left out)."""
    code = (
        "import importlib.metadata as m, json; print(json.dumps("
        "{d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    found: dict[str, str] = {
        str(canonicalize_name(k)): v for k, v in json.loads(done.stdout).items()
    }
    found.pop("pip", None)
    return found


def torch_info(python: Path) -> dict[str, str]:
    """What DeepSpeed recorded of the torch it was built against (its setup.py writes it)."""
    code = (
        "import json, deepspeed.git_version_info_installed as info; "
        "print(json.dumps(info.torch_info))"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    info: dict[str, str] = json.loads(done.stdout)
    return info


def locked(out: Path) -> dict[str, str]:
    return pinned_requirements(
        (out / "requirements.lock.txt").read_text() + (out / "requirements.last.txt").read_text()
    )


def venv(where: Path, env: dict[str, str], *, with_pip: bool) -> Path:
    if with_pip:
        run([sys.executable, "-m", "venv", where], env, where.parent)
    else:
        run([UV, "venv", "--python", sys.executable, where], env, where.parent)
    return where / "bin" / "python"


# -- bootstrap --create ----------------------------------------------------------------------


def test_create_installs_exactly_the_locked_closure(created: Stack) -> None:
    build = created.build
    python = created.out / ".venv" / "bin" / "python"
    pins = locked(created.out)
    assert len(pins) >= 100
    assert installed(python) == pins
    # llamafactory requires torchaudio: it came from the PyTorch index, with torch's label.
    for name in ("torch", "torchvision", "torchaudio"):
        assert pins[name] == build.version(name)
    lock = (created.out / "pylock.toml").read_text()
    audio = f"{build.version('torchaudio')}".replace("+", "%2B")
    assert f"/whl/{build.variant}/torchaudio-{audio}-cp" in lock
    constraints = (created.out / "constraints.txt").read_text()
    assert f"torchaudio=={build.version('torchaudio')}" in constraints
    # DeepSpeed, an sdist, was built last against the installed torch.
    assert torch_info(python)["version"] == "2.8"
    assert torch_info(python)["cuda_version"] == build.cuda


def test_the_wheels_downloaded_ahead_are_the_locked_ones_each_fetched_once(
    created: Stack, real_stack: IndexServer
) -> None:
    # While uv resolved, bootstrap downloaded what the lock takes from the PyTorch index in an
    # exact version: all of it (the torch family, the nvidia-* and triton wheels torch pins)
    # and nothing else, so no byte of it was fetched for nothing or fetched twice.
    ahead = downloaded_ahead(created)
    lock = tomllib.loads((created.out / "pylock.toml").read_text())
    variant = f"{real_stack.pytorch_url}/{created.build.variant}"
    from_variant = {p["name"]: p["version"] for p in lock["packages"] if p.get("index") == variant}
    assert len(ahead) >= 15
    assert ahead == from_variant
    for package in lock["packages"]:
        if package["name"] in ahead:
            (wheel,) = package["wheels"]
            assert created.downloads[urllib.parse.urlsplit(wheel["url"]).path] == 1, wheel


def log_section(created: Stack, heading: str) -> str:
    """The bootstrap log's section whose ``###`` line starts with ``heading``, up to the next."""
    log = (created.out / "cudalock-bootstrap.log").read_text()
    section = log[log.index(f"\n### {heading}") :].split("\n", 2)[2]
    return section.split("\n### ", 1)[0]


def downloaded_ahead(created: Stack) -> dict[str, str]:
    """Name → version of what the head start downloaded (its command's pins)."""
    command = next(
        line for line in log_section(created, DOWNLOAD_AHEAD).splitlines() if line.startswith("$ ")
    )
    return dict(word.split("==", 1) for word in command.split() if "==" in word)


def test_the_other_wheels_download_once_the_closure_is_resolved_each_fetched_once(
    created: Stack,
) -> None:
    # Once the closure was resolved, bootstrap downloaded the rest of what install.sh's uv installs
    # first: every package of pylock.first.toml with a wheel and no marker, less the head
    # start's. Every wheel install.sh installed was fetched once, nearly all before it ran.
    section = log_section(created, DOWNLOAD_REST)
    first = tomllib.loads((created.out / "pylock.first.toml").read_text())
    with_wheels = [package for package in first["packages"] if package.get("wheels")]
    marked = [package for package in with_wheels if "marker" in package]
    rest = len(with_wheels) - len(marked) - len(downloaded_ahead(created))
    assert rest >= 100
    # The cache lacked torch's wheels, so the rest skipped the dry run: it would only delay.
    assert "--dry-run" not in section
    assert f"Prepared {rest} packages" in section
    for package in with_wheels:
        wheels = package["wheels"]
        fetched = [created.downloads[urllib.parse.urlsplit(w["url"]).path] for w in wheels]
        assert sum(fetched) == 1, package["name"]
    # install.sh's first uv step found the rest in uv's cache: it prepared the marked ones only.
    install = log_section(created, "install.sh").split("Installed", 1)[0]
    assert ("Prepared" not in install) if not marked else (f"Prepared {len(marked)} " in install)


def test_the_lock_is_larger_than_a_pipe_buffer_and_relocking_takes_seconds(
    created: Stack, real_stack: IndexServer
) -> None:
    assert (created.out / "pylock.toml").stat().st_size > PIPE_BUFFER
    relock = created.root / "relock"
    relock.mkdir()
    started = time.monotonic()
    done = cudalock(
        "lock",
        "-o",
        relock,
        "--spec",
        created.out / "cudalock.toml",
        "--upgrade",
        cwd=created.root,
        env=created.env,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert elapsed < 60, f"locking {len(locked(relock))} packages took {elapsed:.0f} s"
    assert locked(relock) == locked(created.out)
    assert (
        cudalock("lock", "-o", created.out, "--check", cwd=created.root, env=created.env).returncode
        == 0
    )


# -- every install path gives the same environment ------------------------------------------


def test_install_sh_with_pip_gives_the_same_environment(created: Stack) -> None:
    python = venv(created.root / "pip-env", created.env, with_pip=True)
    env = created.env | {"PYTHON": str(python), "CUDALOCK_INSTALLER": "pip"}
    done = run(["bash", created.out / "install.sh"], env, created.root)
    assert "cudalock: installing with pip" in done.stdout
    assert "cudalock: verified torch 2.8.0+cu128 (CUDA 12.8)" in done.stdout
    assert installed(python) == installed(created.out / ".venv" / "bin" / "python")
    assert torch_info(python)["version"] == "2.8"


def test_uv_pip_sync_of_the_lock_gives_the_same_environment(created: Stack) -> None:
    python = venv(created.root / "uv-env", created.env, with_pip=False)
    sync: list[str | os.PathLike[str]] = [UV, "pip", "sync", "--python", python, *created.indexes]
    run([*sync, "--config-file", "uv-install.toml", "pylock.toml"], created.env, created.out)
    assert installed(python) == installed(created.out / ".venv" / "bin" / "python")
    assert torch_info(python)["version"] == "2.8"

    # Without the settings, uv builds DeepSpeed in isolation: it records no torch at all.
    bare = venv(created.root / "uv-bare", created.env, with_pip=False)
    isolated = created.env | {"UV_NO_CACHE": "1"}
    run(
        [UV, "pip", "sync", "--python", bare, *created.indexes, "pylock.toml"],
        isolated,
        created.out,
    )
    assert torch_info(bare)["version"] == "0.0"


def test_pip_from_pylock_then_deepspeed_last_gives_the_same_environment(created: Stack) -> None:
    python = venv(created.root / "pip-pylock-env", created.env, with_pip=False)
    # pip reads pylock.toml from 26.3: this interpreter's pip installs into the venv.
    pip: list[str | os.PathLike[str]] = [sys.executable, "-m", "pip", "--python", python]
    pip += ["install", "--no-input", *created.indexes]
    run([*pip, "-r", "pylock.toml"], created.env, created.out)
    run(
        [
            *pip,
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "--force-reinstall",
            "--require-hashes",
            "-r",
            "requirements.last.txt",
        ],
        created.env,
        created.out,
    )
    assert installed(python) == installed(created.out / ".venv" / "bin" / "python")
    assert torch_info(python)["version"] == "2.8"


def test_uv_sync_of_the_uv_project_gives_the_same_environment(
    created: Stack, real_stack: IndexServer
) -> None:
    args = request(real_stack, "2.8.0", "--framework", LLAMAFACTORY, "--with", "deepspeed")
    done = cudalock(
        "bootstrap", "-o", "uv-project", "--format", "uv", *args, cwd=created.root, env=created.env
    )
    assert done.returncode == 0, done.stderr
    project = created.root / "uv-project"
    # uv reads the project's own [tool.uv] settings (UV_NO_CONFIG would drop its indexes and
    # build rule); an empty configuration directory keeps this machine's uv.toml out.
    env = {k: v for k, v in created.env.items() if k != "UV_NO_CONFIG"}
    env["XDG_CONFIG_HOME"] = str(created.root / "no-config")
    run([UV, "sync", "--python", sys.executable], env, project)
    python = project / ".venv" / "bin" / "python"
    assert installed(python) == installed(created.out / ".venv" / "bin" / "python")
    assert torch_info(python)["version"] == "2.8"


# -- frameworks fitted to the planned torch --------------------------------------------------


def lock_for(
    server: IndexServer, root: Path, name: str, torch: str, *frameworks: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``cudalock lock`` of the frameworks with DeepSpeed (no torchvision: none of them asks)."""
    out = root / name
    out.mkdir()
    args = request(server, torch, "--with", "none")
    args += [a for f in frameworks for a in ("--framework", f)]
    cuda = "12.4" if torch == "2.5.1" else "12.8"
    done = cudalock(
        "lock", "-o", out, "--with", "deepspeed", *args, cwd=root, env=environment(root, cuda)
    )
    return done, out


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("frameworks")


def test_repeated_frameworks_resolve_together_as_real_uv_on_real_pypi_does(
    real_stack: IndexServer, recording: Recording, work: Path
) -> None:
    names = ["transformers", "peft", "trl", "accelerate", "datasets"]
    done, out = lock_for(real_stack, work, "together", "2.5.1", *names)
    assert done.returncode == 0, done.stderr
    pins = locked(out)
    real = recording.scenario(
        "transformers[torch]",
        "peft",
        "trl",
        "accelerate",
        "datasets",
        "deepspeed",
        "torch==2.5.1",
        python="3.11",
    ).resolved
    family = {"torch", "torchvision", "torchaudio"}
    # DeepSpeed's build backend and (on a CUDA torch) the nvidia-ml-py its build requires.
    added = {"setuptools", "nvidia-ml-py"} - set(real)
    assert {k: v for k, v in pins.items() if k not in family | added} == {
        k: v for k, v in real.items() if k not in family
    }
    assert pins["transformers"] == "5.19.0"
    assert "transformers: asked for as transformers[torch]" in done.stderr
    assert "torch>=2.5 (its 'torch' extra)" in done.stderr


def test_a_framework_is_fitted_through_the_extra_that_declares_torch(
    real_stack: IndexServer, recording: Recording, work: Path
) -> None:
    newest = max(recording.versions("transformers"), key=lambda v: tuple(map(int, v.split("."))))
    done, out = lock_for(real_stack, work, "fitted", "2.5.1", "transformers")
    assert done.returncode == 0, done.stderr
    assert locked(out)["transformers"] == "5.19.0" != newest
    record = (out / "pylock.toml").read_text()
    assert 'requested = "transformers[torch]"' in record
    assert 'extras-added = ["torch"]' in record


def test_no_release_that_fits_is_exit_1_naming_the_newest_that_does(
    real_stack: IndexServer, work: Path
) -> None:
    done, out = lock_for(real_stack, work, "misfit", "2.5.1", "transformers>=5.24")
    assert done.returncode == 1, done.stderr
    assert (
        "transformers>=5.24 does not fit torch 2.5.1+cu124: transformers 5.24.0 requires "
        "torch>=2.6 (its 'torch' extra); the newest transformers that accepts torch "
        "2.5.1+cu124 is 5.19.0"
    ) in done.stderr
    assert (
        "hint: Give --framework 'transformers==5.19.0', or a torch transformers 5.24.0 accepts: "
        "--torch '>=2.6'" in done.stderr
    )
    assert not list(out.iterdir())
