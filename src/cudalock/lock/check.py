"""``cudalock lock --check``: is the lock still current? (pure comparison, no I/O)

A lock records in ``[tool.cudalock]`` what it was made from: the matrix version, the Python and
platform, the Targets (driver, driver CUDA, GPU architectures), the Request (the spec) and the
Plan. ``--check`` rebuilds the same record from today's spec, matrix and target and names every
difference, so CI can say *why* a lock must be regenerated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name

from cudalock.errors import InputError

__all__ = [
    "LockState",
    "compare",
    "pins_missing_from_lock",
]

#: Request fields and how a change to each is named.
_REQUEST_FIELDS = (
    ("torch", "torch requirement"),
    ("python", "Python requirement"),
    ("cuda", "CUDA pin"),
    ("compat", "compatibility policy"),
    ("with", "companion packages (--with)"),
    ("frameworks", "frameworks (--framework)"),
    ("pytorch_index", "PyTorch index"),
    ("pypi_index", "PyPI index"),
)
_TARGET_FIELDS = (
    ("platform", "platform"),
    ("driver-version", "NVIDIA driver"),
    ("driver-cuda", "driver's maximum CUDA"),
    ("compute-capabilities", "GPU compute capabilities"),
)


@dataclass(frozen=True)
class LockState:
    """What a lock depends on: recorded in the lock, or computed from today's inputs."""

    matrix_version: str
    python: str
    platform: str
    targets: tuple[Mapping[str, Any], ...]
    request: Mapping[str, Any]
    #: The Plan's pins: normalised name → version.
    pins: Mapping[str, str]

    @classmethod
    def from_record(cls, record: Any, *, source: str) -> LockState:
        """Read ``[tool.cudalock]``; ``InputError`` if it is missing or malformed."""
        if not isinstance(record, Mapping) or not record:
            raise InputError(
                f"{source} has no [tool.cudalock] record; it was not written by "
                "cudalock lock (regenerate it with cudalock lock --force)"
            )
        try:
            plan = record["plan"]
            pins: dict[str, str] = {
                canonicalize_name(str(p["name"])): str(p["version"])
                for p in plan.get("packages", [])
            }
            return cls(
                matrix_version=str(record["matrix-version"]),
                python=str(record["python"]),
                platform=str(record["platform"]),
                targets=tuple(dict(t) for t in record.get("targets", [])),
                request=dict(record["request"]),
                pins=pins,
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise InputError(
                f"{source}: [tool.cudalock] is malformed ({err}); regenerate the "
                "lock with cudalock lock"
            ) from None


def _show(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "(none)"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def _changed(what: str, old: Any, new: Any) -> str:
    return f"{what} changed: {_show(old)} → {_show(new)}"


def _normalised(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return sorted(str(v) for v in value)
    return value if value not in ("", [], None) else None


def compare(recorded: LockState, current: LockState) -> list[str]:
    """Every difference between what the lock was made from and today's inputs, in words.

    Empty means the lock is current.
    """
    changes: list[str] = []
    if recorded.matrix_version != current.matrix_version:
        changes.append(
            _changed("the compatibility matrix", recorded.matrix_version, current.matrix_version)
        )
    changes += _target_changes(recorded.targets, current.targets)
    for key, what in _REQUEST_FIELDS:
        old, new = recorded.request.get(key), current.request.get(key)
        if _normalised(old) != _normalised(new):
            changes.append(_changed(f"the spec's {what}", old, new))
    if recorded.python != current.python:
        changes.append(_changed("the target Python", recorded.python, current.python))
    if recorded.platform != current.platform:
        changes.append(_changed("the target platform", recorded.platform, current.platform))
    for name in sorted(set(recorded.pins) | set(current.pins)):
        old, new = recorded.pins.get(name), current.pins.get(name)
        if old != new:
            changes.append(_changed(f"the plan's {name}", old, new))
    return changes


def _target_changes(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
) -> list[str]:
    if len(old) != len(new):
        return [f"the targets changed: {len(old)} node(s) when locked, {len(new)} now"]
    changes: list[str] = []
    for before, after in zip(old, new, strict=True):
        who = "the target" if len(old) == 1 else f"target {after.get('name', '?')}"
        for key, what in _TARGET_FIELDS:
            if _normalised(before.get(key)) != _normalised(after.get(key)):
                changes.append(_changed(f"{who}'s {what}", before.get(key), after.get(key)))
    return changes


def pins_missing_from_lock(pins: Mapping[str, str], locked: Mapping[str, str]) -> list[str]:
    """Plan pins the lock's packages do not carry at the planned version (a hand-edited lock)."""
    problems = []
    for name, version in sorted(pins.items()):
        have = locked.get(canonicalize_name(name))
        if have != version:
            problems.append(f"the lock pins {name} {have or '(nothing)'}, the plan says {version}")
    return problems
