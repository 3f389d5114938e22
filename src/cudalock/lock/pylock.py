"""``cudalock lock``: a PEP 751 ``pylock.toml`` (and ``requirements.lock.txt``) for a Plan.

uv is the resolution engine; cudalock never resolves anything itself. For a Plan, cudalock
writes a throw-away input project whose dependencies are the Plan's pins plus the requested
extras, with every package the Plan routes to a PyTorch index pinned to that index through
``[tool.uv.sources]`` and the index marked ``explicit = true``: uv then looks for those
packages on that index *only*, so a same-named version on PyPI or a mirror can never win
(dependency confusion), and looks for nothing else there. Everything else comes from PyPI or
its mirror (``--default-index``). uv resolves for the Target's platform and Python
(``--python-platform``, ``--python-version``), not this machine's.

The pure parts (building uv's input, shaping and validating the lock, the requirements file)
are plain functions; :func:`make_lock` is the edge that runs uv and writes the files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomlkit
from packaging.pylock import Package, Pylock, PylockValidationError
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from cudalock import __version__
from cudalock.errors import EnvironmentFailure, InputError, Unsatisfiable, UsageError
from cudalock.fsutil import read_bounded, refuse_existing, write_group
from cudalock.lock.check import LockState, compare, pins_missing_from_lock
from cudalock.lock.uv import find_uv, run_uv, uv_environment, uv_version
from cudalock.model import Plan, Request, Target
from cudalock.platforms import platform_named
from cudalock.tomlfile import tomllib
from cudalock.urls import (
    DEFAULT_PYPI_INDEX,
    redact,
    redact_json,
    strip_credentials,
    validate_index_url,
)
from cudalock.versions import format_cc, format_cuda

if TYPE_CHECKING:
    from cudalock.lock.check import LockState


LOCK_FILE = "pylock.toml"
REQUIREMENTS_FILE = "requirements.lock.txt"
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

    def index_for(self, name: str) -> str:
        """The index a package (any spelling) is resolved from."""
        normalized = canonicalize_name(name)
        for route in self.routes:
            if normalized in route.packages:
                return route.url
        return self.default_index


def _index_name(url: str, taken: set[str]) -> str:
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1]) or "index"
    name = f"pytorch-{tail}"
    counter = 2
    while name in taken:
        name = f"pytorch-{tail}-{counter}"
        counter += 1
    taken.add(name)
    return name


def lock_input(
    plan: Plan,
    request: Request,
    *,
    pypi_index: str | None = None,
    glibc: str | None = None,
    allow_insecure: bool = False,
) -> LockInput:
    """uv's input for ``plan``: its pins, routed, plus requested packages it does not pin.

    ``with`` packages and the framework that the Plan does not pin itself are passed as the user
    wrote them, so uv pins them (and their dependencies) under the Plan's torch.
    """
    default_index = validate_index_url(
        pypi_index or request.pypi_index or DEFAULT_PYPI_INDEX,
        flag="--pypi-index",
        allow_insecure=allow_insecure,
    )
    requirements: list[str] = []
    routed: dict[str, list[str]] = {}
    pinned: set[str] = set()
    for pin in plan.packages:
        name = canonicalize_name(pin.name)
        pinned.add(name)
        requirements.append(f"{name}=={pin.version}")
        if pin.index_url:
            url = validate_index_url(
                pin.index_url, flag="--pytorch-index", allow_insecure=allow_insecure
            )
            if url != default_index:
                routed.setdefault(url, []).append(name)
    extras = [*request.with_packages, *([request.framework] if request.framework else [])]
    for text in extras:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            raise UsageError(
                f"cannot lock {text!r}: expected a requirement such as 'deepspeed>=0.15' or "
                "'name @ https://...' (a local path cannot be locked with hashes)"
            ) from None
        if canonicalize_name(requirement.name) not in pinned:
            requirements.append(str(requirement))
            pinned.add(canonicalize_name(requirement.name))
    taken: set[str] = set()
    routes = tuple(
        IndexRoute(name=_index_name(url, taken), url=url, packages=tuple(names))
        for url, names in routed.items()
    )
    return LockInput(
        requirements=tuple(requirements),
        routes=routes,
        default_index=default_index,
        python=plan.python,
        platform=plan.platform,
        python_platform=uv_python_platform(plan.platform, glibc),
    )


def input_project(inp: LockInput) -> str:
    """The ``pyproject.toml`` uv compiles: requirements, sources and explicit indexes."""

    doc = tomlkit.document()
    doc.add(tomlkit.comment("Input for uv, written by cudalock lock; not a real project."))
    doc["project"] = {"name": INPUT_PROJECT, "version": "0", "dependencies": list(inp.requirements)}
    sources = {name: {"index": route.name} for route in inp.routes for name in route.packages}
    indexes = [{"name": route.name, "url": route.url, "explicit": True} for route in inp.routes]
    tool_uv: dict[str, Any] = {}
    if sources:
        tool_uv["sources"] = sources
        tool_uv["index"] = indexes
    if tool_uv:
        doc["tool"] = {"uv": tool_uv}
    return tomlkit.dumps(doc)


def uv_compile_args(uv: str, inp: LockInput, *, upgrade: bool, cache_dir: Path | None) -> list[str]:
    """``uv pip compile`` for the input project (run in its directory, output ``pylock.toml``).

    The default index is passed through the environment (``UV_DEFAULT_INDEX``), not argv, so
    credentials in a mirror URL never show in a process listing.
    """
    args = [
        uv,
        "pip",
        "compile",
        "pyproject.toml",
        "--format",
        "pylock.toml",
        "--output-file",
        LOCK_FILE,
        "--python-version",
        inp.python,
        "--python-platform",
        inp.python_platform,
        "--no-config",
        "--no-header",
        "--no-python-downloads",
    ]
    interpreter = build_interpreter(inp.python)
    if interpreter is not None:
        args += ["--python", interpreter]
    if upgrade:
        args.append("--upgrade")
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
    """The Request as recorded: index URLs without credentials, None dropped."""
    data = request.to_json()
    for key in ("pytorch_index", "pypi_index"):
        if data.get(key):
            data[key] = strip_credentials(str(data[key]))
    summary: dict[str, Any] = _without_none(data)
    return summary


def fingerprint(document: Any) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def lock_record(
    plan: Plan, request: Request, inp: LockInput, *, cudalock_version: str, uv_version: str
) -> dict[str, Any]:
    """The ``[tool.cudalock]`` table: what the lock was made from, for ``--check``."""
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
    }


# --------------------------------------------------------------------------------------------
# Shaping and validating the lock (pure)


def parse_lock(text: str, *, source: str) -> tuple[Pylock, dict[str, Any]]:
    """Read a pylock.toml with packaging's PEP 751 reader; ``InputError`` naming what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{source} is not valid TOML: {err}") from None
    except RecursionError:
        raise InputError(f"{source} is not valid TOML: nested too deeply") from None
    try:
        lock = Pylock.from_dict(data)
    except PylockValidationError as err:
        raise InputError(f"{source} is not a valid PEP 751 lock: {err}") from None
    except Exception as err:  # packaging raises a few other types for odd shapes
        raise InputError(f"{source} is not a valid PEP 751 lock: {err}") from None
    return lock, data


