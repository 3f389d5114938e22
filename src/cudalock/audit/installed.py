"""What an environment holds, as audit needs it: the value ``inspect`` and ``reports`` produce.

Plain frozen dataclasses, serialisable to JSON. Versions stay text here (they come from files and
pasted reports); audit parses them where it compares them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cudalock.packagenames import canonical_name

__all__ = [
    "DeepSpeedBuild",
    "Distribution",
    "ExtensionArchs",
    "ExtensionBuild",
    "Installed",
    "Nvcc",
    "ReportedMessage",
    "SharedLibrary",
    "TorchInstall",
    "local_label",
    "public_version",
]


def local_label(version: str | None) -> str | None:
    """``"2.1.0+cu121"`` → ``"cu121"``; no label → None."""
    if not version or "+" not in version:
        return None
    return version.split("+", 1)[1] or None


def public_version(version: str) -> str:
    """``"2.1.0+cu121"`` → ``"2.1.0"``."""
    return version.split("+", 1)[0]


@dataclass(frozen=True)
class Distribution:
    """One installed distribution (a ``*.dist-info`` / ``*.egg-info``, or a report's line)."""

    name: str  # canonical name
    version: str | None
    location: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "location": self.location}


@dataclass(frozen=True)
class TorchInstall:
    """A torch package directory and what its ``torch/version.py`` says (or what a report says).

    ``version`` is ``torch.__version__`` with its local label (``2.9.1+cu128``) even where the
    distribution metadata has none; ``cuda`` is ``torch.version.cuda`` (None: a CPU/ROCm build).
    """

    version: str | None
    cuda: str | None
    hip: str | None = None
    git_version: str | None = None
    location: str | None = None
    #: False when the version file is missing (a broken or partial install).
    has_version_file: bool = True
    #: False when a report names the version but not the CUDA it was built for.
    cuda_known: bool = True

    @property
    def label(self) -> str | None:
        return local_label(self.version)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "cuda": self.cuda,
            "hip": self.hip,
            "git_version": self.git_version,
            "location": self.location,
            "has_version_file": self.has_version_file,
            "cuda_known": self.cuda_known,
        }


@dataclass(frozen=True)
class DeepSpeedBuild:
    """DeepSpeed and what it was built with (``deepspeed/git_version_info_installed.py``)."""

    version: str | None
    #: ``torch_info['version']`` ("2.3"; "0.0" when torch was not importable at build time).
    torch_version: str | None
    torch_cuda: str | None
    torch_hip: str | None = None
    accelerator: str | None = None
    #: Ops compiled at install time (the rest are JIT-built on first use).
    installed_ops: tuple[str, ...] = ()
    has_build_info: bool = True
    location: str | None = None

    @property
    def built_without_torch(self) -> bool:
        return self.torch_version in ("0.0", "0")

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "torch_version": self.torch_version,
            "torch_cuda": self.torch_cuda,
            "torch_hip": self.torch_hip,
            "accelerator": self.accelerator,
            "installed_ops": list(self.installed_ops),
            "has_build_info": self.has_build_info,
            "location": self.location,
        }


@dataclass(frozen=True)
class Nvcc:
    """An nvcc the environment reaches. ``origin``: CUDA_HOME, CUDA_PATH, PATH, prefix, default."""

    path: str | None
    version: str | None  # "12.1.105" or "12.1"
    origin: str
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "version": self.version,
            "origin": self.origin,
            "problem": self.problem,
        }


@dataclass(frozen=True)
class SharedLibrary:
    """A CUDA library found on ``LD_LIBRARY_PATH``; the version comes from its file name."""

    name: str  # "libnvJitLink"
    path: str
    version: str | None  # "12.1.105", or just "12" when only the soname is there
    directory: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "version": self.version,
            "directory": self.directory,
        }


