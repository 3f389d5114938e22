"""uv's input for a Plan: the throw-away project ``uv pip compile`` resolves, and its arguments.

uv is the resolution engine; cudalock never resolves anything itself. For a Plan, cudalock
writes a throw-away input project whose dependencies are the Plan's pins plus the requested
extras, with every package the Plan routes to a PyTorch index pinned to that index through
``[tool.uv.sources]`` and the index marked ``explicit = true``: uv then looks for those
packages on that index *only*, so a same-named version on PyPI or a mirror can never win
(dependency confusion), and looks for nothing else there. Everything else comes from PyPI or
its mirror (``--default-index``). uv resolves for the Target's platform and Python
(``--python-platform``, ``--python-version``), not this machine's. Pure: no I/O.
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from cudalock.defaults import DEFAULT_PYPI_INDEX
from cudalock.errors import UsageError
from cudalock.lock.names import LOCK_FILE
from cudalock.model import PackagePin, Plan, Target
from cudalock.platforms import platform_named
from cudalock.request import Request
from cudalock.tomlfile import dumps
from cudalock.urls import validate_index_url

__all__ = [
    "COMPILE_SETTINGS",
    "DEFAULT_GLIBC_MINOR",
    "INPUT_PROJECT",
    "LOCAL_INPUT",
    "STATIC_METADATA",
    "TORCH_BUILD_SETTING",
    "IndexRoute",
    "LockInput",
    "build_interpreter",
    "compile_settings",
    "default_index_of",
    "environment_marker",
    "index_name",
    "input_project",
    "input_requirements",
    "lock_input",
    "target_glibc",
    "uv_compile_args",
    "uv_python_platform",
]

#: Core metadata uv is given for sdists whose metadata cannot be prepared without torch in the
#: build environment (their setup.py imports torch first): flash-attn's install_requires, same
#: source. Given, uv resolves them without building them.
STATIC_METADATA: dict[str, tuple[str, ...]] = {"flash-attn": ("torch", "einops")}
#: The config setting that keys uv's cached metadata of an sdist built against torch by that
#: torch (cudalock.lock.torchbuild).
TORCH_BUILD_SETTING = "cudalock-torch"
#: The uv settings file ``uv pip compile`` reads (the static metadata above).
COMPILE_SETTINGS = "uv-compile.toml"
#: The uv input file for frameworks given as a local path or a URL without a name.
LOCAL_INPUT = "requirements.in"
#: The name of the throw-away project uv compiles (uv's messages name it).
INPUT_PROJECT = "cudalock-lock-input"
#: The glibc assumed when the Target does not say (what torch ≥ 2.6 wheels require anyway).
DEFAULT_GLIBC_MINOR = 28
#: uv knows manylinux_2_17 … manylinux_2_40 (``uv pip compile --help``).
_GLIBC_RANGE = (17, 40)


# --------------------------------------------------------------------------------------------
# Building uv's input (pure)


def uv_python_platform(platform: str, glibc: str | None = None) -> str:
    """uv's ``--python-platform`` for a cudalock platform, honouring a known glibc on Linux."""
    known = platform_named(platform, what="platform to lock for")
    if not known.uses_glibc:
        return known.uv_platform
    minor = DEFAULT_GLIBC_MINOR
    match = re.fullmatch(r"\s*2\.(\d{1,4})(?:\.\d{1,4})?\s*", glibc or "")
    if match:
        minor = min(max(int(match.group(1)), _GLIBC_RANGE[0]), _GLIBC_RANGE[1])
    return f"{known.uv_platform}_2_{minor}"


def target_glibc(targets: Sequence[Target]) -> str | None:
    """The lowest glibc a probed target reported (None: unknown, assume manylinux_2_28).

    A Target described by override flags carries this machine's host facts, which say nothing
    about the machine the lock is for, so only probed targets count.
    """
    known: list[tuple[int, ...]] = []
    for target in targets:
        glibc = target.host.glibc
        if target.source == "override" or not glibc:
            continue
        if re.fullmatch(r"\d{1,4}(\.\d{1,4})+", glibc):
            known.append(tuple(int(part) for part in glibc.split(".")))
    return ".".join(str(part) for part in min(known)) if known else None


def _narrowed(text: str, name: str, addition: Requirement) -> str:
    """``text`` with ``addition``'s specifier added when it names ``name`` by version."""
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        return text  # a local path: not narrowed by version
    if canonicalize_name(requirement.name) != name or requirement.url:
        return text
    requirement.specifier &= addition.specifier
    return str(requirement)


def environment_marker(platform: str) -> str:
    return platform_named(platform).marker


@dataclass(frozen=True)
class IndexRoute:
    """An explicit index (by uv name) and the packages pinned to it."""

    name: str
    url: str
    packages: tuple[str, ...]


