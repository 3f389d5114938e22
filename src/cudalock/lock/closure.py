"""The closure: everything a Plan's environment holds, resolved once by uv, fitted to the torch.

``lock`` and ``bootstrap`` both come here. uv resolves the Plan's pins (the torch family routed
to its explicit index), every ``--with`` package and every framework, for the target's Python
and platform. What comes back is then checked against the Plan, and resolved again until
nothing changes:

- a torch-family package the closure holds that the Plan did not route (llamafactory requires
  torchaudio) is added as a direct pin of the matrix's paired build, routed like torch: uv
  applies index routing to direct dependencies only, so without this PyPI's newest torchaudio
  (a build for another CUDA, or one that no longer requires torch) would win;
- a framework is asked for with the extras that declare its torch requirement (transformers'
  ``torch`` extra), read from the metadata of the version uv chose, so uv picks a version
  whose torch requirement accepts the planned torch;
- with DeepSpeed or flash-attn in the closure, what they are built with is locked too
  (``BUILD_REQUIREMENTS``: DeepSpeed's setuptools, flash-attn's setup.py imports), and on a CUDA
  torch nvidia-ml-py, which DeepSpeed's ``setup.py`` adds to its requirements when it is built
  against a CUDA torch (deepspeedai/DeepSpeed@3855dbb0c245bf82fac3735b7e0b089d5afd618c:
  setup.py, "Only install pynvml on nvidia gpus").

When uv finds no solution, each framework's newest release matching the request is read: one
whose torch requirement rejects the planned torch is named, with the newest release that
accepts it (exit 1).
"""

from __future__ import annotations

import os
import re
import tempfile
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from packaging.pylock import Package, Pylock
from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from cudalock.errors import CudalockError, EnvironmentFailure, Unsatisfiable, UsageError, sentence
from cudalock.lock.cudabuilt import BuildCheck
from cudalock.lock.flashattn import flash_attn_note
from cudalock.lock.frameworks import (
    Sdist,
    matching,
    newest_sdist_only,
    project_releases,
    release_metadata,
    torch_specifier,
    with_framework,
)
from cudalock.lock.http import cache_disabled, request
from cudalock.lock.metadata import (
    Metadata,
    describe,
    family_requirements,
    fetch_metadata,
    marker_environment,
    requirements_with,
    stored_metadata,
    torch_extras,
)
from cudalock.lock.names import BUILD_REQUIREMENTS, BUILT_AGAINST_TORCH, LOCK_FILE
from cudalock.lock.pylock import locked_versions, read_toml_lock, validate_lock
from cudalock.lock.torchbuild import (
    DEFAULT_BUILD_REQUIRES,
    SdistBuild,
    TorchBuildNeeded,
    needs_torch_to_build,
    read_sdist,
)
from cudalock.lock.uv import find_uv, run_uv, uv_environment, uv_version_later
from cudalock.lock.uvfailures import (
    NoWheelsForPython,
    classify_uv_failure,
    missing_from_index,
    no_wheels_for_python,
)
from cudalock.lock.uvinput import (
    COMPILE_SETTINGS,
    LOCAL_INPUT,
    LockInput,
    build_interpreter,
    compile_settings,
    input_project,
    input_requirements,
    lock_input,
    target_glibc,
    uv_compile_args,
)
from cudalock.lock.variant import Reader, VariantIndex, read_variant_index, served_versions
from cudalock.matrix import Matrix, load_matrix
from cudalock.model import PackagePin, Plan
from cudalock.request import (
    COMPANIONS,
    TORCH_FAMILY,
    Framework,
    Request,
    parse_framework,
    parse_torch_spec,
)
from cudalock.resolve import resolve
from cudalock.resolve.pairings import fitting_releases, pairing_fit
from cudalock.urls import redact

Echo = Callable[[str], None]
#: Resolutions before the closure must have settled. The first is made with what the
#: frameworks' metadata predicts (their torch extras, the variant-index packages they require);
#: another only when uv's answer shows something the prediction missed, and one or two after
#: versions built for another CUDA were excluded.
MAX_ROUNDS = 6
#: Metadata and index pages read at once.
CONCURRENCY = 8
#: Releases of a framework whose metadata is read, newest first, to find the one uv will take.
PREDICTED_RELEASES = 40
#: The largest sdist read to tell whether its build reads the installed torch.
SDIST_LIMIT = 64 * 2**20
#: Added to DeepSpeed's requirements by its setup.py when it is built against a CUDA torch.
DEEPSPEED_CUDA_REQUIREMENT = "nvidia-ml-py"


@dataclass(frozen=True)
class UvOptions:
    """How uv runs: the indexes, its cache and network limits, and whether to upgrade."""

    pypi_index: str | None = None
    allow_insecure: bool = False
    cache_dir: Path | None = None
    timeout_s: int = 60
    retries: int = 3
    upgrade: bool = False
    environ: Mapping[str, str] | None = None
    #: Resolve from uv's cache alone and read no index (``--offline``).
    offline: bool = False


@dataclass(frozen=True)
class RoutedWheels:
    """What the first resolution takes from the plan's variant index in an exact version:
    the torch family and the CUDA wheels torch pins (``nvidia-*``, triton). Known before uv
    runs, and most of what a new environment downloads, so ``bootstrap --create`` fetches
    their wheels while uv resolves the rest."""

    #: The variant index (credentials and all): where the lock takes them from.
    index_url: str
    #: ``name==version``, each exactly as the lock will hold it.
    pins: tuple[str, ...]
    #: The Python and uv's ``--python-platform`` the closure is resolved for.
    python: str
    python_platform: str


@dataclass(frozen=True)
class FrameworkFit:
    """One framework as the closure holds it."""

    given: str
    #: As uv was asked for it (extras added); the path or URL as given for those.
    requested: str
    name: str | None = None
    version: str | None = None
    extras_added: tuple[str, ...] = ()
    #: Its torch-family requirements with those extras ("torch>=2.5").
    torch_requirements: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "given": self.given,
            "requested": self.requested,
            "name": self.name,
            "version": self.version,
            "extras-added": list(self.extras_added),
            "torch-requirements": list(self.torch_requirements),
        }


@dataclass(frozen=True)
class Closure:
    """The resolved closure: uv's lock, what was fitted, and why."""

    input: LockInput
    #: uv's pylock.toml as read (its validated form is :attr:`lock`).
    uv_data: dict[str, Any]
    uv_version: str
    #: Every torch-family package in the closure, routed to the plan's index (torch first).
    family: tuple[PackagePin, ...]
    frameworks: tuple[FrameworkFit, ...]
    #: Requirements added to the request (DeepSpeed's build tools).
    additions: tuple[str, ...] = ()
    #: What was fitted and why, in words (shown with the plan, recorded in the lock).
    notes: tuple[str, ...] = field(default=())
    #: sdists found reading the installed torch when built (besides BUILT_AGAINST_TORCH).
    against_torch: tuple[str, ...] = ()

    @property
    def versions(self) -> dict[str, str]:
        return locked_versions(self.uv_data)

    @cached_property
    def lock(self) -> Pylock:
        """uv's lock as packaging reads it, validated when first asked for: ``cudalock lock``
        validates only the lock it writes (:func:`cudalock.lock.files.lock_texts`)."""
        return validate_lock(self.uv_data, source="uv's pylock.toml")

    @property
    def built_last(self) -> tuple[str, ...]:
        versions = self.versions
        names = (*BUILT_AGAINST_TORCH, *self.against_torch)
        return tuple(dict.fromkeys(name for name in names if name in versions))

    def to_json(self) -> dict[str, Any]:
        return {
            "family": [pin.requirement for pin in self.family],
            "frameworks": [fit.to_json() for fit in self.frameworks],
            "additions": list(self.additions),
            "built-last": list(self.built_last),
            "notes": list(self.notes),
        }


#: What makes a directory a Python project uv can build.
_PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")


