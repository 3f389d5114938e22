"""Record the real dependency closure of a fine-tuning stack from PyPI (run by hand, with network).

    .venv/bin/python -m tests.support.record_closure
        [--stack finetune|kernels|unsloth|axolotl]
        [--as-of YYYY-MM-DD]
        [--output PATH]

Tests never run this; they read what it wrote, ``tests/fixtures/closures/finetune-stack.json``,
and serve it as stand-in packages (``tests/support/realstack.py``).

What it does:

1. For every scenario in ``SCENARIOS`` (a requirement set, e.g. ``llamafactory[metrics,deepspeed]
   ==0.9.4`` with ``torch==2.5.1``) and every Python in ``PYTHONS``, real ``uv pip compile``
   resolves the closure against real PyPI for linux x86_64 (``--python-platform``), with
   ``--exclude-newer`` set to the as-of date, so a rerun with the same date resolves the same.
   The union of the pins is what gets recorded: 2–4 versions of each framework, and the versions
   the real resolutions pick for everything else.
2. For every recorded version it reads PyPI's JSON API (``https://pypi.org/pypi/NAME/json``) for
   the file names and the core metadata of one file: a wheel's ``.dist-info/METADATA`` read with
   HTTP range requests (torch wheels are ~1 GB; PEP 658 files are not served by every mirror), or
   the ``PKG-INFO`` of the sdist when there is no wheel; a ``PKG-INFO`` older than Metadata-Version
   2.2 need not list Requires-Dist, so that sdist's metadata is built for real (its backend's
   ``prepare_metadata_for_build_wheel`` beside its build requirements, as uv does).
   ``Requires-Dist``, ``Provides-Extra`` and ``Requires-Python`` are kept verbatim. Only the
   files tests need are listed: sdists, ``*-none-any`` wheels, and manylinux x86_64/aarch64
   wheels for CPython 3.10–3.13 (the lowest glibc tag per interpreter, ABI and machine).
3. The torch builds in ``TORCH_BUILDS`` are PyPI's own builds (PyPI carries one CUDA variant per
   release): their CUDA version is read from ``torch/version.py`` inside the PyPI wheel, so the
   stand-in ``/whl/cuXYZ/`` pages serve the torch, torchvision and torchaudio of that variant with
   the real ``Requires-Dist`` (the nvidia-* pins of that CUDA) and the nvidia-* packages it names.

4. A package whose ``setup.py`` computes its Requires-Dist from the installed torch (axolotl
   0.9.2, an sdist only: its PKG-INFO has no Requires-Dist) is built for real: its sdist's
   ``prepare_metadata_for_build_wheel`` runs in a venv holding its build requirements and a
   ``torch-X.dist-info`` of each scenario's torch (metadata only, which is all its setup.py
   reads). The Requires-Dist each build wrote is recorded per torch
   (``requires_dist_built_against_torch``), and the scenario resolves that list in the
   package's place (uv's isolated build would see no torch and pin its default instead).

The output is sorted JSON, one package version per block; the same PyPI state and as-of date give
the same bytes.
"""

from __future__ import annotations

import argparse
import datetime
import email.parser
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

from cudalock.tomlfile import tomllib

PYPI_SIMPLE = "https://pypi.org/simple"
PYPI_JSON = "https://pypi.org/pypi/{name}/json"
PYTHONS = ("3.11", "3.12")
#: uv's name for the platform the closure is resolved for.
PLATFORM = "x86_64-manylinux_2_28"
#: CPython versions whose wheels are listed (the stand-in index serves these names).
LISTED_PYTHONS = ("310", "311", "312", "313")
MACHINES = ("x86_64", "aarch64")
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "fixtures/closures/finetune-stack.json"
FORMAT = 1


@dataclass(frozen=True)
class TorchBuild:
    """A torch release with the torchvision/torchaudio that pin it, as PyPI ships them."""

    torch: str
    torchvision: str
    torchaudio: str
    #: The platform tag of this release's x86_64 files on download.pytorch.org.
    pytorch_platform_tag: str


