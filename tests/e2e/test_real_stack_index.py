"""The recorded real fine-tuning closure, served on 127.0.0.1, behaves as the real indexes do.

Real uv and real pip against the stand-in PyPI and PyTorch indexes of ``tests/support/
realstack.py``: llamafactory + DeepSpeed with torch pinned to a CUDA build and routed to its index
resolves to the same 135 packages real PyPI gave (torch family aside), the lock is larger than a
pipe buffer, the closure installs with ``--no-deps``, and the DeepSpeed sdist records the torch it
was built against only when built without isolation.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from cudalock.request import TORCH_FAMILY
from tests.support.index import PEP691_JSON, IndexServer, offline_env
from tests.support.realstack import (
    Recording,
    TorchBuild,
    load_recording,
    pinned_requirements,
)

UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
PLATFORM = ["--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28"]
LLAMAFACTORY = "llamafactory[metrics,deepspeed]==0.9.4"
#: A pipe buffer on Linux: a child writing more than this to an unread pipe blocks.
PIPE_BUFFER = 64 * 1024


@pytest.fixture(scope="module")
def recording() -> Recording:
    return load_recording()


@pytest.fixture(scope="module")
def build(recording: Recording) -> TorchBuild:
    return recording.torch_build("2.5.1")


def uv_compile(cwd: Path, source: str, *flags: str) -> subprocess.CompletedProcess[str]:
    assert UV is not None
    command = [
        UV,
        "pip",
        "compile",
        source,
        *PLATFORM,
        "--no-config",
        "--no-header",
        "--python",
        sys.executable,
        *flags,
    ]
    return subprocess.run(
        command,
        cwd=cwd,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def routed_project(
    directory: Path, server: IndexServer, build: TorchBuild, requirements: Sequence[str]
) -> Path:
    """A pyproject whose torch family is pinned to ``build`` and routed to its explicit index."""
    pins = [f"{name}=={version}" for name, version in build.pins().items()]
    sources = "".join(f'{name} = {{ index = "pytorch" }}\n' for name in TORCH_FAMILY)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pyproject.toml").write_text(
        '[project]\nname = "closure-probe"\nversion = "0"\n'
        f"dependencies = {json.dumps([*requirements, *pins])}\n\n"
        f"[tool.uv.sources]\n{sources}\n"
        f'[[tool.uv.index]]\nname = "pytorch"\nurl = "{server.pytorch_url}/{build.variant}"\n'
        "explicit = true\n",
        encoding="utf-8",
    )
    return directory


@dataclass(frozen=True)
class Closure:
    """The compiled llamafactory + DeepSpeed closure, as requirements (with hashes) and pylock."""

    directory: Path
    pins: dict[str, str]
    pylock: str


@pytest.fixture(scope="module")
def closure(
    real_stack: IndexServer, build: TorchBuild, tmp_path_factory: pytest.TempPathFactory
) -> Closure:
    project = routed_project(tmp_path_factory.mktemp("closure"), real_stack, build, [LLAMAFACTORY])
    default = ["--default-index", real_stack.pypi_url]
    for fmt, output in (("requirements.txt", "requirements.txt"), ("pylock.toml", "pylock.toml")):
        done = uv_compile(
            project,
            "pyproject.toml",
            *default,
            "--format",
            fmt,
            "--generate-hashes",
            "--output-file",
            output,
        )
        assert done.returncode == 0, done.stderr
    return Closure(
        directory=project,
        pins=pinned_requirements((project / "requirements.txt").read_text()),
        pylock=(project / "pylock.toml").read_text(),
    )


def _get(url: str, accept: str = "") -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as answer:
        data: bytes = answer.read()
        return data


# -- the recording --------------------------------------------------------------------------


def test_recording_has_the_size_and_shape_of_the_real_closure(recording: Recording) -> None:
    assert len(recording.releases) >= 100
    for framework in (
        "llamafactory",
        "transformers",
        "peft",
        "trl",
        "accelerate",
        "datasets",
        "deepspeed",
    ):
        assert len(recording.versions(framework)) >= 2, framework
    majors = {version.split(".")[0] for version in recording.versions("transformers")}
    assert {"4", "5"} <= majors
    # DeepSpeed is on PyPI as sdists only, under their real names.
    for version in recording.versions("deepspeed"):
        assert recording.release("deepspeed", version).files == (f"deepspeed-{version}.tar.gz",)
    # Every recorded version can be installed here, from a wheel for this host or an sdist.
    host = set(sys_tags())
    for releases in recording.releases.values():
        for release in releases.values():
            assert any(
                not f.endswith(".whl") or host & parse_wheel_filename(f)[3] for f in release.files
            ), (release.name, release.version)


def test_transformers_torch_extra_moves_its_torch_floor(recording: Recording) -> None:
    """Some recorded transformers accept torch 2.5 in their ``torch`` extra, newer ones do not."""
    floors: dict[str, bool] = {}
    for version in recording.versions("transformers"):
        release = recording.release("transformers", version)
        requirements = [Requirement(r) for r in release.requires_dist]
        torch_extra = [
            r
            for r in requirements
            if r.name == "torch" and r.marker is not None and r.marker.evaluate({"extra": "torch"})
        ]
        assert len(torch_extra) == 1, (version, torch_extra)
        floors[version] = torch_extra[0].specifier.contains("2.5.1")
    assert True in floors.values() and False in floors.values(), floors


def test_torch_builds_pin_the_nvidia_libraries_of_their_cuda(recording: Recording) -> None:
    pins: dict[str, set[str]] = {}
    for build in recording.torch_builds:
        torch = recording.release("torch", build.torch)
        nvidia = {
            str(Requirement(r).specifier)
            for r in torch.requires_dist
            if Requirement(r).name == "nvidia-cuda-runtime-cu12"
        }
        assert len(nvidia) == 1, (build, nvidia)
        pins.setdefault(build.variant, set()).update(nvidia)
        # and the nvidia packages themselves are recorded, in the pinned versions
        for line in torch.requires_dist:
            requirement = Requirement(line)
            if requirement.name.startswith("nvidia-"):
                versions = recording.versions(requirement.name)
                assert any(requirement.specifier.contains(v) for v in versions), line
    assert pins["cu121"].isdisjoint(pins["cu128"])


# -- what is served -------------------------------------------------------------------------


def test_pages_serve_the_recorded_metadata(
    real_stack: IndexServer, recording: Recording, build: TorchBuild
) -> None:
    page = json.loads(_get(real_stack.pypi_url + "/transformers/", PEP691_JSON))
    wheel = next(
        f for f in page["files"] if f["filename"] == "transformers-4.57.1-py3-none-any.whl"
    )
    assert wheel["url"].startswith("/pypi/files/packages/")  # files.pythonhosted.org's layout
    metadata = _get(real_stack.base_url + wheel["url"] + ".metadata").decode()
    release = recording.release("transformers", "4.57.1")
    assert [
        line.removeprefix("Requires-Dist: ")
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ")
    ] == list(release.requires_dist)
    assert "Provides-Extra: torch" in metadata.splitlines()

    sdist = next(
        f
        for f in json.loads(_get(real_stack.pypi_url + "/deepspeed/", PEP691_JSON))["files"]
        if f["filename"] == "deepspeed-0.16.9.tar.gz"
    )
    assert "core-metadata" not in sdist  # as on PyPI: installers must build it

    torch_page = json.loads(_get(f"{real_stack.pytorch_url}/{build.variant}/torch/", PEP691_JSON))
    names = {f["filename"] for f in torch_page["files"]}
    assert f"torch-{build.version('torch')}-cp311-cp311-{build.platform_tag}.whl" in names
    nvidia = json.loads(
        _get(f"{real_stack.pytorch_url}/{build.variant}/nvidia-cudnn-cu12/", PEP691_JSON)
    )
    assert [f["filename"] for f in nvidia["files"]] == list(
        recording.release("nvidia-cudnn-cu12", "9.1.0.70").files
    )


# -- uv resolves the closure ----------------------------------------------------------------


def test_uv_resolves_the_real_closure_with_torch_routed(
    closure: Closure, recording: Recording, build: TorchBuild
) -> None:
    real = recording.scenario(LLAMAFACTORY, f"torch=={build.torch}", python="3.11").resolved
    assert len(closure.pins) >= 100
    assert {name: closure.pins[name] for name in TORCH_FAMILY} == build.pins()
    # Everything else is what real uv picked from real PyPI.
    others = {name: version for name, version in closure.pins.items() if name not in TORCH_FAMILY}
    assert others == {name: version for name, version in real.items() if name not in TORCH_FAMILY}
    assert len(closure.pylock.encode()) > PIPE_BUFFER
    assert f'name = "deepspeed"\nversion = "{closure.pins["deepspeed"]}"' in closure.pylock


def test_an_unrouted_torchaudio_comes_from_pypi(
    real_stack: IndexServer, build: TorchBuild, tmp_path: Path
) -> None:
    """llamafactory 0.9.4 requires torchaudio; PyPI's newest no longer pins torch, so it wins."""
    (tmp_path / "requirements.in").write_text(f"{LLAMAFACTORY}\ntorch=={build.version('torch')}\n")
    done = uv_compile(
        tmp_path,
        "requirements.in",
        "--index-url",
        f"{real_stack.pytorch_url}/{build.variant}",
        "--extra-index-url",
        real_stack.pypi_url,
        "--index-strategy",
        "unsafe-best-match",
    )
    assert done.returncode == 0, done.stderr
    pins = pinned_requirements(done.stdout)
    assert pins["torch"] == build.version("torch")
    assert pins["torchaudio"] != build.version("torchaudio")
    assert "+" not in pins["torchaudio"]


