"""conda environments made by real clients from cudalock's unedited files, without conda-forge.

A local channel stands in for conda-forge (tests/support/conda_channel.py: python, pip and
cuda-version with their real names and versions, built once per machine with py-rattler-build);
``channel_alias`` maps the name ``conda-forge`` to it, the mechanism mirrors use. On it:
py-rattler solves and installs what environment.yml lists, pip installs its ``pip:`` section
the way conda runs it, and ``bootstrap --format conda --create`` builds a working environment
through the py-rattler creator with a relative and an absolute ``-o`` (and through
conda/mamba/micromamba where this machine has one).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from cudalock.envfiles.wheelsahead import DOWNLOAD as DOWNLOAD_AHEAD
from tests.support.cli import cudalock
from tests.support.conda_channel import LocalChannel, channel_for_tests
from tests.support.index import IndexServer, offline_env, serve_indexes
from tests.support.wheels import StandIn, torch_standin

# The first test also pays for building the local channel (minutes, once per machine).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

PLANNED_TORCH = "2.1.0+cu121"
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
CONDA_CLIENTS = ("micromamba", "mamba", "conda", "pixi")


@pytest.fixture(scope="session")
def channel(tmp_path_factory: pytest.TempPathFactory) -> LocalChannel:
    # Kept beside pytest's numbered temporary directories, so later runs find it built.
    return channel_for_tests(tmp_path_factory.getbasetemp().parent / "cudalock-conda-channel")


@dataclass
class Scene:
    server: IndexServer
    root: Path
    channel: LocalChannel

    def env(self, **extra: str) -> dict[str, str]:
        """No conda client on PATH, conda's channel_alias pointing at the local channel, and a
        home of its own (no condarc, rattler's cache inside the test)."""
        path = [
            d
            for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any((Path(d) / tool).exists() for tool in CONDA_CLIENTS)
        ]
        home = self.root / "home"
        home.mkdir(exist_ok=True)
        env = offline_env() | {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), *path]),
            "HOME": str(home),
            "CONDA_CHANNEL_ALIAS": self.channel.alias,
            "RATTLER_CACHE_DIR": str(self.root / "rattler-cache"),
        }
        env.pop("CONDA_PREFIX", None)
        env.pop("CONDARC", None)
        return env | extra

    def bootstrap_args(self, out: str | Path, *more: str) -> list[str]:
        return [
            "bootstrap",
            "-o",
            str(out),
            "--format",
            "conda",
            "--driver-version",
            "535.104.05",
            "--compute-capability",
            "8.0",
            "--torch",
            "==2.1.0",
            "--python",
            PYTHON,
            "--pytorch-index",
            self.server.pytorch_url,
            "--pypi-index",
            self.server.pypi_url,
            *more,
        ]


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory, channel: LocalChannel) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("conda-e2e")
    pytorch = {
        "cu121": [
            torch_standin(PLANNED_TORCH, "12.1"),
            StandIn("torchvision", "0.16.0+cu121", requires_dist=["torch==2.1.0"]),
        ]
    }
    pypi = [
        torch_standin("2.15.0", "13.2"),
        StandIn("finetunekit", "1.0", requires_dist=["torch>=2.0", "helperlib>=1"]),
        StandIn("helperlib", "1.2"),
    ]
    with serve_indexes(root, pytorch=pytorch, pypi=pypi) as server:
        yield Scene(server=server, root=root, channel=channel)


