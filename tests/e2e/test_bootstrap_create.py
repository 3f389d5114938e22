"""`cudalock bootstrap --format venv --create` end to end: real cudalock, uv, pip, venv and
bash, against PEP 503/691 indexes served on 127.0.0.1 (no internet).

One virtual environment is built and then reused by the later scenarios (bootstrap reuses an
existing --venv), in this order: a tampered torch wheel stops the first step; the plan is
installed; a hostile-but-valid framework path is installed without executing anything; a
framework that needs an incompatible torch is refused before anything is installed. The indexes
require basic auth and the URLs carry the credentials, so every scenario also proves they reach
uv and pip but never the screen, the log, the lock or cudalock.toml.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import cudalock
from tests.support.index import IndexServer, offline_env, serve_indexes
from tests.support.localproject import make_local_project
from tests.support.wheels import StandIn, torch_standin

pytestmark = pytest.mark.slow

PLANNED_TORCH = "2.1.0+cu121"
USER, SECRET = "alice", "s3cret-token"

PYTORCH_CU121 = [
    torch_standin(PLANNED_TORCH, "12.1"),
    StandIn("torchvision", "0.16.0+cu121", requires_dist=["torch==2.1.0"]),
]
PYPI = [
    # What pip would otherwise take: a newer, unlabelled torch built for CUDA 13.2.
    torch_standin("2.15.0", "13.2"),
    StandIn("torchvision", "0.30.0", requires_dist=["torch==2.15.0"]),
    StandIn("finetunekit", "1.0", requires_dist=["torch>=2.0", "helperlib>=1"]),
    StandIn("helperlib", "1.2"),
    StandIn("finetunekit-nightly", "3.0", requires_dist=["torch>=2.5"]),
    # Fits torch, but needs a package no index has: uv's resolution of the closure fails.
    StandIn("brokenkit", "1.0", requires_dist=["torch>=2.0", "nosuchlib>=1"]),
    # A local framework's build backend (pip builds it in isolation).
    *[
        StandIn("hatchling", "1.27.0", requires_dist=["packaging>=24.2", "pathspec>=0.10.1"]),
        StandIn("packaging", "25.0"),
        StandIn("pathspec", "0.12.1"),
        StandIn("pluggy", "1.6.0"),
        StandIn("trove-classifiers", "2025.5.9.12"),
    ],
]


@dataclass
class Scene:
    server: IndexServer
    root: Path
    out: Path
    venv: Path

    def base_args(self) -> list[str]:
        pytorch, pypi = (url.replace("http://", f"http://{USER}:{SECRET}@") for url in self.server)
        return [
            # Relative, as people type it: the venv must not end up nested inside -o.
            "bootstrap",
            "-o",
            str(self.out.relative_to(self.root)),
            "--format",
            "venv",
            "--driver-version",
            "535.104.05",
            "--compute-capability",
            "8.0",
            "--torch",
            "==2.1.0",
            "--python",
            f"{sys.version_info[0]}.{sys.version_info[1]}",
            "--pytorch-index",
            pytorch,
            "--pypi-index",
            pypi,
        ]

    def cudalock(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = cudalock(*args, env=env, cwd=self.root, timeout=600)
        log = self.out / "cudalock-bootstrap.log"
        shown = done.stdout + done.stderr + (log.read_text() if log.exists() else "")
        assert SECRET not in shown, "index credentials were shown or logged"
        if (self.out / "cudalock.toml").exists():
            assert SECRET not in (self.out / "cudalock.toml").read_text()
        return done

    def venv_python(self, code: str) -> str:
        result = subprocess.run(
            [str(self.venv / "bin" / "python"), "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env=offline_env(),
        )
        return result.stdout.strip()

    def installed(self) -> dict[str, str]:
        code = (
            "import importlib.metadata as m, json; print(json.dumps("
            "{d.metadata['Name']: d.version for d in m.distributions()}))"
        )
        return dict(json.loads(self.venv_python(code)))

    def torch_version_file(self) -> str:
        code = (
            "import importlib.util, pathlib; s = importlib.util.find_spec('torch'); "
            "print(pathlib.Path(s.submodule_search_locations[0], 'version.py').read_text())"
        )
        return self.venv_python(code)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("bootstrap-e2e")
    with serve_indexes(
        root, pytorch={"cu121": PYTORCH_CU121}, pypi=PYPI, auth=(USER, SECRET)
    ) as server:
        yield Scene(server=server, root=root, out=root / "out", venv=root / "out" / ".venv")


def _outputs(directory: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != "cudalock-bootstrap.log"
    }


def test_wheel_not_matching_its_hash_stops_the_first_step_with_exit_3(scene: Scene) -> None:
    wheel = scene.server.file_path(f"torch-{PLANNED_TORCH}-py3-none-any.whl")
    scene.server.tamper(wheel)
    try:
        done = scene.cudalock(
            *scene.base_args(),
            "--framework",
            "finetunekit",
            "--create",
            # uv would otherwise fetch the bad file again before it gives up.
            env=offline_env() | {"UV_HTTP_RETRIES": "0"},
        )
    finally:
        scene.server.clear_faults()
    assert done.returncode == 3, done.stderr + done.stdout
    assert "step 1/4: the locked closure" in done.stderr
    # uv checks the file against the hash in the lock (the index still advertises the original).
    assert "Failed to download `torch==2.1.0+cu121`" in done.stderr
    assert "cudalock-bootstrap.log" in done.stderr and "rm -rf" in done.stderr
    assert "torch" not in scene.installed()  # nothing from the bad file was installed


def test_create_installs_the_locked_closure_and_the_framework_cannot_replace_torch(
    scene: Scene,
) -> None:
    # --force: the first scenario wrote the same files; the venv it left is reused.
    done = scene.cudalock(*scene.base_args(), "--framework", "finetunekit", "--create", "--force")
    assert done.returncode == 0, done.stderr + done.stdout

    installed = scene.installed()
    assert installed["torch"] == PLANNED_TORCH
    assert installed["torchvision"] == "0.16.0+cu121"
    assert installed["finetunekit"] == "1.0"
    assert installed["helperlib"] == "1.2"  # the framework's own dependencies came in
    version_file = scene.torch_version_file()
    assert f"__version__ = '{PLANNED_TORCH}'" in version_file
    assert "cuda: Optional[str] = '12.1'" in version_file
    # The newer torch on the PyPI-like index was never even downloaded.
    assert not scene.server.requested("/pypi/files/torch-2.15.0*.whl")
    assert scene.server.requested("/whl/cu121/torch-2.1.0%2Bcu121-py3-none-any.whl")
    # uv and pip authenticated with the credentials from the URLs (install.sh carries them).
    assert not [r for r in scene.server.requests if r[2] == 401 and r[1].endswith(".whl")]
    assert f"{USER}:{SECRET}@" in (scene.out / "install.sh").read_text()
    for name in ("pylock.toml", "requirements.lock.txt", "uv-install.toml"):
        assert SECRET not in (scene.out / name).read_text()

    # Progress named each step; every step's output is in the log.
    assert "step 1/4: the locked closure" in done.stdout
    assert "step 4/4: verify torch" in done.stdout
    assert "installed with uv" in done.stdout
    log = (scene.out / "cudalock-bootstrap.log").read_text()
    assert "==> cudalock step 2/4: DeepSpeed and anything else built" in log
    assert "cudalock: nothing in the closure is built against torch" in log
    assert f"cudalock: verified torch {PLANNED_TORCH} (CUDA 12.1), 4 locked packages" in log
    assert "environment ready" in done.stdout


def test_second_run_writes_byte_identical_files(scene: Scene) -> None:
    before = _outputs(scene.out)
    assert set(before) >= {
        "install.sh",
        "constraints.txt",
        "requirements.txt",
        "cudalock.toml",
        "pylock.toml",
        "requirements.lock.txt",
        "requirements.last.txt",
        "uv-install.toml",
    }
    refused = scene.cudalock(*scene.base_args(), "--framework", "finetunekit")
    assert refused.returncode == 2
    assert "already exists; pass --force" in refused.stderr
    again = scene.cudalock(*scene.base_args(), "--framework", "finetunekit", "--force")
    assert again.returncode == 0, again.stderr
    assert _outputs(scene.out) == before


def test_hostile_framework_path_is_quoted_and_nothing_is_executed(scene: Scene) -> None:
    hostile = scene.root / "fw dir 'q\" $(touch pwned); touch pwned2 `touch pwned3` x"
    make_local_project(hostile, "localfw", "0.1", requires=["torch>=2.0"])
    done = scene.cudalock(*scene.base_args(), "--framework", str(hostile), "--force", "--create")
    assert done.returncode == 0, done.stderr + done.stdout
    script = (scene.out / "install.sh").read_text()
    assert "-e '" + str(hostile).replace("'", "'\"'\"'") + "'" in script
    for name in ("pwned", "pwned2", "pwned3"):
        for where in (scene.root, scene.out, Path.cwd()):
            assert not (where / name).exists(), f"{where / name} was created"
    installed = scene.installed()
    assert installed["localfw"] == "0.1"
    assert installed["torch"] == PLANNED_TORCH
    assert scene.venv_python("import localfw; print(localfw.__file__)").startswith(str(hostile))


def test_unreachable_index_is_exit_3_naming_the_network(scene: Scene) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/simple"
    args = [*scene.base_args(), "--framework", "finetunekit-nightly", "--force", "--create"]
    args[args.index("--pypi-index") + 1] = dead
    done = scene.cudalock(*args, env=offline_env() | {"UV_HTTP_RETRIES": "0"})
    assert done.returncode == 3, done.stderr + done.stdout
    assert "could not resolve the closure" in done.stderr
    assert "Connection refused" in done.stderr
    assert "cudalock lock -o out" in done.stderr
    assert "finetunekit-nightly" not in scene.installed()
    assert scene.installed()["torch"] == PLANNED_TORCH


def test_framework_needing_incompatible_torch_is_refused_before_anything_is_installed(
    scene: Scene,
) -> None:
    before = scene.installed()
    done = scene.cudalock(
        *scene.base_args(), "--framework", "finetunekit-nightly", "--force", "--create"
    )
    assert done.returncode == 1, done.stderr + done.stdout
    message = done.stderr
    assert "finetunekit-nightly does not fit torch 2.1.0+cu121" in message
    assert "finetunekit-nightly 3.0 requires torch>=2.5" in message
    assert "--torch '>=2.5'" in message
    assert "Traceback" not in message
    assert scene.installed() == before
    assert f"__version__ = '{PLANNED_TORCH}'" in scene.torch_version_file()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_generated_install_script_passes_bash_n_and_shellcheck(scene: Scene) -> None:
    script = scene.out / "install.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    shellcheck = Path(sys.executable).with_name("shellcheck")
    result = subprocess.run(
        [str(shellcheck), str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_a_plan_resolved_under_compat_minor_passes_its_own_audit(scene: Scene) -> None:
    # Driver 525.85.12 supports CUDA 12.0; only minor-version compatibility (12.x floor
    # 525.60.13) lets the cu121 build run. The new environment is audited with the policy the
    # plan was resolved with: a warning there, not the error strict would make of it. Its own
    # directory and venv: the shared one holds what the scenarios above left.
    args = scene.base_args()
    args[args.index("535.104.05")] = "525.85.12"
    args[args.index("-o") + 1] = "out-minor"
    done = scene.cudalock(*args, "--framework", "finetunekit", "--compat", "minor", "--create")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "audit warning: minor-compat-only" in done.stdout
    assert "environment ready" in done.stdout


def _into(scene: Scene, name: str, *args: str) -> tuple[list[str], Path]:
    """The scene's bootstrap arguments with ``-o NAME`` (a new directory, its own new venv)."""
    base = scene.base_args()
    base[base.index("-o") + 1] = name
    return [*base, *args], scene.root / name


