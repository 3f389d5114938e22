"""``cudalock lock``: a PEP 751 ``pylock.toml`` (and ``requirements.lock.txt``) for a Plan.

uv is the resolution engine; cudalock never resolves anything itself. For a Plan, cudalock
writes a throw-away input project whose dependencies are the Plan's pins plus the requested
extras, with every package the Plan routes to a PyTorch index pinned to that index through
``[tool.uv.sources]`` and the index marked ``explicit = true``: uv then looks for those
packages on that index *only*, so a same-named version on PyPI or a mirror can never win
(dependency confusion), and looks for nothing else there. Everything else comes from PyPI or
its mirror (``--default-index``). uv resolves for the Target's platform and Python
(``--python-platform``, ``--python-version``), not this machine's.

The whole closure is resolved once (:mod:`cudalock.lock.closure`: the torch family found in it
routed too, frameworks asked for with the extras that declare their torch requirement) and
then written as the files every install path reads (:mod:`cudalock.lock.files`):
``pylock.toml``; ``requirements.lock.txt`` for pip (everything installed first, hash-checked,
``--no-deps``); ``requirements.last.txt`` (DeepSpeed, built last, without build isolation,
against the installed torch); and ``uv-install.toml``, the settings with which uv installs
``pylock.toml`` so that it builds DeepSpeed against the locked torch too.

This module holds the pure parts: uv's input, the record, shaping and validating the lock and
rendering the files.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.pylock import Package, Pylock, PylockValidationError
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from cudalock.defaults import DEFAULT_PYPI_INDEX
from cudalock.errors import EnvironmentFailure, InputError, UsageError
from cudalock.fsutil import read_bounded
from cudalock.lock.check import LockState
from cudalock.lock.names import INSTALL_LINES, LOCK_FILE
from cudalock.model import PackagePin, Plan, Target
from cudalock.platforms import platform_named
from cudalock.request import Request, recorded_request
from cudalock.tomlfile import dumps, tomllib
from cudalock.urls import (
    holds_credentials,
    redact,
    redact_json,
    strip_credentials,
    validate_index_url,
)
from cudalock.versions import format_cc, format_cuda

#: Core metadata uv is given for sdists whose metadata cannot be prepared without torch in the
#: build environment (their setup.py imports torch first): flash-attn's install_requires, same
#: source. Given, uv resolves them without building them.
STATIC_METADATA: dict[str, tuple[str, ...]] = {"flash-attn": ("torch", "einops")}
#: The uv settings file ``uv pip compile`` reads (the static metadata above).
COMPILE_SETTINGS = "uv-compile.toml"
#: The uv input file for frameworks given as a local path or a URL without a name.
LOCAL_INPUT = "requirements.in"
#: The name of the throw-away project uv compiles (uv's messages name it).
INPUT_PROJECT = "cudalock-lock-input"
#: Written into ``[tool.cudalock]``; bump when the record's shape changes.
RECORD_VERSION = 1

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
    interpreter = build_interpreter(inp.python)
    if interpreter is not None:
        args += ["--python", interpreter]
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


# --------------------------------------------------------------------------------------------
# The lock record (pure)


def _without_none(value: Any) -> Any:
    """TOML has no null: drop None values (recursively)."""
    if isinstance(value, Mapping):
        return {str(k): _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_none(v) for v in value if v is not None]
    return value


def target_summary(target: Target) -> dict[str, Any]:
    """What of a Target a lock depends on (not host names, memory or probe notes)."""

    summary: dict[str, Any] = _without_none(
        {
            "name": target.name,
            "platform": target.platform,
            "driver-version": str(target.driver_version) if target.driver_version else None,
            "driver-cuda": format_cuda(target.driver_cuda) if target.driver_cuda else None,
            "compute-capabilities": [format_cc(cc) for cc in target.compute_capabilities],
        }
    )
    return summary


def request_summary(request: Request) -> dict[str, Any]:
    """The Request as recorded: URLs without credentials, None dropped."""
    summary: dict[str, Any] = _without_none(recorded_request(request).to_json())
    return summary


def fingerprint(document: Any) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def lock_record(
    plan: Plan,
    request: Request,
    inp: LockInput,
    *,
    cudalock_version: str,
    uv_version: str,
    closure: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``[tool.cudalock]`` table: what the lock was made from (for ``--check``) and how the
    closure was fitted to the plan (``closure``: extras added, family members routed, ...)."""
    req = request_summary(request)
    targets = [target_summary(t) for t in plan.targets]
    plan_json = plan.to_json()
    plan_json.pop("target", None)  # duplicated in "targets"
    for target in plan_json.get("targets", []):
        # Host names and memory sizes do not belong in a committed lockfile.
        host = target.get("host") or {}
        target["host"] = {k: host.get(k) for k in ("os", "arch", "glibc")}
    plan_json["index_url"] = strip_credentials(plan.index_url)
    return {
        "record-version": RECORD_VERSION,
        "cudalock-version": cudalock_version,
        "uv-version": uv_version,
        "matrix-version": plan.matrix_version,
        "python": plan.python,
        "platform": plan.platform,
        "python-platform": inp.python_platform,
        "default-index": strip_credentials(inp.default_index),
        "spec-fingerprint": fingerprint(req),
        "request": req,
        "targets": targets,
        "plan": _without_none(redact_json(plan_json)),
        **({"closure": _without_none(redact_json(dict(closure)))} if closure else {}),
    }


