"""The lock's files, written and checked: ``pylock.toml``, ``requirements.lock.txt``,
``requirements.last.txt`` and ``uv-install.toml``.

``cudalock lock`` writes them alone (:func:`make_lock`); ``cudalock bootstrap`` writes the same
texts (:func:`lock_texts`) in one group with the environment files. Everything is rendered from
one resolved :class:`~cudalock.lock.closure.Closure`, so every install path installs the same
closure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudalock import __version__
from cudalock.errors import CudalockError, EnvironmentFailure, InputError
from cudalock.fsutil import credentials_note, refuse_existing, write_outputs
from cudalock.lock.check import LockState, compare, pins_missing_from_lock
from cudalock.lock.closure import Closure, Echo, UvOptions
from cudalock.lock.installfiles import requirements_files, uv_first_lock, uv_settings
from cudalock.lock.names import (
    LAST_FILE,
    LOCK_FILE,
    LOCK_FILES,
    REQUIREMENTS_FILE,
    UV_FIRST_FILE,
    UV_SETTINGS_FILE,
)
from cudalock.lock.pixi import PIXI_FILE, expected_pins, pixi_changes
from cudalock.lock.pylock import (
    check_routes,
    finalize_lock,
    is_ours,
    lock_record,
    locked_versions,
    parse_lock,
    read_lock_text,
    state_of,
    validate_lock,
)
from cudalock.lock.python import (
    RecordedPython,
    Replan,
    closure_with_default_python,
    recorded_python,
)
from cudalock.matrix import Matrix
from cudalock.model import Plan
from cudalock.request import Request


@dataclass(frozen=True)
class LockResult:
    lock_path: Path
    requirements_path: Path
    packages: dict[str, str]
    closure: Closure
    #: The plan the closure was resolved for (its Python the one the closure installs on).
    plan: Plan


def lock_texts(closure: Closure, plan: Plan, request: Request) -> dict[str, str]:
    """File name → text of every lock file, validated (a lock uv could have mixed indexes in,
    or one packaging cannot read, is refused: exit 3)."""
    inp = closure.input
    record = lock_record(
        plan,
        request,
        inp,
        cudalock_version=__version__,
        uv_version=closure.uv_version,
        closure=closure.to_json(),
    )
    text, data = finalize_lock(closure.uv_data, record, inp, cudalock_version=__version__)
    try:
        lock = validate_lock(data, source=f"the new {LOCK_FILE}")
    except InputError as err:
        raise EnvironmentFailure(f"{err.message}; nothing was written") from None
    check_routes(lock, inp)
    texts = {LOCK_FILE: text}
    texts.update(
        requirements_files(
            lock,
            default_index=inp.default_index,
            python=inp.python,
            platform=inp.platform,
            cudalock_version=__version__,
            built_last=closure.built_last,
        )
    )
    texts[UV_SETTINGS_FILE] = uv_settings(
        lock,
        default_index=inp.default_index,
        cudalock_version=__version__,
        built_last=closure.built_last,
    )
    texts[UV_FIRST_FILE] = uv_first_lock(
        data, cudalock_version=__version__, built_last=closure.built_last
    )
    return texts


def _untouched(err: CudalockError) -> CudalockError:
    """The same error, saying that the previous lock was left as it was."""
    if isinstance(err, EnvironmentFailure) and "untouched" not in err.message:
        changed = type(err)(
            f"{err.message}; nothing was written, the previous lock is untouched", hint=err.hint
        )
        return changed
    return err


def make_lock(
    plan: Plan,
    request: Request,
    *,
    output_dir: Path,
    options: UvOptions | None = None,
    force: bool = False,
    echo: Echo | None = None,
    matrix: Matrix | None = None,
    also: Mapping[Path, str] | None = None,
    replan: Replan | None = None,
) -> LockResult:
    """Resolve the closure of ``plan`` with uv and write the lock files into ``output_dir``,
    with the files ``also`` holds (the spec that records the inputs) in the same write.

    When the request names no Python, ``replan`` makes the plan for an older one, and the
    Python is the newest the whole closure installs on (:mod:`cudalock.lock.python`); the
    previous lock's choice is kept while it still installs, unless ``options.upgrade``.

    On any failure nothing is written and the previous files stay as they were.
    """
    options = options or UvOptions()
    say = echo or (lambda _line: None)
    paths = {name: output_dir / name for name in LOCK_FILES}
    ours = {path: is_ours(path) for path in paths.values() if path.exists()}
    refuse_existing([path for path, own in ours.items() if not own], force=force)
    lock_path = paths[LOCK_FILE]
    previous = None
    if ours.get(lock_path):
        try:
            previous = read_lock_text(lock_path)
        except InputError:
            previous = None
    try:
        plan, closure = closure_with_default_python(
            plan,
            request,
            options,
            replan=replan,
            previous=previous,
            echo=say,
            matrix=matrix,
            recorded=None if options.upgrade else recorded_python(previous),
        )
        texts = lock_texts(closure, plan, request)
    except CudalockError as err:
        raise _untouched(err) from None
    for line in closure.notes:
        say(f"cudalock: {line}")
    files = {paths[name]: text for name, text in texts.items()}
    files.update(also or {})
    secret = write_outputs(files)
    if secret:
        say(f"cudalock: {credentials_note(secret)}")
    versions = closure.versions
    say(f"cudalock: wrote {', '.join(str(path) for path in files)} ({len(versions)} packages)")
    return LockResult(
        lock_path=lock_path,
        requirements_path=paths[REQUIREMENTS_FILE],
        packages=versions,
        closure=closure,
        plan=plan,
    )


def recorded_python_in(output_dir: Path) -> RecordedPython | None:
    """The Python the lock in ``output_dir`` chose by default (None: no such lock of ours, or
    its Python was asked for)."""
    path = output_dir / LOCK_FILE
    if not path.exists() or not is_ours(path):
        return None
    try:
        return recorded_python(read_lock_text(path))
    except InputError:
        return None


def read_lock_file(path: Path) -> tuple[Any, dict[str, Any]]:
    return parse_lock(read_lock_text(path), source=str(path))


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
    del pypi_index, allow_insecure  # the files are checked against the lock's own record
    lock_path = output_dir / LOCK_FILE
    if not lock_path.exists():
        return [f"there is no lock at {lock_path}; run cudalock lock"]
    lock, data = read_lock_file(lock_path)
    record = data.get("tool", {}).get("cudalock")
    recorded = LockState.from_record(record, source=str(lock_path))
    changes = compare(recorded, state_of(plan, request))
    changes += pins_missing_from_lock(recorded.pins, locked_versions(lock))
    if changes:
        return changes
    default_index = str(record.get("default-index", ""))
    closure = record.get("closure")
    listed = closure.get("built-last") if isinstance(closure, dict) else None
    built_last = [str(n) for n in listed] if isinstance(listed, list) else []
    expected = requirements_files(
        lock,
        default_index=default_index,
        python=recorded.python,
        platform=recorded.platform,
        cudalock_version=__version__,
        built_last=built_last,
    )
    expected[UV_SETTINGS_FILE] = uv_settings(
        lock, default_index=default_index, cudalock_version=__version__, built_last=built_last
    )
    expected[UV_FIRST_FILE] = uv_first_lock(
        data, cudalock_version=__version__, built_last=built_last
    )
    for name, text in expected.items():
        path = output_dir / name
        if not path.exists():
            return [f"{path} is missing; run cudalock lock"]
        actual = read_lock_text(path)
        if _significant(actual) != _significant(text):
            return [f"{path} does not match {lock_path}; run cudalock lock"]
    expected_pixi = expected_pins(lock, recorded.python, recorded.platform)
    return pixi_changes(output_dir / PIXI_FILE, expected_pixi)


__all__ = [
    "LAST_FILE",
    "LOCK_FILE",
    "LOCK_FILES",
    "REQUIREMENTS_FILE",
    "UV_FIRST_FILE",
    "UV_SETTINGS_FILE",
    "LockResult",
    "check_lock",
    "lock_texts",
    "make_lock",
    "read_lock_file",
    "recorded_python_in",
]
