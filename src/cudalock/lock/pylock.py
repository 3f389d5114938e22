"""``pylock.toml`` (PEP 751) for a Plan: the record cudalock keeps under ``[tool.cudalock]``,
uv's lock shaped into the written one and validated with ``packaging.pylock``, reading a lock
back, and the state ``--check`` compares.

uv's input is :mod:`cudalock.lock.uvinput`; the files installers read beside the lock are
:mod:`cudalock.lock.installfiles`; the whole closure is resolved once by
:mod:`cudalock.lock.closure` and written by :mod:`cudalock.lock.files`.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.pylock import Package, Pylock, PylockValidationError
from packaging.utils import canonicalize_name

from cudalock.errors import EnvironmentFailure, InputError
from cudalock.fsutil import read_bounded
from cudalock.lock.check import LockState
from cudalock.lock.names import INSTALL_LINES, LOCK_FILE
from cudalock.lock.uvinput import LockInput, environment_marker
from cudalock.model import Plan, Target
from cudalock.request import Request, recorded_request
from cudalock.tomlfile import dumps, tomllib
from cudalock.urls import (
    holds_credentials,
    redact,
    redact_json,
    strip_credentials,
)
from cudalock.versions import format_cc, format_cuda

__all__ = [
    "MAX_LOCK_BYTES",
    "RECORD_VERSION",
    "check_routes",
    "finalize_lock",
    "fingerprint",
    "is_ours",
    "lock_record",
    "locked_versions",
    "parse_lock",
    "read_lock_text",
    "read_toml_lock",
    "request_summary",
    "state_of",
    "target_summary",
    "validate_lock",
]

#: Written into ``[tool.cudalock]``; bump when the record's shape changes.
RECORD_VERSION = 1

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