def test_first_index_strategy_finds_pypi_torch_first(
    real_stack: IndexServer, build: TorchBuild, tmp_path: Path
) -> None:
    """uv looks at ``--extra-index-url`` before ``--index-url`` and stops at the first index
    that has torch at all: the labelled build is never seen."""
    (tmp_path / "requirements.in").write_text(f"{LLAMAFACTORY}\ntorch=={build.version('torch')}\n")
    done = uv_compile(
        tmp_path,
        "requirements.in",
        "--index-url",
        f"{real_stack.pytorch_url}/{build.variant}",
        "--extra-index-url",
        real_stack.pypi_url,
    )
    assert done.returncode == 1
    assert f"torch=={build.version('torch')}" in done.stderr


def test_transformers_torch_extra_picks_a_version_that_accepts_the_planned_torch(
    real_stack: IndexServer, recording: Recording, build: TorchBuild, tmp_path: Path
) -> None:
    frameworks = ["transformers[torch]", "peft", "trl", "accelerate", "datasets", "deepspeed"]
    project = routed_project(tmp_path, real_stack, build, frameworks)
    done = uv_compile(project, "pyproject.toml", "--default-index", real_stack.pypi_url)
    assert done.returncode == 0, done.stderr
    pins = pinned_requirements(done.stdout)
    real = recording.scenario(*frameworks, f"torch=={build.torch}", python="3.11").resolved
    newest = max(recording.versions("transformers"), key=lambda v: tuple(map(int, v.split("."))))
    assert pins["transformers"] == real["transformers"] != newest


