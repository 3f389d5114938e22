"""`cudalock bootstrap` without --create: the files it writes, cudalock.toml, and its refusals.

Runs the real command in a subprocess against the shipped matrix (driver 535.104.05 supports
CUDA 12.2, so torch 2.1.0 gets its cu121 build: matrix cuda.toml / torch.toml) and a small
stand-in index on 127.0.0.1 for the closure; with --offline (and no uv cache) the closure
cannot be resolved, which shows what bootstrap writes without it.
"""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.cli import cudalock
from tests.support.index import IndexServer, offline_env, serve_indexes
from tests.support.wheels import StandIn, torch_standin

TARGET = ["--driver-version", "535.104.05", "--compute-capability", "8.0"]
REQUEST = ["--torch", "==2.1.0", "--python", "3.11"]
LOCK_FILES = [
    "pylock.first.toml",
    "pylock.toml",
    "requirements.last.txt",
    "requirements.lock.txt",
    "uv-install.toml",
]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """torch 2.1.0+cu121 and its torchvision on a PyTorch-like index; PyPI's newer torch."""
    pytorch = {
        "cu121": [
            torch_standin("2.1.0+cu121", "12.1"),
            StandIn("torchvision", "0.16.0+cu121", requires_dist=["torch==2.1.0"]),
        ]
    }
    pypi = [torch_standin("2.15.0", "13.2"), StandIn("finetunekit", "1.0", requires_dist=["torch"])]
    with serve_indexes(tmp_path_factory.mktemp("index"), pytorch=pytorch, pypi=pypi) as server:
        yield server


def indexes(server: IndexServer) -> list[str]:
    return ["--pytorch-index", server.pytorch_url, "--pypi-index", server.pypi_url]


