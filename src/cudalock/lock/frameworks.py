"""Frameworks take part in choosing torch: the releases of a framework and what each requires.

A framework that pins torch (vllm 0.6.6.post1: ``torch==2.5.1``; xformers; axolotl) decides
which torch the plan can have. :func:`fit_frameworks` reads, newest first, the releases of each
``--framework`` the request allows, and keeps the newest whose torch requirement leaves a torch
build that fits the target (the pure resolver says which); the request's torch is narrowed to
that requirement, so the plan is the newest torch build the target runs *and* the frameworks
accept. When no release fits, the error names what the asked release pins, why that torch
cannot run on this target, the newest release that does fit, and the driver the asked one needs.

Checks from elsewhere (the CUDA a wheel was built for) hook in as :data:`ReleaseCheck`: one that
rejects a release makes the search go on to the next older one.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from cudalock.errors import CudalockError, EnvironmentFailure, Unsatisfiable, sentence
from cudalock.lock.metadata import (
    Metadata,
    cached_wheel_metadata,
    describe,
    family_requirements,
    marker_environment,
    torch_extras,
)
from cudalock.lock.variant import Reader
from cudalock.matrix import Matrix
from cudalock.model import Plan, Rejection, Target
from cudalock.request import Framework, Request, parse_framework, parse_torch_spec
from cudalock.resolve import resolve
from cudalock.resolve.cudabuilt import from_label, from_matrix, mismatch

#: Framework releases whose metadata is read at once.
BATCH = 8

#: A further check of a framework release against a plan: the reason it cannot be used, or
#: None. (The CUDA its wheels were built for, say.)
ReleaseCheck = Callable[[str, str, Plan], str | None]
#: Resolves the whole closure of a plan and request with uv (``closure_verifier``): None when
#: it resolves, else why not; an index or uv that fails raises EnvironmentFailure.
FitVerifier = Callable[[Plan, Request], str | None]
#: Releases a refusal's next step tries with uv, newest first, before it says none resolved.
VERIFIED_TRIES = 3


def cuda_build_check(matrix: Matrix) -> ReleaseCheck:
    """A framework release built for a CUDA the plan's torch or driver cannot run (vllm
    0.10.1.1, a CUDA 12.8 build, beside torch 2.7.1+cu118) is passed over, from the matrix's
    sourced facts about PyPI's CUDA-built wheels (``cuda_builds.toml``) or the build's label;
    the closure's own check reads the locked wheels for the rest."""

    def check(name: str, version: str, plan: Plan) -> str | None:
        built = from_label(name, version) or from_matrix(matrix, name, version)
        if built is None:
            return None
        reason = mismatch(
            built,
            torch_version=plan.torch_pin.version,
            torch_cuda=plan.cuda,
            matrix=matrix,
            targets=plan.targets,
            compat=plan.compat,
        )
        return f"{reason} ({built.evidence})" if reason else None

    return check


@dataclass(frozen=True)
class Release:
    """One version of a project on an index, with the wheel whose metadata stands for it."""

    name: str
    version: Version
    wheel_url: str
    sha256: str | None
    has_core_metadata: bool
    requires_python: str | None


def _wheel_rank(filename: str) -> int:
    if filename.endswith("-none-any.whl"):
        return 0
    if "manylinux" in filename and "x86_64" in filename:
        return 1
    return 2


