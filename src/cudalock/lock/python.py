"""The default Python: the newest one the whole closure installs on, as uv's answer proves.

Without ``--python`` the resolver plans for the newest CPython the chosen torch release ships
wheels for. ``bootstrap`` and ``lock`` then resolve the closure for it, and keep it when the
closure installs there: uv found a wheel, for this Python and platform, of every binary package
(one that publishes wheels for this platform), and took no such package as its sdist. A binary
package that falls back to its sdist (sentencepiece 0.2.0 without a cp314 wheel), or a package
uv finds no wheel of at all for this Python (a torch-family build), rejects the Python: the next
older Python the torch release ships is tried, with those packages asked for as wheels only
(``--only-binary``), so uv's next answer proves they install there. A package with no wheel
for this platform at any Python (DeepSpeed, an sdist) is built on any Python and rejects none.
When uv finds no solution at all for a Python (a requirement that only applies from 3.13 on),
the next older one is tried once: failing there too, the conflict is not the Python's, and the
newest Python's error stands.

The common case costs one resolution: the newest Python usually works. The choice is said in
the plan ("Python 3.13: the newest for which the whole stack installs; 3.14 has no wheel of
sentencepiece 0.2.0") and recorded in the lock, so ``lock --check`` plans for the same Python
and a plain ``lock`` keeps it while it still installs (``--upgrade`` chooses again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)

from cudalock.errors import CudalockError, EnvironmentFailure, Unsatisfiable
from cudalock.lock.closure import (
    CONCURRENCY,
    Closure,
    Echo,
    RoutedWheels,
    UvOptions,
    closure_verifier,
    resolve_closure,
)
from cudalock.lock.frameworks import plan_with_frameworks
from cudalock.lock.http import cache_disabled
from cudalock.lock.pylock import read_toml_lock
from cudalock.lock.uvfailures import NO_SOLUTION, NoWheelsForPython
from cudalock.lock.uvinput import default_index_of
from cudalock.lock.variant import Reader, page_files
from cudalock.matrix import Matrix, load_matrix
from cudalock.model import Plan, Target
from cudalock.platforms import platform_of_wheel_tag
from cudalock.request import Request
from cudalock.versions import python_key

__all__ = [
    "RecordedPython",
    "Replan",
    "WheelGap",
    "closure_with_default_python",
    "default_pythons",
    "plan_for_recorded_python",
    "planner",
    "recorded_python",
    "wheel_gaps",
]

#: The plan for a Python the request did not name (the closure's Python steps down).
Replan = Callable[[str], Plan]


def planner(
    matrix: Matrix, targets: Sequence[Target], request: Request, uv: UvOptions
) -> Callable[[str | None], Plan]:
    """How the plan for ``request`` is made (:func:`~cudalock.lock.frameworks.
    plan_with_frameworks`): at the request's own Python (None), or at another one. The
    frameworks' releases are read from the index and with the network limits ``uv`` gives; a
    refusal's next step is resolved with uv (:func:`closure_verifier`) before it is named."""
    default_index = default_index_of(request, allow_insecure=uv.allow_insecure)
    verify = closure_verifier(uv, matrix)

    def plan_at(python: str | None) -> Plan:
        at = request if python is None else dataclasses.replace(request, python=python)
        return plan_with_frameworks(
            matrix,
            targets,
            at,
            default_index=default_index,
            timeout_s=uv.timeout_s,
            retries=uv.retries,
            offline=uv.offline,
            use_cache=not cache_disabled(uv.environ),
            verify=verify,
        )[0]

    return plan_at


# --------------------------------------------------------------------------------------------
# The pure parts


def default_pythons(matrix: Matrix, plan: Plan) -> list[str]:
    """The CPython versions (not free-threaded) the plan's torch release ships wheels for on
    its platform, newest first, none newer than the plan's."""
    release = next((r for r in matrix.torch_releases if r.version == plan.torch_version), None)
    offered = release.python.get(plan.platform, ()) if release is not None else ()
    gil = {p for p in offered if not p.endswith("t")} | {plan.python}
    ceiling = python_key(plan.python)
    return sorted((p for p in gil if python_key(p) <= ceiling), key=python_key, reverse=True)


@dataclass(frozen=True)
class WheelGap:
    """A binary package uv took as its sdist for the Python it resolved for."""

    name: str
    version: str
    #: The version has wheels for this platform, for other Pythons: the Python's doing. False:
    #: other versions have wheels, this one none (another version may have one for it).
    for_other_pythons: bool


def taken_as_sdist(uv_data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, version) of every package of uv's lock that it locked as an sdist, no wheel."""
    found = []
    for entry in uv_data.get("packages", []):
        if isinstance(entry, Mapping) and "sdist" in entry and not entry.get("wheels"):
            found.append((str(canonicalize_name(str(entry["name"]))), str(entry["version"])))
    return found