def test_conda_format_writes_the_files(tmp_path: Path, index: IndexServer) -> None:
    done = cudalock(
        "bootstrap", "-o", "out", *TARGET, *REQUEST, *indexes(index), "--name", "ft", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            "constraints.txt",
            "cudalock.toml",
            "environment.conda-lock.yml",
            "environment.yml",
            "install.sh",
            *LOCK_FILES,
        ]
    )
    document = yaml.safe_load((out / "environment.yml").read_text())
    assert document["name"] == "ft"
    assert {"pip": ["-r requirements.lock.txt"]} in document["dependencies"]
    assert stat.S_IMODE((out / "install.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "environment.yml").stat().st_mode) == 0o644
    spec = (out / "cudalock.toml").read_text()
    assert 'torch = "==2.1.0"' in spec and 'driver_version = "535.104.05"' in spec
    assert "conda env create -f" in done.stdout
    # The closure was resolved once and locked beside the environment files.
    assert "closure: 2 packages, resolved once by uv and locked" in done.stdout
    lock = (out / "requirements.lock.txt").read_text()
    assert "torch==2.1.0+cu121 \\\n" in lock and "torchvision==0.16.0+cu121 \\\n" in lock

    from conda_lock.src_parser.environment_yaml import parse_environment_file

    mapping = tmp_path / "mapping.json"  # conda-lock would otherwise download its name mapping
    mapping.write_text("{}")
    locked = parse_environment_file(
        out / "environment.conda-lock.yml", ["linux-64"], mapping_url=str(mapping)
    )
    # The stand-in PyTorch index is http, and conda-lock reads an http direct reference as a
    # local path: so it stays a repository and the closure is pinned to the locked versions
    # (an https index gets direct references: tests/envfiles/test_render.py).
    assert [r.url for r in locked.pip_repositories] == [
        f"{index.pytorch_url}/cu121",
        index.pypi_url,
    ]
    assert {d.name: d.version for d in locked.dependencies["linux-64"] if d.manager == "pip"} == {
        "torch": "==2.1.0+cu121",
        "torchvision": "==0.16.0+cu121",
    }


def test_offline_without_a_cache_writes_the_rest_and_says_how_to_finish(
    tmp_path: Path, index: IndexServer
) -> None:
    args = ["bootstrap", "-o", "out", *TARGET, *REQUEST, *indexes(index), "--format", "venv"]
    seen = len(index.requests)
    done = cudalock(*args, "--offline", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "constraints.txt",
        "cudalock.toml",
        "install.sh",
        "requirements.txt",
    ]
    assert "could not resolve the closure" in done.stderr
    assert "the lock files (pylock.toml, requirements.lock.txt" in done.stderr
    assert "run: cudalock lock -o out (it reads the cudalock.toml written there)" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(index.requests) == seen  # offline: no index was read

    # Later, with the index in reach, 'cudalock lock' finishes from the spec bootstrap wrote.
    locked = cudalock("lock", "-o", "out", cwd=tmp_path)
    assert locked.returncode == 0, locked.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["constraints.txt", "cudalock.toml", "install.sh", "requirements.txt", *LOCK_FILES]
    )
    assert cudalock("lock", "-o", "out", "--check", cwd=tmp_path).returncode == 0


def test_a_torch_the_index_does_not_serve_is_named_as_such(
    tmp_path: Path, index: IndexServer
) -> None:
    # The matrix has torch 2.1.2+cu121; the stand-in index serves only 2.1.0.
    request = ["--torch", "==2.1.2", "--python", "3.11", "--framework", "finetunekit"]
    done = cudalock("bootstrap", "-o", "out", *TARGET, *request, *indexes(index), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert f"{index.pytorch_url}/cu121 serves no torch==2.1.2+cu121" in done.stderr
    assert "--pytorch-index" in done.stderr and "framework" not in done.stderr.lower()
    assert not (tmp_path / "out").exists()  # files that could never be installed help nobody


def test_existing_output_is_not_overwritten_without_force(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "install.sh").write_text("mine\n")
    done = cudalock("bootstrap", "-o", "out", *TARGET, *REQUEST, cwd=tmp_path)
    assert done.returncode == 2
    assert "out/install.sh already exists; pass --force" in done.stderr
    assert (out / "install.sh").read_text() == "mine\n"
    assert sorted(p.name for p in out.iterdir()) == ["install.sh"]  # nothing half-written


@pytest.mark.parametrize("name", ["my env", "a/b", "x;touch pwned", "base", "$(id)"])
def test_invalid_environment_name_is_refused(tmp_path: Path, name: str) -> None:
    done = cudalock("bootstrap", "-o", "out", *TARGET, *REQUEST, "--name", name, cwd=tmp_path)
    assert done.returncode == 2
    assert "invalid environment name" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert not (tmp_path / "pwned").exists()


def test_plain_http_index_needs_loopback_or_the_insecure_flag(tmp_path: Path) -> None:
    refused = cudalock(
        "bootstrap",
        "-o",
        "out",
        *TARGET,
        *REQUEST,
        "--pytorch-index",
        "http://mirror.example/whl",
        cwd=tmp_path,
    )
    assert refused.returncode == 2
    assert "plain http to a non-loopback host" in refused.stderr
    assert "--allow-insecure-index" in refused.stderr
    allowed = cudalock(
        "bootstrap",
        "-o",
        "out",
        *TARGET,
        *REQUEST,
        "--format",
        "venv",
        "--pytorch-index",
        "http://mirror.example/whl",
        "--allow-insecure-index",
        "--offline",
        cwd=tmp_path,
    )
    # Offline, the closure is not resolved (exit 3); the files that do not need it are written.
    assert allowed.returncode == 3, allowed.stderr
    assert "could not resolve the closure" in allowed.stderr
    assert (
        "--index-url http://mirror.example/whl/cu121"
        in (tmp_path / "out" / "requirements.txt").read_text()
    )


def test_index_from_environment_variables(tmp_path: Path) -> None:
    env = offline_env() | {
        "CUDALOCK_PYTORCH_INDEX": "https://mirror.example/pt",
        "CUDALOCK_PYPI_INDEX": "https://mirror.example/simple",
    }
    done = cudalock(
        "bootstrap",
        "-o",
        "out",
        *TARGET,
        *REQUEST,
        "--format",
        "venv",
        "--offline",
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 3, done.stderr
    lines = (tmp_path / "out" / "requirements.txt").read_text().splitlines()
    assert "--index-url https://mirror.example/pt/cu121" in lines
    assert "--extra-index-url https://mirror.example/simple" in lines
    assert "pypi.org" not in (tmp_path / "out" / "install.sh").read_text()


def test_credentials_are_used_in_files_but_never_shown(tmp_path: Path) -> None:
    done = cudalock(
        "bootstrap",
        "-o",
        "out",
        *TARGET,
        *REQUEST,
        "--format",
        "venv",
        "--pytorch-index",
        "https://alice:s3cret@mirror.example/whl",
        "--pypi-index",
        "https://alice:s3cret@mirror.example/simple",
        "--json",
        "--offline",
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr
    assert "s3cret" not in done.stdout and "s3cret" not in done.stderr
    assert "https://***@mirror.example/whl/cu121" in done.stderr
    out = tmp_path / "out"
    # pip needs them: the index lines keep them, as the user gave them.
    assert "https://alice:s3cret@mirror.example/whl/cu121" in (out / "install.sh").read_text()
    # cudalock.toml is meant to be committed: no credentials.
    assert "s3cret" not in (out / "cudalock.toml").read_text()


def test_bad_flags_are_usage_errors(tmp_path: Path) -> None:
    for args, expected in [
        (["--python", "three"], "invalid Python version 'three'"),
        (["--torch", "~=banana"], "invalid torch version spec"),
        (["--format", "spack"], "invalid --format 'spack'"),
        (["--framework", "./does-not-exist"], "no such directory exists"),
    ]:
        done = cudalock("bootstrap", "-o", "out", *TARGET, *REQUEST, *args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert expected in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_nothing_fits_is_exit_1_and_writes_nothing(tmp_path: Path) -> None:
    done = cudalock(
        "bootstrap",
        "-o",
        "out",
        "--driver-version",
        "470.57.02",
        "--compute-capability",
        "8.0",
        "--torch",
        "==2.5.1",
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert re.search(r"nothing in the matrix \(1\.13–\d+\.\d+\) fits", done.stderr)
    assert not (tmp_path / "out").exists()


def test_create_with_uv_format_is_refused(tmp_path: Path) -> None:
    done = cudalock(
        "bootstrap", "-o", "out", *TARGET, *REQUEST, "--format", "uv", "--create", cwd=tmp_path
    )
    assert done.returncode == 2
    assert "uv sync" in done.stderr


def test_cudalock_toml_is_read_flags_override_and_comments_survive(
    tmp_path: Path, index: IndexServer
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "cudalock.toml").write_text(
        "# team spec: do not bump torch without asking\n"
        "[request]\n"
        'torch = "==2.1.0"  # see ticket 42\n'
        'python = "3.11"\n'
        f'pytorch_index = "{index.pytorch_url}"\n'
        f'pypi_index = "{index.pypi_url}"\n'
        "[target]\n"
        'driver_version = "535.104.05"\n'
        'compute_capabilities = ["8.0"]\n'
        'platform = "linux-x86_64"\n'
        "[output]\n"
        'format = "venv"\n'
        'name = "team-env"\n'
    )
    # No target or request flags: everything comes from the file.
    done = cudalock("bootstrap", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "target: as recorded in" in done.stdout
    assert "torch==2.1.0+cu121" in (out / "constraints.txt").read_text()
    assert (out / "requirements.txt").exists()
    # A flag overrides the file, and the file is updated with the user's comments kept.
    again = cudalock("bootstrap", "-o", "out", "--python", "3.10", "--force", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    text = (out / "cudalock.toml").read_text()
    assert text.startswith("# team spec: do not bump torch without asking\n")
    assert 'torch = "==2.1.0"  # see ticket 42' in text
    assert 'python = "3.10"' in text
    assert "Python 3.10" in (out / "install.sh").read_text()


def test_cudalock_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "cudalock.toml").write_text('[request]\ntorch = "2.1.0"\npython = = "3.11"\n')
    done = cudalock("bootstrap", "-o", "out", *TARGET, cwd=tmp_path)
    assert done.returncode == 2
    assert "out/cudalock.toml:3:10: invalid TOML" in done.stderr  # the second "="
    assert "Traceback" not in done.stderr


def test_bootstrap_cli_module_imports_only_the_standard_library_at_top() -> None:
    code = (
        "import sys, cudalock.cli.bootstrap; "
        "print(sorted(m for m in ('cudalock.envfiles.bootstrap', 'cudalock.envfiles.render', "
        "'cudalock.resolve.search', 'yaml', 'tomlkit') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_a_hard_link_planted_as_the_lock_file_is_left_as_it_is(tmp_path: Path) -> None:
    import os

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / ".cudalock.lock")
    done = cudalock("bootstrap", "-o", "out", *TARGET, *REQUEST, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "is a hard link to another file" in done.stderr and "Traceback" not in done.stderr
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("out", ["a" * 300, "new/" + "b" * 300 + "/c", "/" + "d/" * 2100])
def test_an_output_directory_past_the_systems_name_limits_is_a_usage_error(
    tmp_path: Path, out: str
) -> None:
    done = cudalock("bootstrap", "-o", out, *TARGET, *REQUEST, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "longer than the system allows" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_failed_bootstrap_into_new_nested_directories_leaves_none_of_them(
    tmp_path: Path, index: IndexServer
) -> None:
    request = ["--torch", "==2.1.2", "--python", "3.11", "--framework", "finetunekit"]
    done = cudalock("bootstrap", "-o", "new/a/b", *TARGET, *request, *indexes(index), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert not (tmp_path / "new").exists()


def test_create_into_a_users_directory_that_is_no_venv_is_refused_and_left_alone(
    tmp_path: Path, index: IndexServer
) -> None:
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    done = cudalock(
        "bootstrap",
        "-o",
        "out",
        *TARGET,
        *REQUEST,
        *indexes(index),
        "--format",
        "venv",
        "--create",
        "--venv",
        mine,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "holds files but no virtual environment" in done.stderr
    assert "rm -rf" not in done.stdout + done.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
