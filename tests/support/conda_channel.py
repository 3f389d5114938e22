"""A local conda channel standing in for conda-forge, built with py-rattler-build from what PyPI
serves, so that real conda clients (py-rattler, conda-lock, conda/mamba/micromamba where a
machine has one) read cudalock's files unedited without reaching conda-forge.

It holds the packages those files ask for, with their real names and versions:

* ``python``: the test interpreter (CPython, built with ``--enable-shared``) repackaged by a
  rattler-build recipe, which relinks it (``RPATH $ORIGIN/../lib``) and records the text files
  naming its prefix, so it relocates. Unlike conda-forge's python it links the host's libssl,
  libffi, zlib and sqlite, and it carries no test suite, IDLE or tkinter.
* ``pip``: noarch: python, installed from PyPI's wheel (the one this Python bundles for
  ``ensurepip``) with its entry points, which is how conda-forge builds it.
* ``cuda-version``: noarch: generic and empty, with the run constraints of conda-forge's recipe
  (:data:`CUDA_VERSION_PACKAGES`): metadata only, so this copy is faithful.

``cuda-nvcc`` cannot be stood in for (no ``nvcc`` is served by PyPI), so it is absent, as from a
mirror without it. The recipe and its costs: ``shared/research/conda_local_channel.md``.

The channel is built once per machine and kept under pytest's temporary root, keyed by what it
is built from; :data:`CHANNEL_NAME` is the directory a ``channel_alias`` maps ``conda-forge`` to.
"""

from __future__ import annotations

import asyncio
import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: The channel name cudalock's files use; the alias directory holds a channel of that name.
CHANNEL_NAME = "conda-forge"
#: conda-forge's cuda-version 12.1 (noarch: generic, build 3): its run constraints, from the
#: recipe (conda-forge/cuda-version-feedstock, recipe/meta.yaml: ``__cuda >={{ major }}`` and
#: ``cudatoolkit {{ version }}|{{ version }}.*``), as observed in its repodata record
#: ``cuda-version-12.1-h1d6eff3_3`` (shared/research/conda_local_channel.md).
CUDA_VERSION_PACKAGES: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "12.1": ("h1d6eff3_3", 3, ("__cuda >=12", "cudatoolkit 12.1|12.1.*")),
}
#: Parts of the standard library a test environment does not need (and that cost build time).
_STDLIB_LEFT_OUT = (
    "site-packages/*",
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "lib2to3/tests",
    "config-*/*.a",
    "__pycache__",
)
_BUILD_VERSION = "1"  # bump when the recipes below change, so cached channels are rebuilt


@dataclass(frozen=True)
class LocalChannel:
    """A built channel: ``alias`` is what ``channel_alias`` is set to."""

    root: Path
    python_version: str
    pip_version: str

    @property
    def alias(self) -> str:
        return self.root.as_uri() + "/"

    @property
    def conda_forge(self) -> Path:
        return self.root / CHANNEL_NAME


def bundled_pip_wheel() -> Path:
    bundled = Path(sysconfig.get_path("stdlib")) / "ensurepip" / "_bundled"
    wheels = sorted(bundled.glob("pip-*-py3-none-any.whl"))
    if not wheels:
        raise RuntimeError(f"this Python bundles no pip wheel in {bundled}")
    return wheels[-1]


def _python_root() -> Path:
    return Path(sys.base_prefix)


def _python_version() -> str:
    return ".".join(str(part) for part in sys.version_info[:3])


def _key() -> str:
    wheel = bundled_pip_wheel()
    parts = [_BUILD_VERSION, str(_python_root()), _python_version(), wheel.name]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def channel_for_tests(cache_root: Path) -> LocalChannel:
    """The channel, built under ``cache_root`` unless an earlier run built the same one.

    The build runs in a process of its own (rattler's indexer has been seen to crash while
    exiting, after writing a correct index), tried twice; builds are serialised with a file
    lock, so parallel test processes share one build.
    """
    channel = _channel_at(cache_root)
    for _attempt in range(2):
        if (channel.root / "complete").exists():
            return channel
        subprocess.run(
            [sys.executable, "-m", "tests.support.conda_channel", str(cache_root)],
            cwd=Path(__file__).parents[2],
            check=False,
            timeout=1800,
        )
    if not (channel.root / "complete").exists():
        raise RuntimeError(f"the local conda channel could not be built under {cache_root}")
    return channel


def _channel_at(cache_root: Path) -> LocalChannel:
    pip_version = bundled_pip_wheel().name.split("-")[1]
    return LocalChannel(cache_root / f"conda-channel-{_key()}", _python_version(), pip_version)