# --------------------------------------------------------------------------------------------
# Shaping and validating the lock (pure)


def parse_lock(text: str, *, source: str) -> tuple[Pylock, dict[str, Any]]:
    """Read a pylock.toml with packaging's PEP 751 reader; ``InputError`` naming what is wrong."""
    data = read_toml_lock(text, source=source)
    return validate_lock(data, source=source), data


def read_toml_lock(text: str, *, source: str) -> dict[str, Any]:
    """A pylock.toml's TOML, not yet checked against PEP 751 (:func:`validate_lock`)."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{source} is not valid TOML: {err}") from None
    except RecursionError:
        raise InputError(f"{source} is not valid TOML: nested too deeply") from None
    return data


def validate_lock(data: Mapping[str, Any], *, source: str) -> Pylock:
    """``data`` read as a PEP 751 lock by packaging; ``InputError`` naming what is wrong."""
    try:
        return Pylock.from_dict(dict(data))
    except PylockValidationError as err:
        raise InputError(f"{source} is not a valid PEP 751 lock: {err}") from None
    except Exception as err:  # packaging raises a few other types for odd shapes
        raise InputError(f"{source} is not a valid PEP 751 lock: {err}") from None


def finalize_lock(
    uv_data: Mapping[str, Any], record: Mapping[str, Any], inp: LockInput, *, cudalock_version: str
) -> tuple[str, dict[str, Any]]:
    """uv's pylock.toml (as read), made ours: created-by, environment, exact Python, indexes,
    the record; its text and its data."""
    packages: list[dict[str, Any]] = []
    for entry in uv_data.get("packages", []):
        # A directory or VCS checkout comes from no index.
        from_index = not any(key in entry for key in ("directory", "vcs", "archive"))
        table: dict[str, Any] = {}
        for key, value in entry.items():
            # uv records a VCS or archive URL as it was given, token and all.
            table[key] = _without_credentials(value)
            if key == "version" and from_index:
                table["index"] = strip_credentials(inp.index_for(str(entry["name"])))
        if "index" not in table and from_index:
            table["index"] = strip_credentials(inp.index_for(str(entry["name"])))
        packages.append(table)
    data = {
        "lock-version": uv_data.get("lock-version", "1.0"),
        "environments": [environment_marker(inp.platform)],
        # The wheels are for this one Python; an installer must refuse any other.
        "requires-python": f"=={inp.python}.*",
        "created-by": "cudalock",
        "packages": packages,
        "tool": {"cudalock": dict(record)},
    }
    header = (
        f"Generated by cudalock {cudalock_version} (resolved by uv); "
        "regenerate with 'cudalock lock', check with 'cudalock lock --check'.",
        *INSTALL_LINES,
    )
    return dumps(data, comments=header), data


def _without_credentials(value: Any) -> Any:
    """``value`` (from uv's lock) with the user:password part of every URL in it removed."""
    if isinstance(value, str):
        return strip_credentials(value) if holds_credentials(value) else value
    if isinstance(value, Mapping):
        return {key: _without_credentials(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_credentials(item) for item in value]
    return value


def check_routes(lock: Pylock, inp: LockInput) -> None:
    """Every routed package's files must come from its explicit index (defence in depth)."""
    for package in lock.packages:
        expected = inp.index_for(package.name)
        if expected == inp.default_index:
            continue
        for url in _file_urls(package):
            if _origin(url) != _origin(expected):
                raise EnvironmentFailure(
                    f"uv resolved {package.name} from {redact(url)}, not from {redact(expected)}; "
                    "refusing to write a lock that could mix indexes"
                )


def _origin(url: str) -> tuple[str, str]:
    # An index may serve its files from another path of its own host (download.pytorch.org
    # does), never from another host.

    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower() + f":{parts.port or ''}"


def _file_urls(package: Package) -> list[str]:
    urls = [w.url for w in package.wheels or () if w.url]
    if package.sdist is not None and package.sdist.url:
        urls.append(package.sdist.url)
    return urls


def locked_versions(lock: Pylock | Mapping[str, Any]) -> dict[str, str]:
    """Name → version of each package of a lock (local ones have none), validated or as read."""
    named: list[tuple[str, object]]
    if isinstance(lock, Pylock):
        named = [(p.name, p.version) for p in lock.packages]
    else:
        entries = lock.get("packages")
        named = [
            (str(entry.get("name")), entry.get("version"))
            for entry in (entries if isinstance(entries, list) else ())
            if isinstance(entry, Mapping)
        ]
    return {canonicalize_name(name): str(version) for name, version in named if version is not None}


# --------------------------------------------------------------------------------------------
# uv's answers


#: A lock of even a thousand packages is a few MB.
MAX_LOCK_BYTES = 64 * 2**20


def read_lock_text(path: Path) -> str:
    """The text of the lock file ``path``, read bounded; :class:`InputError` (exit 2) when it is
    missing, not a regular file, larger than :data:`MAX_LOCK_BYTES` or not UTF-8."""
    data = read_bounded(path, limit=MAX_LOCK_BYTES, what="lock file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None


def is_ours(path: Path) -> bool:
    """Whether ``path`` is a file cudalock wrote (then regenerating it needs no --force).

    A pylock.toml is ours when its ``created-by`` says so, as parsed: a comment that looks
    like the key does not count. The other lock files (requirements.lock.txt,
    requirements.last.txt, uv-install.toml) have no such key, only their first line to go by.
    """
    try:
        text = read_lock_text(path)
    except InputError:
        return False
    if path.name == LOCK_FILE:
        # created-by is a top-level key, and those come before the first table: only that
        # part is read (a lock of a thousand packages is megabytes).
        head = re.split(r"^\s*\[", text, maxsplit=1, flags=re.MULTILINE)[0]
        try:
            return bool(tomllib.loads(head).get("created-by") == "cudalock")
        except (tomllib.TOMLDecodeError, RecursionError):
            return False
    return text.startswith("# Generated by cudalock")


# --------------------------------------------------------------------------------------------
# --check


def state_of(plan: Plan, request: Request) -> LockState:
    """The record today's inputs would produce (compared with the lock's by ``--check``)."""

    return LockState(
        matrix_version=plan.matrix_version,
        python=plan.python,
        platform=plan.platform,
        targets=tuple(target_summary(t) for t in plan.targets),
        request=request_summary(request),
        pins={str(canonicalize_name(p.name)): p.version for p in plan.packages},
    )
