"""The recorded real fine-tuning closure, served as stand-in packages on 127.0.0.1.

``tests/fixtures/closures/finetune-stack.json`` (written by ``tests/support/record_closure.py``)
holds the real PyPI metadata of llamafactory, transformers, peft, trl, accelerate, datasets,
deepspeed, the torch family and their whole closure: 150+ packages, their real Requires-Dist
(extras and markers verbatim), Provides-Extra, Requires-Python and real file names. This module
turns it into stand-ins (tiny wheels and sdists with exactly that metadata) and serves them with
the index server of ``tests/support/index.py``:

- a PyPI-like index with every recorded file, torch, torchvision and torchaudio included, under
  their PyPI names and unlabelled versions, as on PyPI;
- a PyTorch-like index with one ``/whl/cuXYZ/`` page per recorded CUDA variant: torch,
  torchvision and torchaudio with the variant's label (``2.5.1+cu124``) and torch's real
  Requires-Dist for that CUDA, plus the triton and nvidia-* packages those name.

DeepSpeed is served as it is on PyPI, an sdist only; its stand-in ``setup.py`` probes torch like
the real one and writes ``deepspeed/git_version_info_installed.py`` with ``torch_info`` of the
torch it was built against (``'0.0'`` when torch is not importable, as in an isolated build).

Usage::

    recording = load_recording()
    with serve_real_stack(tmp_path) as server:      # or the session fixture ``real_stack``
        pytorch_base, pypi_url = server             # ".../whl", ".../pypi/simple"
        build = recording.torch_build("2.5.1")      # variant "cu124", pins "2.5.1+cu124", ...
        index = f"{pytorch_base}/{build.variant}"
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from cudalock.request import TORCH_FAMILY
from tests.support.index import IndexServer, serve_indexes
from tests.support.wheels import StandIn, torch_version_file

RECORDING = Path(__file__).resolve().parent.parent / "fixtures/closures/finetune-stack.json"
#: vllm, xformers and trl stacks (``record_closure.py --stack kernels``).
KERNELS_RECORDING = RECORDING.parent / "kernels-stack.json"
#: unsloth on torch 2.7.1 and 2.8.0 (``record_closure.py --stack unsloth``).
UNSLOTH_RECORDING = RECORDING.parent / "unsloth-stack.json"
#: axolotl 0.9.2 on torch 2.5.1 and 2.6.0 (``record_closure.py --stack axolotl``).
AXOLOTL_RECORDING = RECORDING.parent / "axolotl-stack.json"
#: CPython versions the PyTorch-like index carries files for (as the recording lists for PyPI).
_PYTORCH_INDEX_PYTHONS = ("cp310", "cp311", "cp312", "cp313")


@dataclass(frozen=True)
class Release:
    """One recorded version of one package, as PyPI has it."""

    name: str  # as PyPI displays it ("PyYAML")
    version: str
    requires_dist: tuple[str, ...]
    provides_extra: tuple[str, ...]
    requires_python: str | None
    files: tuple[str, ...]  # real file names: sdists and the listed wheels
    #: Real sizes of the files recorded with theirs (vllm 0.33.0's 321 MiB wheels): served as
    #: sparse stand-ins of that size.
    sizes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: Files PyPI serves no PEP 658 metadata for: neither does the stand-in index.
    without_core_metadata: tuple[str, ...] = ()
    #: torch version → Requires-Dist, for an sdist whose setup.py computes it from the
    #: installed torch (axolotl 0.9.2): what its real build wrote beside that torch.
    built_against_torch: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


@dataclass(frozen=True)
class TorchBuild:
    """A torch release and its companions as one CUDA variant of the PyTorch index serves them."""

    variant: str  # "cu124"
    cuda: str  # "12.4"
    torch: str  # "2.5.1", the PyPI version; the index's is torch + "+" + variant
    torchvision: str
    torchaudio: str
    #: The x86_64 platform tag of this release's files on the PyTorch index.
    platform_tag: str

    def version(self, package: str) -> str:
        """The labelled version the PyTorch index serves: ``version("torch") == "2.5.1+cu124"``."""
        plain = {
            "torch": self.torch,
            "torchvision": self.torchvision,
            "torchaudio": self.torchaudio,
        }[package]
        return f"{plain}+{self.variant}"

    def pins(self) -> dict[str, str]:
        """``{"torch": "2.5.1+cu124", "torchvision": ..., "torchaudio": ...}``."""
        return {package: self.version(package) for package in TORCH_FAMILY}


@dataclass(frozen=True)
class Scenario:
    """A requirement set the recording resolved against real PyPI, and what uv picked."""

    requirements: tuple[str, ...]
    python: str
    resolved: Mapping[str, str]  # normalised name → version


@dataclass(frozen=True)
class Recording:
    """The parsed recording."""

    recorded: str  # the date PyPI was read (uv --exclude-newer)
    releases: Mapping[str, Mapping[str, Release]]  # normalised name → version → release
    torch_builds: tuple[TorchBuild, ...]
    scenarios: tuple[Scenario, ...]

    def release(self, name: str, version: str) -> Release:
        return self.releases[canonicalize_name(name)][version]

    def versions(self, name: str) -> list[str]:
        return list(self.releases[canonicalize_name(name)])

    def torch_build(self, torch: str) -> TorchBuild:
        """The recorded build of torch ``torch`` (a PyPI version, "2.5.1")."""
        return next(b for b in self.torch_builds if b.torch == torch)

    def scenario(self, *requirements: str, python: str) -> Scenario:
        return next(
            s for s in self.scenarios if s.requirements == requirements and s.python == python
        )

    @property
    def variants(self) -> list[str]:
        return sorted({b.variant for b in self.torch_builds})


@functools.cache
def load_recording(path: Path = RECORDING) -> Recording:
    document = json.loads(path.read_text(encoding="utf-8"))
    releases: dict[str, dict[str, Release]] = {}
    for key, package in document["packages"].items():
        releases[key] = {
            version: Release(
                name=package["name"],
                version=version,
                requires_dist=tuple(entry["requires_dist"]),
                provides_extra=tuple(entry["provides_extra"]),
                requires_python=entry["requires_python"],
                files=tuple(entry["files"]),
                sizes=dict(entry.get("sizes", {})),
                without_core_metadata=tuple(entry.get("without_core_metadata", ())),
                built_against_torch={
                    torch: tuple(requires)
                    for torch, requires in entry.get(
                        "requires_dist_built_against_torch", {}
                    ).items()
                },
            )
            for version, entry in package["versions"].items()
        }
    builds = tuple(
        TorchBuild(
            variant=b["variant"],
            cuda=b["cuda"],
            torch=b["torch"],
            torchvision=b["torchvision"],
            torchaudio=b["torchaudio"],
            platform_tag=b["pytorch_platform_tag"],
        )
        for b in document["torch_builds"]
    )
    scenarios = tuple(
        Scenario(
            requirements=tuple(s["requirements"]), python=s["python"], resolved=dict(s["resolved"])
        )
        for s in document["scenarios"]
    )
    return Recording(
        recorded=document["recorded"], releases=releases, torch_builds=builds, scenarios=scenarios
    )


def _wheel_tag(filename: str) -> str:
    """ "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64" from a wheel file name."""
    return "-".join(filename.removesuffix(".whl").split("-")[-3:])


def _is_x86_64(filename: str) -> bool:
    return filename.endswith(".whl") and "x86_64" in _wheel_tag(filename)


def _standin(
    release: Release,
    filename: str,
    *,
    version: str | None = None,
    files: Mapping[str, str] | None = None,
) -> StandIn:
    """A stand-in for the real file ``filename`` of ``release``, with its recorded metadata."""
    sdist = not filename.endswith(".whl")
    return StandIn(
        name=release.name,
        version=version or release.version,
        requires_dist=release.requires_dist,
        requires_python=release.requires_python,
        provides_extra=release.provides_extra,
        files=files or {},
        tag="py3-none-any" if sdist else _wheel_tag(filename),
        real_filename=filename,
        kind="sdist" if sdist else "wheel",
        sparse_bytes=release.sizes.get(filename, 0),
    )


def torch_files(version: str, cuda: str) -> dict[str, str]:
    """The files of a stand-in torch: ``torch/version.py`` as the real wheels write it."""
    return {
        "torch/__init__.py": "from torch.version import __version__ as __version__\n",
        "torch/version.py": torch_version_file(version, cuda),
    }


#: The stand-in of DeepSpeed's ``setup.py``: the same torch probe, requirement and build-info
#: file as the real one (deepspeed 0.16.x-0.19.x), and no ops. Format with ``version`` and
#: ``requires`` (the recorded Requires-Dist).
DEEPSPEED_SETUP = '''"""Stand-in for DeepSpeed's setup.py: its torch probe and build info."""
torch_available = True
try:
    import torch