def wheel_gap(name: str, version: str, files: Sequence[str], platform: str) -> WheelGap | None:
    """Whether ``name`` ``version``, locked as an sdist, is a binary package on ``platform``
    (its index lists wheels for the platform): the gap, or None for a package that publishes
    none for it (pure, or built on every Python)."""
    versions_with_wheels = set()
    for filename in files:
        if not filename.endswith(".whl"):
            continue
        try:
            _name, wheel_version, _build, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if any(platform_of_wheel_tag(tag.platform) == platform for tag in tags):
            versions_with_wheels.add(str(wheel_version))
    if not versions_with_wheels:
        return None
    return WheelGap(name, version, for_other_pythons=version in versions_with_wheels)


def wheel_gaps(
    uv_data: Mapping[str, Any], platform: str, files_of: Callable[[str], Sequence[str] | None]
) -> list[WheelGap]:
    """The binary packages uv's lock takes as sdists; ``files_of(name)`` lists the files the
    package's index has (None: unknown, so not counted)."""
    gaps = []
    for name, version in taken_as_sdist(uv_data):
        files = files_of(name)
        gap = wheel_gap(name, version, files, platform) if files is not None else None
        if gap is not None:
            gaps.append(gap)
    return gaps


@dataclass(frozen=True)
class _PassedOver:
    python: str
    why: str  # "no wheel of sentencepiece 0.2.0"


def _reason(
    python: str, plan: Plan, passed: Sequence[_PassedOver], held_back: Sequence[WheelGap]
) -> str:
    if passed:
        why = "; ".join(f"{p.python} has {p.why}" for p in passed)
        text = f"Python {python}: the newest for which the whole stack installs; {why}"
    else:
        text = (
            f"Python {python}: the newest CPython torch {plan.torch_version} ships wheels for "
            f"on {plan.platform}, and the whole stack installs on it (uv found a wheel of every "
            "binary package for it)"
        )
    if held_back:
        names = ", ".join(f"{g.name} (not {g.version})" for g in held_back)
        text += f"; {names} taken at a version with a wheel for it"
    return text + " (--python chooses another)."


def _with_reason(plan: Plan, reason: str) -> Plan:
    """``plan`` saying ``reason`` for its Python, in place of what the resolver said."""
    lines = [line for line in plan.explanation if line != plan.python_reason]
    lines.insert(min(1, len(lines)), reason)
    return dataclasses.replace(plan, python_reason=reason, explanation=tuple(lines))


# --------------------------------------------------------------------------------------------
# The recorded choice


@dataclass(frozen=True)
class RecordedPython:
    """The Python a lock chose by default, and why (from its ``[tool.cudalock]`` record)."""

    python: str
    reason: str


def recorded_python(lock_text: str | None) -> RecordedPython | None:
    """The default Python the lock ``lock_text`` recorded; None when it has none, or when its
    Python was asked for (that request is read again from the spec and the flags)."""
    if lock_text is None:
        return None
    try:
        record = read_toml_lock(lock_text, source="the previous lock").get("tool", {})
    except CudalockError:
        return None
    record = record.get("cudalock", {}) if isinstance(record, Mapping) else {}
    if not isinstance(record, Mapping):
        return None
    request, plan = record.get("request", {}), record.get("plan", {})
    python = record.get("python")
    if not isinstance(request, Mapping) or request.get("python") or not isinstance(python, str):
        return None
    reason = plan.get("python_reason") if isinstance(plan, Mapping) else None
    return RecordedPython(python, reason if isinstance(reason, str) else "")


def plan_for_recorded_python(
    plan: Plan, request: Request, replan: Replan, matrix: Matrix, recorded: RecordedPython | None
) -> Plan:
    """The plan for the Python a lock chose by default, when the request names none and the
    planned torch still ships it: what ``lock --check`` compares, and a plain ``lock`` keeps."""
    if request.python is not None or recorded is None:
        return plan
    if recorded.python not in default_pythons(matrix, plan):
        return plan
    kept = plan if recorded.python == plan.python else replan(recorded.python)
    return _with_reason(kept, recorded.reason) if recorded.reason else kept


# --------------------------------------------------------------------------------------------
# Choosing with uv