@dataclass(frozen=True)
class ReportedMessage:
    """An error or warning line a report carries (see ``audit.messages``): its kind, the line
    as pasted, and what it states (``("found", "12010")``, ``("library", "libcudart.so.11.0")``)."""

    kind: str
    text: str
    fields: tuple[tuple[str, str], ...] = ()

    def get(self, name: str) -> str | None:
        return next((value for key, value in self.fields if key == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "fields": dict(self.fields)}


@dataclass(frozen=True)
class ExtensionBuild:
    """What an installed distribution's own files say about the CUDA it was built for."""

    name: str  # canonical name
    version: str | None
    #: (path, text) of its ``cpp_lib.json`` (xformers), when it has one.
    cpp_lib: tuple[str, str] | None = None
    #: (path, DT_NEEDED sonames) of the extensions read, up to the first that needs CUDA.
    needed: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: Its extensions built once per CUDA version (``libbitsandbytes_cuda121.so``), if any.
    per_cuda: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "cpp_lib": list(self.cpp_lib) if self.cpp_lib else None,
            "needed": [[path, list(sonames)] for path, sonames in self.needed],
            "per_cuda": list(self.per_cuda),
        }


@dataclass(frozen=True)
class ExtensionArchs:
    """The GPU architectures a package's own compiled ops were built for, as a report lists
    them (detectron2's collect_env: "detectron2 arch flags   7.0, 7.5" from cuobjdump)."""

    name: str  # canonical name
    #: Compute capabilities with SASS in the extension, sorted.
    archs: tuple[tuple[int, int], ...]
    #: The line the list was read from.
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "archs": [f"{major}.{minor}" for major, minor in self.archs],
            "text": self.text,
        }


@dataclass(frozen=True)
class Installed:
    """An environment's contents. ``torch[0]`` is the torch that ``import torch`` would load."""

    #: Where this came from: "python:/path/to/python" or "report:collect_env+ds_report".
    source: str
    python: str | None = None
    python_version: str | None = None
    #: cudalock platform name (linux-x86_64, ...), when known.
    platform: str | None = None
    prefix: str | None = None
    distributions: tuple[Distribution, ...] = ()
    torch: tuple[TorchInstall, ...] = ()
    deepspeed: DeepSpeedBuild | None = None
    #: nvcc candidates, in the order torch's cpp_extension would pick its CUDA_HOME.
    nvcc: tuple[Nvcc, ...] = ()
    ld_library_path: tuple[str, ...] = ()
    cuda_libraries: tuple[SharedLibrary, ...] = ()
    #: Distributions built against CUDA, with what their files say (a live inspection only).
    cuda_builds: tuple[ExtensionBuild, ...] = ()
    #: ``torch.cuda.get_arch_list()``, when known (``--deep`` or a report that shows it).
    arch_list: tuple[str, ...] | None = None
    #: What packages' own compiled ops were built for, as a report lists it.
    extension_archs: tuple[ExtensionArchs, ...] = ()
    #: What could not be read, in words.
    notes: tuple[str, ...] = ()
    #: Error and warning lines a pasted report carries (evidence of this environment's state).
    messages: tuple[ReportedMessage, ...] = ()

    @property
    def active_torch(self) -> TorchInstall | None:
        return self.torch[0] if self.torch else None

    def dists(self, name: str) -> tuple[Distribution, ...]:
        wanted = canonical_name(name)
        return tuple(d for d in self.distributions if d.name == wanted)

    def dist(self, name: str) -> Distribution | None:
        found = self.dists(name)
        return found[0] if found else None

    @property
    def effective_nvcc(self) -> Nvcc | None:
        """The nvcc JIT-built extensions (DeepSpeed ops) would use."""
        return self.nvcc[0] if self.nvcc else None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "python": self.python,
            "python_version": self.python_version,
            "platform": self.platform,
            "prefix": self.prefix,
            "distributions": [d.to_json() for d in self.distributions],
            "torch": [t.to_json() for t in self.torch],
            "deepspeed": self.deepspeed.to_json() if self.deepspeed else None,
            "nvcc": [n.to_json() for n in self.nvcc],
            "ld_library_path": list(self.ld_library_path),
            "cuda_libraries": [lib.to_json() for lib in self.cuda_libraries],
            "cuda_builds": [build.to_json() for build in self.cuda_builds],
            "arch_list": list(self.arch_list) if self.arch_list is not None else None,
            "extension_archs": [e.to_json() for e in self.extension_archs],
            "notes": list(self.notes),
            "messages": [m.to_json() for m in self.messages],
        }