except ImportError:
    torch_available = False
    print('[WARNING] Unable to import torch, pre-compiling ops will be disabled. '
          'Please visit https://pytorch.org/ to see how to properly install torch on your system.')

version_str = {version!r}
requires_dist = {requires!r}
cuda_torch = torch_available and torch.version.cuda is not None
# Only install pynvml on nvidia gpus: the real setup.py appends it to install_requires when
# the accelerator is CUDA (a CUDA torch on a build machine with a GPU).
if cuda_torch:
    requires_dist.insert(0, 'nvidia-ml-py')

if torch_available:
    TORCH_MAJOR = torch.__version__.split('.')[0]
    TORCH_MINOR = torch.__version__.split('.')[1]
else:
    TORCH_MAJOR = "0"
    TORCH_MINOR = "0"

torch_version = ".".join([TORCH_MAJOR, TORCH_MINOR])
cuda_version = "0.0"
nccl_version = "0.0"
hip_version = "0.0"
if cuda_torch:
    cuda_version = ".".join(torch.version.cuda.split('.')[:2])
    nccl = getattr(getattr(getattr(torch, 'cuda', None), 'nccl', None), 'version', None)
    if nccl is not None:
        nccl_version = ".".join(map(str, nccl()[:2]))
if torch_available and getattr(torch.version, 'hip', None) is not None:
    hip_version = ".".join(torch.version.hip.split('.')[:2])