#: torchvision/torchaudio pairs: their PyPI Requires-Dist pins ``torch==<torch>`` (checked when
#: recording). The download.pytorch.org platform tags come from third-party scripts and lock files
#: that quote the index's URLs (download.pytorch.org itself was not reachable when recording):
#: ``linux_x86_64`` up to 2.6, ``manylinux_2_28_x86_64`` from 2.7 on.
TORCH_BUILDS = (
    TorchBuild("2.4.1", "0.19.1", "2.4.1", "linux_x86_64"),
    TorchBuild("2.5.1", "0.20.1", "2.5.1", "linux_x86_64"),
    TorchBuild("2.6.0", "0.21.0", "2.6.0", "linux_x86_64"),
    TorchBuild("2.7.1", "0.22.1", "2.7.1", "manylinux_2_28_x86_64"),
    TorchBuild("2.8.0", "0.23.0", "2.8.0", "manylinux_2_28_x86_64"),
)


def _torch_scenarios(builds: Sequence[TorchBuild]) -> list[tuple[str, ...]]:
    """One requirement set per torch build: torch with the torchvision/torchaudio that pin it."""
    return [
        (f"torch=={b.torch}", f"torchvision=={b.torchvision}", f"torchaudio=={b.torchaudio}")
        for b in builds
    ]


PYTORCH_TAG_EVIDENCE = (
    "download.pytorch.org URLs quoted in public install scripts and lock files (e.g. "
    "torch-2.4.1%2Bcu121-cp311-cp311-linux_x86_64.whl, torch-2.6.0%2Bcu124-cp311-cp311-"
    "linux_x86_64.whl, torch-2.7.1+cu126-cp311-cp311-manylinux_2_28_x86_64.whl, "
    "torchaudio-2.8.0%2Bcu128-cp311-cp311-manylinux_2_28_x86_64.whl); the index itself was "
    "not reachable from the recording host"
)

#: Requirement sets resolved against real PyPI. The llamafactory extras are the ones its README
#: installs (torch, metrics) plus deepspeed; 0.9.5 has no deepspeed extra, so DeepSpeed is named.
SCENARIOS: tuple[tuple[str, ...], ...] = (
    *_torch_scenarios(TORCH_BUILDS),
    ("llamafactory[torch,metrics,deepspeed]==0.9.3", "torch==2.4.1"),
    ("llamafactory[torch,metrics,deepspeed]==0.9.3", "torch==2.6.0"),
    ("llamafactory[metrics,deepspeed]==0.9.4", "torch==2.5.1"),
    ("llamafactory[metrics,deepspeed]==0.9.4", "torch==2.7.1"),
    ("llamafactory[metrics]==0.9.5", "deepspeed", "torch==2.8.0"),
    ("deepspeed==0.16.4", "transformers[torch]<5", "torch==2.4.1"),
    ("transformers[torch]", "peft", "trl", "accelerate", "datasets", "deepspeed", "torch==2.5.1"),
    ("transformers[torch]", "peft", "trl", "accelerate", "datasets", "deepspeed", "torch==2.8.0"),
)


#: Torch builds of the stack of CUDA-built packages next to torch (``--stack kernels``).
KERNEL_TORCH_BUILDS = (
    TorchBuild("2.1.0", "0.16.0", "2.1.0", "linux_x86_64"),
    TorchBuild("2.5.1", "0.20.1", "2.5.1", "linux_x86_64"),
    TorchBuild("2.7.1", "0.22.1", "2.7.1", "manylinux_2_28_x86_64"),
)
#: vllm pinning torch 2.5.1 (with xformers 0.0.28.post3) and 2.7.1 (xformers 0.0.31), xformers
#: alone, and trl on torch 2.1.0, where uv alone takes a transformers (and a safetensors) whose
#: ``torch`` extra needs a newer torch; with those extras asked for, the releases that fit.
KERNEL_SCENARIOS: tuple[tuple[str, ...], ...] = (
    *_torch_scenarios(KERNEL_TORCH_BUILDS),
    ("vllm==0.6.6.post1",),
    ("vllm==0.10.1.1",),
    ("xformers==0.0.28.post3", "torch==2.5.1"),
    ("trl==1.16.0", "torch==2.1.0"),
    ("trl<0.12", "transformers[torch]", "safetensors[torch]", "torch==2.1.0"),
)