def closure_with_default_python(
    plan: Plan,
    request: Request,
    options: UvOptions,
    *,
    replan: Replan | None = None,
    previous: str | None = None,
    echo: Echo | None = None,
    matrix: Matrix | None = None,
    recorded: RecordedPython | None = None,
    on_routed: Callable[[RoutedWheels], None] | None = None,
) -> tuple[Plan, Closure]:
    """The closure of ``plan`` (:func:`resolve_closure`) and the plan it was resolved for.

    When the request names no Python, the Python is the newest the whole closure installs
    on (module docstring): ``plan``'s first, then each older one torch ships (``replan`` makes
    its plan), ``recorded`` (a previous lock's choice) first when torch still ships it. No
    Python installs everything from wheels: the newest, saying what it builds from source.

    ``on_routed`` (:func:`resolve_closure`) is told before each resolution, so when the
    Python is still to be chosen, once for each Python tried: each call replaces the wheels of
    the one before (and the Python chosen may be an earlier one: the closure says which).
    """
    if request.python is not None or replan is None:
        closure = resolve_closure(
            plan,
            request,
            options,
            previous=previous,
            echo=echo,
            matrix=matrix,
            on_routed=on_routed,
        )
        return plan, closure
    say = echo or (lambda _line: None)
    matrix = matrix or load_matrix()
    order = default_pythons(matrix, plan)
    if recorded is not None and recorded.python in order:
        order = [recorded.python, *(p for p in order if p != recorded.python)]
    passed: list[_PassedOver] = []
    only_binary: list[str] = []
    fallback: tuple[Plan, Closure, list[WheelGap]] | None = None
    first_error: NoWheelsForPython | None = None
    #: uv found no solution at all for a Python (gradio needs audioop-lts from 3.13 on):
    #: the next older one is tried once; failing too, the conflict is not the Python's.
    no_solution: Unsatisfiable | None = None
    for python in order:
        current = plan if python == plan.python else replan(python)
        held_back: list[WheelGap] = []
        while True:
            try:
                closure = resolve_closure(
                    current,
                    request,
                    options,
                    previous=previous,
                    echo=say,
                    matrix=matrix,
                    only_binary=only_binary,
                    on_routed=on_routed,
                )
            except NoWheelsForPython as err:
                first_error = first_error or err
                passed.append(_PassedOver(python, f"no wheel of {err.package}"))
                break
            except Unsatisfiable as err:
                if no_solution is not None or python == order[-1]:
                    raise no_solution or err from None
                no_solution = err
                cause = err.message.removeprefix(NO_SOLUTION).rstrip(".")
                passed.append(_PassedOver(python, f"no solution for the closure (uv: {cause})"))
                break
            gaps = [g for g in _gaps(closure, options) if g.name not in only_binary]
            if not gaps:
                if recorded is not None and python == recorded.python and recorded.reason:
                    reason = recorded.reason  # the same choice, said as it was
                else:
                    reason = _reason(python, plan, passed, held_back)
                return _with_reason(current, reason), closure
            if fallback is None:
                fallback = (current, closure, gaps)
            only_binary += [g.name for g in gaps]
            lacking = [g for g in gaps if g.for_other_pythons]
            if lacking:
                what = ", ".join(f"{g.name} {g.version}" for g in lacking)
                passed.append(_PassedOver(python, f"no wheel of {what}"))
                break
            # Only versions without any wheel: uv may find versions of them with one for it.
            held_back += gaps
        nxt = order[order.index(python) + 1] if python != order[-1] else None
        if nxt is not None:
            say(
                f"cudalock: Python {python} does not install the whole stack "
                f"({passed[-1].why}); resolving for Python {nxt}"
            )
    if fallback is not None:
        chosen, closure, gaps = fallback
        built = ", ".join(f"{g.name} {g.version}" for g in gaps)
        why = "; ".join(f"{p.python} has {p.why}" for p in passed)
        reason = (
            f"Python {chosen.python}: no Python torch {plan.torch_version} ships installs the "
            f"whole stack from wheels ({why}); on the newest, {built} is built from its sdist "
            "(--python chooses another)."
        )
        return _with_reason(chosen, reason), closure
    if no_solution is not None:
        raise no_solution
    assert first_error is not None  # every Python was tried, and none resolved
    why = "; ".join(f"Python {p.python}: {p.why}" for p in passed)
    raise NoWheelsForPython(
        order[0],
        first_error.package,
        hint=f"No Python torch {plan.torch_version} ships has wheels of the whole stack ({why}): "
        "choose another torch (--torch) or drop the package.",
    )


def _gaps(closure: Closure, options: UvOptions) -> list[WheelGap]:
    """The binary packages of ``closure`` locked as sdists, from their index pages."""
    inp = closure.input
    if not taken_as_sdist(closure.uv_data):
        return []  # the common case: no page is read
    reader = Reader(
        indexes=inp.indexes,
        timeout_s=options.timeout_s,
        retries=options.retries,
        offline=options.offline,
        use_cache=not cache_disabled(options.environ),
    )

    def files_of(name: str) -> Sequence[str] | None:
        url = f"{inp.index_for(name).rstrip('/')}/{name}/"
        try:
            return page_files(*reader.page(url))
        except (EnvironmentFailure, FileNotFoundError, ValueError):
            return None  # unknown: the package is not counted against the Python

    names = [name for name, _version in taken_as_sdist(closure.uv_data)]
    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        pages = dict(zip(names, pool.map(files_of, names), strict=True))
    return wheel_gaps(closure.uv_data, inp.platform, pages.get)