def finalize_lock(
    uv_text: str, record: Mapping[str, Any], inp: LockInput, *, cudalock_version: str
) -> str:
    """uv's pylock.toml, made ours: created-by, environment, exact Python, indexes, record."""

    try:
        uv_doc = tomlkit.parse(uv_text)
    except Exception as err:
        raise EnvironmentFailure(f"uv wrote a pylock.toml that is not TOML: {err}") from None
    doc = tomlkit.document()
    doc.add(
        tomlkit.comment(
            f"Generated by cudalock {cudalock_version} (resolved by uv); "
            "regenerate with 'cudalock lock', check with 'cudalock lock --check'."
        )
    )
    doc.add(
        tomlkit.comment(
            "Install: uv pip sync pylock.toml | pip install -r pylock.toml (pip >= "
            "26.3) | pip install --require-hashes -r requirements.lock.txt"
        )
    )
    doc["lock-version"] = uv_doc.get("lock-version", "1.0")
    doc["environments"] = [environment_marker(inp.platform)]
    # The wheels are for this one Python; an installer must refuse any other.
    doc["requires-python"] = f"=={inp.python}.*"
    doc["created-by"] = "cudalock"
    packages = tomlkit.aot()
    for entry in uv_doc.get("packages", []):
        table = tomlkit.table()
        for key, value in entry.items():
            table[key] = value
            if key == "version":
                table["index"] = strip_credentials(inp.index_for(str(entry["name"])))
        if "index" not in table:
            table["index"] = strip_credentials(inp.index_for(str(entry["name"])))
        packages.append(table)
    doc["packages"] = packages
    tool = tomlkit.table(is_super_table=True)
    tool["cudalock"] = dict(record)
    doc["tool"] = tool
    return tomlkit.dumps(doc)


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


