# Installs the packages of the requirements file named below (DeepSpeed, and anything else that
# is built against the installed torch) without build isolation, against the torch installed
# here. The wheels such a build makes are kept, keyed by everything the build depends on: the
# pinned sources with their hashes, the exact torch build (version, local label and the commit
# it was built from), the CUDA torch was built for, the Python and the platform, the build's
# DS_BUILD_* / TORCH_CUDA_ARCH_LIST settings and the nvcc it would use; a later environment
# with the same key installs them in seconds, and any other torch builds anew. pip builds them
# with `pip wheel`; uv builds and installs them in one step, with a uv cache of that build's own
# from which the wheels it built are kept.
# Arguments: "pip" or "uv", the path of uv (or ""), the requirements file, the index options.
# CUDALOCK_WHEEL_CACHE names the cache (default: $XDG_CACHE_HOME/cudalock/wheels);
# CUDALOCK_NO_WHEEL_CACHE=1 builds without it. Standard library only, kept compatible with old
# Pythons (the environment's, not cudalock's).
import ast
import contextlib
import glob
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
SETTINGS = ("DS_BUILD_", "DS_ACCELERATOR", "TORCH_CUDA_ARCH_LIST", "FLASH_ATTENTION_", "CUDA_HOME")


def normalize_name(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def torch_build():
    """torch.version's __version__, cuda and git_version (the commit the build was made from),
    read from torch/version.py as text: importing torch is what crashes."""
    found = {"__version__": "", "cuda": "none", "git_version": "unknown"}
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return found
    path = os.path.join(next(iter(spec.submodule_search_locations)), "version.py")
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return found
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id in found and value is not None:
            with contextlib.suppress(ValueError):
                found[target.id] = str(ast.literal_eval(value))
    return found


def nvcc_version():
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "none"
    try:
        done = subprocess.run(  # noqa: S603 - the nvcc on PATH, as torch's builder finds it
            [nvcc, "--version"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else "unknown"


def build_key(requirements):
    with open(requirements, "rb") as handle:
        pinned = hashlib.sha256(handle.read()).hexdigest()
    build = torch_build()
    facts = [
        "requirements=" + pinned,
        "torch=" + (build["__version__"] or installed_version("torch")),
        "torch-cuda=" + build["cuda"],
        "torch-git-version=" + build["git_version"],
        "python=" + sys.implementation.cache_tag + getattr(sys, "abiflags", ""),
        "platform=" + sysconfig.get_platform(),
        "nvcc=" + nvcc_version(),
    ]
    facts += sorted(k + "=" + v for k, v in os.environ.items() if k.startswith(SETTINGS))
    text = "\n".join(facts) + "\n"
    return hashlib.sha256(text.encode()).hexdigest()[:32], text


def cache_root():
    given = os.environ.get("CUDALOCK_WHEEL_CACHE")
    if given:
        return given
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cudalock", "wheels")


def run(argv, env=None):
    print("+ " + " ".join(argv[:6]) + (" ..." if len(argv) > 6 else ""), flush=True)
    code = subprocess.call(argv, env=env)  # noqa: S603 - this script's own installer commands
    if code != 0:
        sys.exit(code)


def installed_version(name):
    # Imported only here: importlib.metadata's import costs more than the rest of this script.
    import importlib.metadata

    return importlib.metadata.version(name)


def installed_here(names):
    """Whether any of ``names`` is installed in this environment's own site-packages, where uv
    looks (read as directory names: importlib.metadata's import costs more)."""
    paths = sysconfig.get_paths()
    for directory in {paths["purelib"], paths["platlib"]}:
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".dist-info") and wheel_name(entry) in names:
                return True
    return False


def install_wheels(installer, uv, wheels):
    if installer == "uv":
        head = [uv, "pip", "install", "--python", sys.executable]
        if installed_here({wheel_name(wheel) for wheel in wheels}):
            # Another build of it may be installed; uv's --reinstall costs a fresh look at the
            # interpreter, so it is asked for only then.
            head.append("--reinstall")
    else:
        head = [sys.executable, "-m", "pip", "install", "--no-input", "--force-reinstall"]
    run([*head, "--no-deps", "--no-index", *wheels])


def build_in_place(installer, uv, requirements, index_options):
    """The build without a cache: straight into the environment."""
    common = ["--no-deps", "--no-build-isolation", "--require-hashes", *index_options]
    if installer == "uv":
        argv = [uv, "pip", "install", "--python", sys.executable, "--no-cache", "--reinstall"]
    else:
        argv = [sys.executable, "-m", "pip", "install", "--no-input", "--no-cache-dir"]
        argv.append("--force-reinstall")
    run([*argv, *common, "-r", requirements])


def pinned_names(requirements):
    """The normalized names the requirements file pins (``name==version`` lines)."""
    names = set()
    with open(requirements, encoding="utf-8") as handle:
        for line in handle:
            match = PIN.match(line.strip())
            if match:
                names.add(normalize_name(match.group(1)))
    return names


def wheel_name(path):
    return normalize_name(os.path.basename(path).split("-", 1)[0])


def build_with_uv(uv, requirements, index_options, building):
    """Build and install with uv, then take the wheels it built out of its cache. The cache is
    one of this build's own, inside ``building``: a shared uv cache would reuse a wheel built
    against another torch, since uv does not key builds by what is installed. True when every
    pinned package's wheel was found there (only then is the build kept)."""
    uv_cache = os.path.join(building, "uv-cache")
    argv = [uv, "pip", "install", "--python", sys.executable, "--reinstall", "--no-deps"]
    options = ["--no-build-isolation", "--require-hashes", "--cache-dir", uv_cache]
    # The cache named is this build's own and removed after it: UV_NO_CACHE would hide it.
    env = {k: v for k, v in os.environ.items() if k != "UV_NO_CACHE"}
    run([*argv, *options, *index_options, "-r", requirements], env)
    built = {}
    for path in glob.glob(os.path.join(uv_cache, "**", "*.whl"), recursive=True):
        if os.path.isfile(path):
            built.setdefault(wheel_name(path), path)
    missing = sorted(pinned_names(requirements) - set(built))
    if missing:
        print("cudalock: not kept: uv left no wheel of " + ", ".join(missing), flush=True)
        return False
    for path in built.values():
        shutil.move(path, os.path.join(building, os.path.basename(path)))
    shutil.rmtree(uv_cache, ignore_errors=True)
    return True


def main(installer, uv, requirements, *index_options):
    off = os.environ.get("CUDALOCK_NO_WHEEL_CACHE", "") not in ("", "0")
    if off or (installer == "pip" and importlib.util.find_spec("pip") is None):
        why = "CUDALOCK_NO_WHEEL_CACHE is set" if off else "pip, which builds wheels, is missing"
        print("cudalock: building without the wheel cache (" + why + ")", flush=True)
        build_in_place(installer, uv, requirements, index_options)
        return
    key, facts = build_key(requirements)
    root = cache_root()
    kept = os.path.join(root, key)
    wheels = sorted(glob.glob(os.path.join(kept, "*.whl")))
    if wheels and os.path.isfile(os.path.join(kept, "key.txt")):
        print("cudalock: reusing " + ", ".join(os.path.basename(w) for w in wheels), flush=True)
        print("cudalock: built earlier against this torch build (cache " + kept + ")", flush=True)
        install_wheels(installer, uv, wheels)
        return
    os.makedirs(root, exist_ok=True)
    building = tempfile.mkdtemp(prefix=".building-", dir=root)
    try:
        print("cudalock: building against the installed torch (cache " + kept + ")", flush=True)
        if installer == "uv":
            # uv builds in a fraction of pip's time; it installs what it built as it goes.
            keep = build_with_uv(uv, requirements, index_options, building)
        else:
            pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-input", "--no-deps"]
            options = ["--no-build-isolation", "--no-cache-dir", "--require-hashes"]
            run([*pip_wheel, *options, *index_options, "-r", requirements, "-w", building])
            keep = True
        if keep:
            with open(os.path.join(building, "key.txt"), "w", encoding="utf-8") as handle:
                handle.write(facts)
            try:
                os.rename(building, kept)  # whole or not at all: a stopped build is never reused
            except OSError:
                if not os.path.isfile(os.path.join(kept, "key.txt")):
                    raise
                # Another environment finished the same build first: its wheels are the same.
    finally:
        shutil.rmtree(building, ignore_errors=True)
    if installer != "uv":
        install_wheels(installer, uv, sorted(glob.glob(os.path.join(kept, "*.whl"))))


main(*sys.argv[1:])
