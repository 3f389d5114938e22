# Checks the installed environment against the plan and the lock WITHOUT importing torch
# (importing a build the driver cannot run is exactly what crashes): it reads torch/version.py
# and DeepSpeed's build info as text, and the other packages' metadata. Arguments: the planned
# CUDA ("none" for a CPU build), the planned torch-family pins (torch first), then "--locked"
# and the lock's requirements files. Kept compatible with old Pythons (the environment's, not
# cudalock's).
import ast
import contextlib
import importlib.util
import os
import re
import sys

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def normalize_name(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def normalize_version(version):
    public, _, local = version.lower().partition("+")
    release = re.match(r"^[0-9]+(\.[0-9]+)*", public)
    if release:
        numbers = [int(part) for part in release.group(0).split(".")]
        while len(numbers) > 1 and numbers[-1] == 0:
            numbers.pop()  # PEP 440 pads releases with zeros: 3 is 3.0
        public = ".".join(map(str, numbers)) + public[release.end() :]
    local = re.sub(r"[-_]", ".", local)
    return public + ("+" + local if local else "")


def literal_values(path):
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            with contextlib.suppress(ValueError):
                values[target.id] = ast.literal_eval(value)
    return values


def package_file(package, name):
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = os.path.join(location, name)
        if os.path.isfile(path):
            return path
    return None


def metadata_headers(path):
    """The Name and Version headers of a METADATA or PKG-INFO file (None where absent)."""
    found = {"name": None, "version": None}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # the headers end at the first blank line
                key, _, value = line.partition(":")
                if key.lower() in found and found[key.lower()] is None:
                    found[key.lower()] = value.strip()
    except OSError:
        pass
    return found["name"], found["version"]


def installed_versions():
    """Every installed distribution's version by normalized name, the first on sys.path
    winning, as importlib.metadata.distributions() finds them; their headers are read as
    text, since importlib.metadata's import and its email parser cost most of this script."""
    versions = {}
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for dirname in names:
            if dirname.endswith(".dist-info"):
                metadata = os.path.join(entry, dirname, "METADATA")
            elif dirname.endswith(".egg-info"):
                metadata = os.path.join(entry, dirname)
                if os.path.isdir(metadata):
                    metadata = os.path.join(metadata, "PKG-INFO")
            else:
                continue
            name, version = metadata_headers(metadata)
            if name and version:
                versions.setdefault(normalize_name(name), version)
    return versions


def locked_pins(paths):
    pins = {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                match = PIN.match(line.strip())
                if match:
                    pins[normalize_name(match.group(1))] = match.group(2)
    return pins


def main(planned_cuda, *rest):
    rest = list(rest)
    locked_files = []
    if "--locked" in rest:
        cut = rest.index("--locked")
        rest, locked_files = rest[:cut], rest[cut + 1 :]
    pins = rest
    problems = []
    installed = installed_versions()

    if importlib.util.find_spec("torch") is None:
        sys.exit("cudalock: verification failed: torch is not installed in " + sys.prefix)
    path = package_file("torch", "version.py")
    if path is None:
        sys.exit("cudalock: verification failed: torch has no version.py")
    values = literal_values(path)
    torch_planned = pins[0].partition("==")[2]
    torch_version = str(values.get("__version__"))
    if torch_version != torch_planned:
        problems.append(f"torch is {torch_version} ({path}), planned {torch_planned}")
    want_cuda = None if planned_cuda == "none" else planned_cuda
    if values.get("cuda") != want_cuda:
        planned = want_cuda or "none (CPU build)"
        problems.append(f"torch is built for CUDA {values.get('cuda')}, planned {planned}")

    for pin in pins[1:]:
        name, _, planned = pin.partition("==")
        have = installed.get(normalize_name(name), "not installed")
        if have != planned:
            problems.append(f"{name} is {have}, planned {planned}")

    # The family shares torch's build: the same local label (+cu124), from the same index.
    label = torch_planned.partition("+")[2]
    for name in ("torchvision", "torchaudio"):
        have = installed.get(name)
        if have is not None and label and have.partition("+")[2] != label:
            problems.append(f"{name} {have} is not a +{label} build like torch {torch_planned}")

    for name, version in sorted(locked_pins(locked_files).items()):
        have = installed.get(name)
        if have is None:
            problems.append(f"{name} {version} is locked but not installed")
        elif normalize_version(have) != normalize_version(version):
            problems.append(f"{name} is {have}, locked {version}")

    if "deepspeed" in installed:
        info_path = package_file("deepspeed", "git_version_info_installed.py")
        info = literal_values(info_path).get("torch_info") if info_path else None
        major_minor = ".".join(torch_planned.partition("+")[0].split(".")[:2])
        if not isinstance(info, dict):
            problems.append("DeepSpeed has no build info (git_version_info_installed.py)")
        else:
            if info.get("version") != major_minor:
                problems.append(
                    f"DeepSpeed was built against torch {info.get('version')}, the installed "
                    f"torch is {major_minor}"
                )
            built_cuda = info.get("cuda_version")
            if want_cuda and built_cuda != ".".join(want_cuda.split(".")[:2]):
                problems.append(
                    f"DeepSpeed was built against CUDA {built_cuda}, torch's is {want_cuda}"
                )

    for problem in problems:
        print("cudalock: verification failed: " + problem, file=sys.stderr)
    if problems:
        sys.exit(1)
    checked = f", {len(locked_pins(locked_files))} locked packages" if locked_files else ""
    print(
        f"cudalock: verified torch {torch_planned} (CUDA {want_cuda or 'none'}){checked} "
        f"in {sys.prefix}"
    )


main(*sys.argv[1:])