def project_releases(index: str, name: str, reader: Reader) -> list[Release]:
    """The releases of ``name`` on the simple index ``index`` that have a wheel, newest first
    (yanked ones left out)."""
    url = f"{index.rstrip('/')}/{canonicalize_name(name)}/"
    ctype, body = reader.page(url)
    if "json" not in ctype and not body.lstrip().startswith(b"{"):
        return []  # a PEP 503-only index: uv still resolves; no metadata is read ahead
    document = json.loads(body)
    best: dict[Version, tuple[int, Release]] = {}
    for entry in document.get("files", []):
        if not isinstance(entry, dict) or entry.get("yanked"):
            continue
        filename = str(entry.get("filename", ""))
        if not filename.endswith(".whl"):
            continue
        try:
            version = parse_wheel_filename(filename)[1]
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        hashes = entry.get("hashes") or {}
        release = Release(
            name=name,
            version=version,
            wheel_url=urllib.parse.urljoin(url, str(entry.get("url", ""))),
            sha256=str(hashes.get("sha256")) if hashes.get("sha256") else None,
            has_core_metadata=bool(entry.get("core-metadata") or entry.get("dist-info-metadata")),
            requires_python=entry.get("requires-python"),
        )
        rank = _wheel_rank(filename)
        if version not in best or rank < best[version][0]:
            best[version] = (rank, release)
    return [best[v][1] for v in sorted(best, reverse=True)]


@dataclass(frozen=True)
class Sdist:
    """A release published as an sdist only (axolotl): its metadata comes from a build."""

    name: str
    version: Version
    url: str
    filename: str


def newest_sdist_only(
    index: str, requirement: Requirement, reader: Reader, python: str | None
) -> Sdist | None:
    """The newest release ``requirement`` allows on ``index`` when it has no wheel at all."""
    url = f"{index.rstrip('/')}/{canonicalize_name(requirement.name)}/"
    ctype, body = reader.page(url)
    if "json" not in ctype and not body.lstrip().startswith(b"{"):
        return None
    wheels: set[Version] = set()
    sdists: dict[Version, tuple[str, str, str | None]] = {}
    for entry in json.loads(body).get("files", []):
        if not isinstance(entry, dict) or entry.get("yanked"):
            continue
        filename = str(entry.get("filename", ""))
        try:
            if filename.endswith(".whl"):
                wheels.add(parse_wheel_filename(filename)[1])
            elif filename.endswith((".tar.gz", ".zip")):
                version = parse_sdist_filename(filename)[1]
                link = urllib.parse.urljoin(url, str(entry.get("url", "")))
                sdists[version] = (filename, link, entry.get("requires-python"))
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
    allowed = sorted(
        (
            v
            for v, (_f, _u, needs) in sdists.items()
            if requirement.specifier.contains(v)
            and (python is None or _python_allows(needs, python))
        ),
        reverse=True,
    )
    newest_wheel = max((v for v in wheels if requirement.specifier.contains(v)), default=None)
    if not allowed or (newest_wheel is not None and newest_wheel >= allowed[0]):
        return None
    filename, link, _needs = sdists[allowed[0]]
    return Sdist(requirement.name, allowed[0], link, filename)


def _python_allows(requires_python: str | None, python: str) -> bool:
    if not requires_python:
        return True
    try:
        return SpecifierSet(requires_python).contains(python.rstrip("t") + ".0")
    except InvalidSpecifier:
        return True


def release_metadata(release: Release, reader: Reader) -> Metadata | None:
    return cached_wheel_metadata(
        release.wheel_url,
        release.sha256,
        indexes=reader.indexes,
        timeout_s=reader.timeout_s,
        retries=reader.retries,
    )


def _python_ok(release: Release, python: str) -> bool:
    return _python_allows(release.requires_python, python)


def matching(
    releases: Sequence[Release], requirement: Requirement, python: str | None
) -> list[Release]:
    """The releases ``requirement`` allows (prereleases only when it names one) on ``python``."""
    return [
        r
        for r in releases
        if requirement.specifier.contains(r.version) and (python is None or _python_ok(r, python))
    ]


def torch_requirements(metadata: Metadata, python: str, platform: str) -> list[Requirement]:
    """A release's requirements on torch, those of its torch extras included."""
    environment = marker_environment(python, platform)
    extras = torch_extras(metadata, environment)
    return [
        found
        for found in family_requirements(metadata, environment, extras)
        if canonicalize_name(found.name) == "torch"
    ]


def torch_specifier(metadata: Metadata, python: str, platform: str) -> SpecifierSet:
    """What a release requires of torch, its torch extras included (empty: anything)."""
    spec = SpecifierSet()
    for found in torch_requirements(metadata, python, platform):
        spec &= found.specifier
    return spec


