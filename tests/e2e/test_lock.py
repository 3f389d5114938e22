"""``cudalock lock`` end to end: the real CLI, real uv, real pip, real venvs, a 127.0.0.1 index.

The PyTorch-like index serves ``torch 2.1.0+cu121`` and ``torchvision 0.16.0+cu121`` with the
real wheel names and dependency metadata; the PyPI-like one serves the NVIDIA libraries and the
rest, and also two traps: a higher torch (2.5.0, what an unrouted resolver would take) and a
*different* file claiming to be ``torch 2.1.0+cu121`` (what a dependency-confusion attack or a
bad mirror would serve). The shipped matrix says driver 535.104.05 allows CUDA 12.2, so torch
2.1.0 resolves to the cu121 build.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.pylock import Pylock

from cudalock.lock.pylock import parse_lock
from tests.support.cli import cudalock
from tests.support.index import IndexServer, offline_env, serve_indexes
from tests.support.tmpfs import snapshot
from tests.support.wheels import StandIn, torch_standin

pytestmark = pytest.mark.slow

UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
LINUX = "manylinux_2_17_x86_64.manylinux2014_x86_64"
CUDNN = 'nvidia-cudnn-cu12==8.9.2.26; platform_system == "Linux" and platform_machine == "x86_64"'
TRITON = 'triton==2.1.0; platform_system == "Linux" and platform_machine == "x86_64"'
DRIVER = "535.104.05"
TARGET = ["--driver-version", DRIVER, "--compute-capability", "8.0", "--platform", "linux-x86_64"]
# DeepSpeed is pinned to the release the stand-in index serves: left open, the plan would take
# the newest release the matrix knows, which grows.
REQUEST = ["--torch", "2.1.0", "--python", "3.11", "--with", "deepspeed==0.19.8"]
#: What the lock must hold, derived by hand from the stand-ins' metadata below.
EXPECTED = {
    "torch": "2.1.0+cu121",
    "torchvision": "0.16.0+cu121",
    "deepspeed": "0.19.8",
    "nvidia-cudnn-cu12": "8.9.2.26",
    "triton": "2.1.0",
    "filelock": "3.13.0",
    "packaging": "24.1",
    # DeepSpeed is built against the installed torch: with its build backend, and (a CUDA
    # torch) with the nvidia-ml-py its setup.py then requires.
    "setuptools": "80.9.0",
    "nvidia-ml-py": "12.560.30",
}


#: How uv installs pylock.toml, and how pip installs what is built against the installed torch.
UV_SETTINGS = ("--config-file", "uv-install.toml")
BUILD_LAST = ("--no-deps", "--no-build-isolation", "--no-cache-dir", "--force-reinstall")


def _torch(py: str, requires: list[str], tag_platform: str = "linux_x86_64") -> StandIn:
    return torch_standin("2.1.0+cu121", "12.1", requires, tag=f"{py}-{py}-{tag_platform}")


def pytorch_stand_ins() -> list[StandIn]:
    requires = [CUDNN, TRITON, "filelock"]
    specs = [_torch(py, requires) for py in ("cp310", "cp311")]
    specs += [
        StandIn(
            "torchvision",
            "0.16.0+cu121",
            requires_dist=["torch==2.1.0"],
            tag=f"{py}-{py}-linux_x86_64",
        )
        for py in ("cp310", "cp311")
    ]
    return specs


def pypi_stand_ins() -> list[StandIn]:
    return [
        # The traps: a newer torch, the same version unlabelled, and an impostor cu121 file.
        torch_standin("2.5.0", "12.4", ["filelock"], tag=f"cp311-cp311-{LINUX}"),
        torch_standin("2.1.0", "12.1", ["filelock"], tag=f"cp311-cp311-{LINUX}"),
        torch_standin(
            "2.1.0+cu121", "12.1", ["filelock", "impostor-payload"], tag="cp311-cp311-linux_x86_64"
        ),
        StandIn("impostor-payload", "1.0"),
        StandIn("torchvision", "0.20.0", requires_dist=["torch==2.5.0"]),
        StandIn("nvidia-cudnn-cu12", "8.9.2.26", tag="py3-none-manylinux1_x86_64"),
        StandIn("triton", "2.1.0", requires_dist=["filelock"], tag=f"cp311-cp311-{LINUX}"),
        StandIn("triton", "2.1.0", requires_dist=["filelock"], tag=f"cp310-cp310-{LINUX}"),
        StandIn("filelock", "3.12.0"),
        StandIn("filelock", "3.13.0"),
        StandIn("packaging", "24.1"),
        StandIn("deepspeed", "0.19.8", requires_dist=["torch", "packaging>=20.0"]),
        StandIn("setuptools", "80.9.0"),
        StandIn("nvidia-ml-py", "12.560.30"),
    ]


def serve_lock_indexes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """The stand-in PyTorch (cu121) and PyPI indexes every lock test resolves against."""
    with serve_indexes(
        tmp_path_factory.mktemp("index"),
        pytorch={"cu121": pytorch_stand_ins()},
        pypi=pypi_stand_ins(),
    ) as server:
        yield server


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    yield from serve_lock_indexes(tmp_path_factory)


@pytest.fixture(scope="module")
def uv_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uv-cache")


def index_flags(server: IndexServer) -> list[str]:
    return ["--pytorch-index", server.pytorch_url, "--pypi-index", server.pypi_url]


def lock(
    server: IndexServer,
    cwd: Path,
    *extra: str,
    cache: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    cache_flags = ["--cache-dir", str(cache)] if cache else []
    return cudalock(
        "lock", *TARGET, *REQUEST, *index_flags(server), *cache_flags, *extra, cwd=cwd, env=env
    )


def read_lock(path: Path) -> tuple[Pylock, dict[str, object]]:
    return parse_lock(path.read_text(encoding="utf-8"), source=str(path))


def versions(lock: Pylock) -> dict[str, str]:
    return {p.name: str(p.version) for p in lock.packages}


def fresh_venv(where: Path) -> Path:
    assert UV is not None
    subprocess.run(
        [UV, "venv", "--python", sys.executable, str(where)],
        check=True,
        capture_output=True,
        env=offline_env(),
    )
    return where / "bin" / "python"


def installed(python: Path) -> dict[str, str]:
    assert UV is not None
    out = subprocess.run(
        [UV, "pip", "freeze", "--python", str(python)],
        check=True,
        capture_output=True,
        text=True,
        env=offline_env(),
    ).stdout
    return dict(line.split("==", 1) for line in out.splitlines() if "==" in line)


@pytest.fixture(scope="module")
def locked(index: IndexServer, tmp_path_factory: pytest.TempPathFactory, uv_cache: Path) -> Path:
    """One lock made through the CLI, shared by the read-only tests below."""
    where = tmp_path_factory.mktemp("locked")
    done = lock(index, where, cache=uv_cache)
    assert done.returncode == 0, done.stderr
    return where


# ---------------------------------------------------------------------------------------------


def test_lock_pins_torch_from_the_cu121_index_with_its_hash(
    index: IndexServer, locked: Path
) -> None:
    lock_obj, data = read_lock(locked / "pylock.toml")
    assert versions(lock_obj) == EXPECTED
    torch = next(p for p in lock_obj.packages if p.name == "torch")
    assert torch.wheels is not None and len(torch.wheels) == 1
    wheel = torch.wheels[0]
    filename = "torch-2.1.0+cu121-cp311-cp311-linux_x86_64.whl"
    assert wheel.url == index.base_url + index.file_path(filename)
    assert wheel.hashes == {"sha256": index.sha256(filename)}
    assert torch.index == index.pytorch_url + "/cu121"
    # Not the impostor with the same name and version on the PyPI-like index ...
    impostor = next(f for f in index.indexes[-1].projects["torch"] if f.filename == filename)
    assert impostor.sha256 != wheel.hashes["sha256"]
    assert "impostor-payload" not in versions(lock_obj)
    # ... which uv was never even asked about: torch is looked up on its explicit index only.
    assert index.requested("/pypi/simple/torch/") == []
    assert index.requested("/pypi/simple/torchvision/") == []
    assert data["created-by"] == "cudalock"
    assert data["environments"] == ["sys_platform == 'linux' and platform_machine == 'x86_64'"]
    record = data["tool"]["cudalock"]  # type: ignore[index]
    assert record["matrix-version"]
    assert record["python"] == "3.11" and record["platform"] == "linux-x86_64"
    assert record["targets"][0]["driver-version"] == DRIVER
    assert record["plan"]["torch"]["variant"] == "cu121"
    assert record["spec-fingerprint"].startswith("sha256:")


def test_requirements_lock_lists_every_package_with_its_hash(
    index: IndexServer, locked: Path
) -> None:
    text = (locked / "requirements.lock.txt").read_text()
    assert f"--index-url {index.pypi_url}\n" in text
    assert f"--extra-index-url {index.pytorch_url}/cu121\n" in text
    torch_hash = index.sha256("torch-2.1.0+cu121-cp311-cp311-linux_x86_64.whl")
    assert f"torch==2.1.0+cu121 \\\n    --hash=sha256:{torch_hash}\n" in text
    pinned = {line.split("==")[0] for line in text.splitlines() if "==" in line}
    # DeepSpeed is built against the installed torch, after everything else: its own file.
    assert pinned == set(EXPECTED) - {"deepspeed"}
    last = (locked / "requirements.last.txt").read_text()
    deepspeed_hash = index.sha256("deepspeed-0.19.8-py3-none-any.whl")
    assert f"deepspeed==0.19.8 \\\n    --hash=sha256:{deepspeed_hash}\n" in last
    assert f"--index-url {index.pypi_url}\n" in last and "--extra-index-url" not in last


def test_installing_from_the_lock_gives_exactly_the_locked_set(
    locked: Path, tmp_path: Path
) -> None:
    assert UV is not None
    python = fresh_venv(tmp_path / "uv-venv")
    done = subprocess.run(
        [UV, "pip", "sync", "--python", str(python), *UV_SETTINGS, "pylock.toml"],
        cwd=locked,
        capture_output=True,
        text=True,
        env=offline_env(),
    )
    assert done.returncode == 0, done.stderr
    assert installed(python) == EXPECTED
    # This host's own CUDA 13 toolkit (/usr/local/cuda) is not part of the environment under
    # test; point CUDA_HOME at an empty directory so the audit judges what the lock installed.
    no_toolkit = {
        **offline_env(),
        "CUDA_HOME": str(tmp_path / "no-cuda"),
        "PATH": f"{python.parent}:/usr/bin:/bin",
    }
    audit = cudalock(
        "audit",
        "--python",
        str(python),
        "--driver-version",
        DRIVER,
        "--compute-capability",
        "8.0",
        "--platform",
        "linux-x86_64",
        cwd=tmp_path,
        env=no_toolkit,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr

    pip_python = fresh_venv(tmp_path / "pip-venv")
    # The venv has no pip of its own; this interpreter's pip installs into it (--python), with
    # the two commands the files' headers give.
    pip = [sys.executable, "-m", "pip", "--python", str(pip_python), "install"]
    for command in (
        ["--no-deps", "--require-hashes", "-r", "requirements.lock.txt"],
        [*BUILD_LAST, "--require-hashes", "-r", "requirements.last.txt"],
    ):
        done = subprocess.run(
            [*pip, *command], cwd=locked, capture_output=True, text=True, env=offline_env()
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert installed(pip_python) == EXPECTED


def pip_reads_pylock() -> bool:
    import pip
    from packaging.version import Version

    # pip 26.3 is the first release that takes "-r pylock.toml".
    return Version(pip.__version__) >= Version("26.3")


@pytest.mark.skipif(
    not pip_reads_pylock(),
    reason="the installed pip cannot read pylock.toml "
    "(observed from pip 26.3); requirements.lock.txt covers pip instead",
)
def test_pip_installs_from_pylock_toml(locked: Path, tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-r", "pylock.toml"],
        cwd=locked,
        capture_output=True,
        text=True,
        env=offline_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert installed(python) == EXPECTED


def test_lock_for_another_python_than_this_one(
    index: IndexServer, tmp_path: Path, uv_cache: Path
) -> None:
    assert sys.version_info[:2] != (3, 10), "this test proves a foreign Python is honoured"
    done = cudalock(
        "lock",
        *TARGET,
        "--torch",
        "2.1.0",
        "--python",
        "3.10",
        *index_flags(index),
        "--cache-dir",
        str(uv_cache),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lock_obj, data = read_lock(tmp_path / "pylock.toml")
    torch = next(p for p in lock_obj.packages if p.name == "torch")
    assert torch.wheels is not None
    assert [w.url.rsplit("/", 1)[-1] for w in torch.wheels if w.url] == [
        "torch-2.1.0%2Bcu121-cp310-cp310-linux_x86_64.whl"
    ]
    assert data["requires-python"] == "==3.10.*"


def test_check_is_current_right_after_locking(index: IndexServer, locked: Path) -> None:
    done = cudalock("lock", "--check", *TARGET, *REQUEST, *index_flags(index), cwd=locked)
    assert done.returncode == 0, done.stderr
    assert "is current" in done.stdout


def test_check_fails_naming_the_new_driver(index: IndexServer, locked: Path) -> None:
    newer = [
        "--driver-version",
        "550.54.14",
        "--compute-capability",
        "8.0",
        "--platform",
        "linux-x86_64",
    ]
    done = cudalock("lock", "--check", "--json", *newer, *REQUEST, *index_flags(index), cwd=locked)
    assert done.returncode == 1, done.stderr
    import json

    report = json.loads(done.stdout)
    assert report["current"] is False
    assert "the target's NVIDIA driver changed: 535.104.05 → 550.54.14" in report["changes"]


def test_the_documented_lock_sequence_keeps_its_plan(
    index: IndexServer, tmp_path: Path, uv_cache: Path
) -> None:
    # docs/commands.md, "cudalock lock": a lock made with flags, a plain lock, a check.
    documented = _documented_lock_sequence()
    assert documented[0] == [
        "--driver-version", DRIVER, "--compute-capability", "8.0", "--torch", "2.1.0",
        "--python", "3.11",
    ]  # fmt: skip
    assert documented[1:] == [[], ["--check"]]
    cache = ["--cache-dir", str(uv_cache)]
    first = cudalock("lock", *documented[0], *index_flags(index), *cache, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    spec = (tmp_path / "cudalock.toml").read_text()
    assert f'driver_version = "{DRIVER}"' in spec and 'torch = "2.1.0"' in spec
    locked = versions(read_lock(tmp_path / "pylock.toml")[0])
    assert locked["torch"] == "2.1.0+cu121"
    # The flags are remembered: the plain lock keeps the plan (not this machine's), ...
    again = cudalock("lock", *documented[1], *cache, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert versions(read_lock(tmp_path / "pylock.toml")[0]) == locked
    assert (tmp_path / "cudalock.toml").read_text() == spec
    # ... and the check right after finds the lock current.
    check = cudalock("lock", *documented[2], cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "is current" in check.stdout


def _documented_lock_sequence() -> list[list[str]]:
    """The arguments of the three commands in docs/commands.md's ``cudalock lock`` example."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "commands.md").read_text()
    section = docs.split("## `cudalock lock`", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].split() for line in block.splitlines()]
    return [words[2:] for words in commands if words[:2] == ["cudalock", "lock"]]