#: unsloth's torch builds: 2.7.1 and 2.8.0 (PyPI's are cu126 and cu128 builds).
UNSLOTH_TORCH_BUILDS = (
    TorchBuild("2.7.1", "0.22.1", "2.7.1", "manylinux_2_28_x86_64"),
    TorchBuild("2.8.0", "0.23.0", "2.8.0", "manylinux_2_28_x86_64"),
)
#: unsloth on torch 2.7.1 and 2.8.0, where uv alone takes torchao 0.18.0 (its extensions need
#: torch >= 2.11) and PyPI's xformers (a CUDA 12 build), and the torchao releases
#: compat_matrix/torch_pairings.toml records for those torches (0.12.0 for 2.7.1, 0.14.0 for
#: 2.8.0; unsloth_zoo requires torchao>=0.13.0).
UNSLOTH_SCENARIOS: tuple[tuple[str, ...], ...] = (
    *_torch_scenarios(UNSLOTH_TORCH_BUILDS),
    ("unsloth==2026.10.9", "torch==2.7.1"),
    ("unsloth==2026.10.9", "torch==2.8.0"),
    ("torchao==0.12.0", "torch==2.7.1"),
    ("torchao==0.14.0", "torch==2.8.0"),
)


#: axolotl's torch builds: 2.5.1 and 2.6.0 (PyPI's are cu124 builds). Its 0.9.2 setup.py
#: requires ``torch==<installed>`` and picks xformers by it (>=0.0.28.post3 for 2.5.x with x > 0,
#: ==0.0.29.post2 and autoawq for 2.6), so each torch gets its own Requires-Dist.
AXOLOTL_TORCH_BUILDS = (
    TorchBuild("2.5.1", "0.20.1", "2.5.1", "linux_x86_64"),
    TorchBuild("2.6.0", "0.21.0", "2.6.0", "linux_x86_64"),
)
AXOLOTL_SCENARIOS: tuple[tuple[str, ...], ...] = (
    *_torch_scenarios(AXOLOTL_TORCH_BUILDS),
    ("axolotl==0.9.2", "torch==2.5.1"),
    ("axolotl==0.9.2", "torch==2.6.0"),
)


@dataclass(frozen=True)
class Stack:
    """One recording: its requirement sets, torch builds, Pythons and output file."""

    about: str
    scenarios: tuple[tuple[str, ...], ...]
    torch_builds: tuple[TorchBuild, ...]
    pythons: tuple[str, ...]
    output: Path
    #: sdist-only packages whose setup.py computes Requires-Dist from the installed torch.
    built_against_torch: tuple[str, ...] = ()


STACKS = {
    "finetune": Stack(
        "Real dependency closure of a fine-tuning stack (llamafactory, transformers, "
        "peft, trl, accelerate, datasets, deepspeed, the torch family)",
        SCENARIOS,
        TORCH_BUILDS,
        PYTHONS,
        DEFAULT_OUTPUT,
    ),
    "kernels": Stack(
        "Real dependency closure of CUDA-built packages next to torch (vllm 0.6.6.post1 and "
        "0.10.1.1, xformers, trl on torch 2.1.0)",
        KERNEL_SCENARIOS,
        KERNEL_TORCH_BUILDS,
        ("3.11",),
        DEFAULT_OUTPUT.parent / "kernels-stack.json",
    ),
    "unsloth": Stack(
        "Real dependency closure of unsloth 2026.10.9 on torch 2.7.1 and 2.8.0 (unsloth_zoo, "
        "xformers, bitsandbytes, triton, torchao, transformers, trl, peft)",
        UNSLOTH_SCENARIOS,
        UNSLOTH_TORCH_BUILDS,
        ("3.11",),
        DEFAULT_OUTPUT.parent / "unsloth-stack.json",
    ),
    "axolotl": Stack(
        "Real dependency closure of axolotl 0.9.2 (an sdist whose setup.py pins the installed "
        "torch) on torch 2.5.1 and 2.6.0: its requirements.txt closure (transformers, peft, trl, "
        "accelerate, datasets, xformers, bitsandbytes, triton, torchao, liger-kernel, autoawq, "
        "gradio, modal, lm-eval, the s3/gcs/azure/oci filesystems) without extras; left out: its "
        "extras (flash-attn, deepspeed, mamba-ssm, vllm, ray, ...), which no scenario asks for",
        AXOLOTL_SCENARIOS,
        AXOLOTL_TORCH_BUILDS,
        ("3.11",),
        DEFAULT_OUTPUT.parent / "axolotl-stack.json",
        built_against_torch=("axolotl",),
    ),
}