@dataclass(frozen=True)
class FrameworkFit:
    """What :func:`fit_frameworks` found for one framework."""

    text: str
    name: str
    version: str | None
    torch: str
    notes: tuple[str, ...] = ()


@dataclass
class FrameworkChoice:
    """The request narrowed to what the frameworks accept, and the frameworks' releases."""

    request: Request
    fits: list[FrameworkFit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _plan_or_none(matrix: Matrix, targets: Sequence[Target], request: Request) -> Plan | None:
    try:
        return resolve(matrix, targets, request)
    except Unsatisfiable:
        return None


def _narrowed(request: Request, spec: SpecifierSet) -> Request:
    if not str(spec):
        return request
    given = request.torch.specifier
    return replace(
        request, torch=parse_torch_spec(str(given & spec if given is not None else spec))
    )


def fit_frameworks(
    matrix: Matrix,
    targets: Sequence[Target],
    request: Request,
    reader: Reader,
    *,
    default_index: str,
    checks: Sequence[ReleaseCheck] = (),
    verify: FitVerifier | None = None,
) -> FrameworkChoice:
    """``request`` with its torch narrowed so every requirement framework has a release that
    accepts it, newest releases first. :class:`Unsatisfiable` when a framework has none, naming
    the newest release that fits, resolved by ``verify`` (uv) before it is named."""
    choice = FrameworkChoice(request=request)
    for framework in request.frameworks:
        requirement = framework.requirement
        if requirement is None or requirement.url:
            continue
        text = framework.text
        releases = project_releases(default_index, requirement.name, reader)
        if not releases:
            continue
        current = choice.request
        fit = _first_fit(matrix, targets, current, reader, requirement, releases, checks)
        if fit is None and checks and not _names_one_release(requirement):
            # Every release the torch allows fails a check (the CUDA it was built for): the
            # closure's own check reads the locked wheels and refuses with their evidence.
            # One release asked for by its version (vllm==0.10.1.1) is refused here, with the
            # check's sourced facts and a next step uv has resolved.
            fit = _first_fit(matrix, targets, current, reader, requirement, releases, ())
        if fit is None:
            raise _no_release(
                matrix, targets, current, reader, requirement, releases, checks, verify
            )
        release, spec, plan, rejected = fit
        choice.request = _narrowed(current, spec)
        torch = f"{plan.torch_version}+{plan.variant}"
        choice.fits.append(
            FrameworkFit(text, requirement.name, str(release.version), torch, tuple(rejected))
        )
        if rejected:
            choice.notes.append(
                f"{requirement.name} {release.version} is the newest release {text!r} allows "
                f"that accepts a torch this target runs ({torch}); newer ones: "
                + "; ".join(rejected[:3])
                + (f"; and {len(rejected) - 3} more" if len(rejected) > 3 else "")
            )
    return choice


def _names_one_release(requirement: Requirement) -> bool:
    """``vllm==0.10.1.1``: one version, no range."""
    specifiers = list(requirement.specifier)
    return (
        len(specifiers) == 1
        and specifiers[0].operator in ("==", "===")
        and "*" not in specifiers[0].version
    )


def _first_fit(
    matrix: Matrix,
    targets: Sequence[Target],
    request: Request,
    reader: Reader,
    requirement: Requirement,
    releases: Sequence[Release],
    checks: Sequence[ReleaseCheck],
) -> tuple[Release, SpecifierSet, Plan, list[str]] | None:
    plans: dict[str, Plan | None] = {}
    candidates = matching(releases, requirement, request.python)
    rejected: list[str] = []
    with ThreadPoolExecutor(max_workers=BATCH) as pool:
        for start in range(0, len(candidates), BATCH):
            batch = candidates[start : start + BATCH]
            metadata = list(pool.map(lambda r: release_metadata(r, reader), batch))
            for release, meta in zip(batch, metadata, strict=True):
                if meta is None:
                    rejected.append(f"{release.version}: its metadata could not be read")
                    continue
                plain = plans.get("") if "" in plans else None
                if "" not in plans:
                    plain = plans[""] = _plan_or_none(matrix, targets, request)
                python = request.python or (plain.python if plain else "3.12")
                platform = plain.platform if plain else "linux-x86_64"
                spec = torch_specifier(meta, python, platform)
                key = str(spec)
                if key not in plans:
                    plans[key] = _plan_or_none(matrix, targets, _narrowed(request, spec))
                plan = plans[key]
                if plan is None:
                    rejected.append(
                        f"{release.version} requires torch{spec}, which has no build this "
                        "target runs"
                    )
                    continue
                reason = next(
                    (
                        why
                        for check in checks
                        if (why := check(requirement.name, str(release.version), plan))
                    ),
                    None,
                )
                if reason is not None:
                    rejected.append(f"{release.version}: {reason}")
                    continue
                return release, spec, plan, rejected
    return None


def _no_release(
    matrix: Matrix,
    targets: Sequence[Target],
    request: Request,
    reader: Reader,
    requirement: Requirement,
    releases: Sequence[Release],
    checks: Sequence[ReleaseCheck],
    verify: FitVerifier | None = None,
) -> CudalockError:
    """Why no release ``requirement`` allows fits: what the newest one requires of torch, why
    no such torch runs here (or conflicts with --torch), the newest release that does fit
    (resolved with uv by ``verify`` first: a next step that does not resolve is not named),
    and the torch or driver the asked one would need."""
    name = requirement.name
    asked = matching(releases, requirement, request.python)
    plain = _plan_or_none(matrix, targets, request)
    python = request.python or (plain.python if plain else "3.12")
    platform = plain.platform if plain else "linux-x86_64"
    parts: list[str] = []
    hints: list[str] = []
    subject = str(requirement)
    if plain is not None:
        subject += f" does not fit torch {plain.torch_version}+{plain.variant}"
    if not asked:
        parts.append(f"{subject}: no release of {name} matches it for Python {python}")
    else:
        newest = asked[0]
        meta = release_metadata(newest, reader)
        if meta is None:
            parts.append(f"{subject}: the metadata of {name} {newest.version} could not be read")
        else:
            spec = torch_specifier(meta, python, platform)
            needs = ", ".join(describe(r) for r in torch_requirements(meta, python, platform))
            parts.append(f"{subject}: {name} {newest.version} requires {needs or 'any torch'}")
            # Without the --torch given: does that torch run on this target at all?
            alone = replace(request, torch=parse_torch_spec(str(spec)))
            try:
                found = resolve(matrix, targets, alone)
            except Unsatisfiable as err:
                parts.append(f"no such torch runs here: {_why_no_torch(err)}")
                driver = _driver_needed(err)
                if driver:
                    hints.append(f"run {name} {newest.version} on a driver ≥ {driver}")
            else:
                version = str(newest.version)
                reason = next(
                    (why for check in checks if (why := check(name, version, found))), None
                )
                if reason is None:
                    hints.append(
                        f"a torch {name} {newest.version} accepts: --torch '{spec}' "
                        f"(torch {found.torch_version}+{found.variant})"
                    )
                else:
                    # The torch runs here, but not beside this release's build.
                    parts.append(
                        f"torch {found.torch_version}+{found.variant} runs here, but {reason}"
                    )
                    driver = _build_driver(matrix, name, version, found)
                    if driver:
                        hints.append(f"run {name} {newest.version} on a driver ≥ {driver}")
    verified = _verified_fit(matrix, targets, request, reader, name, releases, checks, verify)
    if verified.fit is not None:
        release, _spec, plan, _rejected = verified.fit
        torch = f"{plan.torch_version}+{plan.variant}"
        if plain is not None and (plain.torch_version, plain.variant) == (
            plan.torch_version,
            plan.variant,
        ):
            found_text = f"the newest {name} that accepts torch {torch} is {release.version}"
        else:
            found_text = (
                f"the newest {name} that fits this target is {release.version} (with torch {torch})"
            )
        parts.append(found_text + verified.confirmation)
        hints.insert(0, f"give --framework '{name}=={release.version}'")
    else:
        parts.append(f"no release of {name} fits this target and request")
        if not hints:
            hints.append(f"drop --framework {name}")
    parts += verified.passed_over
    return Unsatisfiable("; ".join(parts), hint=sentence(", or ".join(hints)))


@dataclass
class _Verified:
    """The next step a refusal names, and how uv took it."""

    fit: tuple[Release, SpecifierSet, Plan, list[str]] | None = None
    #: Said after the release: " (uv resolves its closure)", or why that was not known.
    confirmation: str = ""
    #: Newer releases that fit by their torch requirement but whose closure uv did not resolve.
    passed_over: list[str] = field(default_factory=list)


def _verified_fit(
    matrix: Matrix,
    targets: Sequence[Target],
    request: Request,
    reader: Reader,
    name: str,
    releases: Sequence[Release],
    checks: Sequence[ReleaseCheck],
    verify: FitVerifier | None,
) -> _Verified:
    """The newest release of ``name`` that fits, its closure resolved with uv by ``verify``:
    one that does not resolve is passed over for the next older (up to
    :data:`VERIFIED_TRIES`), and said."""
    remaining = list(releases)
    verified = _Verified()
    for _attempt in range(VERIFIED_TRIES if verify is not None else 1):
        fit = _first_fit(matrix, targets, request, reader, Requirement(name), remaining, checks)
        if fit is None or verify is None:
            verified.fit = fit
            return verified
        release, spec, plan, _rejected = fit
        hinted = with_framework(_narrowed(request, spec), name, f"{name}=={release.version}")
        try:
            why = verify(plan, hinted)
        except EnvironmentFailure as err:
            verified.fit = fit
            verified.confirmation = f" (not confirmed with uv: {err.message})"
            return verified
        if why is None:
            verified.fit = fit
            verified.confirmation = " (uv resolves its closure)"
            return verified
        verified.passed_over.append(
            f"{name} {release.version} fits by its torch requirement, but its closure does "
            f"not resolve: {why}"
        )
        remaining = [r for r in remaining if r.version < release.version]
    return verified


def with_framework(request: Request, name: str, text: str) -> Request:
    """``request`` with its framework ``name`` asked for as ``text`` instead (added when it
    is not one of its frameworks: a package of the closure named as the next step)."""
    wanted = canonicalize_name(name)

    def named(f: Framework) -> bool:
        return f.requirement is not None and canonicalize_name(f.requirement.name) == wanted

    frameworks = tuple(parse_framework(text) if named(f) else f for f in request.frameworks)
    if not any(named(f) for f in request.frameworks):
        frameworks += (parse_framework(text),)
    return replace(request, frameworks=frameworks)


def _build_driver(matrix: Matrix, name: str, version: str, plan: Plan) -> str | None:
    """The lowest driver that runs the CUDA release ``version`` of ``name`` was built for
    (the matrix's sourced facts): its CUDA's own minimum, or, where only the major is known,
    that of the oldest build of the plan's torch for that major the target was refused."""
    built = from_label(name, version) or from_matrix(matrix, name, version)
    if built is None:
        return None
    cuda = built.cuda_version
    if cuda is not None:
        driver = matrix.min_driver_for_cuda(cuda, plan.platform)
        return str(driver) if driver is not None else None
    drivers = [
        str(change.value)
        for rejection in plan.rejected
        if rejection.variant.startswith(f"cu{built.cuda_major}")
        for fix in rejection.fixes
        for change in fix.changes
        if change.kind == "driver"
    ]
    return min(drivers, key=_driver_key, default=None)


def _why_no_torch(err: Unsatisfiable) -> str:
    """Why the newest build of the torch asked for cannot run here, in the resolver's words
    (driver, GPU architecture, Python), with how many builds were rejected."""
    rejections = [r for r in err.rejected if isinstance(r, Rejection)]
    if not rejections:
        return err.message
    text = rejections[0].reason  # the newest build's: "torch 2.14.0+cu132: CUDA 13.2 needs …"
    if len(rejections) > 1:
        text += f" ({len(rejections) - 1} other builds rejected too)"
    return text


def _driver_needed(err: Unsatisfiable) -> str | None:
    """The lowest driver any rejected build would run with (the oldest CUDA's minimum)."""
    drivers = [
        str(change.value)
        for rejection in err.rejected
        if isinstance(rejection, Rejection)
        for fix in rejection.fixes
        for change in fix.changes
        if change.kind == "driver"
    ]
    return min(drivers, key=_driver_key, default=None)


def _driver_key(driver: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in driver.split("."))


__all__ = [
    "FitVerifier",
    "FrameworkChoice",
    "FrameworkFit",
    "Release",
    "ReleaseCheck",
    "Sdist",
    "cuda_build_check",
    "fit_frameworks",
    "matching",
    "newest_sdist_only",
    "plan_with_frameworks",
    "project_releases",
    "release_metadata",
    "torch_specifier",
    "with_framework",
]


def plan_with_frameworks(
    matrix: Matrix,
    targets: Sequence[Target],
    request: Request,
    *,
    default_index: str,
    timeout_s: float = 60,
    retries: int = 3,
    offline: bool = False,
    use_cache: bool = True,
    checks: Sequence[ReleaseCheck] | None = None,
    verify: FitVerifier | None = None,
) -> tuple[Plan, FrameworkChoice]:
    """The plan for ``request`` with torch chosen together with its frameworks
    (:func:`fit_frameworks`), the frameworks' releases said in its explanation. ``checks``
    (default: :func:`cuda_build_check`) pass over releases that cannot run beside a plan;
    ``verify`` resolves the next step a refusal names before it is named."""
    if checks is None:
        checks = (cuda_build_check(matrix),)
    if not any(f.requirement is not None for f in request.frameworks):
        return resolve(matrix, targets, request), FrameworkChoice(request=request)
    reader = Reader(
        indexes=(default_index, request.pytorch_index),
        timeout_s=timeout_s,
        retries=retries,
        offline=offline,
        use_cache=use_cache,
    )
    try:
        choice = fit_frameworks(
            matrix,
            targets,
            request,
            reader,
            default_index=default_index,
            checks=checks,
            verify=verify,
        )
    except (EnvironmentFailure, FileNotFoundError, ValueError) as err:
        reason = err.message if isinstance(err, CudalockError) else type(err).__name__
        plan = resolve(matrix, targets, request)
        note = (
            f"The frameworks' releases could not be read ({reason}): torch was chosen without "
            "them, and the closure is fitted to it."
        )
        return replace(plan, explanation=(*plan.explanation, note)), FrameworkChoice(request)
    plan = resolve(matrix, targets, choice.request)
    lines = [
        f"Frameworks: {fit.name} {fit.version} goes with torch {fit.torch} (the newest release "
        f"{fit.text!r} allows whose torch requirement a build for this target meets)."
        for fit in choice.fits
    ]
    lines += [f"{note}." for note in choice.notes]
    lines += [
        f"{fit.name} {fit.version} is built against torch, but the matrix does not record the "
        f"CUDA it was built for (cuda_builds.toml): unverified until `cudalock lock` reads it "
        "from the wheel and passes the release over if it cannot run here."
        for fit in choice.fits
        if fit.version is not None and _unrecorded_cuda_build(matrix, fit.name, fit.version)
    ]
    return replace(plan, explanation=(*plan.explanation, *lines)), choice


def _unrecorded_cuda_build(matrix: Matrix, name: str, version: str) -> bool:
    """A release of a package cuda_builds.toml lists (one PyPI serves CUDA-built) whose build
    neither its label nor the table says: the plan judged it without knowing its CUDA."""
    listed = any(entry.package == canonicalize_name(name) for entry in matrix.package_builds)
    return (
        listed and from_label(name, version) is None and from_matrix(matrix, name, version) is None
    )
