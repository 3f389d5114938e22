"""TOML: read with the standard library's ``tomllib`` (its backport ``tomli`` on Python 3.10),
and written by :func:`dumps` from plain data, for files cudalock makes whole (a lock).

Files people edit keep their comments through tomlkit instead (``cudalock.toml``).
"""

from __future__ import annotations

import datetime
import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = ["dumps", "tomllib"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dumps(document: Mapping[str, Any], *, comments: Sequence[str] = ()) -> str:
    """``document`` as TOML text that ``tomllib.loads`` reads back equal, ``comments`` first.

    Tables nested in tables become ``[a.b]`` sections and lists of tables ``[[a]]`` sections;
    inside those, tables and lists are written inline, a list of tables one entry a line.
    Values are strings, integers, floats, booleans, dates and times, lists and tables (TOML
    has no null: a None is a ``ValueError``).
    """
    lines = [f"# {comment}" if comment else "#" for comment in comments]
    _table(lines, (), document)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(
    lines: list[str], path: tuple[str, ...], table: Mapping[str, Any], *, in_list: bool = False
) -> None:
    sections: list[tuple[str, Any]] = []
    for key, value in table.items():
        # Sections for the tables of tables (and lists of them) the document starts with; in a
        # list's tables everything nested is inline, as lock files write their files.
        if not in_list and (isinstance(value, Mapping) or _is_table_list(value)):
            sections.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in sections:
        name = ".".join(_key(part) for part in (*path, key))
        if isinstance(value, Mapping):
            # A table of tables alone needs no header of its own.
            if not value or any(not isinstance(v, Mapping) for v in value.values()):
                lines += ["", f"[{name}]"]
            _table(lines, (*path, key), value)
        else:
            for item in value:
                lines += ["", f"[[{name}]]"]
                _table(lines, (*path, key), item, in_list=True)


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    # A JSON string is a TOML basic string once characters JSON would escape as a surrogate
    # pair are left as they are (ensure_ascii=False) and DEL, which TOML refuses raw, is
    # escaped: the escapes JSON uses are TOML's too.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any, *, multiline: bool = True) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_key(k)} = {_value(v, multiline=False)}" for k, v in value.items())
        return f"{{ {inner} }}" if inner else "{}"
    if isinstance(value, list | tuple):
        items = [_value(item, multiline=False) for item in value]
        if multiline and _is_table_list(list(value)):
            return "[\n" + "".join(f"    {item},\n" for item in items) + "]"
        return "[" + ", ".join(items) + "]"
    raise ValueError(f"TOML cannot hold {type(value).__name__} values ({value!r})")