def _get(url: str, headers: Mapping[str, str] | None = None) -> bytes:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    with urllib.request.urlopen(request, timeout=120) as response:
        data: bytes = response.read()
        return data


class RangeFile(io.RawIOBase):
    """A remote file read with HTTP range requests, so zipfile reads one member of a big wheel."""

    def __init__(self, url: str, size: int) -> None:
        super().__init__()
        self.url = url
        self.size = size
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = base + offset
        return self.position

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), self.size - self.position)
        if count <= 0:
            return 0
        last = self.position + count - 1
        data = _get(self.url, {"Range": f"bytes={self.position}-{last}"})[:count]
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def wheel_metadata(url: str, size: int) -> str:
    """``.dist-info/METADATA`` of the wheel at ``url``, read without downloading the wheel."""
    with zipfile.ZipFile(io.BufferedReader(RangeFile(url, size), 256 * 1024)) as archive:
        names = [
            n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        ]
        return archive.read(names[0]).decode("utf-8")


def sdist_metadata(url: str) -> str:
    """``PKG-INFO`` at the top of the sdist at ``url``."""
    data = _get(url)
    if url.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            name = min((n for n in archive.namelist() if n.endswith("/PKG-INFO")), key=len)
            return archive.read(name).decode("utf-8")
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = min(
            (m for m in archive.getmembers() if m.name.endswith("/PKG-INFO")),
            key=lambda m: len(m.name),
        )
        extracted = archive.extractfile(member)
        assert extracted is not None
        return extracted.read().decode("utf-8")


def wheel_member(url: str, size: int, member: str) -> str:
    with zipfile.ZipFile(io.BufferedReader(RangeFile(url, size), 256 * 1024)) as archive:
        return archive.read(member).decode("utf-8")


def listed_wheel(filename: str) -> bool:
    """A wheel the stand-in index lists: pure, or manylinux x86_64/aarch64 for CPython 3.10–3.13."""
    tags = parse_wheel_filename(filename)[3]
    for tag in tags:
        if tag.platform == "any":
            return True
        if not tag.platform.startswith("manylinux") or not tag.platform.endswith(MACHINES):
            continue
        if tag.interpreter.startswith("py3") or tag.interpreter in {
            f"cp{v}" for v in LISTED_PYTHONS
        }:
            return tag.abi in {"none", "abi3", tag.interpreter}
        if tag.abi == "abi3" and tag.interpreter.startswith("cp3"):
            return int(tag.interpreter[3:]) <= int(LISTED_PYTHONS[-1])
    return False


def _glibc(tag_platform: str) -> tuple[int, int]:
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    match = re.match(r"manylinux_(\d+)_(\d+)_", tag_platform)
    if match:
        return int(match[1]), int(match[2])
    return legacy.get(tag_platform.split("_")[0], (99, 99))


def select_files(filenames: Iterable[str]) -> list[str]:
    """Sdists, pure wheels and, per interpreter/ABI/machine, the manylinux wheel of lowest glibc."""
    kept: list[str] = []
    best: dict[tuple[str, str, str], tuple[tuple[int, int], str]] = {}
    for filename in filenames:
        if filename.endswith((".tar.gz", ".zip")):
            kept.append(filename)
            continue
        if not filename.endswith(".whl") or not listed_wheel(filename):
            continue
        tags = parse_wheel_filename(filename)[3]
        if any(t.platform == "any" for t in tags):
            kept.append(filename)
            continue
        first = min(tags, key=lambda t: (t.interpreter, t.abi, t.platform))
        machine = next(m for m in MACHINES if first.platform.endswith(m))
        key = (first.interpreter, first.abi, machine)
        glibc = min(_glibc(t.platform) for t in tags)
        if key not in best or (glibc, filename) < best[key]:
            best[key] = (glibc, filename)
    kept += [filename for _glibc_version, filename in best.values()]
    return sorted(kept)