def check_framework_paths(frameworks: Sequence[Framework]) -> None:
    """Every local framework path (or ``file://`` URL) is a Python project directory, before
    anything is resolved: ``/etc`` or ``file:///etc/passwd`` is a usage error, not a failed
    download."""
    for framework in frameworks:
        path = framework.path
        if path is None and framework.text.lower().startswith("file:"):
            from urllib.request import url2pathname  # http.client with it: for file: only

            path = Path(url2pathname(urllib.parse.urlsplit(framework.text).path))
        if path is None:
            continue
        if not path.is_dir():
            raise UsageError(
                f"--framework {framework.text!r} looks like a local path, but no such "
                "directory exists; expected a requirement (name==version), a VCS URL "
                "or a project directory"
            )
        if not any((path / name).is_file() for name in _PROJECT_FILES):
            raise UsageError(
                f"--framework {framework.text!r} is a directory but not a Python project "
                f"(no {', '.join(_PROJECT_FILES)} in it)"
            )


# --------------------------------------------------------------------------------------------
# Running uv


class _Uv:
    """One uv executable, its environment and a scratch directory for its inputs."""

    def __init__(self, options: UvOptions, work: Path, echo: Echo) -> None:
        self.options = options
        self.work = work
        self.echo = echo
        self.path = find_uv()
        self._version = uv_version_later(self.path)
        #: Packages whose build reads the installed torch, prepared without isolation in
        #: ``build_python``, an environment holding the locked torch.
        self.no_isolation: list[str] = []
        self.build_python: str | None = None

    @property
    def version(self) -> str:
        """uv's version ("0.13.9"), recorded in the lock."""
        return self._version()

    def _env(self, inp: LockInput) -> dict[str, str]:
        env = uv_environment(
            self.options.environ if self.options.environ is not None else os.environ,
            timeout_s=self.options.timeout_s,
            retries=self.options.retries,
            # uv's own temporary files go in the scratch directory, removed with it even when
            # uv is killed (SIGTERM to cudalock).
            extra={"UV_DEFAULT_INDEX": inp.default_index, "TMPDIR": str(self.work)},
        )
        if self.options.cache_dir is not None:
            env.pop("UV_NO_CACHE", None)  # an explicit --cache-dir means: use it
        return env

    def torch_build_environment(self, inp: LockInput, requirements: Sequence[str]) -> None:
        """A scratch environment with the locked torch (routed to its index, as in the lock)
        and ``requirements`` (the build requirements of the sdists built against it), whose
        interpreter uv then prepares those sdists' metadata in."""
        where = self.work.parent / "torch-build"
        where.mkdir(parents=True, exist_ok=True)
        torch = [r for r in inp.requirements if r.startswith("torch==")]
        routes = tuple(
            replace(route, packages=("torch",)) for route in inp.routes if "torch" in route.packages
        )
        project = replace(inp, requirements=(*torch, *requirements), routes=routes, local=())
        (where / "pyproject.toml").write_text(input_project(project), encoding="utf-8")
        env = self._env(inp)
        python = build_interpreter(inp.python) or inp.python
        venv = where / "venv"
        say = lambda line: self.echo(f"  uv: {line}")  # noqa: E731
        if not (venv / "bin" / "python").exists():
            made = run_uv(
                [self.path, "venv", "-q", "--no-python-downloads", "--python", python, str(venv)],
                cwd=where,
                env=env,
                echo=say,
            )
            if not made.ok:
                raise EnvironmentFailure(
                    f"{', '.join(self.no_isolation)} read the installed torch when built, so "
                    f"their metadata is prepared beside torch in a Python {inp.python} "
                    f"environment, and uv found no Python {inp.python} here",
                    hint=f"Install Python {inp.python} (uv python install {inp.python}), or "
                    "lock for the Python cudalock runs on (--python).",
                )
        args = [self.path, "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
        args += ["-r", "pyproject.toml", "--no-config", "--no-python-downloads"]
        if self.options.cache_dir is not None:
            args += ["--cache-dir", str(self.options.cache_dir)]
        if self.options.offline:
            args.append("--offline")
        installed = run_uv(args, cwd=where, env=env, echo=say)
        if not installed.ok:
            raise classify_uv_failure(installed.stderr)
        self.build_python = str(venv / "bin" / "python")

    def resolve(
        self,
        inp: LockInput,
        *,
        directory: Path | None = None,
        no_deps: bool = False,
        quiet: bool = False,
    ) -> str:
        """uv's pylock.toml for ``inp``; uv's failure as cudalock's (exit 1 or 3)."""
        where = directory or self.work
        where.mkdir(parents=True, exist_ok=True)
        (where / "pyproject.toml").write_text(input_project(inp), encoding="utf-8")
        (where / COMPILE_SETTINGS).write_text(compile_settings(), encoding="utf-8")
        local = input_requirements(inp)
        if local is not None:
            (where / LOCAL_INPUT).write_text(local, encoding="utf-8")
        env = self._env(inp)
        args = uv_compile_args(
            self.path,
            inp,
            upgrade=self.options.upgrade,
            cache_dir=self.options.cache_dir,
            no_deps=no_deps,
            offline=self.options.offline,
            no_build_isolation=self.no_isolation,
            build_python=self.build_python,
        )
        say = (lambda _line: None) if quiet else (lambda line: self.echo(f"  uv: {line}"))
        result = run_uv(args, cwd=where, env=env, echo=say)
        if not result.ok:
            needs_torch = needs_torch_to_build(result.stderr)
            if needs_torch is not None and needs_torch[0] not in self.no_isolation:
                raise TorchBuildNeeded(*needs_torch, "No module named 'torch'")
            raise (
                missing_from_index(result.stderr, inp)
                or no_wheels_for_python(result.stderr, inp)
                or classify_uv_failure(result.stderr)
            )
        try:
            return (where / LOCK_FILE).read_text(encoding="utf-8")
        except OSError as err:
            raise EnvironmentFailure(f"uv reported success but wrote no lock: {err}") from None


def _version(uv_data: Mapping[str, Any], name: str) -> str | None:
    """The version of package ``name`` in uv's lock (as read); None when it is not there."""
    return locked_versions(uv_data).get(canonicalize_name(name))


class _Answer:
    """One uv answer (its pylock.toml as read), its packages looked up by name: the fitter
    asks about each of a hundred packages, so the lock is indexed once, not searched each time."""

    def __init__(self, uv_data: dict[str, Any]) -> None:
        self.data = uv_data
        self.versions = locked_versions(uv_data)
        entries = uv_data.get("packages")
        self._entries = {
            str(canonicalize_name(str(entry.get("name")))): entry
            for entry in (entries if isinstance(entries, list) else ())
            if isinstance(entry, Mapping)
        }
        self._packages: dict[str, Package | None] = {}

    def version(self, name: str) -> str | None:
        return self.versions.get(canonicalize_name(name))

    def package(self, name: str) -> Package | None:
        """The package ``name``, validated alone to fetch its metadata: only the lock that is
        written is validated whole."""
        wanted = str(canonicalize_name(name))
        if wanted not in self._packages:
            entry = self._entries.get(wanted)
            alone = {"lock-version": "1.0", "created-by": "uv", "packages": [dict(entry or {})]}
            self._packages[wanted] = (
                None
                if entry is None
                else validate_lock(alone, source="uv's pylock.toml").packages[0]
            )
        return self._packages[wanted]


# --------------------------------------------------------------------------------------------
# Fitting


class _Fitter:
    """The state of one closure resolution: what was found and added, round by round."""

    def __init__(
        self, plan: Plan, request: Request, options: UvOptions, uv: _Uv, matrix: Matrix
    ) -> None:
        self.plan = plan
        self.request = request
        self.options = options
        self.uv = uv
        self.environment = marker_environment(plan.python, plan.platform)
        planned = {canonicalize_name(p.name): p for p in plan.packages}
        paired = {canonicalize_name(p.name): p for p in plan.paired}
        #: Every family pin the plan allows: planned ones, then the matrix's pairings.
        self.available: dict[str, PackagePin] = {
            str(name): pin for name, pin in {**paired, **planned}.items() if name in TORCH_FAMILY
        }
        self.planned = {str(name) for name in planned}
        self.family: dict[str, PackagePin] = {}
        self.extras: dict[str, tuple[str, ...]] = {}
        self.additions: list[str] = []
        #: Closure packages asked for with the torch extra that rejected the plan's torch.
        self.fitted: list[str] = []
        #: What each of those extras requires of torch ("torch>=2.6 (its 'torch' extra)").
        self.fitted_needs: dict[str, str] = {}
        self.notes: list[str] = []
        self.metadata: dict[tuple[str, str], Metadata | None] = {}
        self.glibc = target_glibc(plan.targets)
        self.matrix = matrix
        #: Packages narrowed to the releases their torch pairing accepts (torchao).
        self.paired: dict[str, str] = {}
        #: Packages the plan's variant index builds, routed to it (xformers, torchao, ...).
        self.routed: list[str] = []
        self.variant: VariantIndex | None = None
        #: Why the variant index's project list is unknown, when it is.
        self.variant_problem = "its project list is unknown"
        #: Why uv had to resolve again (said in the output).
        self.again: list[str] = []
        self._reader: Reader | None = None
        #: Whether the local caches are read and written (``CUDALOCK_NO_CACHE`` unset).
        self.use_cache = not cache_disabled(options.environ)
        #: The versions the variant index serves of each project asked about.
        self._served: dict[str, tuple[Version, ...]] = {}
        #: What the torch family pins exactly and the variant index serves in that version
        #: (triton==3.1.0, pytorch-triton): name → version, routed to the variant index.
        self.family_pins: dict[str, str] = {}
        #: The family pins whose metadata was read for those (name, version).
        self._pins_read: set[tuple[str, str]] = set()
        #: Binary packages uv must take a wheel of (``--only-binary``).
        self.only_binary: tuple[str, ...] = ()
        #: The closure's packages built against the installed torch (the last resolution's).
        self.built: list[str] = []
        #: sdists whose build reads the installed torch → why (cudalock.lock.torchbuild).
        self.against_torch: dict[str, str] = {}
        #: Their build requirements, installed beside the locked torch to prepare them.
        self.build_requires: list[str] = []
        self._torch_builds: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        #: The closure's sdist-only packages whose files were read for that.
        self._sdists: set[str] = set()
        #: What the closure's CUDA-built packages were built for; versions that do not fit.
        self.builds = BuildCheck(
            plan=plan,
            matrix=matrix,
            environment=self.environment,
            indexes=(),
            timeout_s=options.timeout_s,
            retries=options.retries,
            offline=options.offline,
            metadata=self.metadata,
        )
        # Planned packages built against torch (DeepSpeed): their build tools in the first pass.
        planned_built = [n for n in BUILT_AGAINST_TORCH if n in self.planned]
        self.additions += self._build_needs(planned_built)

    def input(self) -> LockInput:
        inp = lock_input(
            self.plan,
            self.request,
            pypi_index=self.options.pypi_index,
            glibc=self.glibc,
            allow_insecure=self.options.allow_insecure,
            family=tuple(self.family.values()),
            extras=self.extras,
            additions=(
                *self.additions,
                *self.fitted,
                *self.paired.values(),
                *self.builds.exclusions,
            ),
            variant_packages=tuple(self.routed),
        )
        return replace(inp, only_binary=self.only_binary) if self.only_binary else inp

    def reader(self, inp: LockInput) -> Reader:
        if self._reader is None:
            self._reader = Reader(
                indexes=inp.indexes,
                timeout_s=self.options.timeout_s,
                retries=self.options.retries,
                offline=self.options.offline,
                use_cache=self.use_cache,
            )
        return self._reader

    def routed_wheels(self, inp: LockInput) -> RoutedWheels | None:
        """The exact pins ``inp`` routes to the plan's variant index (None: it routes none)."""
        url = self.plan.index_url
        if not url or url == inp.default_index:
            return None
        routed = {name for route in inp.routes if route.url == url for name in route.packages}
        exact = {
            name: pin.version
            for name, pin in self.available.items()
            if (name in self.planned or name in self.family) and pin.index_url == url
        }
        exact.update(self.family_pins)
        pins = tuple(f"{name}=={version}" for name, version in exact.items() if name in routed)
        return RoutedWheels(url, pins, inp.python, inp.python_platform) if pins else None

    def _build_needs(self, built: Sequence[str]) -> list[str]:
        """What packages built against the installed torch need locked beside them: their
        build tools, and for DeepSpeed on a CUDA torch nvidia-ml-py."""
        needed = [tool for name in built for tool in BUILD_REQUIREMENTS.get(name, ())]
        # An sdist found reading torch is built last, without isolation, with what its
        # build-system requires: locked too, so pip finds it installed.
        needed += [r for r in self.build_requires if any(n in built for n in self.against_torch)]
        if "deepspeed" in built and self.plan.cuda is not None:
            needed.append(DEEPSPEED_CUDA_REQUIREMENT)
        return list(dict.fromkeys(needed))

    # ---------------------------------------------------------------------------------------
    # Before the first resolution: what the frameworks' metadata predicts

    def prepare(self, inp: LockInput) -> None:
        """Read, at once, the variant index's project list and each framework's newest
        matching release's metadata, and from them: the framework's torch extras, the torch
        family members it requires, and the variant-index packages it requires. So uv runs
        once in the common case."""
        reader = self.reader(inp)
        frameworks = self.requirement_frameworks()
        use_variant = bool(self.plan.index_url) and self.plan.index_url != inp.default_index
        with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            variant = pool.submit(self._read_variant, reader) if use_variant else None
            newest = [
                pool.submit(self._newest_metadata, inp, requirement, reader)
                for _text, requirement in frameworks
            ]
            sdists = [
                pool.submit(self._sdist_reading_torch, inp, requirement, reader)
                for _text, requirement in frameworks
            ]
            for scanned in sdists:
                scanned.result()
            routed_family = [
                pin
                for pin in self.available.values()
                if pin.index_url == self.plan.index_url and pin.name in self.planned
            ]
            family_metadata = [
                pool.submit(self._family_metadata_ahead, pin, reader) for pin in routed_family
            ]
            self.variant = variant.result() if variant is not None else None
            self._route_family_pins(
                [m for future in family_metadata if (m := future.result()) is not None], pool
            )
            predicted: list[str] = []
            direct: dict[str, Requirement] = {}
            for (text, requirement), future in zip(frameworks, newest, strict=True):
                metadata = future.result()
                if metadata is None:
                    continue
                extras = [
                    e
                    for e in torch_extras(metadata, self.environment)
                    if e not in requirement.extras
                ]
                if extras:
                    self.extras[text] = tuple(extras)
                asked = (*requirement.extras, *extras)
                for found in requirements_with(metadata, self.environment, asked):
                    predicted.append(str(canonicalize_name(found.name)))
                    direct.setdefault(str(canonicalize_name(found.name)), found)
            self._add_family(predicted, why="required by a framework")
            self._check_with_packages(pool)
            candidates = [n for n in predicted if n not in TORCH_FAMILY]
            for name in self._labelled_among(candidates, pool):
                self._route(name, "required by a framework")
            # The frameworks' own requirements whose torch extra rejects the planned torch
            # (vllm's transformers): asked for with it now, not after uv's first answer.
            own = [
                r
                for n, r in direct.items()
                if n not in TORCH_FAMILY and n not in self.routed and r.url is None
            ]
            ahead = pool.map(lambda r: self._newest_metadata(inp, r, reader, quiet=True), own)
            for requirement, metadata in zip(own, ahead, strict=True):
                if metadata is not None:
                    self._fit_extra(
                        str(canonicalize_name(requirement.name)), metadata.version, metadata
                    )

    def _sdist_reading_torch(
        self, inp: LockInput, requirement: Requirement, reader: Reader
    ) -> None:
        """A framework published as an sdist only whose build reads the installed torch
        (axolotl 0.9.2's setup.py pins torch==<installed>, "2.6.0" in an isolated build) is
        prepared against the locked torch from the first resolution."""
        if requirement.url:
            return
        try:
            sdist = newest_sdist_only(inp.default_index, requirement, reader, self.plan.python)
            build = self._read_sdist(inp, sdist) if sdist is not None else None
        except (CudalockError, FileNotFoundError, ValueError) as err:
            reason = err.message if isinstance(err, CudalockError) else type(err).__name__
            self.notes.append(
                f"the sdist of {requirement.name} could not be read ahead ({reason}): whether "
                "its build reads the installed torch is known only if uv's build fails"
            )
            return
        if sdist is not None and build is not None and build.reason is not None:
            self.found_against_torch(
                str(canonicalize_name(requirement.name)),
                f"{sdist.filename}: {build.reason}",
                build.build_requires,
            )

    def _read_sdist(self, inp: LockInput, sdist: Sdist) -> SdistBuild:
        data = request(
            sdist.url,
            indexes=inp.indexes,
            timeout_s=self.options.timeout_s,
            retries=self.options.retries,
            limit=SDIST_LIMIT,
        ).body
        return read_sdist(data, sdist.filename)

    def sdist_build_requires(
        self, inp: LockInput, name: str, version: str | None
    ) -> tuple[str, ...]:
        """The build requirements of ``name`` ``version``'s sdist (uv's build of it needed
        torch), read from its pyproject.toml; PEP 517's fallback where it cannot be read."""
        asked = Requirement(f"{name}=={version}" if version else name)
        try:
            sdist = newest_sdist_only(inp.default_index, asked, self.reader(inp), None)
            if sdist is not None:
                return self._read_sdist(inp, sdist).build_requires
        except (CudalockError, FileNotFoundError, ValueError):
            pass
        return DEFAULT_BUILD_REQUIRES

    def prepare_torch_builds(self, inp: LockInput) -> None:
        """uv prepares the sdists found reading torch in an environment with the locked torch
        (made, or completed, when what it must hold changed)."""
        wanted = (tuple(self.against_torch), tuple(self.build_requires))
        if not self.against_torch or wanted == self._torch_builds:
            return
        self.uv.no_isolation = list(self.against_torch)
        self.uv.torch_build_environment(inp, self.build_requires)
        self._torch_builds = wanted

    def found_against_torch(self, name: str, why: str, build_requires: Sequence[str]) -> None:
        if name in self.against_torch:
            return
        self.against_torch[name] = why
        for requirement in build_requires:
            if requirement not in self.build_requires:
                self.build_requires.append(requirement)

    def _family_metadata_ahead(self, pin: PackagePin, reader: Reader) -> Metadata | None:
        """The metadata of a planned family pin on the variant index (torch 2.5.1+cu121), read
        from its project page before uv runs; None when the page says too little (an index
        that speaks only PEP 503): uv's answer is read instead."""
        try:
            releases = project_releases(str(pin.index_url), pin.name, reader)
            wanted = Version(pin.version)
            release = next((r for r in releases if r.version == wanted), None)
            metadata = release_metadata(release, reader) if release is not None else None
        except (CudalockError, FileNotFoundError, ValueError):
            return None  # read again from uv's answer, where a failure is said
        if metadata is not None:
            self.metadata[(canonicalize_name(pin.name), pin.version)] = metadata
            self._pins_read.add((str(canonicalize_name(pin.name)), pin.version))
        return metadata

    def _route_family_pins(self, family: Sequence[Metadata], pool: ThreadPoolExecutor) -> bool:
        """Route what ``family`` (the torch family's metadata) pins exactly, where the variant
        index serves that version: the triton or pytorch-triton its torch was built with."""
        variant = self.variant
        if variant is None or self._reader is None:
            return False
        wanted: dict[str, tuple[str, str]] = {}
        for metadata in family:
            for requirement in requirements_with(metadata, self.environment):
                name = str(canonicalize_name(requirement.name))
                pinned = _exact_pin(requirement)
                if pinned is not None and name not in TORCH_FAMILY and variant.serves(name):
                    wanted.setdefault(name, (pinned, f"{metadata.name} {metadata.version}"))
        self._read_served(list(wanted), pool)
        routed: dict[str, list[str]] = {}
        for name, (version, by) in wanted.items():
            if Version(version) not in self._served.get(name, ()):
                continue
            self.family_pins[name] = version
            if name in self.routed or name in self.planned:
                continue
            self.routed.append(name)
            routed.setdefault(by, []).append(f"{name}=={version}")
        for by, pins in routed.items():
            one = len(pins) == 1
            self.notes.append(
                f"{', '.join(pins)} from {redact(self.plan.index_url)}: {by} pins "
                + (
                    "it exactly and the index serves that version, so it is"
                    if one
                    else "them exactly and the index serves those versions, so they are"
                )
                + " routed there with the torch"
            )
        return bool(routed)

    def _read_served(self, names: Sequence[str], pool: ThreadPoolExecutor) -> None:
        variant, reader = self.variant, self._reader
        if variant is None or reader is None:
            return
        unknown = sorted({n for n in names if n not in self._served and variant.serves(n)})
        for name, found in zip(
            unknown, pool.map(lambda n: served_versions(variant, n, reader), unknown), strict=True
        ):
            self._served[name] = found

    def _read_variant(self, reader: Reader) -> VariantIndex | None:
        try:
            return read_variant_index(self.plan.index_url, reader)
        except (CudalockError, FileNotFoundError) as err:
            reason = err.message if isinstance(err, CudalockError) else "404"
            self.variant_problem = f"its project list could not be read ({reason})"
            self.notes.append(
                f"the project list of {redact(self.plan.index_url)} could not be read "
                f"({reason}): only the torch family is routed to it"
            )
            return None

    def _newest_metadata(
        self, inp: LockInput, requirement: Requirement, reader: Reader, *, quiet: bool = False
    ) -> Metadata | None:
        if requirement.url:
            return None
        try:
            releases = matching(
                project_releases(inp.default_index, requirement.name, reader),
                requirement,
                self.plan.python,
            )
            if quiet:
                # A framework's own requirement: its newest release, the one uv takes unless
                # its torch extra is asked for.
                return release_metadata(releases[0], reader) if releases else None
            # A framework: the newest release whose torch requirement accepts the planned
            # torch, the one uv will take (the torch was chosen with the frameworks' releases).
            torch = self.plan.torch_pin.version
            for release in releases[:PREDICTED_RELEASES]:
                metadata = release_metadata(release, reader)
                if metadata is None:
                    continue
                spec = torch_specifier(metadata, self.plan.python, self.plan.platform)
                if spec.contains(torch, prereleases=True):
                    return metadata
            return None
        except (CudalockError, FileNotFoundError, ValueError) as err:
            if not quiet:
                reason = err.message if isinstance(err, CudalockError) else type(err).__name__
                self.notes.append(
                    f"the metadata of {requirement.name} could not be read ahead ({reason}); "
                    "uv's first answer is read instead"
                )
            return None

    def _labelled_among(self, names: Sequence[str], pool: ThreadPoolExecutor) -> list[str]:
        """Those of ``names`` the variant index has builds of with its label, in order."""
        variant = self.variant
        if variant is None:
            return []
        self._read_served(names, pool)
        result: list[str] = []
        for name in names:
            labelled = any(v.local == variant.label for v in self._served.get(name, ()))
            if labelled and name not in result:
                result.append(name)
        return result

    def _route(self, name: str, why: str) -> bool:
        if name in self.routed or name in self.planned or name in TORCH_FAMILY:
            return False
        self.routed.append(name)
        label = self.variant.label if self.variant else "its"
        self.notes.append(
            f"{name} from {redact(self.plan.index_url)} ({why}): the index builds it for "
            f"{label}, so it is routed there, not to PyPI's build for another CUDA"
        )
        return True

    def _add_family(self, names: Sequence[str], *, why: str) -> bool:
        changed = False
        for name in names:
            if name not in TORCH_FAMILY or name in self.planned or name in self.family:
                continue
            pin = self.available.get(name)
            if pin is None:
                continue  # reported by review() if uv's answer holds it
            self.family[name] = pin
            where = redact(pin.index_url or "the default index")
            self.notes.append(
                f"{pin.requirement} from {where}: {why}; pinned and routed, so no other build "
                "of it can be installed"
            )
            changed = True
        return changed

    def _check_with_packages(self, pool: ThreadPoolExecutor) -> None:
        """``--with`` packages beyond torch's companions must be ones the variant index builds."""
        others = [c.name for c in self.request.with_packages if c.name not in COMPANIONS]
        if not others:
            return
        labelled = self._labelled_among(others, pool)
        for name in others:
            if name in labelled:
                self._route(name, "asked for with --with")
                continue
            if name in self.family_pins:
                continue  # routed with the torch that pins it (triton)
            where = redact(self.plan.index_url or "the PyTorch index")
            raise UsageError(
                f"--with {name}: {where} serves no {name} build for this plan "
                + (f"({self.variant.label})" if self.variant else f"({self.variant_problem})"),
                hint=f"Give it as --framework {name}, resolved from PyPI under the planned torch.",
            )

    def requirement_frameworks(self) -> list[tuple[str, Requirement]]:
        return [
            (framework.text, framework.requirement)
            for framework in self.request.frameworks
            if framework.requirement is not None
        ]

    def read_metadata(
        self,
        uv_lock: _Answer,
        name: str,
        indexes: Sequence[str],
        *,
        quiet: bool = False,
    ) -> Metadata | None:
        version = uv_lock.version(name)
        if version is None:
            return None
        key = (canonicalize_name(name), version)
        if not self._known_metadata(uv_lock, name) and self.options.offline:
            raise EnvironmentFailure(
                f"offline, the metadata of {name} {version} cannot be read, and without "
                "it the framework cannot be fitted to the planned torch (its extras that name "
                "torch are unknown)",
                hint="Run it again where the indexes can be reached.",
            )
        if key not in self.metadata:
            package = uv_lock.package(name)
            self.metadata[key] = (
                None
                if package is None
                else fetch_metadata(
                    package,
                    indexes=indexes,
                    timeout_s=self.options.timeout_s,
                    retries=self.options.retries,
                    use_cache=self.use_cache,
                )
            )
            if self.metadata[key] is None and not quiet:
                self.notes.append(
                    f"{name} {version} has no wheel, so its extras were not read; "
                    "its torch requirement is what uv resolved without them"
                )
        return self.metadata[key]

    def _known_metadata(self, uv_lock: _Answer, name: str) -> bool:
        """Whether the metadata of ``name`` is known without the network: read before, or
        held by the local cache (then read now, in this thread)."""
        version = uv_lock.version(name)
        if version is None:
            return True
        key = (canonicalize_name(name), version)
        if key in self.metadata:
            return True
        package = uv_lock.package(name)
        if package is None:
            return False
        stored = stored_metadata(package) if self.use_cache else None
        if stored is not None:
            self.metadata[key] = stored
        return stored is not None

    def review(self, uv_lock: _Answer, inp: LockInput) -> bool:
        """Look at one resolution; True when something was added and uv must resolve again."""
        versions = uv_lock.versions
        changed = False
        for name in map(str, TORCH_FAMILY):
            if name not in versions or name in self.planned or name in self.family:
                continue
            pin = self.available.get(name)
            if pin is None:
                raise Unsatisfiable(
                    f"the closure needs {name} ({self._who_requires(uv_lock, name, inp)}), and "
                    f"the matrix pairs no {name} release with torch {self.plan.torch_version}",
                    hint=f"Choose a torch that has a paired {name} (--torch), or drop the "
                    "framework that requires it.",
                )
            self.family[name] = pin
            where = redact(pin.index_url or "the default index")
            self.notes.append(
                f"{pin.requirement} from {where}: {self._who_requires(uv_lock, name, inp)}; "
                "pinned and routed, so no other build of it can be installed"
            )
            self.again.append(f"{name} is in the closure")
            changed = True
        for text, requirement in self.requirement_frameworks():
            metadata = self.read_metadata(uv_lock, requirement.name, inp.indexes)
            if metadata is None:
                continue
            have = {*requirement.extras, *self.extras.get(text, ())}
            wanted = [e for e in torch_extras(metadata, self.environment) if e not in have]
            if wanted:
                self.extras[text] = (*self.extras.get(text, ()), *wanted)
                self.again.append(
                    f"{requirement.name} {uv_lock.version(requirement.name)} declares its "
                    f"torch requirement in {', '.join(wanted)}"
                )
                changed = True
        changed = self._route_locked_family_pins(uv_lock, inp) or changed
        built = [name for name in (*BUILT_AGAINST_TORCH, *self.against_torch) if name in versions]
        self.built = built
        if built:
            for name in self._build_needs(built):
                if name not in versions and name not in self.additions:
                    self.additions.append(name)
                    self.again.append(f"{name} is needed to build {', '.join(built)}")
                    changed = True
        with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            unrouted = [n for n in versions if n not in self.routed and n not in TORCH_FAMILY]
            for name in self._labelled_among(unrouted, pool):
                if self._route(name, "in the closure"):
                    self.again.append(f"{name} is in the closure and the variant index builds it")
                    changed = True
            changed = self._fit_closure_extras(uv_lock, inp, pool) or changed
        changed = self._fit_pairings(versions) or changed
        changed = self._find_torch_builds(uv_lock, inp) or changed
        if not changed:
            # The closure fits the torch family; now what its CUDA-built packages were built for.
            self.builds.indexes = inp.indexes
            packages = [p for p in map(uv_lock.package, versions) if p is not None]
            changed = self.builds.review(packages)
            if changed:
                self.again.append("a CUDA-built package's version was built for another CUDA")
        return changed

    def torch_builds_behind(self, explanation: str, inp: LockInput) -> list[str]:
        """The sdists uv's explanation of no solution says depend on torch ("axolotl==0.9.2
        depends on torch==2.6.0") whose files show the build reads the installed torch: their
        metadata was built in isolation, for no torch; found, they are prepared against it."""
        found = []
        # uv: "axolotl==0.9.2 depends on torch==2.6.0", or "all versions of axolotl depend on
        # torch==2.6.0" (the version then from what depends on it: "depend on axolotl==0.9.2").
        named = re.findall(
            r"(?:^|\s)([A-Za-z0-9][A-Za-z0-9._-]*?)(?:==(\S+))? depends? on torch\b",
            explanation,
        )
        for text, given in dict.fromkeys(named):
            name = str(canonicalize_name(text))
            if name in self.against_torch or name in BUILT_AGAINST_TORCH or name in self._sdists:
                continue
            version = given
            if not version:
                pinned = re.search(rf"depends? on {re.escape(text)}==([^\s,]+)", explanation)
                version = pinned[1].rstrip(".") if pinned else ""
            self._sdists.add(name)
            try:
                asked = Requirement(f"{name}=={version}" if version else name)
                sdist = newest_sdist_only(inp.default_index, asked, self.reader(inp), None)
                build = self._read_sdist(inp, sdist) if sdist is not None else None
            except (CudalockError, FileNotFoundError, ValueError):
                continue  # uv's explanation stands
            if sdist is not None and build is not None and build.reason is not None:
                self.found_against_torch(
                    name, f"{sdist.filename}: {build.reason}", build.build_requires
                )
                found.append(name)
        return found

    def _find_torch_builds(self, uv_lock: _Answer, inp: LockInput) -> bool:
        """sdists of the closure whose build reads the installed torch but succeeded in
        isolation (axolotl pulled in by another package: its metadata then pins the torch
        2.6.0 its setup.py assumes when none is installed) are read once and, when their files
        say so, prepared against the locked torch in the next resolution."""
        unread = []
        for name in uv_lock.versions:
            if name in self.against_torch or name in BUILT_AGAINST_TORCH or name in self._sdists:
                continue
            package = uv_lock.package(name)
            if package is None or package.wheels or package.sdist is None or not package.sdist.url:
                continue
            self._sdists.add(name)
            unread.append(
                (
                    name,
                    Sdist(
                        name,
                        Version(str(package.version)),
                        package.sdist.url,
                        package.sdist.url.rsplit("/", 1)[-1],
                    ),
                )
            )
        changed = False
        for name, sdist in unread:
            try:
                build = self._read_sdist(inp, sdist)
            except (CudalockError, FileNotFoundError) as err:
                reason = err.message if isinstance(err, CudalockError) else "404"
                self.notes.append(
                    f"the sdist of {name} {sdist.version} could not be read ({reason}): whether "
                    "its build reads the installed torch was not checked"
                )
                continue
            if build.reason is not None:
                self.found_against_torch(
                    name, f"{sdist.filename}: {build.reason}", build.build_requires
                )
                self.again.append(f"{name}'s build reads the installed torch")
                changed = True
        return changed

    def _fit_pairings(self, versions: Mapping[str, str]) -> bool:
        """A package that declares no torch requirement but is built against one torch
        (torchao) is narrowed to the releases the matrix's pairings say accept the plan's
        torch: uv alone takes the newest (torchao 0.18.0, which needs torch >= 2.11)."""
        torch = self.plan.torch_pin.version
        changed = False
        for name, version in versions.items():
            if name in self.paired:
                continue
            fit = pairing_fit(self.matrix, name, version, torch)
            if fit is None:
                continue
            self.paired[name] = f"{name}{fit.specifier}"
            rejected = fit.rejected
            source = rejected.provenance.source[0]
            if fit.newest is not None:
                chosen = f"the newest recorded release that accepts torch {torch} is {fit.newest}"
            else:
                chosen = (
                    f"no recorded release accepts torch {torch}, so only releases older than "
                    "the records remain (their torch is not verified)"
                )
            self.notes.append(
                f"{name} declares no torch requirement, but {name} {version} works with "
                f"{rejected.torch_text} ({rejected.read_from}; source: {source}): asked for "
                f"as {self.paired[name]}; {chosen}"
            )
            self.again.append(f"{name} {version} is built against another torch")
            changed = True
        return changed

    def _route_locked_family_pins(self, uv_lock: _Answer, inp: LockInput) -> bool:
        """What the locked torch family pins exactly, routed like it (when its metadata could
        not be read before uv ran, or a family member joined the closure since)."""
        if self.variant is None:
            return False
        versions = uv_lock.versions
        unread = [
            name
            for name, pin in self.available.items()
            if name in versions
            and pin.index_url == self.plan.index_url
            and (name, versions[name]) not in self._pins_read
        ]
        if not unread:
            return False
        family = []
        for name in unread:
            self._pins_read.add((name, versions[name]))
            try:
                metadata = self.read_metadata(uv_lock, name, inp.indexes, quiet=True)
            except CudalockError as err:
                self.notes.append(
                    f"the metadata of {name} {versions[name]} could not be read ({err.message}); "
                    "what it pins exactly (triton) was not routed to its index"
                )
                continue
            if metadata is not None:
                family.append(metadata)
        with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            changed = self._route_family_pins(family, pool)
        if changed:
            self.again.append("the torch family pins packages its index serves")
        return changed

    def _fit_closure_extras(
        self, uv_lock: _Answer, inp: LockInput, pool: ThreadPoolExecutor
    ) -> bool:
        """Every package of the closure whose torch extra rejects the planned torch (a
        transformers whose 'torch' extra needs torch>=2.6 under torch 2.1.0) is asked for with
        that extra, so uv chooses a version that accepts the torch, or finds none."""
        versions = uv_lock.versions
        frameworks = {canonicalize_name(r.name) for _t, r in self.requirement_frameworks()}
        names = [n for n in versions if n not in TORCH_FAMILY and n not in frameworks]
        # The local cache holds most of them: read in this thread (a pool's hand-offs cost more
        # than a small file); only the rest is fetched, concurrently.
        missing = [n for n in names if not self._known_metadata(uv_lock, n)]
        fetched = dict(
            zip(
                missing,
                pool.map(lambda n: self._closure_metadata(uv_lock, n, inp), missing),
                strict=True,
            )
        )
        read = [
            fetched[n] if n in fetched else self._closure_metadata(uv_lock, n, inp) for n in names
        ]
        changed = False
        for name, metadata in zip(names, read, strict=True):
            if metadata is not None and self._fit_extra(name, versions[name], metadata):
                self.again.append(
                    f"{name}'s torch extra rejects torch {self.plan.torch_pin.version}"
                )
                changed = True
        return changed

    def _fit_extra(self, name: str, version: str, metadata: Metadata) -> bool:
        """Ask for ``name`` with its torch extras when they reject the plan's torch."""
        if name in {canonicalize_name(Requirement(t).name) for t in self.fitted}:
            return False
        extras = torch_extras(metadata, self.environment)
        if not extras:
            return False
        planned = {canonicalize_name(p.name): p.version for p in self.available.values()}
        rejecting = [
            found
            for found in family_requirements(metadata, self.environment, extras)
            if found.marker is not None
            and canonicalize_name(found.name) in planned
            and not found.specifier.contains(
                planned[canonicalize_name(found.name)], prereleases=True
            )
        ]
        if not rejecting:
            return False
        torch = self.plan.torch_pin.version
        asked = f"{name}[{','.join(extras)}]"
        self.fitted.append(asked)
        self.fitted_needs[asked] = ", ".join(describe(r) for r in rejecting)
        self.notes.append(
            f"{name} {version} is in the closure, and its "
            + ", ".join(describe(r) for r in rejecting)
            + f" rejects torch {torch}: asked for as {asked}, so uv chooses a version that "
            "accepts it"
        )
        return True

    def _closure_metadata(self, uv_lock: _Answer, name: str, inp: LockInput) -> Metadata | None:
        try:
            return self.read_metadata(uv_lock, name, inp.indexes, quiet=True)
        except CudalockError as err:
            self.notes.append(
                f"the metadata of {name} {uv_lock.version(name)} could not be read "
                f"({err.message}); its torch extra was not checked"
            )
            return None

    def _who_requires(self, uv_lock: _Answer, name: str, inp: LockInput) -> str:
        for text, requirement in self.requirement_frameworks():
            metadata = self.read_metadata(uv_lock, requirement.name, inp.indexes)
            if metadata is None:
                continue
            extras = (*requirement.extras, *self.extras.get(text, ()))
            for found in family_requirements(metadata, self.environment, extras):
                if canonicalize_name(found.name) == name:
                    return f"{requirement.name} requires {describe(found)}"
        return f"a package of the closure requires {name}"

    def fits(self, uv_lock: _Answer, inp: LockInput) -> tuple[FrameworkFit, ...]:
        result = []
        for framework in self.request.frameworks:
            text, requirement = framework.text, framework.requirement
            if requirement is None:
                result.append(FrameworkFit(given=text, requested=text))
                continue
            added = self.extras.get(text, ())
            requested = Requirement(text)
            requested.extras = {*requested.extras, *added}
            metadata = self.read_metadata(uv_lock, requirement.name, inp.indexes)
            torch: tuple[str, ...] = ()
            if metadata is not None:
                extras = (*requirement.extras, *added)
                torch = tuple(
                    describe(r) for r in family_requirements(metadata, self.environment, extras)
                )
            result.append(
                FrameworkFit(
                    given=text,
                    requested=str(requested),
                    name=requirement.name,
                    version=uv_lock.version(requirement.name),
                    extras_added=added,
                    torch_requirements=torch,
                )
            )
        return tuple(result)

    def explain(self, fits: Sequence[FrameworkFit]) -> list[str]:
        lines = []
        torch = self.plan.torch_pin.version
        for fit in fits:
            if fit.extras_added:
                extras = ", ".join(f"'{e}'" for e in fit.extras_added)
                needs = ", ".join(fit.torch_requirements) or "torch"
                lines.append(
                    f"{fit.name}: asked for as {fit.requested}, since its {extras} extra "
                    f"declares its torch requirement ({needs}); so uv chose a version that "
                    f"accepts torch {torch}: {fit.name} {fit.version}"
                )
        if self.additions:
            why = (
                f"{', '.join(self.built) or 'DeepSpeed'} built last, without build isolation, "
                "against the installed torch"
            )
            if DEEPSPEED_CUDA_REQUIREMENT in self.additions:
                why += (
                    f"; its setup.py adds {DEEPSPEED_CUDA_REQUIREMENT} to its requirements when "
                    "built against a CUDA torch"
                )
            lines.append(f"{', '.join(self.additions)} locked too: {why}")
        for name, why in self.against_torch.items():
            lines.append(
                f"{name} reads the installed torch when built ({why}): uv prepared its metadata "
                f"without build isolation beside torch {torch}, and it is built last against the "
                "installed torch (requirements.last.txt)"
            )
        return lines + self.notes + self.builds.notes


def resolve_closure(
    plan: Plan,
    request: Request,
    options: UvOptions,
    *,
    previous: str | None = None,
    echo: Echo | None = None,
    matrix: Matrix | None = None,
    only_binary: Sequence[str] = (),
    verify_hints: bool = True,
    on_routed: Callable[[RoutedWheels], None] | None = None,
) -> Closure:
    """Resolve the whole closure of ``plan`` and ``request`` with uv, fitted to the torch.

    ``verify_hints``: a refusal's next step is resolved (with this function) before it is
    named; off for that resolution itself.

    ``on_routed`` is told, once, before uv first runs, what the lock will take from the variant
    index in an exact version (:class:`RoutedWheels`), when it takes anything.

    ``matrix`` (default: the shipped one or ``CUDALOCK_MATRIX``) judges the CUDA its CUDA-built
    packages were built for against the targets' drivers.

    ``previous``: the pylock.toml already there, whose versions uv keeps where the new
    inputs still allow them (unless ``options.upgrade``). Raises :class:`Unsatisfiable`
    (exit 1) when no closure fits, naming the framework that needs another torch, and
    :class:`EnvironmentFailure` (exit 3) when uv or an index fails; :class:`NoWheelsForPython`
    (exit 1) when a package has no wheel for the plan's Python (``only_binary``: packages that
    must come as wheels), without looking further.
    """
    say = echo or (lambda _line: None)
    with tempfile.TemporaryDirectory(prefix="cudalock-lock-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o700)  # the input may hold a mirror URL with credentials
        uv = _Uv(options, work / "closure", say)
        (work / "closure").mkdir()
        if previous is not None and not options.upgrade:
            # uv reads an existing output file as preferences: locked versions are kept
            # where the new plan still allows them.
            (work / "closure" / LOCK_FILE).write_text(previous, encoding="utf-8")
        fitter = _Fitter(plan, request, options, uv, matrix or load_matrix())
        fitter.only_binary = tuple(only_binary)
        fitter.prepare(fitter.input())
        inp = fitter.input()
        routes = ", ".join(f"{', '.join(r.packages)} only from {redact(r.url)}" for r in inp.routes)
        say(
            f"cudalock: resolving the closure for Python {inp.python} on {inp.platform} "
            f"({inp.python_platform}) with uv {uv.version}: {routes or 'no routed packages'}; "
            f"everything else from {redact(inp.default_index)}"
        )
        wheels = fitter.routed_wheels(inp) if on_routed is not None else None
        if on_routed is not None and wheels is not None:
            on_routed(wheels)
        for _round in range(MAX_ROUNDS):
            inp = fitter.input()
            try:
                fitter.prepare_torch_builds(inp)
                text = uv.resolve(inp)
            except NoWheelsForPython:
                raise  # the Python's doing: no framework probe would say more
            except Unsatisfiable as err:
                found = fitter.torch_builds_behind(err.message, inp)
                if not found:
                    raise _diagnose(fitter, work, err, verify_hints=verify_hints) from None
                say(
                    f"cudalock: resolving again, since {', '.join(found)} read the installed "
                    "torch when built, and an isolated build saw none: prepared against torch "
                    f"{plan.torch_pin.version}, without build isolation"
                )
                continue
            except TorchBuildNeeded as err:
                fitter.found_against_torch(
                    err.package,
                    "uv's isolated build of it failed with No module named 'torch'",
                    fitter.sdist_build_requires(inp, err.package, err.version),
                )
                say(
                    f"cudalock: resolving again, since {err.package}'s build needs torch: its "
                    f"metadata is prepared against torch {plan.torch_pin.version}, without "
                    "build isolation"
                )
                continue
            answer = _Answer(read_toml_lock(text, source="uv's pylock.toml"))
            fitter.again.clear()
            if not fitter.review(answer, inp):
                break
            say(
                "cudalock: resolving again, since uv's answer shows what the first input "
                f"lacked ({'; '.join(fitter.again) or 'a change'}): with {_changes(fitter)}"
            )
        else:
            raise EnvironmentFailure(
                f"the closure did not settle after {MAX_ROUNDS} resolutions: " + _changes(fitter)
            )
        fits = fitter.fits(answer, inp)
        family = tuple(
            sorted(
                (pin for name, pin in fitter.available.items() if name in answer.versions),
                key=lambda p: (p.name != "torch", p.name),
            )
        )
        notes = fitter.explain(fits)
        flash_attn = answer.version("flash-attn")
        if flash_attn is not None:
            notes.append(
                flash_attn_note(
                    flash_attn, plan, offline=options.offline, timeout_s=options.timeout_s
                )
            )
        return Closure(
            input=inp,
            uv_data=answer.data,
            uv_version=uv.version,
            family=family,
            frameworks=fits,
            additions=tuple(fitter.additions),
            notes=tuple(notes),
            against_torch=tuple(fitter.against_torch),
        )


def _exact_pin(requirement: Requirement) -> str | None:
    """The version ``requirement`` pins (``triton==3.1.0``: "3.1.0"); None for a range."""
    specifiers = list(requirement.specifier)
    if (
        len(specifiers) == 1
        and specifiers[0].operator in ("==", "===")
        and "*" not in str(specifiers[0].version)
    ):
        return specifiers[0].version
    return None


def closure_verifier(
    options: UvOptions, matrix: Matrix | None = None
) -> Callable[[Plan, Request], str | None]:
    """A :data:`cudalock.lock.frameworks.FitVerifier`: the whole closure of a plan and request
    resolved as ``lock`` resolves it (uv, the CUDA-built checks, torch extras), nothing
    written; None when it resolves, else why not."""

    def verify(plan: Plan, request: Request) -> str | None:
        try:
            resolve_closure(plan, request, options, matrix=matrix)
        except Unsatisfiable as err:
            return err.message
        return None

    return verify


def _changes(fitter: _Fitter) -> str:
    parts = [pin.requirement for pin in fitter.family.values()]
    parts += [
        f"{Requirement(text).name}[{','.join(extras)}]" for text, extras in fitter.extras.items()
    ]
    parts += fitter.additions
    parts += fitter.fitted
    parts += fitter.paired.values()
    parts += fitter.builds.exclusions
    parts += [f"{name} from the variant index" for name in fitter.routed]
    return ", ".join(parts) or "nothing new"


# --------------------------------------------------------------------------------------------
# When nothing fits


def _recorded_fit_verifier(fitter: _Fitter) -> Callable[[str, str, str], str | None]:
    """Resolves ``--framework 'name==version' --torch torch`` (a next step read from
    cuda_builds.toml) as ``lock`` would: None when it resolves, else why not."""

    def verify(name: str, version: str, torch: str) -> str | None:
        request = with_framework(
            replace(fitter.request, torch=parse_torch_spec(f"=={torch}")),
            name,
            f"{name}=={version}",
        )
        try:
            plan = resolve(fitter.builds.matrix, fitter.plan.targets, request)
            resolve_closure(
                plan, request, fitter.options, matrix=fitter.builds.matrix, verify_hints=False
            )
        except CudalockError as err:
            return err.message
        return None

    return verify


def _diagnose(
    fitter: _Fitter, work: Path, original: Unsatisfiable, *, verify_hints: bool = True
) -> CudalockError:
    """The framework whose newest matching release needs another torch, by name; else uv's own
    explanation. Versions excluded for the CUDA they were built for come first: without them
    uv had a solution."""
    refusal = fitter.builds.refusal(_recorded_fit_verifier(fitter) if verify_hints else None)
    if refusal is not None:
        return Unsatisfiable(refusal[0], hint=refusal[1])
    paired = _pairing_refusal(fitter, original)
    if paired is not None:
        return paired
    problems: list[str] = []
    hints: list[str] = []
    for index, (text, requirement) in enumerate(fitter.requirement_frameworks()):
        try:
            found = _misfit(fitter, work / f"probe-{index}", text, requirement)
            if found is None and fitter.fitted:
                found = _misfit_through(fitter, work / f"through-{index}", text, requirement)
        except CudalockError as err:
            # The probe itself failed: uv's explanation stands, and says so.
            original.message += f" (naming the framework that needs another torch failed: {err})"
            continue
        if found is not None:
            problems.append(found[0])
            hints.append(found[1])
    if not problems:
        return original
    return Unsatisfiable("; ".join(problems), hint=sentence("; ".join(hints)))


def _pairing_refusal(fitter: _Fitter, original: Unsatisfiable) -> Unsatisfiable | None:
    """When a package narrowed to the releases its torch pairing accepts (torchao<0.13.0 for
    torch 2.7.1) is required above them by the closure (unsloth_zoo: torchao>=0.13.0): what
    requires it, what the releases it accepts are built against, and the torch, verified to
    run on the targets, that the oldest of them works with."""
    torch = fitter.plan.torch_pin.version
    for name, narrowed in fitter.paired.items():
        # uv: "unsloth-zoo==2026.10.9 depends on torchao>=0.13.0", or "all versions of
        # unsloth-zoo depend on torchao{<marker>}>=0.13.0".
        needed = re.search(
            rf"(\S+) depends? on {re.escape(name)}(?:\{{[^}}]*\}})?((?:[<>=!~]=?[^\s,]+,?)+)",
            original.message,
        )
        if needed is None:
            continue
        requirer, spec = needed[1], needed[2].rstrip(",")
        try:
            wanted = SpecifierSet(spec)
        except InvalidSpecifier:
            continue
        rows = sorted(fitter.matrix.pairings_of(name), key=lambda p: Version(p.version))
        accepted = [p for p in rows if wanted.contains(p.version, prereleases=True)]
        fitting = fitting_releases(fitter.matrix, name, torch)
        problem = (
            f"{requirer} requires {name}{spec}, and no such {name} release works with torch "
            f"{torch}: {name} declares no torch requirement, but is built against one torch "
            f"({', '.join(f'{p.version}: {p.torch_text}' for p in accepted) or 'none recorded'}"
            f"; source: {accepted[0].provenance.source[0] if accepted else 'none'}), so the "
            f"closure asked for {narrowed}"
            + (f" ({', '.join(fitting)} for torch {torch})" if fitting else "")
        )
        hints = []
        for pairing in accepted:
            plan = _plan_for_torch(fitter, pairing.torch[0])
            if plan is not None:
                hints.append(
                    f"give --torch '{pairing.torch[0]}' (torch {plan.torch_version}+{plan.variant} "
                    f"runs here, with {name} {pairing.version})"
                )
                break
        if not hints:
            hints.append(
                f"choose a target whose driver runs {accepted[0].torch_text} (for {name} "
                f"{accepted[0].version}), or a release of {requirer.split('==')[0]} that "
                f"accepts {name} {', '.join(fitting) or 'releases older than the records'}"
                if accepted
                else f"drop the package that requires {name}{spec}"
            )
        return Unsatisfiable(problem, hint=sentence(hints[0]))
    return None


def _plan_for_torch(fitter: _Fitter, spec: str) -> Plan | None:
    """The plan for the same targets and request with torch ``spec``; None when none runs."""
    request = replace(fitter.request, torch=parse_torch_spec(spec))
    try:
        return resolve(fitter.matrix, fitter.plan.targets, request)
    except Unsatisfiable:
        return None


def _misfit_through(
    fitter: _Fitter, where: Path, text: str, requirement: Requirement
) -> tuple[str, str] | None:
    """(problem, hint) when ``text`` fits the torch only through a package of its closure whose
    torch extra rejects it (trl 1.16.0 needs a transformers whose 'torch' extra needs torch
    2.6): the newest release of the framework that resolves with those extras, verified by
    uv, is the next step."""
    name = requirement.name
    torch = fitter.plan.torch_pin.version
    through = ", ".join(
        f"{asked} ({fitter.fitted_needs.get(asked, 'another torch')})" for asked in fitter.fitted
    )
    newest = _newest_fit(fitter, where, name, fitter.extras.get(text, ()))
    problem = (
        f"{text} does not fit torch {torch}: with it, uv needs {through}, and no release of "
        "those accepts that torch"
    )
    if newest is not None and not requirement.specifier.contains(newest, prereleases=True):
        problem += f"; the newest {name} that resolves with torch {torch} is {newest}"
        hint = f"give --framework '{name}=={newest}'"
    elif newest is None:
        problem += f"; no {name} release resolves with torch {torch}"
        hint = f"drop {name}"
    else:
        return None
    needs = [n for n in fitter.fitted_needs.values() if n.startswith("torch")]
    if needs:
        hint += (
            f", or a torch they accept: --torch '{needs[0].split(' ')[0].removeprefix('torch')}'"
        )
    return problem, hint


def _misfit(
    fitter: _Fitter, where: Path, text: str, requirement: Requirement
) -> tuple[str, str] | None:
    """(problem, hint) when ``text``'s newest matching release rejects the planned family."""
    plan = fitter.plan
    inp = fitter.input()
    probe = LockInput(
        requirements=(str(requirement),),
        routes=(),
        default_index=inp.default_index,
        python=inp.python,
        platform=inp.platform,
        python_platform=inp.python_platform,
    )
    lock = read_toml_lock(
        fitter.uv.resolve(probe, directory=where / "newest", no_deps=True, quiet=True),
        source="uv's pylock.toml",
    )
    answer = _Answer(lock)
    metadata = fitter.read_metadata(answer, requirement.name, inp.indexes)
    version = answer.version(requirement.name)
    if metadata is None or version is None:
        return None
    extras = (*requirement.extras, *torch_extras(metadata, fitter.environment))
    rejected = [
        (found, fitter.available[canonicalize_name(found.name)])
        for found in family_requirements(metadata, fitter.environment, extras)
        if canonicalize_name(found.name) in fitter.available
        and not found.specifier.contains(
            fitter.available[canonicalize_name(found.name)].version, prereleases=True
        )
    ]
    if not rejected:
        return None
    name = requirement.name
    torch = plan.torch_pin.version
    needs = ", ".join(
        describe(found) + ("" if pin.name == "torch" else f", the plan pairs {pin.requirement}")
        for found, pin in rejected
    )
    problem = f"{text} does not fit torch {torch}: {name} {version} requires {needs}"
    newest = _newest_fit(fitter, where / "fit", name, extras)
    if newest is not None:
        problem += f"; the newest {name} that accepts torch {torch} is {newest}"
        hint = f"give --framework '{name}=={newest}'"
    else:
        problem += f"; no {name} release accepts torch {torch}"
        hint = f"drop {name}"
    torch_spec = next((str(f.specifier) for f, pin in rejected if pin.name == "torch"), None)
    if torch_spec:
        hint += f", or a torch {name} {version} accepts: --torch '{torch_spec}'"
    return problem, hint


def _newest_fit(fitter: _Fitter, where: Path, name: str, extras: Sequence[str]) -> str | None:
    """The newest release of ``name`` (with ``extras``) that resolves with the planned torch."""
    asked = Requirement(name)
    asked.extras = set(extras)
    request = Request(
        torch=fitter.request.torch,
        python=fitter.request.python,
        with_packages=(),
        frameworks=(parse_framework(str(asked)),),
        pytorch_index=fitter.request.pytorch_index,
        pypi_index=fitter.request.pypi_index,
    )
    torch_only = [p for p in fitter.plan.packages if canonicalize_name(p.name) in TORCH_FAMILY]
    plan = _with_packages(fitter.plan, torch_only)
    inp = lock_input(
        plan,
        request,
        pypi_index=fitter.options.pypi_index,
        glibc=fitter.glibc,
        allow_insecure=fitter.options.allow_insecure,
        additions=tuple(fitter.fitted),
        variant_packages=tuple(fitter.routed),
    )
    try:
        text = fitter.uv.resolve(inp, directory=where, quiet=True)
    except Unsatisfiable:
        return None
    return _version(read_toml_lock(text, source="uv's pylock.toml"), name)


def _with_packages(plan: Plan, packages: Sequence[PackagePin]) -> Plan:
    return replace(plan, packages=tuple(packages))


__all__ = [
    "Closure",
    "FrameworkFit",
    "RoutedWheels",
    "UvOptions",
    "check_framework_paths",
    "closure_verifier",
    "resolve_closure",
]