@dataclass(frozen=True)
class LockInput:
    """Everything uv is told: requirements, explicit index routes, the default index, target."""

    requirements: tuple[str, ...]
    routes: tuple[IndexRoute, ...]
    default_index: str
    python: str
    platform: str
    python_platform: str
    #: Frameworks given as a local path (``-e /abs/dir``) or a URL without a name: uv reads
    #: them from a requirements file, which takes such lines.
    local: tuple[str, ...] = field(default=())
    #: Packages uv must take a wheel of (``--only-binary``): binary packages that fell back to
    #: their sdist for a default Python, so a resolution without a wheel of them fails.
    only_binary: tuple[str, ...] = field(default=())

    def index_for(self, name: str) -> str:
        """The index a package (any spelling) is resolved from."""
        normalized = canonicalize_name(name)
        for route in self.routes:
            if normalized in route.packages:
                return route.url
        return self.default_index

    @property
    def indexes(self) -> tuple[str, ...]:
        """Every index uv may read, credentials included (for fetching what it locked)."""
        return (self.default_index, *(route.url for route in self.routes))


def index_name(url: str, taken: set[str]) -> str:
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1]) or "index"
    name = f"pytorch-{tail}"
    counter = 2
    while name in taken:
        name = f"pytorch-{tail}-{counter}"
        counter += 1
    taken.add(name)
    return name


def default_index_of(
    request: Request, *, pypi_index: str | None = None, allow_insecure: bool = False
) -> str:
    return validate_index_url(
        pypi_index or request.pypi_index or DEFAULT_PYPI_INDEX,
        flag="--pypi-index",
        allow_insecure=allow_insecure,
    )


def lock_input(
    plan: Plan,
    request: Request,
    *,
    pypi_index: str | None = None,
    glibc: str | None = None,
    allow_insecure: bool = False,
    family: Sequence[PackagePin] = (),
    extras: Mapping[str, Sequence[str]] | None = None,
    additions: Sequence[str] = (),
    variant_packages: Sequence[str] = (),
) -> LockInput:
    """uv's input for ``plan``: its pins, routed, plus requested packages it does not pin.

    ``with`` packages and the frameworks that the Plan does not pin itself are passed as the
    user wrote them, so uv pins them (and their dependencies) under the Plan's torch;
    ``extras`` adds extras to a framework (by the text the user gave). ``family`` are further
    torch-family pins the closure was found to need, routed like the Plan's; ``additions`` are
    further requirements (DeepSpeed's build tools), from the default index.
    ``variant_packages`` are packages the plan's variant index builds (xformers, torchao, ...):
    required (unpinned, so uv takes the framework's constraint on them) and routed to that
    index, direct requirements or not: uv honours an index route on direct requirements only.
    """
    default_index = default_index_of(request, pypi_index=pypi_index, allow_insecure=allow_insecure)
    requirements: list[str] = []
    local: list[str] = []
    routed: dict[str, list[str]] = {}
    pinned: set[str] = set()
    for pin in (*plan.packages, *family):
        name = canonicalize_name(pin.name)
        if name in pinned:
            continue
        pinned.add(name)
        requirements.append(f"{name}=={pin.version}")
        if pin.index_url:
            url = validate_index_url(
                pin.index_url, flag="--pytorch-index", allow_insecure=allow_insecure
            )
            if url != default_index:
                routed.setdefault(url, []).append(name)
    for companion in request.with_packages:
        if companion.name not in pinned:
            requirements.append(str(companion))
            pinned.add(companion.name)
    for framework in request.frameworks:
        text = framework.text
        if framework.path is not None:
            # A file URL: any character a path may hold survives, percent-encoded.
            local.append(f"-e {framework.path.as_uri()}")
            continue
        if framework.requirement is None:
            local.append(text)  # a URL
            continue
        requirement = copy.copy(framework.requirement)
        added = (extras or {}).get(text, ())
        if added:
            requirement.extras = {*requirement.extras, *added}
        name = canonicalize_name(requirement.name)
        if name in pinned:
            raise UsageError(
                f"--framework {text!r} names {requirement.name}, which the plan already pins; "
                "give it once"
            )
        requirements.append(str(requirement))
        pinned.add(name)
    for text in additions:
        addition = Requirement(text)
        name = canonicalize_name(addition.name)
        if name not in pinned:
            requirements.append(text)
            pinned.add(name)
        elif addition.specifier:
            # A version excluded for the CUDA it was built for narrows what was asked for.
            requirements[:] = [_narrowed(r, name, addition) for r in requirements]
    if variant_packages and plan.index_url:
        url = validate_index_url(
            plan.index_url, flag="--pytorch-index", allow_insecure=allow_insecure
        )
        for variant_name in map(canonicalize_name, variant_packages):
            if variant_name not in pinned:
                requirements.append(variant_name)
                pinned.add(variant_name)
            names = routed.setdefault(url, [])
            if variant_name not in names and url != default_index:
                names.append(variant_name)
    taken: set[str] = set()
    routes = tuple(
        IndexRoute(name=index_name(url, taken), url=url, packages=tuple(names))
        for url, names in routed.items()
    )
    return LockInput(
        requirements=tuple(requirements),
        routes=routes,
        default_index=default_index,
        python=plan.python,
        platform=plan.platform,
        python_platform=uv_python_platform(plan.platform, glibc),
        local=tuple(local),
    )