torch_info = {{
    "version": torch_version,
    "bf16_support": False,
    "cuda_version": cuda_version,
    "nccl_version": nccl_version,
    "hip_version": hip_version
}}
install_ops = dict.fromkeys(['deepspeed_not_implemented', 'async_io', 'deepspeed_ccl_comm',
                             'deepspeed_shm_comm', 'cpu_adam', 'fused_adam'], False)
accelerator_name = 'cuda' if cuda_torch else 'cpu'

print(f"version={{version_str}}, git_hash=unknown, git_branch=unknown")
with open('deepspeed/git_version_info_installed.py', 'w') as fd:
    fd.write(f"version='{{version_str}}'\\n")
    fd.write("git_hash='unknown'\\n")
    fd.write("git_branch='unknown'\\n")
    fd.write(f"installed_ops={{install_ops}}\\n")
    fd.write(f"accelerator_name='{{accelerator_name}}'\\n")
    fd.write(f"torch_info={{torch_info}}\\n")
'''

#: ``deepspeed/git_version_info.py`` as the real package has it (its fallback shortened).
DEEPSPEED_VERSION_INFO = """try:
    #  This is populated by setup.py
    from .git_version_info_installed import *  # noqa: F401 # type: ignore
except ModuleNotFoundError:
    version = "0.0.0"
    git_hash = '[none]'
    git_branch = '[none]'
    installed_ops = {}
    accelerator_name = ""
    torch_info = {'version': "0.0", "cuda_version": "0.0", "hip_version": "0.0"}
"""


def deepspeed_sdist(release: Release, filename: str) -> StandIn:
    """The stand-in of a DeepSpeed sdist: building it runs the torch-probing ``setup.py``."""
    files = {
        "setup.py": DEEPSPEED_SETUP.format(
            version=release.version, requires=list(release.requires_dist)
        ),
        "deepspeed/__init__.py": "from .git_version_info import version as __version__\n",
        "deepspeed/git_version_info.py": DEEPSPEED_VERSION_INFO,
    }
    return _standin(release, filename, files=files)


#: The stand-in of axolotl 0.9.2's ``setup.py``: its torch probe as the real one has it
#: (``version("torch")``, "2.6.0" when torch is not installed, as in an isolated build), and the
#: Requires-Dist its real build wrote beside that torch, with ``torch==<installed version>`` as
#: the real one appends it (the label included: "2.5.1+cu124"). Format with ``built``.
TORCH_PINNING_SETUP = """from importlib.metadata import PackageNotFoundError, version

try:
    torch_version = version("torch")
except PackageNotFoundError:
    torch_version = "2.6.0"  # default to torch 2.6
built = {built!r}
plain = torch_version.split("+")[0]
if plain not in built:
    raise SystemExit("the recording has no build of this sdist beside torch " + torch_version)
requires_dist = [
    "torch==" + torch_version if r.startswith("torch==") else r for r in built[plain]
]
"""


def torch_pinning_sdist(release: Release, filename: str) -> StandIn:
    """The stand-in of an sdist whose setup.py pins the installed torch (axolotl 0.9.2)."""
    built = {torch: list(requires) for torch, requires in release.built_against_torch.items()}
    return _standin(release, filename, files={"setup.py": TORCH_PINNING_SETUP.format(built=built)})


#: Bytes of incompressible payload per (package, version without its local label).
Payloads = Mapping[tuple[str, str], int]


def _sized(standin: StandIn, payloads: Payloads) -> StandIn:
    """``standin`` carrying the payload ``payloads`` gives its package and version, if any."""
    size = payloads.get((canonicalize_name(standin.name), standin.version.split("+", 1)[0]), 0)
    return dataclasses.replace(standin, payload_bytes=size) if size else standin


def pypi_standins(recording: Recording, payloads: Payloads | None = None) -> list[StandIn]:
    """Every recorded file of every recorded version, as the PyPI-like index serves them;
    ``payloads`` makes the wheels it names that large."""
    cuda_of = {b.torch: (b.variant, b.cuda) for b in recording.torch_builds}
    standins: list[StandIn] = []
    for key, releases in sorted(recording.releases.items()):
        for release in releases.values():
            for filename in release.files:
                if key == "deepspeed" and not filename.endswith(".whl"):
                    standins.append(deepspeed_sdist(release, filename))
                elif release.built_against_torch and not filename.endswith(".whl"):
                    standins.append(torch_pinning_sdist(release, filename))
                elif key == "torch" and release.version in cuda_of and _is_x86_64(filename):
                    # PyPI's wheel is the default-CUDA build; only its version.py says which.
                    variant, cuda = cuda_of[release.version]
                    files = torch_files(f"{release.version}+{variant}", cuda)
                    standins.append(_standin(release, filename, files=files))
                else:
                    standins.append(_standin(release, filename))
    return [_sized(standin, payloads or {}) for standin in standins]


def _family_closure(recording: Recording, roots: Sequence[Release]) -> list[Release]:
    """triton and nvidia-* releases that ``roots`` require, transitively (markers ignored)."""
    found: dict[tuple[str, str], Release] = {}
    pending = list(roots)
    while pending:
        release = pending.pop()
        for line in release.requires_dist:
            requirement = Requirement(line)
            name = canonicalize_name(requirement.name)
            if requirement.marker is not None and "extra" in str(requirement.marker):
                continue
            if not (name.startswith("nvidia-") or name == "triton"):
                continue
            for version, candidate in recording.releases.get(name, {}).items():
                if (
                    requirement.specifier.contains(version, prereleases=True)
                    and (name, version) not in found
                ):
                    found[(name, version)] = candidate
                    pending.append(candidate)
    return [found[key] for key in sorted(found)]


#: Packages the real variant indexes build for each variant, with its label (the recording's
#: releases of them are served on every variant page that has the torch they pin).
VARIANT_PACKAGES = ("xformers",)
#: PyPI packages the real variant indexes also carry, as plain copies without a label.
PLAIN_COPIES = ("numpy", "jinja2")


def _pinned_torch(release: Release) -> str | None:
    for line in release.requires_dist:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == "torch" and requirement.marker is None:
            pins = [s.version for s in requirement.specifier if s.operator == "=="]
            if pins:
                return pins[0]
    return None


def _labelled_filename(filename: str, version: str, labelled: str) -> str:
    return filename.replace(f"-{version}-", f"-{labelled}-", 1)


def pytorch_standins(
    recording: Recording,
    payloads: Payloads | None = None,
    *,
    extra_builds: Sequence[TorchBuild] = (),
) -> dict[str, list[StandIn]]:
    """Per CUDA variant, what its ``/whl/cuXYZ/`` pages serve: the torch family with the
    variant's label, triton and the nvidia-* packages they require, the recorded releases of
    :data:`VARIANT_PACKAGES` that pin a torch the page has (labelled), and plain copies of
    :data:`PLAIN_COPIES`. ``payloads`` makes the wheels it names that large; ``extra_builds``:
    recorded builds served under another variant too (torch 2.5.1 as cu121: the recorded
    metadata, relabelled)."""
    builds = (*recording.torch_builds, *extra_builds)
    variants = sorted({b.variant for b in builds})
    pages: dict[str, list[StandIn]] = {variant: [] for variant in variants}
    roots: dict[str, list[Release]] = {variant: [] for variant in variants}
    torches: dict[str, set[str]] = {variant: set() for variant in variants}
    for build in builds:
        page = pages[build.variant]
        torches[build.variant].add(build.torch)
        for package in TORCH_FAMILY:
            release = recording.release(package, getattr(build, package))
            roots[build.variant].append(release)
            pythons = sorted(
                {
                    next(iter(parse_wheel_filename(f)[3])).interpreter
                    for f in release.files
                    if _is_x86_64(f)
                }
                & set(_PYTORCH_INDEX_PYTHONS)
            )
            version = build.version(package)
            files = torch_files(version, build.cuda) if package == "torch" else None
            for python in pythons:
                tag = f"{python}-{python}-{build.platform_tag}"
                filename = f"{package}-{version}-{tag}.whl"
                page.append(_standin(release, filename, version=version, files=files))
    for variant, page in pages.items():
        for release in _family_closure(recording, roots[variant]):
            page += [
                _standin(release, filename)
                for filename in release.files
                if filename.endswith(".whl")
            ]
        for name in VARIANT_PACKAGES:
            for release in recording.releases.get(name, {}).values():
                if _pinned_torch(release) not in torches[variant]:
                    continue
                labelled = f"{release.version}+{variant}"
                page += [
                    _standin(
                        release,
                        _labelled_filename(f, release.version, labelled),
                        version=labelled,
                    )
                    for f in release.files
                    if _is_x86_64(f)
                ]
        for name in PLAIN_COPIES:
            for release in recording.releases.get(name, {}).values():
                page += [_standin(release, f) for f in release.files if f.endswith(".whl")]
    return {
        variant: [_sized(standin, payloads or {}) for standin in page]
        for variant, page in pages.items()
    }


@contextmanager
def serve_real_stack(
    directory: Path,
    recording: Recording | None = None,
    *,
    payloads: Payloads | None = None,
    extra_builds: Sequence[TorchBuild] = (),
) -> Iterator[IndexServer]:
    """Serve the recording (stand-ins built under ``directory``) until the block ends.

    ``payloads`` makes the wheels of the packages and versions it names that large (random,
    incompressible bytes, on both indexes), for measurements where the download size matters.
    """
    recording = recording or load_recording()
    with serve_indexes(
        directory,
        pytorch=pytorch_standins(recording, payloads, extra_builds=extra_builds),
        pypi=pypi_standins(recording, payloads),
        hashed_paths=True,
    ) as server:
        for releases in recording.releases.values():
            for release in releases.values():
                server.no_metadata.update(release.without_core_metadata)
        yield server


def pinned_requirements(text: str) -> dict[str, str]:
    """``name==version`` lines of a requirements file (as uv writes them) → {name: version}."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)", line)
        if match:
            pins[canonicalize_name(match[1])] = match[2]
    return pins
