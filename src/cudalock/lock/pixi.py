"""``cudalock lock --check`` for a pixi workspace written by ``bootstrap --format pixi``: does
pixi.toml still pin the locked closure? (``pixi install`` resolves from it, so a pixi.toml
older than the lock would install something else.)"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from packaging.markers import Marker
from packaging.pylock import Pylock
from packaging.utils import canonicalize_name

from cudalock.errors import InputError
from cudalock.lock.metadata import marker_environment
from cudalock.tomlfile import tomllib

__all__ = [
    "PIXI_FILE",
    "PIXI_MARKER",
    "expected_pins",
    "pixi_changes",
]

PIXI_FILE = "pixi.toml"
#: How a pixi.toml cudalock wrote begins; any other pixi.toml is the user's own.
PIXI_MARKER = "# pixi.toml, written by cudalock bootstrap"


def expected_pins(lock: Pylock, python: str, platform: str) -> dict[str, str]:
    """Name → version of every package of the lock installed on the target (local ones have
    no version and are left out)."""
    environment = marker_environment(python, platform)
    return {
        canonicalize_name(p.name): str(p.version)
        for p in lock.packages
        if p.version is not None
        and p.directory is None
        and p.vcs is None
        and (p.marker is None or Marker(str(p.marker)).evaluate(environment))
    }


def pixi_changes(path: Path, expected: Mapping[str, str]) -> list[str]:
    """How the pins of the pixi.toml at ``path`` differ from ``expected`` (empty: they agree,
    or there is no pixi.toml of cudalock's there)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read {path}: {err}") from None
    if not text.startswith(PIXI_MARKER):
        return []
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{path} is not valid TOML: {err}") from None
    table = document.get("pypi-dependencies")
    pins: dict[str, str | None] = {}
    for name, value in (table if isinstance(table, dict) else {}).items():
        version = value.get("version") if isinstance(value, dict) else value
        if isinstance(version, str) and version.startswith("=="):
            pins[canonicalize_name(name)] = version[2:]
        elif isinstance(value, dict) and ("path" in value or "git" in value or "url" in value):
            pins[canonicalize_name(name)] = None  # local or direct: the lock has no version
        else:
            pins[canonicalize_name(name)] = str(version)
    changes = []
    for name in sorted(set(pins) | set(expected)):
        if name in pins and pins[name] is None:
            continue
        if name not in pins:
            changes.append(f"{path} does not pin {name} (locked at {expected[name]})")
        elif name not in expected:
            changes.append(f"{path} pins {name}=={pins[name]}, which the lock does not hold")
        elif pins[name] != expected[name]:
            changes.append(f"{path} pins {name}=={pins[name]}, the lock has {expected[name]}")
    if changes:
        changes.append(
            f"rewrite {path} from the lock with: cudalock bootstrap --format pixi --force"
        )
    return changes