def _sha256s(package: Package) -> list[str]:
    hashes = [w.hashes.get("sha256") for w in package.wheels or ()]
    if package.sdist is not None:
        hashes.append(package.sdist.hashes.get("sha256"))
    if package.archive is not None:
        hashes.append(package.archive.hashes.get("sha256"))
    return sorted({h for h in hashes if h})


def requirements_lock(lock: Pylock, inp: LockInput, *, cudalock_version: str) -> str:
    """pip's ``--require-hashes`` rendering of the lock: pins, markers and every sha256.

    Index lines carry no credentials (pip takes them from netrc or keyring); hash checking makes
    the extra index safe: pip only accepts a file whose sha256 is listed here.
    """
    lines = [
        f"# Generated by cudalock {cudalock_version} from {LOCK_FILE}; do not edit.",
        f"# For Python {inp.python} on {inp.platform}. Install with:",
        f"#   pip install --require-hashes -r {REQUIREMENTS_FILE}",
        f"--index-url {strip_credentials(inp.default_index)}",
    ]
    lines += [f"--extra-index-url {strip_credentials(r.url)}" for r in inp.routes]
    lines.append("")
    for package in sorted(lock.packages, key=lambda p: p.name):
        if package.vcs is not None or package.directory is not None:
            raise UsageError(
                f"{package.name} is locked from a VCS checkout or a directory, which pip cannot "
                "verify by hash; lock a released version of it instead"
            )
        hashes = _sha256s(package)
        if not hashes:
            raise EnvironmentFailure(f"the lock has no sha256 for {package.name}")
        if package.archive is not None and package.archive.url:
            head = f"{package.name} @ {package.archive.url}"
        else:
            head = f"{package.name}=={package.version}"
        if package.marker is not None:
            head += f" ; {package.marker}"
        lines.append(" \\\n".join([head, *(f"    --hash=sha256:{h}" for h in hashes)]))
    return "\n".join(lines) + "\n"


def locked_versions(lock: Pylock) -> dict[str, str]:
    return {
        canonicalize_name(p.name): str(p.version) for p in lock.packages if p.version is not None
    }


# --------------------------------------------------------------------------------------------
# The edge: run uv, validate, write


@dataclass(frozen=True)
class LockResult:
    lock_path: Path
    requirements_path: Path
    packages: dict[str, str]
    input: LockInput


#: A lock of even a thousand packages is a few MB.
MAX_LOCK_BYTES = 64 * 2**20