def test_check_fails_after_the_spec_is_edited(
    index: IndexServer, tmp_path: Path, uv_cache: Path
) -> None:
    spec = tmp_path / "cudalock.toml"
    spec.write_text(
        '# my GPU node\nspec_version = 1\n\n[request]\ntorch = "==2.1.0"\npython = "3.11"\n'
        f'pytorch_index = "{index.pytorch_url}"\npypi_index = "{index.pypi_url}"\n\n'
        f'[target]\ndriver_version = "{DRIVER}"\ncompute_capabilities = ["8.0"]\n'
        'platform = "linux-x86_64"\n'
    )
    done = cudalock("lock", "--cache-dir", str(uv_cache), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lock_obj, _ = read_lock(tmp_path / "pylock.toml")
    assert versions(lock_obj)["torchvision"] == "0.16.0+cu121"  # the default companion
    assert cudalock("lock", "--check", cwd=tmp_path).returncode == 0
    # One Target flag overrides its part of the spec's [target]; the rest still applies.
    done = cudalock("lock", "--check", "--driver-version", "550.54.14", cwd=tmp_path)
    assert done.returncode == 1
    assert [line for line in done.stderr.splitlines() if line.startswith("  - ")] == [
        "  - the target's NVIDIA driver changed: 535.104.05 → 550.54.14",
        "  - the target's driver's maximum CUDA changed: 12.2 → 12.4",
    ]
    spec.write_text(spec.read_text().replace('torch = "==2.1.0"', 'torch = ">=2.1,<2.2"'))
    done = cudalock("lock", "--check", cwd=tmp_path)
    assert done.returncode == 1
    assert "the spec's torch requirement changed: ==2.1.0 → >=2.1,<2.2" in done.stderr


def test_a_tampered_wheel_fails_both_installs(
    index: IndexServer, locked: Path, tmp_path: Path
) -> None:
    assert UV is not None
    filename = "torch-2.1.0+cu121-cp311-cp311-linux_x86_64.whl"
    fault = index.tamper(index.file_path(filename))
    try:
        python = fresh_venv(tmp_path / "uv-venv")
        # No retries: the bytes are wrong every time, retrying only slows the test.
        done = subprocess.run(
            [UV, "pip", "sync", "--python", str(python), "pylock.toml"],
            cwd=locked,
            capture_output=True,
            text=True,
            env={**offline_env(), "UV_HTTP_RETRIES": "0"},
        )
        assert done.returncode != 0
        assert "torch" in done.stderr
        assert "torch" not in installed(python)
        pip_python = fresh_venv(tmp_path / "pip-venv")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(pip_python),
                "install",
                "--retries",
                "0",
                "--require-hashes",
                "-r",
                "requirements.lock.txt",
            ],
            cwd=locked,
            capture_output=True,
            text=True,
            env=offline_env(),
        )
        assert done.returncode != 0
        assert "THESE PACKAGES DO NOT MATCH THE HASHES" in done.stdout + done.stderr
        assert "torch" not in installed(pip_python)
        assert fault.hits >= 2
    finally:
        index.clear_faults()