def test_the_new_venv_is_made_while_uv_resolves_the_closure(scene: Scene) -> None:
    # uv waits 1.5 s on a page of the closure; the venv needs only the plan's Python.
    scene.server.slow("/pypi/simple/helperlib/", 1.5)
    try:
        args, out = _into(scene, "ahead", "--framework", "finetunekit", "--create")
        done = scene.cudalock(*args)
    finally:
        scene.server.clear_faults()
    assert done.returncode == 0, done.stderr + done.stdout
    made = (out / ".venv" / "pyvenv.cfg").stat().st_mtime
    locked = (out / "pylock.toml").stat().st_mtime
    assert made < locked - 1.0, "the venv was made only after the closure was locked"
    # The output and the log read as they do when the venv is made after the files.
    stdout = done.stdout
    assert stdout.index("wrote: ") < stdout.index("environment: creating") < stdout.index("step 1/")
    log = (out / "cudalock-bootstrap.log").read_text()
    assert log.index("### create the virtual environment") < log.index("### install.sh")
    assert "environment ready" in stdout


def _with_uv_cache(tmp: Path) -> dict[str, str]:
    """The tests' environment with a uv cache of its own (theirs has none: UV_NO_CACHE) and a
    temporary directory of its own, so what a run leaves there is seen."""
    (tmp / "tmp").mkdir(exist_ok=True)
    env = offline_env()
    del env["UV_NO_CACHE"]
    return env | {"UV_CACHE_DIR": str(tmp / "uv-cache"), "TMPDIR": str(tmp / "tmp")}