def metadata_source(files: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The file whose metadata stands for a version: pure wheel, cp311 x86_64 wheel, sdist."""

    def rank(entry: Mapping[str, Any]) -> tuple[int, str]:
        name: str = entry["filename"]
        if name.endswith("-none-any.whl"):
            return 0, name
        if name.endswith(".whl") and "x86_64" in name and ("cp311" in name or "abi3" in name):
            return 1, name
        if name.endswith(".whl") and "x86_64" in name:
            return 2, name
        if name.endswith(".whl"):
            return 3, name
        return 4, name

    return min(files, key=rank)


def parse_metadata(text: str) -> dict[str, Any]:
    message = email.parser.HeaderParser().parsestr(text)
    return {
        "requires_dist": [str(v) for v in message.get_all("Requires-Dist") or []],
        "provides_extra": [str(v) for v in message.get_all("Provides-Extra") or []],
        "requires_python": message.get("Requires-Python"),
    }


def resolve(requirements: Sequence[str], python: str, as_of: str, cache: Path) -> dict[str, str]:
    """Real ``uv pip compile`` against real PyPI: the pins (normalised name → version)."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise SystemExit("uv not found")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["UV_NO_CONFIG"] = "1"
    command = [
        uv,
        "pip",
        "compile",
        "-",
        "--no-config",
        "--no-header",
        "--no-annotate",
        "--python-version",
        python,
        "--python-platform",
        PLATFORM,
        "--index-url",
        PYPI_SIMPLE,
        "--exclude-newer",
        as_of,
        "--cache-dir",
        str(cache),
    ]
    result = subprocess.run(
        command,
        input="\n".join(requirements) + "\n",
        text=True,
        capture_output=True,
        env=env,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(
            f"uv pip compile {requirements} (Python {python}) failed:\n{result.stderr}"
        )
    pins: dict[str, str] = {}
    for line in result.stdout.splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split(";")[0].strip().split("==")
            pins[canonicalize_name(name)] = version
    return pins


def project_json(name: str) -> dict[str, Any]:
    url = PYPI_JSON.format(name=name)
    document: dict[str, Any] = json.loads(_get(url))
    for files in document["releases"].values():
        for entry in files:
            entry["url"] = urllib.parse.urljoin(url, entry["url"])
    return document


def file_version(filename: str) -> str:
    if filename.endswith(".whl"):
        return str(parse_wheel_filename(filename)[1])
    return str(parse_sdist_filename(filename)[1])


def record_version(
    name: str, version: str, document: Mapping[str, Any], stack: Stack
) -> dict[str, Any]:
    """The recorded entry for one version: its metadata and the listed file names."""
    files = [f for f in document["releases"].get(version, []) if not f.get("yanked")]
    if not files:
        raise SystemExit(f"{name} {version}: no files on PyPI")
    source = metadata_source(files)
    built = False
    if source["filename"].endswith(".whl"):
        text = wheel_metadata(source["url"], int(source["size"]))
    else:
        text = sdist_metadata(source["url"])
        # A PKG-INFO before Metadata-Version 2.2 need not carry Requires-Dist (grpclib 0.4.7's
        # and rouge-score 0.1.2's have none: setup.py writes them when built), so the sdist is
        # built, as uv builds it. Those whose build reads the installed torch are built per
        # torch instead (``requires_dist_built_against_torch``).
        if _metadata_version(text) < (2, 2) and name not in stack.built_against_torch:
            text = built_metadata(source["url"], stack.pythons[0])
            built = True
    entry = parse_metadata(text)
    entry["files"] = select_files(f["filename"] for f in files)
    entry["metadata_from"] = source["filename"] + (" (built)" if built else "")
    return entry


def torch_cuda(document: Mapping[str, Any], version: str) -> str:
    """``cuda`` from ``torch/version.py`` in PyPI's cp311 x86_64 wheel of ``version``."""
    wheel = next(
        f
        for f in document["releases"][version]
        if f["filename"].endswith(".whl")
        and "cp311-cp311" in f["filename"]
        and "x86_64" in f["filename"]
        and "manylinux" in f["filename"]
    )
    text = wheel_member(wheel["url"], int(wheel["size"]), "torch/version.py")
    match = re.search(r"^cuda(?:: Optional\[str\])? = '([\d.]+)'", text, re.MULTILINE)
    if match is None:
        raise SystemExit(f"torch {version}: no CUDA version in torch/version.py")
    return match[1]


def _sdist_of(document: Mapping[str, Any], version: str) -> Mapping[str, Any]:
    return next(
        f
        for f in document["releases"][version]
        if f["filename"].endswith((".tar.gz", ".zip")) and not f.get("yanked")
    )


#: Runs a PEP 517 backend's ``prepare_metadata_for_build_wheel`` (argv: backend, output folder).
_PREPARE_METADATA = """import importlib, sys
module, _, attribute = sys.argv[1].partition(":")
backend = importlib.import_module(module)
for part in filter(None, attribute.split(".")):
    backend = getattr(backend, part)
print(backend.prepare_metadata_for_build_wheel(sys.argv[2]))
"""


def built_metadata(url: str, python: str, torch: str | None = None) -> str:
    """METADATA of the sdist at ``url`` as its real build writes it: the backend's
    ``prepare_metadata_for_build_wheel`` in a venv holding its ``[build-system] requires``
    and, with ``torch``, a ``torch-<torch>.dist-info`` (what a setup.py reading the installed
    torch's version sees; no torch code)."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise SystemExit("uv not found")
    with tempfile.TemporaryDirectory(prefix="record-build-") as scratch:
        root = Path(scratch)
        data = _get(url)
        if url.endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                archive.extractall(root / "src")
        else:
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                archive.extractall(root / "src", filter="data")
        (tree,) = (root / "src").iterdir()
        pyproject = tree / "pyproject.toml"
        system = (
            tomllib.loads(pyproject.read_text(encoding="utf-8")).get("build-system", {})
            if pyproject.exists()
            else {}
        )
        requires = system.get("requires", ["setuptools>=40.8.0", "wheel"])
        backend = system.get("build-backend", "setuptools.build_meta:__legacy__")
        venv = root / "venv"
        subprocess.run([uv, "venv", "-q", "-p", python, str(venv)], check=True)
        interpreter = str(venv / "bin/python")
        if requires:
            subprocess.run([uv, "pip", "install", "-q", "-p", interpreter, *requires], check=True)
        if torch is not None:
            purelib = subprocess.run(
                [interpreter, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            dist_info = Path(purelib) / f"torch-{torch}.dist-info"
            dist_info.mkdir()
            (dist_info / "METADATA").write_text(
                f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n", encoding="utf-8"
            )
        out = root / "metadata"
        out.mkdir()
        printed = subprocess.run(
            [interpreter, "-c", _PREPARE_METADATA, backend, str(out)],
            cwd=tree,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return (out / printed.strip().splitlines()[-1] / "METADATA").read_text(encoding="utf-8")


def _metadata_version(text: str) -> tuple[int, ...]:
    found = email.parser.HeaderParser().parsestr(text).get("Metadata-Version", "1.0")
    return tuple(int(part) for part in str(found).split("."))


def _without_extras(requires_dist: Iterable[str]) -> list[str]:
    return [r for r in requires_dist if "extra ==" not in r]


def _parallel(function: Any, items: Iterable[Any]) -> Iterator[Any]:
    with ThreadPoolExecutor(max_workers=16) as pool:
        yield from pool.map(function, items)


def _built_in_place(
    requirements: Sequence[str],
    python: str,
    stack: Stack,
    built: dict[tuple[str, str], dict[str, list[str]]],
) -> tuple[list[str], dict[str, str]]:
    """``requirements`` with each ``NAME==VERSION`` of ``stack.built_against_torch`` replaced
    by the Requires-Dist its real build writes beside the scenario's ``torch==X``, and the
    pins of those packages (uv never sees them)."""
    torch = next(r.split("==", 1)[1] for r in requirements if r.startswith("torch=="))
    asked: list[str] = []
    own: dict[str, str] = {}
    for requirement in requirements:
        name, _, version = requirement.partition("==")
        if canonicalize_name(name) not in stack.built_against_torch:
            asked.append(requirement)
            continue
        key = (str(canonicalize_name(name)), version)
        per_torch = built.setdefault(key, {})
        if torch not in per_torch:
            sdist = _sdist_of(project_json(name), version)
            per_torch[torch] = parse_metadata(built_metadata(sdist["url"], python, torch))[
                "requires_dist"
            ]
        asked += _without_extras(per_torch[torch])
        own[key[0]] = version
    return asked, own


def record(as_of: str, stack: Stack = STACKS["finetune"]) -> dict[str, Any]:
    pins: dict[str, set[str]] = {}
    scenarios = []
    #: (name, version) → torch → the Requires-Dist its real build wrote.
    built: dict[tuple[str, str], dict[str, list[str]]] = {}
    with tempfile.TemporaryDirectory(prefix="record-closure-") as cache:
        for requirements in stack.scenarios:
            for python in stack.pythons:
                asked, own_pins = _built_in_place(requirements, python, stack, built)
                resolved = resolve(asked, python, as_of, Path(cache)) | own_pins
                print(
                    f"{python} {' '.join(requirements)}: {len(resolved)} packages", file=sys.stderr
                )
                scenarios.append(
                    {
                        "requirements": list(requirements),
                        "python": python,
                        "resolved": dict(sorted(resolved.items())),
                    }
                )
                for name, version in resolved.items():
                    pins.setdefault(name, set()).add(version)
    names = sorted(pins)
    documents = dict(zip(names, _parallel(project_json, names), strict=True))
    jobs = [(name, version) for name in names for version in sorted(pins[name])]
    entries = list(
        _parallel(lambda job: record_version(job[0], job[1], documents[job[0]], stack), jobs)
    )
    for (name, version), entry in zip(jobs, entries, strict=True):
        if (name, version) in built:
            entry["requires_dist_built_against_torch"] = built[(name, version)]
            entry["requires_dist_built_with"] = (
                "setuptools build_meta.prepare_metadata_for_build_wheel of the sdist, in a venv "
                "with its [build-system] requires and a torch-<version>.dist-info"
            )
    packages: dict[str, Any] = {}
    for (name, version), entry in zip(jobs, entries, strict=True):
        package = packages.setdefault(
            name,
            {
                "name": documents[name]["info"]["name"],
                "source": PYPI_JSON.format(name=name),
                "versions": {},
            },
        )
        package["versions"][version] = entry
    builds = []
    for build in stack.torch_builds:
        cuda = torch_cuda(documents["torch"], build.torch)
        for companion in ("torchvision", "torchaudio"):
            version = getattr(build, companion)
            requires = packages[companion]["versions"][version]["requires_dist"]
            if not any(
                re.fullmatch(rf"torch ?\(?=={re.escape(build.torch)}\)?", r) for r in requires
            ):
                raise SystemExit(
                    f"{companion} {version} does not pin torch=={build.torch}: {requires}"
                )
        builds.append(
            {
                "variant": "cu" + cuda.replace(".", ""),
                "cuda": cuda,
                "torch": build.torch,
                "torchvision": build.torchvision,
                "torchaudio": build.torchaudio,
                "cuda_source": f"torch/version.py in PyPI's torch {build.torch} cp311 x86_64 wheel",
                "pytorch_platform_tag": build.pytorch_platform_tag,
                "pytorch_platform_tag_status": "unverified",
                "pytorch_platform_tag_evidence": PYTORCH_TAG_EVIDENCE,
            }
        )
    return {
        "about": (
            f"{stack.about}, recorded from PyPI by tests/support/record_closure.py; "
            "see its docstring."
        ),
        "format": FORMAT,
        "recorded": as_of,
        "index": PYPI_SIMPLE,
        "platform": PLATFORM,
        "pythons": list(stack.pythons),
        "listed_files": (
            "sdists, *-none-any wheels, manylinux x86_64/aarch64 wheels for "
            "CPython 3.10-3.13 (lowest glibc per interpreter, ABI and machine)"
        ),
        "scenarios": scenarios,
        "torch_builds": builds,
        "packages": packages,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--as-of",
        default=datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        help="resolve as PyPI was on this date (uv --exclude-newer)",
    )
    parser.add_argument("--stack", choices=sorted(STACKS), default="finetune")
    parser.add_argument("--output", type=Path, help="default: the stack's fixture file")
    args = parser.parse_args(argv)
    stack = STACKS[args.stack]
    document = record(args.as_of, stack)
    args.output = args.output or stack.output
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    count = len(document["packages"])
    versions = sum(len(p["versions"]) for p in document["packages"].values())
    print(f"{args.output}: {count} packages, {versions} versions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