def is_ours(path: Path) -> bool:
    """Whether ``path`` is a file cudalock wrote (then regenerating it needs no --force).

    A pylock.toml is ours when its ``created-by`` says so, as parsed: a comment that looks
    like the key does not count. requirements.lock.txt has only its header line to go by.
    """
    try:
        text = read_bounded(path, limit=MAX_LOCK_BYTES, what="lock file").decode("utf-8")
    except (InputError, UnicodeDecodeError):
        return False
    if path.name.endswith(".toml"):
        try:
            return bool(tomllib.loads(text).get("created-by") == "cudalock")
        except (tomllib.TOMLDecodeError, RecursionError):
            return False
    return text.startswith("# Generated by cudalock")


def classify_uv_failure(stderr: str) -> Exception:
    """Turn uv's failure into cudalock's: no solution → exit 1, anything else → exit 3."""
    text = stderr.replace(f"{INPUT_PROJECT} depends on", "the request needs")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("warning:")]
    causes = [
        line.removeprefix("cause:").strip()
        for line in lines
        if line.startswith(("cause:", "╰─▶", "Caused by:"))
    ]
    if "no solution found" in text.lower() or "unsatisfiable" in text.lower():
        explanation = " ".join(c.removeprefix("╰─▶").strip() for c in causes) or lines[-1]
        return Unsatisfiable(
            "uv found no set of versions that fits the plan: " + explanation,
            hint="relax the framework or --with requirements, or pin another torch with --torch",
        )
    build = re.search(r"Failed to build `?([^`\s:]+)", text)
    if build:
        return EnvironmentFailure(
            f"uv had to build {build.group(1)} from source to read its dependencies, and the "
            "build failed; nothing was written, the previous lock is untouched",
            hint="packages without wheels (DeepSpeed is an sdist) run their setup code while "
            "locking; see uv's output above, or lock without that package (--with)",
        )
    first = next(
        (line for line in lines if line.startswith("error:")),
        lines[0] if lines else "uv failed without a message",
    )
    detail = first.removeprefix("error:").strip()
    if causes and causes[-1] not in detail:
        detail += f" ({causes[-1].removeprefix('Caused by:').strip()})"
    return EnvironmentFailure(
        f"resolving the lock failed: {detail}; nothing was written, the previous lock is untouched",
        hint="check the network and the index URLs (--pytorch-index, --pypi-index); uv retried "
        "each request --retries times, waiting --timeout seconds",
    )


