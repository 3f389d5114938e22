"""Running the cudalock command as a user does: the installed console script, in a process of
its own, offline, and without this machine's pip/uv configuration or CUDALOCK_* variables."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tests.support.index import offline_env

#: The console script ``pip install`` put beside this interpreter.
CUDALOCK = Path(sys.executable).parent / "cudalock"


def cudalock(
    *args: str | os.PathLike[str],
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float = 120,
    umask: int = -1,
) -> subprocess.CompletedProcess[str]:
    """``cudalock ARGS``; ``env`` is the whole environment (default: :func:`offline_env`);
    ``umask`` the one it starts with (-1: this process's).

    Output is decoded as UTF-8 with replacement, so a test can look at whatever came out.
    """
    done = subprocess.run(
        [str(CUDALOCK), *map(str, args)],
        cwd=cwd,
        env=dict(offline_env() if env is None else env),
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
        umask=umask,
    )
    return subprocess.CompletedProcess(
        done.args,
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


def lock_against(
    indexes: Iterable[str],
    env: Mapping[str, str],
    out: Path,
    target: Sequence[str],
    *args: str,
    python: str = "3.11",
) -> subprocess.CompletedProcess[str]:
    """``cudalock lock -o OUT`` for ``target`` (Target flags) against the stand-in indexes
    ``indexes`` (an :class:`~tests.support.index.IndexServer`: its PyTorch base, its PyPI)."""
    return cudalock(
        "lock", "-o", str(out), *target, *_index_flags(indexes, python), *args, env=env, timeout=300
    )


def _index_flags(indexes: Iterable[str], python: str) -> list[str]:
    """The flags that point cudalock at the stand-in indexes ``indexes`` for ``python``."""
    pytorch, pypi = indexes
    return [
        "--python",
        python,
        "--pytorch-index",
        pytorch,
        "--pypi-index",
        pypi,
        "--allow-insecure-index",
    ]


def locked_packages(out: Path) -> dict[str, tuple[str, str]]:
    """name → (version, index) of every package in ``out/pylock.toml``."""
    text = (out / "pylock.toml").read_text(encoding="utf-8")
    found = {}
    for block in text.split("[[packages]]")[1:]:
        name = re.search(r'^name = "([^"]+)"', block, re.MULTILINE)
        version = re.search(r'^version = "([^"]+)"', block, re.MULTILINE)
        index = re.search(r'^index = "([^"]+)"', block, re.MULTILINE)
        if name and version:
            found[name[1]] = (version[1], index[1] if index else "")
    return found


def create_venv_against(
    indexes: Iterable[str],
    env: Mapping[str, str],
    directory: Path,
    target: Sequence[str],
    *args: str,
    python: str = "3.11",
) -> subprocess.CompletedProcess[str]:
    """``cudalock bootstrap -o out --format venv --create`` in ``directory`` for ``target``
    against the stand-in indexes ``indexes``: the venv is ``directory/out/.venv``."""
    return cudalock(
        *("bootstrap", "-o", "out", "--format", "venv", "--create"),
        *target,
        *_index_flags(indexes, python),
        *args,
        cwd=directory,
        env=env,
        timeout=600,
    )


def toolkit_home(directory: Path, release: str) -> Path:
    """A CUDA toolkit folder (for ``CUDA_HOME``) whose ``bin/nvcc`` prints ``release``
    ("12.1, V12.1.105") as the real nvcc does: what a plan building against a CUDA torch checks."""
    nvcc = directory / f"cuda-{release.split(',')[0]}" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}'\n")
    nvcc.chmod(0o755)
    return nvcc.parent.parent