# -- pip installs it ------------------------------------------------------------------------


def _venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return where / "bin" / "python"


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-input", *args],
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _torch_info(python: Path) -> dict[str, str]:
    script = (
        "import json, deepspeed.git_version_info_installed as info; "
        "print(json.dumps(info.torch_info))"
    )
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True)
    info: dict[str, str] = json.loads(done.stdout)
    return info


@pytest.mark.slow
def test_pip_installs_the_closure_and_deepspeed_records_the_torch_it_was_built_against(
    closure: Closure, real_stack: IndexServer, build: TorchBuild, tmp_path: Path
) -> None:
    python = _venv(tmp_path / "env")
    indexes = [
        "--index-url",
        real_stack.pypi_url,
        "--extra-index-url",
        f"{real_stack.pytorch_url}/{build.variant}",
    ]
    done = _pip(
        python,
        "--no-deps",
        "--require-hashes",
        *indexes,
        "-r",
        str(closure.directory / "requirements.txt"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    listed = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, json; print(json.dumps("
            "{d.metadata['Name']: d.version for d in m.distributions()}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {canonicalize_name(k): v for k, v in json.loads(listed.stdout).items()}
    assert installed == closure.pins
    # Built in isolation (pip's default), DeepSpeed's setup.py could not see torch.
    assert _torch_info(python)["version"] == "0.0"

    # Without isolation, against the installed torch: its version and CUDA are recorded.
    done = _pip(
        python,
        "--no-deps",
        "--no-build-isolation",
        "--no-cache-dir",
        "--force-reinstall",
        *indexes,
        f"deepspeed=={closure.pins['deepspeed']}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    major_minor = ".".join(build.torch.split(".")[:2])
    assert _torch_info(python) == {
        "version": major_minor,
        "bf16_support": False,
        "cuda_version": build.cuda,
        "nccl_version": "0.0",
        "hip_version": "0.0",
    }
    requires = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.requires('deepspeed'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "nvidia-ml-py" in requires  # the real setup.py adds it on a CUDA torch