def test_uv_refuses_a_file_whose_hash_is_not_the_locked_one(locked: Path, tmp_path: Path) -> None:
    # The same check from the other side: an intact file, a lock that expects other bytes.
    assert UV is not None
    text = (locked / "pylock.toml").read_text()
    lock_obj, _ = read_lock(locked / "pylock.toml")
    torch = next(p for p in lock_obj.packages if p.name == "torch")
    assert torch.wheels is not None
    good = torch.wheels[0].hashes["sha256"]
    (tmp_path / "pylock.toml").write_text(text.replace(good, "0" * 64))
    python = fresh_venv(tmp_path / "venv")
    done = subprocess.run(
        [UV, "pip", "sync", "--python", str(python), "pylock.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=offline_env(),
    )
    assert done.returncode != 0
    assert "hash mismatch" in done.stderr.lower()
    assert "torch" not in installed(python)


def test_index_failure_exits_3_and_leaves_the_previous_lock(
    index: IndexServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert lock(index, out, cache=tmp_path / "cache").returncode == 0
    before = snapshot(out)
    assert set(before) == {
        "pylock.toml",
        "requirements.lock.txt",
        "requirements.last.txt",
        "uv-install.toml",
        "pylock.first.toml",
        "cudalock.toml",  # the flags, remembered
    }
    index.fail("/pypi/simple/*", status=500)
    try:
        # A fresh cache: nothing may come from an earlier run.
        done = lock(index, out, "--retries", "1", "--upgrade", cache=tmp_path / "empty-cache")
    finally:
        index.clear_faults()
    assert done.returncode == 3, done.stderr
    assert "500" in done.stderr
    assert "previous lock is untouched" in done.stderr
    assert "Traceback" not in done.stderr
    assert snapshot(out) == before  # same files, same bytes, no temp files left behind


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("drop", "connection closed"),
        ("truncate", "end of file before message length reached"),
        ("slow", "timed out"),
    ],
)
def test_network_faults_exit_3_and_write_nothing(
    index: IndexServer, tmp_path: Path, fault: str, says: str
) -> None:
    if fault == "drop":
        index.drop("/pypi/simple/*")
    elif fault == "truncate":
        index.truncate("/pypi/files/*.metadata")
    else:
        index.slow("/pypi/simple/*", seconds=3)
    try:
        done = lock(index, tmp_path, "--retries", "0", "--timeout", "1", cache=tmp_path / "cache")
    finally:
        index.clear_faults()
    assert done.returncode == 3, done.stderr
    message = done.stderr.split("cudalock: error: ", 1)[1]
    assert says in message
    assert "nothing was written" in message
    assert not (tmp_path / "pylock.toml").exists()
    assert not (tmp_path / "requirements.lock.txt").exists()