def make_lock(
    plan: Plan,
    request: Request,
    *,
    output_dir: Path,
    upgrade: bool = False,
    pypi_index: str | None = None,
    allow_insecure: bool = False,
    cache_dir: Path | None = None,
    timeout_s: int = 60,
    retries: int = 3,
    force: bool = False,
    echo: Callable[[str], None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> LockResult:
    """Resolve ``plan`` with uv and write ``pylock.toml`` and ``requirements.lock.txt``.

    On any failure nothing is written and the previous files stay as they were.
    """

    say = echo or (lambda _line: None)
    lock_path = output_dir / LOCK_FILE
    req_path = output_dir / REQUIREMENTS_FILE
    foreign = [p for p in (lock_path, req_path) if p.exists() and not is_ours(p)]
    refuse_existing(foreign, force=force)
    inp = lock_input(
        plan,
        request,
        pypi_index=pypi_index,
        glibc=target_glibc(plan.targets),
        allow_insecure=allow_insecure,
    )
    uv = find_uv()
    uv_ver = uv_version(uv)
    routes = ", ".join(f"{', '.join(r.packages)} only from {redact(r.url)}" for r in inp.routes)
    say(
        f"cudalock: locking for Python {inp.python} on {inp.platform} ({inp.python_platform}) "
        f"with uv {uv_ver}: {routes or 'no routed packages'}; everything else from "
        f"{redact(inp.default_index)}"
    )
    with tempfile.TemporaryDirectory(prefix="cudalock-lock-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o700)  # the input may hold a mirror URL with credentials
        (work / "pyproject.toml").write_text(input_project(inp), encoding="utf-8")
        if not upgrade and lock_path.exists() and is_ours(lock_path):
            # uv reads an existing output file as preferences: locked versions are kept
            # where the new plan still allows them.
            shutil.copyfile(lock_path, work / LOCK_FILE)
        env = uv_environment(
            environ if environ is not None else os.environ,
            timeout_s=timeout_s,
            retries=retries,
            # uv's own temporary files go in the scratch directory, removed with it even
            # when uv is killed (SIGTERM to cudalock).
            extra={"UV_DEFAULT_INDEX": inp.default_index, "TMPDIR": str(work)},
        )
        if cache_dir is not None:
            env.pop("UV_NO_CACHE", None)  # an explicit --cache-dir means: use it
        args = uv_compile_args(uv, inp, upgrade=upgrade, cache_dir=cache_dir)
        result = run_uv(args, cwd=work, env=env, echo=lambda line: say(f"  uv: {line}"))
        if not result.ok:
            raise classify_uv_failure(result.stderr)
        try:
            uv_text = (work / LOCK_FILE).read_text(encoding="utf-8")
        except OSError as err:
            raise EnvironmentFailure(f"uv reported success but wrote no lock: {err}") from None
    parse_lock(uv_text, source="uv's pylock.toml")
    record = lock_record(plan, request, inp, cudalock_version=__version__, uv_version=uv_ver)
    text = finalize_lock(uv_text, record, inp, cudalock_version=__version__)
    try:
        lock, _data = parse_lock(text, source=f"the new {LOCK_FILE}")
    except InputError as err:
        raise EnvironmentFailure(f"{err.message}; nothing was written") from None
    check_routes(lock, inp)
    requirements = requirements_lock(lock, inp, cudalock_version=__version__)
    write_group({lock_path: text, req_path: requirements}, force=True)
    versions = locked_versions(lock)
    say(f"cudalock: wrote {lock_path} and {req_path} ({len(versions)} packages)")
    return LockResult(lock_path=lock_path, requirements_path=req_path, packages=versions, input=inp)


def read_lock_file(path: Path) -> tuple[Pylock, dict[str, Any]]:
    try:
        text = read_bounded(path, limit=MAX_LOCK_BYTES, what="lock file").decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None
    return parse_lock(text, source=str(path))


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


def _significant(text: str) -> list[str]:
    return [
        line.rstrip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def check_lock(
    output_dir: Path,
    plan: Plan,
    request: Request,
    *,
    pypi_index: str | None = None,
    allow_insecure: bool = False,
) -> list[str]:
    """What makes the lock in ``output_dir`` stale for ``plan``/``request`` (empty: current).

    An unreadable or invalid lock is an ``InputError`` (exit 2); a missing one is stale.
    """

    lock_path = output_dir / LOCK_FILE
    req_path = output_dir / REQUIREMENTS_FILE
    if not lock_path.exists():
        return [f"there is no lock at {lock_path}; run cudalock lock"]
    lock, data = read_lock_file(lock_path)
    recorded = LockState.from_record(data.get("tool", {}).get("cudalock"), source=str(lock_path))
    changes = compare(recorded, state_of(plan, request))
    changes += pins_missing_from_lock(recorded.pins, locked_versions(lock))
    if changes:
        return changes
    inp = lock_input(
        plan,
        request,
        pypi_index=pypi_index,
        allow_insecure=allow_insecure,
        glibc=target_glibc(plan.targets),
    )
    expected = requirements_lock(lock, inp, cudalock_version=__version__)
    if not req_path.exists():
        return [f"{req_path} is missing; run cudalock lock"]
    try:
        actual = read_bounded(req_path, limit=MAX_LOCK_BYTES, what="lock file").decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{req_path} is not UTF-8 text") from None
    if _significant(actual) != _significant(expected):
        return [f"{req_path} does not match {lock_path}; run cudalock lock"]
    return []
