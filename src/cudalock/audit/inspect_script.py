"""Run inside the audited interpreter: report what is installed, as one JSON document on stdout.

Standard library only, Python 3.7+, and it never imports torch, deepspeed or any other
installed package: it reads distribution metadata and version files as text, so it is fast and
cannot crash the way ``import torch`` can. ``cudalock.audit.inspection`` runs it with ``python -c``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable

__all__ = [
    "SCRIPT_VERSION",
    "main",
]

SCRIPT_VERSION = 1

# Packages whose files we read directly (beyond their dist-info metadata).
_CUDA_LIBS = (
    "libnvJitLink",
    "libcudart",
    "libcublas",
    "libcublasLt",
    "libcusparse",
    "libcusolver",
    "libcufft",
    "libcurand",
    "libnvrtc",
    "libcupti",
    "libcudnn",
    "libnccl",
    "libnvToolsExt",
)
_LIB_RE = re.compile(r"^(lib[A-Za-z_]+?)\.so((?:\.\d+)*)$")
_NVCC_RE = re.compile(r"release (\d+\.\d+), V(\d+(?:\.\d+)*)")
_MAX_METADATA_BYTES = 64 * 1024
#: Extensions read per distribution: the first that needs a CUDA library settles it.
_MAX_EXTENSIONS = 16
_MAX_RECORD_BYTES = 4 * 1024 * 1024
#: Their CUDA is checked by the torch checks, or they are CUDA itself.
#: One build per CUDA version in one wheel (bitsandbytes' libbitsandbytes_cuda121.so).
_PER_CUDA_RE = re.compile(r"cuda\d{2,3}\.so$")
_NOT_BUILT_AGAINST = re.compile(r"^(torch|torchvision|torchaudio|nvidia-.*|cuda-.*)$")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _search_path() -> list[str]:
    """sys.path as a script would see it, minus the working directory ``-c`` adds."""
    seen: list[str] = []
    for entry in sys.path:
        if not entry or entry == os.getcwd():
            continue
        real = os.path.realpath(entry)
        if os.path.isdir(real) and real not in seen:
            seen.append(real)
    return seen


def _read_headers(path: str) -> dict[str, str]:
    """Name and Version from a METADATA / PKG-INFO file (RFC 822 headers; stop at the body)."""
    headers: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(_MAX_METADATA_BYTES)
    except OSError:
        return headers
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in headers:
            headers[key] = value.strip()
    return headers


def _distributions(paths: list[str]) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    for directory in paths:
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in entries:
            full = os.path.join(directory, entry)
            if entry.endswith(".dist-info"):
                meta = os.path.join(full, "METADATA")
            elif entry.endswith(".egg-info"):
                meta = os.path.join(full, "PKG-INFO") if os.path.isdir(full) else full
            else:
                continue
            headers = _read_headers(meta)
            name = headers.get("Name")
            version = headers.get("Version")
            if not name:
                # A dist-info without readable METADATA still names itself: name-version.dist-info
                stem = entry.rsplit(".", 1)[0]
                name, _, version = stem.partition("-")
            found.append(
                {
                    "name": _normalize(name),
                    "version": version or None,
                    "location": full,
                }
            )
    return found


def _literal_assignments(path: str) -> dict[str, object]:
    """Top-level ``name = <literal>`` and ``name: T = <literal>`` of a Python file, unexecuted."""
    values: dict[str, object] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            tree = ast.parse(handle.read(256 * 1024))
    except (OSError, SyntaxError, ValueError):
        return values
    for node in tree.body:
        targets: list[ast.expr] = []
        value = None
        if isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name) and value is not None:
                with contextlib.suppress(ValueError, TypeError, SyntaxError, RecursionError):
                    values[target.id] = ast.literal_eval(value)
    return values


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _torch_installs(paths: list[str]) -> list[dict[str, object]]:
    installs: list[dict[str, object]] = []
    for directory in paths:
        package = os.path.join(directory, "torch")
        if not os.path.isfile(os.path.join(package, "__init__.py")):
            continue
        info = _literal_assignments(os.path.join(package, "version.py"))
        installs.append(
            {
                "location": package,
                "version": _text(info.get("__version__")),
                "cuda": _text(info.get("cuda")),
                "hip": _text(info.get("hip")),
                "git_version": _text(info.get("git_version")),
                "has_version_file": os.path.isfile(os.path.join(package, "version.py")),
            }
        )
    return installs


def _deepspeed(paths: list[str]) -> dict[str, object] | None:
    for directory in paths:
        package = os.path.join(directory, "deepspeed")
        if not os.path.isfile(os.path.join(package, "__init__.py")):
            continue
        build_file = os.path.join(package, "git_version_info_installed.py")
        info = _literal_assignments(build_file)
        torch_info = info.get("torch_info")
        torch_info = torch_info if isinstance(torch_info, dict) else {}
        installed = info.get("installed_ops")
        ops = sorted(k for k, v in installed.items() if v) if isinstance(installed, dict) else []
        return {
            "location": package,
            "has_build_info": os.path.isfile(build_file),
            "version": _text(info.get("version")),
            "git_hash": _text(info.get("git_hash")),
            "accelerator": _text(info.get("accelerator_name")),
            "torch_version": _text(torch_info.get("version")),
            "torch_cuda": _text(torch_info.get("cuda_version")),
            "torch_hip": _text(torch_info.get("hip_version")),
            "installed_ops": ops,
        }
    return None


def _nvcc_version(nvcc: str) -> tuple[str | None, str | None]:
    """(version, problem) from ``nvcc --version``, falling back to the toolkit's version.json."""
    try:
        result = subprocess.run(  # noqa: S603 - the nvcc this environment would run
            [nvcc, "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=15,
            check=False,
        )
        match = _NVCC_RE.search(result.stdout.decode("utf-8", "replace"))
        if match:
            return match.group(2), None
        problem = "nvcc --version printed no release line"
    except (OSError, subprocess.SubprocessError) as err:
        problem = "nvcc --version failed: " + str(err)
    # The toolkit nvcc belongs to, through a symlinked nvcc as the probe finds it.
    home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    try:
        with open(os.path.join(home, "version.json"), encoding="utf-8") as handle:
            data = json.load(handle)
        version = data.get("cuda", {}).get("version") or data.get("cuda_nvcc", {}).get("version")
        if isinstance(version, str):
            return version, None
    except (OSError, ValueError, AttributeError):
        pass
    return None, problem


def _nvcc_candidates() -> list[dict[str, object]]:
    """Every nvcc the environment can reach, in the order torch's cpp_extension picks CUDA_HOME
    in the activated environment.

    A CUDA_HOME / CUDA_PATH that is set counts even without bin/nvcc: cpp_extension uses it
    as given (and JIT builds then fail), so it stays first.
    """
    candidates: list[tuple[str, str]] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home:
            candidates.append((var, os.path.join(home, "bin", "nvcc")))
    # The environment's own nvcc (conda's cuda-nvcc) comes before PATH's: activating the
    # environment puts its bin directory first on PATH.
    prefix_nvcc = os.path.join(sys.prefix, "bin", "nvcc")
    if os.path.isfile(prefix_nvcc):
        candidates.append(("prefix", prefix_nvcc))
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(("PATH", on_path))
    candidates.append(("default", "/usr/local/cuda/bin/nvcc"))
    found: list[dict[str, object]] = []
    seen: list[str] = []
    for origin, path in candidates:
        real = os.path.realpath(path)
        if real in seen:
            continue
        if not os.path.isfile(real):
            if origin in ("CUDA_HOME", "CUDA_PATH"):
                seen.append(real)
                found.append(
                    {
                        "origin": origin,
                        "path": path,
                        "version": None,
                        "problem": origin + " is set but has no bin/nvcc",
                    }
                )
            continue
        seen.append(real)
        version, problem = _nvcc_version(path)
        found.append({"origin": origin, "path": path, "version": version, "problem": problem})
    return found


def _library_version(directory: str, entry: str, suffix: str) -> str | None:
    """The fullest version a library file names: its own suffix, or that of its symlink target."""
    versions = [suffix.lstrip(".")] if suffix else []
    try:
        real = os.path.basename(os.path.realpath(os.path.join(directory, entry)))
    except OSError:
        real = entry
    match = _LIB_RE.match(real)
    if match and match.group(2):
        versions.append(match.group(2).lstrip("."))
    versions = [v for v in versions if v]
    return max(versions, key=len) if versions else None


def _cuda_libraries(ld_path: list[str]) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    for directory in ld_path:
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            continue
        best: dict[str, dict[str, object]] = {}
        for entry in entries:
            match = _LIB_RE.match(entry)
            if not match or match.group(1) not in _CUDA_LIBS:
                continue
            name = match.group(1)
            version = _library_version(directory, entry, match.group(2))
            current = best.get(name)
            if current is None or len(version or "") > len(str(current["version"] or "")):
                best[name] = {
                    "name": name,
                    "path": os.path.join(directory, entry),
                    "version": version,
                    "directory": directory,
                }
        found.extend(best[name] for name in sorted(best))
    return found


def _record_paths(dist_info: str) -> list[str]:
    """The files a ``*.dist-info/RECORD`` lists, relative to its site directory."""
    try:
        with open(os.path.join(dist_info, "RECORD"), encoding="utf-8", errors="replace") as h:
            text = h.read(_MAX_RECORD_BYTES)
    except OSError:
        return []
    return [line.split(",", 1)[0] for line in text.splitlines() if line.strip()]


def _sharedlibs_readers() -> tuple[Callable[..., object] | None, Callable[..., object] | None]:
    """``needed_of_file`` and ``cuda_majors`` of :mod:`cudalock.sharedlibs`, loaded from the
    path cudalock passes as the first argument as a module of its own (its cached bytecode
    when there is one; not runpy, which loads pkgutil and typing); (None, None) when it
    cannot be loaded."""
    if len(sys.argv) < 2 or not os.path.isfile(sys.argv[1]):
        return None, None
    try:
        spec = importlib.util.spec_from_file_location("cudalock_sharedlibs", sys.argv[1])
        if spec is None or spec.loader is None:
            return None, None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception:  # an unreadable helper only costs this part of the report
        return None, None
    needed_of_file = getattr(module, "needed_of_file", None)
    cuda_majors = getattr(module, "cuda_majors", None)
    if not callable(needed_of_file) or not callable(cuda_majors):
        return None, None
    return needed_of_file, cuda_majors


def _cuda_builds(distributions: list[dict[str, object]]) -> list[dict[str, object]]:
    """What each distribution's own files say about the CUDA it was built for: its
    ``cpp_lib.json`` (xformers) and the DT_NEEDED of its extensions, read with
    :mod:`cudalock.sharedlibs` (loaded from the path cudalock passes as the first argument)."""
    needed_of_file, cuda_majors = _sharedlibs_readers()
    found: list[dict[str, object]] = []
    for dist in distributions:
        location = str(dist["location"])
        if not location.endswith(".dist-info") or _NOT_BUILT_AGAINST.match(str(dist["name"])):
            continue
        site = os.path.dirname(location)
        paths = _record_paths(location)
        cpp_lib = None
        for path in paths:
            if path.endswith("/cpp_lib.json") and path.count("/") == 1:
                try:
                    with open(os.path.join(site, path), encoding="utf-8") as handle:
                        cpp_lib = [path, handle.read(_MAX_METADATA_BYTES)]
                except OSError:
                    pass
                break
        needed: list[list[object]] = []
        extensions = [p for p in paths if p.endswith(".so") or ".so." in p.rsplit("/", 1)[-1]]
        per_cuda = [p for p in extensions if _PER_CUDA_RE.search(p.rsplit("/", 1)[-1])]
        if needed_of_file is not None and cuda_majors is not None and len(per_cuda) < 2:
            for path in sorted(extensions)[:_MAX_EXTENSIONS]:
                try:
                    sonames = needed_of_file(os.path.join(site, path))
                except (OSError, ValueError):
                    continue
                needed.append([path, sonames])
                if cuda_majors(sonames):
                    break
        cuda_needed = cuda_majors is not None and any(cuda_majors(n[1]) for n in needed)
        if cpp_lib is not None or cuda_needed or len(per_cuda) >= 2:
            found.append(
                {
                    "name": dist["name"],
                    "version": dist["version"],
                    "cpp_lib": cpp_lib,
                    "needed": needed,
                    "extensions": per_cuda if len(per_cuda) >= 2 else [],
                }
            )
    return found


def main() -> None:
    paths = _search_path()
    distributions = _distributions(paths)
    ld_path = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    document = {
        "script_version": SCRIPT_VERSION,
        "python": {
            "executable": sys.executable,
            "version": ".".join(str(part) for part in sys.version_info[:3]),
            "implementation": platform.python_implementation(),
            "prefix": sys.prefix,
            "base_prefix": getattr(sys, "base_prefix", sys.prefix),
            "platform": sys.platform,
            "machine": platform.machine(),
        },
        "sys_path": paths,
        "distributions": distributions,
        "cuda_builds": _cuda_builds(distributions),
        "torch": _torch_installs(paths),
        "deepspeed": _deepspeed(paths),
        "nvcc": _nvcc_candidates(),
        "ld_library_path": ld_path,
        "cuda_libraries": _cuda_libraries(ld_path),
    }
    sys.stdout.write(json.dumps(document))


if __name__ == "__main__":
    main()