def _installed(python: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json; print(json.dumps("
        "{d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    done = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True, env=offline_env()
    )
    return dict(json.loads(done.stdout))


def _rattler_install(
    channel: LocalChannel, channels: list[str], specs: list[str], prefix: Path
) -> list[str]:
    import rattler

    config = rattler.ChannelConfig(channel_alias=channel.alias)

    async def run() -> list[str]:
        records = await rattler.solve(
            [rattler.Channel(c, config) for c in channels],
            specs,
            platforms=[rattler.Subdir("linux-64"), rattler.Subdir("noarch")],
            virtual_packages=rattler.VirtualPackage.detect(),
        )
        await rattler.install(records, target_prefix=prefix, show_progress=False)
        return sorted(f"{r.name.normalized}={r.version}" for r in records)

    return asyncio.run(run())


def test_py_rattler_installs_environment_yml_and_pip_installs_its_section_as_conda_does(
    scene: Scene, tmp_path: Path
) -> None:
    done = cudalock(*scene.bootstrap_args("out"), cwd=tmp_path, env=scene.env())
    assert done.returncode == 0, done.stderr + done.stdout
    out = tmp_path / "out"
    document = yaml.safe_load((out / "environment.yml").read_text())
    conda_specs = [d for d in document["dependencies"] if isinstance(d, str)]
    (pip_section,) = [d["pip"] for d in document["dependencies"] if isinstance(d, dict)]
    assert conda_specs == [f"python={PYTHON}", "pip"]

    prefix = tmp_path / "env"
    installed = _rattler_install(scene.channel, document["channels"], conda_specs, prefix)
    assert f"python={scene.channel.python_version}" in installed
    assert f"pip={scene.channel.pip_version}" in installed
    python = prefix / "bin" / "python"
    shown = subprocess.run(
        [str(python), "-c", "import sys, ssl, sqlite3; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(shown.stdout.strip()) == prefix

    # conda writes the pip: lines to a requirements file beside environment.yml and runs
    # 'python -m pip install -U -r FILE --exists-action=b' (shared/research/conda_local_channel.md).
    with tempfile.NamedTemporaryFile(
        "w", dir=out, prefix="condaenv.", suffix=".requirements.txt", delete=False
    ) as handle:
        handle.write("\n".join(pip_section) + "\n")
    pip = [str(python), "-m", "pip", "install", "-U", "-r", handle.name, "--exists-action=b"]
    result = subprocess.run(pip, cwd=tmp_path, capture_output=True, text=True, env=offline_env())
    assert result.returncode == 0, result.stdout + result.stderr
    packages = _installed(python)
    assert packages["torch"] == PLANNED_TORCH
    assert packages["torchvision"] == "0.16.0+cu121"
    # Nothing but the locked closure: the newer torch on the PyPI-like index was never read.
    assert not scene.server.requested("/pypi/files/torch-2.15.0*.whl")


def test_create_with_a_relative_o_builds_a_working_environment_with_py_rattler(
    scene: Scene, tmp_path: Path
) -> None:
    args = scene.bootstrap_args("caseC", "--framework", "finetunekit", "--create")
    done = cudalock(*args, cwd=tmp_path, env=scene.env(), timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    prefix = tmp_path / "caseC" / ".conda-env"
    assert "with py-rattler" in done.stdout
    assert "environment ready" in done.stdout
    packages = _installed(prefix / "bin" / "python")
    assert packages["torch"] == PLANNED_TORCH
    assert packages["finetunekit"] == "1.0" and packages["helperlib"] == "1.2"
    assert (prefix / "conda-meta").is_dir()
    assert not (tmp_path / "caseC" / "caseC").exists()

    # The same plan again: the environment is checked and reused.
    again = cudalock(*args, "--force", cwd=tmp_path, env=scene.env(), timeout=600)
    assert again.returncode == 0, again.stderr + again.stdout
    assert "reusing" in again.stdout and "made from this plan" in again.stdout


def test_the_torch_wheels_download_while_uv_resolves_and_the_environment_is_made(
    scene: Scene, tmp_path: Path
) -> None:
    # uv's cache on (the other tests have none): the torch wheel is downloaded into it while
    # the closure resolves, and install.sh in the new conda environment takes it from there.
    env = scene.env(UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    del env["UV_NO_CACHE"]
    wheel = scene.server.file_path(f"torch-{PLANNED_TORCH}-py3-none-any.whl")
    before = len(scene.server.requested(wheel))
    args = scene.bootstrap_args("out", "--framework", "finetunekit", "--create")
    done = cudalock(*args, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    log = (tmp_path / "out" / "cudalock-bootstrap.log").read_text()
    ahead = log.index(f"### {DOWNLOAD_AHEAD}")
    assert f"torch=={PLANNED_TORCH}" in log[ahead:]
    assert ahead < log.index("### install.sh")
    assert len(scene.server.requested(wheel)) - before == 1
    packages = _installed(tmp_path / "out" / ".conda-env" / "bin" / "python")
    assert packages["torch"] == PLANNED_TORCH


def test_create_with_an_absolute_o_and_a_prefix_elsewhere(scene: Scene, tmp_path: Path) -> None:
    out = tmp_path / "abs" / "env-files"
    prefix = tmp_path / "prefixes" / "ft"
    args = scene.bootstrap_args(out, "--create", "--venv", str(prefix))
    done = cudalock(*args, cwd=scene.root, env=scene.env(), timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    assert _installed(prefix / "bin" / "python")["torch"] == PLANNED_TORCH


def test_a_failed_create_offers_to_remove_nothing_when_nothing_was_made(
    scene: Scene, tmp_path: Path
) -> None:
    empty = tmp_path / "mirror"  # a channel_alias under which conda-forge has nothing
    (empty / "conda-forge" / "noarch").mkdir(parents=True)
    env = scene.env(CONDA_CHANNEL_ALIAS=empty.as_uri())
    done = cudalock(*scene.bootstrap_args("caseC", "--create"), cwd=tmp_path, env=env)
    assert done.returncode == 3, done.stderr + done.stdout
    assert "py-rattler could not create" in done.stderr
    assert "remove" not in done.stderr and "rm -rf" not in done.stderr
    assert not (tmp_path / "caseC" / ".conda-env").exists()
    assert "Traceback" not in done.stderr


def test_an_environment_not_made_from_this_plan_is_not_reused(scene: Scene, tmp_path: Path) -> None:
    prefix = tmp_path / "other"
    _rattler_install(scene.channel, ["conda-forge"], ["python", "pip", "cuda-version=12.1"], prefix)
    args = scene.bootstrap_args("out", "--create", "--venv", str(prefix))
    done = cudalock(*args, cwd=tmp_path, env=scene.env(), timeout=600)
    assert done.returncode == 2, done.stderr + done.stdout
    assert f"the conda environment at {prefix} cannot be reused" in done.stderr
    assert "not made by cudalock bootstrap --create" in done.stderr
    assert f"Remove it (rm -rf {prefix})" in done.stderr
    assert "Traceback" not in done.stderr


def test_cuda_version_constrains_the_driver_and_conda_override_cuda_stands_in_for_it(
    scene: Scene, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudalock.envfiles.rattler import create_prefix
    from cudalock.envfiles.render import CondaPart
    from cudalock.errors import EnvironmentFailure

    part = CondaPart(("conda-forge",), (f"python={PYTHON}", "pip", "cuda-version=12.1"))
    lines: list[str] = []
    monkeypatch.setenv("RATTLER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA", "11.8")  # a driver too old for CUDA 12
    with pytest.raises(EnvironmentFailure, match="cuda-version"):
        create_prefix(
            tmp_path / "old",
            part,
            subdir="linux-64",
            channel_alias=scene.channel.alias,
            environ=os.environ,
            echo=lines.append,
        )
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA", "12.2")  # the target's driver
    installed = create_prefix(
        tmp_path / "target",
        part,
        subdir="linux-64",
        channel_alias=scene.channel.alias,
        environ=os.environ,
        echo=lines.append,
    )
    assert "cuda-version-12.1-h1d6eff3_3" in installed
    assert not any("no NVIDIA driver" in line for line in lines)


@pytest.mark.parametrize("client", ["micromamba", "mamba", "conda"])
def test_create_through_a_conda_client_on_this_machine(
    scene: Scene, tmp_path: Path, client: str
) -> None:
    executable = shutil.which(client)
    if executable is None:
        pytest.skip(f"no {client} on this machine")
    condarc = tmp_path / "condarc.yml"  # conda reads a CONDARC whose name ends in .yml
    condarc.write_text(
        f"channel_alias: {scene.channel.alias}\n"
        f"pkgs_dirs: [{tmp_path / 'pkgs'}]\n"
        f"envs_dirs: [{tmp_path / 'envs'}]\n"
        "notify_outdated_conda: false\n"
        # A user's usual setting: --override-channels must keep it out of the solve.
        "channels: [defaults]\n"
    )
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / client).symlink_to(executable)
    env = scene.env(CONDARC=str(condarc), MAMBARC=str(condarc))
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    env.pop("CONDA_CHANNEL_ALIAS")
    done = cudalock(
        *scene.bootstrap_args("caseC", "--create", "--name", "ft"),
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"with {client}" in done.stdout
    assert f"note: {condarc} adds the 'defaults' channel" in done.stdout
    assert _installed(tmp_path / "envs" / "ft" / "bin" / "python")["torch"] == PLANNED_TORCH


# --------------------------------------------------------------------------------------------
# --format pixi

PIXI_SCHEMA = Path(__file__).parents[1] / "fixtures" / "pixi" / "schema.json"


def test_pixi_manifest_validates_pins_the_closure_and_its_conda_part_solves(
    scene: Scene, tmp_path: Path
) -> None:
    import jsonschema
    import rattler

    from cudalock.tomlfile import tomllib

    args = scene.bootstrap_args("out", "--framework", "finetunekit")
    args[args.index("conda")] = "pixi"
    done = cudalock(*args, cwd=tmp_path, env=scene.env())
    assert done.returncode == 0, done.stderr + done.stdout
    assert "pixi install" in done.stdout
    text = (tmp_path / "out" / "pixi.toml").read_text()
    manifest = tomllib.loads(text)
    schema = json.loads(PIXI_SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(manifest)

    # The target driver's CUDA (535.104.05: 12.2), declared on the platform as pixi documents.
    assert manifest["workspace"]["platforms"] == [{"platform": "linux-64", "cuda": "12.2"}]
    assert manifest["workspace"]["channels"] == ["conda-forge"]
    assert manifest["dependencies"] == {"python": f"{PYTHON}.*", "pip": "*"}
    pypi = manifest["pypi-dependencies"]
    cu121 = f"{scene.server.pytorch_url}/cu121"
    assert pypi["torch"] == {"version": f"=={PLANNED_TORCH}", "index": cu121}
    assert pypi["torchvision"] == {"version": "==0.16.0+cu121", "index": cu121}
    assert pypi["finetunekit"] == "==1.0" and pypi["helperlib"] == "==1.2"
    assert manifest["pypi-options"] == {"index-url": scene.server.pypi_url}

    # Its conda part, solved by py-rattler for the platform it declares.
    config = rattler.ChannelConfig(channel_alias=scene.channel.alias)
    cuda = rattler.GenericVirtualPackage(
        rattler.PackageName("__cuda"), rattler.Version("12.2"), rattler.BuildString("0")
    )
    specs = [f"{name} {version}" for name, version in manifest["dependencies"].items()]

    async def solve() -> list[str]:
        records = await rattler.solve(
            [rattler.Channel(c, config) for c in manifest["workspace"]["channels"]],
            [*specs, "cuda-version 12.1.*"],  # and the CUDA pin the toolkit would bring
            platforms=[rattler.Subdir("linux-64"), rattler.Subdir("noarch")],
            virtual_packages=[cuda],
        )
        return sorted(r.name.normalized for r in records)

    assert asyncio.run(solve()) == ["cuda-version", "pip", "python"]

    # lock --check reads the pixi.toml beside the lock: current, then stale once edited.
    check = ["lock", "--check", "-o", "out"]
    assert cudalock(*check, cwd=tmp_path, env=scene.env()).returncode == 0
    (tmp_path / "out" / "pixi.toml").write_text(
        text.replace('helperlib = "==1.2"', 'helperlib = "==1.1"')
    )
    stale = cudalock(*check, cwd=tmp_path, env=scene.env())
    assert stale.returncode == 1, stale.stderr + stale.stdout
    assert "pixi.toml pins helperlib==1.1, the lock has 1.2" in stale.stdout + stale.stderr


def test_pixi_create_needs_pixi_on_path(scene: Scene, tmp_path: Path) -> None:
    args = scene.bootstrap_args("out", "--create")
    args[args.index("conda")] = "pixi"
    done = cudalock(*args, cwd=tmp_path, env=scene.env())
    if shutil.which("pixi", path=scene.env()["PATH"]):
        pytest.skip("pixi is on PATH")
    assert done.returncode == 3, done.stderr + done.stdout
    assert "pixi is not on PATH" in done.stderr
    assert not (tmp_path / "out").exists()  # known before anything was resolved or written


@pytest.mark.parametrize("client", ["micromamba", "mamba", "conda"])
def test_conda_lock_locks_the_conda_lock_form_as_pylock_toml_does(
    scene: Scene, tmp_path: Path, client: str
) -> None:
    # conda-lock solves the conda part with a conda client (none is on PyPI or in Debian).
    executable = shutil.which(client)
    if executable is None:
        pytest.skip(f"no {client} on this machine")
    done = cudalock(*scene.bootstrap_args("out", "--framework", "finetunekit"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    condarc = tmp_path / "condarc.yml"
    condarc.write_text(f"channel_alias: {scene.channel.alias}\npkgs_dirs: [{tmp_path / 'pkgs'}]\n")
    mapping = tmp_path / "mapping.json"  # conda-lock would otherwise download its name mapping
    mapping.write_text("{}")
    env = scene.env(CONDARC=str(condarc), MAMBARC=str(condarc))
    conda_lock = Path(sys.executable).parent / "conda-lock"
    command = [
        str(conda_lock),
        "lock",
        "-f",
        "environment.conda-lock.yml",
        "--conda",
        executable,
        "--pypi_to_conda_lookup_file",
        str(mapping),
    ]
    locked = subprocess.run(
        command, cwd=tmp_path / "out", env=env, capture_output=True, text=True, timeout=600
    )
    assert locked.returncode == 0, locked.stdout + locked.stderr
    lock = yaml.safe_load((tmp_path / "out" / "conda-lock.yml").read_text())
    pip = {p["name"]: p["version"] for p in lock["package"] if p["manager"] == "pip"}
    from cudalock.tomlfile import tomllib

    pylock = tomllib.loads((tmp_path / "out" / "pylock.toml").read_text())
    assert pip == {p["name"]: p["version"] for p in pylock["packages"]}