def _torch_downloads(scene: Scene) -> list[str]:
    return scene.server.requested(scene.server.file_path(f"torch-{PLANNED_TORCH}-py3-none-any.whl"))


def _torch_in(venv: Path) -> str:
    code = "import torch.version as v; print(v.__version__)"
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_torch_wheels_are_downloaded_while_uv_resolves_the_closure(
    scene: Scene, tmp_path: Path
) -> None:
    # uv waits 1.5 s on a page of the closure; the torch family's pins are known before.
    env = _with_uv_cache(tmp_path)
    before = len(_torch_downloads(scene))
    scene.server.slow("/pypi/simple/helperlib/", 1.5)
    try:
        args, out = _into(scene, "wheels-ahead", "--framework", "finetunekit", "--create")
        done = scene.cudalock(*args, env=env)
    finally:
        scene.server.clear_faults()
    assert done.returncode == 0, done.stderr + done.stdout
    cached = [p.stat().st_mtime for p in (tmp_path / "uv-cache").glob("*/*/torch/version.py")]
    locked = (out / "pylock.toml").stat().st_mtime
    assert cached and min(cached) < locked - 1.0, "torch was downloaded only after the lock"
    # Downloaded once: install.sh's uv took it from the cache, checked against the lock's hash.
    assert len(_torch_downloads(scene)) - before == 1
    assert _torch_in(out / ".venv") == PLANNED_TORCH
    log = (out / "cudalock-bootstrap.log").read_text()
    ahead = log.index("### the torch and CUDA wheels")
    assert ahead < log.index("### install.sh")
    assert f"torch=={PLANNED_TORCH}" in log[ahead:]
    # The rest of the lock's wheels followed once it was resolved, before install.sh ran.
    rest = log.index("### the other wheels, downloading since the closure was resolved")
    assert ahead < rest < log.index("### install.sh")
    assert "helperlib==1.2" in log[rest:] and "Prepared 2 packages" in log[rest:]
    assert "environment ready" in done.stdout
    assert not list((tmp_path / "tmp").iterdir()), "the download's directory was left behind"

    # Again with that cache: uv's dry run finds every wheel there, and nothing more is done.
    args, out = _into(scene, "wheels-cached", "--framework", "finetunekit", "--create")
    again = scene.cudalock(*args, env=env)
    assert again.returncode == 0, again.stderr + again.stdout
    log = (out / "cudalock-bootstrap.log").read_text()
    section = log[log.index("### the torch and CUDA wheels") : log.index("### install.sh")]
    assert "--dry-run" in section
    assert section.count("every wheel is in uv's cache already") == 2  # torch's, and the rest
    assert "--link-mode" not in section
    assert len(_torch_downloads(scene)) - before == 1
    assert not list((tmp_path / "tmp").iterdir())