def build_channel(cache_root: Path) -> LocalChannel:
    """Build the channel in this process (see :func:`channel_for_tests`)."""
    channel = _channel_at(cache_root)
    done = channel.root
    cache_root.mkdir(parents=True, exist_ok=True)
    with open(cache_root / f"{done.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (done / "complete").exists():
            return channel
        work = Path(tempfile.mkdtemp(prefix="conda-channel-", dir=cache_root))
        try:
            _build(work, bundled_pip_wheel(), channel.pip_version)
            (work / "chan" / "complete").write_text("built\n")
            shutil.rmtree(done, ignore_errors=True)
            (work / "chan").rename(done)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return channel


def _build(work: Path, wheel: Path, pip_version: str) -> None:
    import rattler_build

    chan = work / "chan" / CHANNEL_NAME
    for subdir in ("linux-64", "noarch"):
        (chan / subdir).mkdir(parents=True)
    recipes = work / "recipes"
    _python_recipe(recipes / "python")
    _pip_recipe(recipes / "pip", wheel, pip_version)
    out = work / "out"
    # rattler-build's caches (and HOME) inside the work directory: the real home stays clean.
    saved = {key: os.environ.get(key) for key in ("HOME", "RATTLER_CACHE_DIR")}
    os.environ["HOME"] = str(work / "home")
    os.environ["RATTLER_CACHE_DIR"] = str(work / "home" / "rattler")
    try:
        _index(chan)
        for recipe in ("python", "pip"):  # pip's host environment is solved from the channel
            rattler_build.build_recipes(
                [recipes / recipe / "recipe.yaml"],
                channel=[chan.as_uri()],
                output_dir=out,
                package_format="conda:1",
                test="skip",
                no_include_recipe=True,
            )
            for built in glob.glob(f"{out}/*/{recipe}-*.conda"):
                subdir = os.path.basename(os.path.dirname(built))
                target = chan / subdir / os.path.basename(built)
                shutil.copy(built, target)
                target.chmod(0o644)  # rattler-build writes packages 0600
            _index(chan)
        for version, (build, number, constrains) in CUDA_VERSION_PACKAGES.items():
            rattler_build.assemble_package(
                name="cuda-version",
                version=version,
                target_platform="noarch",
                build_string=build,
                build_number=number,
                noarch="generic",
                files=[],
                output_dir=chan / "noarch",
                constrains=list(constrains),
                license="LicenseRef-NVIDIA-End-User-License-Agreement",
            )
        for package in chan.glob("*/*.conda"):
            package.chmod(0o644)
        _index(chan)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _index(chan: Path) -> None:
    from rattler.index import index_fs

    asyncio.run(index_fs(chan, write_zst=False, write_shards=False, force=True))


def _python_recipe(where: Path) -> None:
    where.mkdir(parents=True)
    version = _python_version()
    short = f"{sys.version_info.major}.{sys.version_info.minor}"
    abi = f"cp{sys.version_info.major}{sys.version_info.minor}"
    (where / "recipe.yaml").write_text(
        f'package: {{name: python, version: "{version}"}}\n'
        "build:\n"
        "  number: 0\n"
        "  string: h0local_0_cpython\n"
        "  script: build.sh\n"
        "requirements:\n"
        f'  run_constraints: ["python_abi {short}.* *_{abi}"]\n'
        "about: {license: Python-2.0, summary: "
        '"CPython repackaged for a local test channel (links host libraries)"}\n'
    )
    excludes = " ".join(
        f"--exclude='{pattern}'"
        if pattern == "__pycache__"
        else f"--exclude='python{short}/{pattern}'"
        for pattern in _STDLIB_LEFT_OUT
    )
    (where / "build.sh").write_text(
        f"""set -euo pipefail
SRC={_python_root()}
mkdir -p "$PREFIX/bin" "$PREFIX/lib/pkgconfig" "$PREFIX/include"
cp -a "$SRC/bin/python{short}" "$PREFIX/bin/"
ln -s python{short} "$PREFIX/bin/python3"; ln -s python{short} "$PREFIX/bin/python"
cp -a "$SRC/include/python{short}" "$PREFIX/include/"
cp -a "$SRC"/lib/libpython3*.so* "$PREFIX/lib/"
tar -C "$SRC/lib" {excludes} -cf - python{short} | tar -C "$PREFIX/lib" -xf -
mkdir -p "$PREFIX/lib/python{short}/site-packages"
# text files naming the build prefix point at $PREFIX, so they get the prefix placeholder
grep -rlI -- "$SRC" "$PREFIX" | while read -r f; do sed -i "s#$SRC#$PREFIX#g" "$f"; done
"""
    )


def _pip_recipe(where: Path, wheel: Path, version: str) -> None:
    where.mkdir(parents=True)
    shutil.copy(wheel, where / wheel.name)
    (where / "recipe.yaml").write_text(
        f'package: {{name: pip, version: "{version}"}}\n'
        f"source: [{{path: {wheel.name}, file_name: {wheel.name}}}]\n"
        "build:\n"
        "  number: 0\n"
        "  noarch: python\n"
        "  script:\n"
        f"    - $PYTHON $SRC_DIR/{wheel.name}/pip install --no-deps --no-index --no-compile "
        f"$SRC_DIR/{wheel.name}\n"
        "    - rm -f $PREFIX/bin/pip $PREFIX/bin/pip3 $PREFIX/bin/pip3.*\n"
        "  python:\n"
        '    entry_points: ["pip = pip._internal.cli.main:main", '
        '"pip3 = pip._internal.cli.main:main"]\n'
        'requirements: {host: [python], run: ["python >=3.7"]}\n'
        "about: {license: MIT}\n"
    )


if __name__ == "__main__":
    # Build (or find) the channel by hand: python -m tests.support.conda_channel DIR
    built = build_channel(Path(sys.argv[1]))
    print(built.root)