def input_project(inp: LockInput) -> str:
    """The ``pyproject.toml`` uv compiles: requirements, sources and explicit indexes."""
    doc: dict[str, Any] = {
        "project": {"name": INPUT_PROJECT, "version": "0", "dependencies": list(inp.requirements)}
    }
    sources = {name: {"index": route.name} for route in inp.routes for name in route.packages}
    indexes = [{"name": route.name, "url": route.url, "explicit": True} for route in inp.routes]
    if sources:
        doc["tool"] = {"uv": {"sources": sources, "index": indexes}}
    return dumps(doc, comments=("Input for uv, written by cudalock lock; not a real project.",))


def compile_settings() -> str:
    """``uv-compile.toml``: the static metadata of the sdists uv cannot prepare without torch."""
    doc = {
        "dependency-metadata": [
            {"name": name, "requires-dist": list(requires)}
            for name, requires in STATIC_METADATA.items()
        ]
    }
    return dumps(doc, comments=("Settings for uv, written by cudalock lock.",))


def input_requirements(inp: LockInput) -> str | None:
    """The ``requirements.in`` beside the input project: local and URL frameworks, if any."""
    if not inp.local:
        return None
    return "".join(f"{line}\n" for line in inp.local)


def uv_compile_args(
    uv: str,
    inp: LockInput,
    *,
    upgrade: bool,
    cache_dir: Path | None,
    no_deps: bool = False,
    offline: bool = False,
    no_build_isolation: Sequence[str] = (),
    build_python: str | None = None,
) -> list[str]:
    """``uv pip compile`` for the input project (run in its directory, output ``pylock.toml``).

    The default index is passed through the environment (``UV_DEFAULT_INDEX``), not argv, so
    credentials in a mirror URL never show in a process listing.
    """
    args = [uv, "pip", "compile", "pyproject.toml"]
    if inp.local:
        args.append(LOCAL_INPUT)
    args += [
        "--format",
        "pylock.toml",
        "--output-file",
        LOCK_FILE,
        "--python-version",
        inp.python,
        "--python-platform",
        inp.python_platform,
        "--no-config",
        "--config-file",
        COMPILE_SETTINGS,
        "--no-header",
        "--no-python-downloads",
    ]
    # The packages whose build reads the installed torch are prepared in ``build_python``, an
    # environment holding the locked torch (cudalock.lock.torchbuild).
    interpreter = build_python or build_interpreter(inp.python)
    torch = next((r.split("==", 1)[1] for r in inp.requirements if r.startswith("torch==")), "")
    for name in no_build_isolation:
        # uv keeps the metadata it built keyed by the source and the build's config settings
        # (not by what the build environment held, nor refreshed by --refresh): an earlier
        # isolated build (torch "2.6.0" for axolotl), or one beside another torch, would be
        # reused. A setting naming the torch keys it; build backends ignore keys they do not
        # know (setuptools reads only its own).
        args += ["--no-build-isolation-package", name]
        args += ["--config-settings-package", f"{name}:{TORCH_BUILD_SETTING}={torch or 'none'}"]
    if interpreter is not None:
        args += ["--python", interpreter]
    for name in inp.only_binary:
        args += ["--only-binary", name]
    if upgrade:
        args.append("--upgrade")
    if no_deps:
        args.append("--no-deps")
    if offline:
        args.append("--offline")
    if cache_dir is not None:
        args += ["--cache-dir", str(cache_dir)]
    return args


def build_interpreter(
    python: str,
    *,
    executable: str = sys.executable,
    version: tuple[int, int] = sys.version_info[:2],
    free_threaded: bool | None = None,
) -> str | None:
    """The interpreter cudalock runs on, when it is the Python the lock is for; else None.

    uv runs an interpreter only to build the metadata of packages without wheels. Without
    ``--python`` it looks for one matching ``--python-version`` in virtual environments and on
    PATH, running candidates to ask their version: a pyenv shim there makes every lock about
    0.2 s slower. Handing it this interpreter, of the same version, skips the search; for
    another version uv searches as before.
    """
    if free_threaded is None:
        free_threaded = not getattr(sys, "_is_gil_enabled", lambda: True)()
    running = f"{version[0]}.{version[1]}{'t' if free_threaded else ''}"
    return executable if executable and python == running else None