def test_connection_refused_exits_3(index: IndexServer, tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/simple"
    done = cudalock(
        "lock",
        *TARGET,
        *REQUEST,
        "--pytorch-index",
        index.pytorch_url,
        "--pypi-index",
        dead,
        "--retries",
        "0",
        "--cache-dir",
        str(tmp_path / "cache"),
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr
    assert not (tmp_path / "pylock.toml").exists()
    assert not (tmp_path / "requirements.lock.txt").exists()


def test_plain_http_mirror_is_refused_and_credentials_never_shown(tmp_path: Path) -> None:
    done = cudalock(
        "lock",
        *TARGET,
        *REQUEST,
        "--pypi-index",
        "http://user:s3cret@mirror.example/simple",
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "plain http" in done.stderr
    assert "s3cret" not in done.stdout + done.stderr


def test_credentials_in_a_failing_index_url_are_redacted(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://user:s3cret@127.0.0.1:{sock.getsockname()[1]}/simple"
    done = cudalock(
        "lock",
        *TARGET,
        *REQUEST,
        "--pytorch-index",
        dead,
        "--pypi-index",
        dead,
        "--retries",
        "0",
        "--cache-dir",
        str(tmp_path / "cache"),
        cwd=tmp_path,
    )
    assert done.returncode == 3
    assert "s3cret" not in done.stdout + done.stderr
    assert "***@127.0.0.1" in done.stderr


def test_a_lock_cudalock_did_not_write_needs_force(
    index: IndexServer, tmp_path: Path, uv_cache: Path
) -> None:
    foreign = tmp_path / "pylock.toml"
    foreign.write_text('lock-version = "1.0"\ncreated-by = "pip"\npackages = []\n')
    done = lock(index, tmp_path, cache=uv_cache)
    assert done.returncode == 2
    assert "pylock.toml already exists" in done.stderr
    assert 'created-by = "pip"' in foreign.read_text()
    assert lock(index, tmp_path, "--force", cache=uv_cache).returncode == 0


def test_relock_keeps_locked_versions_unless_upgrade(tmp_path: Path) -> None:
    old_pypi = [s for s in pypi_stand_ins() if (s.name, s.version) != ("filelock", "3.13.0")]
    with serve_indexes(
        tmp_path / "old", pytorch={"cu121": pytorch_stand_ins()}, pypi=old_pypi
    ) as old:
        assert lock(old, tmp_path, cache=tmp_path / "c1").returncode == 0
    assert versions(read_lock(tmp_path / "pylock.toml")[0])["filelock"] == "3.12.0"
    with serve_indexes(
        tmp_path / "new", pytorch={"cu121": pytorch_stand_ins()}, pypi=pypi_stand_ins()
    ) as new:
        assert lock(new, tmp_path, cache=tmp_path / "c2").returncode == 0
        assert versions(read_lock(tmp_path / "pylock.toml")[0])["filelock"] == "3.12.0"
        assert lock(new, tmp_path, "--upgrade", cache=tmp_path / "c2").returncode == 0
        assert versions(read_lock(tmp_path / "pylock.toml")[0])["filelock"] == "3.13.0"


def test_second_lock_uses_the_shared_cache(index: IndexServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # cudalock's own cache (the variant index's project list) on, in this test's directory.
    env = {k: v for k, v in offline_env().items() if k != "CUDALOCK_NO_CACHE"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    assert lock(index, tmp_path / "a", cache=cache, env=env).returncode == 0
    asked = len(index.requests)
    assert lock(index, tmp_path / "b", cache=cache, env=env).returncode == 0
    # The index answers like PyPI (pages reusable for 10 minutes, files immutable), so the
    # second lock is served from uv's cache and cudalock's entirely.
    assert index.requests[asked:] == []
    assert (tmp_path / "a" / "pylock.toml").read_text() == (
        tmp_path / "b" / "pylock.toml"
    ).read_text()


def test_mirrors_from_the_environment_and_json_output(
    index: IndexServer, tmp_path: Path, uv_cache: Path
) -> None:
    import json

    env = {
        **offline_env(),
        "CUDALOCK_PYTORCH_INDEX": index.pytorch_url,
        "CUDALOCK_PYPI_INDEX": index.pypi_url,
    }
    done = cudalock(
        "lock",
        "--json",
        "--quiet",
        *TARGET,
        *REQUEST,
        "--cache-dir",
        str(uv_cache),
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # --quiet
    result = json.loads(done.stdout)
    assert result["packages"] == EXPECTED
    assert result["lock"] == "pylock.toml"
    lock_obj, _ = read_lock(tmp_path / "pylock.toml")
    assert {str(p.name): p.index for p in lock_obj.packages}[
        "torch"
    ] == index.pytorch_url + "/cu121"


def test_check_fails_naming_a_newer_matrix(
    index: IndexServer, locked: Path, tmp_path: Path
) -> None:
    from cudalock.matrix import default_matrix_dir, load_matrix

    shipped = load_matrix().matrix_version
    newer = tmp_path / "matrix"
    shutil.copytree(default_matrix_dir(), newer)
    text = (newer / "matrix.toml").read_text()
    (newer / "matrix.toml").write_text(
        text.replace(f'matrix_version = "{shipped}"', 'matrix_version = "2099-01-01"')
    )
    done = cudalock(
        "lock",
        "--check",
        *TARGET,
        *REQUEST,
        *index_flags(index),
        "--matrix",
        str(newer),
        cwd=locked,
    )
    assert done.returncode == 1
    assert f"the compatibility matrix changed: {shipped} → 2099-01-01" in done.stderr


def test_a_second_lock_reads_what_cudalock_needs_from_its_caches(
    index: IndexServer, tmp_path: Path, uv_cache: Path
) -> None:
    """With its caches on, a lock done again asks the indexes for nothing cudalock itself
    reads (the variant index's project list, wheels' metadata), and makes the same lock."""
    # The caches on, in this test's own directory (a stand-in index's port can be reused).
    env = {k: v for k, v in offline_env().items() if k != "CUDALOCK_NO_CACHE"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    first = lock(index, tmp_path, cache=uv_cache, env=env)
    assert first.returncode == 0, first.stderr
    assert index.requested("*.metadata")  # read once, and kept
    before = len(index.requests)
    # -X importtime's list on stderr: a lock that fetches nothing imports no HTTP client, one
    # whose cudalock.toml already holds its flags no TOML writer, and none asyncio (only the
    # py-rattler path needs it) or importlib.metadata (uv says its own version).
    second = lock(index, tmp_path, cache=uv_cache, env=env | {"PYTHONPROFILEIMPORTTIME": "1"})
    assert second.returncode == 0, second.stderr
    after = [path for _method, path, _status in index.requests[before:]]
    assert [p for p in after if p.endswith(".metadata") or p == "/whl/cu121/"] == []
    imported = {line.rsplit("|", 1)[-1].strip() for line in second.stderr.splitlines()}
    assert "cudalock.lock.metadata" in imported
    assert not imported & {
        "http.client",
        "urllib.request",
        "cudalock.httpget",
        "tomlkit",
        "asyncio",
        "importlib.metadata",
    }
    assert (tmp_path / "pylock.toml").read_text(encoding="utf-8").count("[[packages]]") == len(
        EXPECTED
    )