def test_a_user_uv_toml_naming_a_cache_dir_is_ignored_by_the_head_start_and_install_sh_alike(
    scene: Scene, tmp_path: Path
) -> None:
    # install.sh's uv runs with --config-file (uv then reads no user uv.toml), the head start
    # with --no-config: both use uv's default cache, so the head start fills the cache
    # install.sh installs from, and torch is fetched once.
    env = _with_uv_cache(tmp_path)
    del env["UV_CACHE_DIR"]
    (tmp_path / "config" / "uv").mkdir(parents=True)
    elsewhere = tmp_path / "user-cache"
    (tmp_path / "config" / "uv" / "uv.toml").write_text(f"cache-dir = {str(elsewhere)!r}\n")
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    before = len(_torch_downloads(scene))
    args, out = _into(scene, "user-uv-toml", "--framework", "finetunekit", "--create")
    done = scene.cudalock(*args, env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    assert len(_torch_downloads(scene)) - before == 1
    assert list((tmp_path / "xdg" / "uv").glob("*/*/torch/version.py"))
    assert not elsewhere.exists()
    assert _torch_in(out / ".venv") == PLANNED_TORCH


@pytest.mark.parametrize(
    ("wheel", "failed", "not_failed"),
    [
        (
            f"torch-{PLANNED_TORCH}-py3-none-any.whl",
            "the torch and CUDA wheels",
            "the other wheels",
        ),
        ("helperlib-1.2-py3-none-any.whl", "the other wheels", "the torch and CUDA wheels"),
    ],
    ids=["torch", "the-other-wheels"],
)
def test_a_failed_download_ahead_leaves_those_wheels_to_install_sh(
    scene: Scene, tmp_path: Path, wheel: str, failed: str, not_failed: str
) -> None:
    # The first request for the wheel fails: the run goes on, install.sh fetches it.
    env = _with_uv_cache(tmp_path)
    scene.server.fail(scene.server.file_path(wheel), times=1)
    try:
        args, out = _into(scene, f"ahead-failed-{wheel}", "--framework", "finetunekit", "--create")
        done = scene.cudalock(*args, env=env | {"UV_HTTP_RETRIES": "0"})
    finally:
        scene.server.clear_faults()
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"downloading {failed} ahead failed (exit status" in done.stdout
    assert f"downloading {not_failed} ahead failed" not in done.stdout
    assert "install.sh downloads them" in done.stdout
    assert "environment ready" in done.stdout
    assert _torch_in(out / ".venv") == PLANNED_TORCH
    assert not list((tmp_path / "tmp").iterdir())


def test_a_run_that_fails_before_installing_leaves_no_new_venv(
    scene: Scene, tmp_path: Path
) -> None:
    # uv finds nothing satisfies the closure: nothing is written, and the venv and the
    # download begun meanwhile are gone.
    args, out = _into(scene, "refused", "--framework", "brokenkit", "--create")
    done = scene.cudalock(*args, env=_with_uv_cache(tmp_path))
    assert done.returncode == 1, done.stderr + done.stdout
    assert not out.exists()
    assert not list((tmp_path / "tmp").iterdir())

    # The index is unreachable: the files are written, the venv and the log are not left.
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/simple"
    args, out = _into(scene, "unreached", "--framework", "finetunekit", "--create")
    args[args.index("--pypi-index") + 1] = dead
    done = scene.cudalock(*args, env=offline_env() | {"UV_HTTP_RETRIES": "0"})
    assert done.returncode == 3, done.stderr + done.stdout
    assert "could not resolve the closure" in done.stderr
    assert (out / "install.sh").exists()
    assert not (out / ".venv").exists()
    assert not (out / "cudalock-bootstrap.log").exists()
