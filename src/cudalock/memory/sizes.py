"""Parsing and printing sizes: bytes (``512GB``, ``64GiB``, ``2TiB``) and parameter counts (``7B``).

Byte units follow Kubernetes and the SI: ``G``/``GB`` are powers of ten, ``Gi``/``GiB`` powers of
two, so ``64Gi`` copied from a pod spec means what Kubernetes means. Bad input raises
:class:`cudalock.errors.InputError` naming the value and the expected form.
"""

from __future__ import annotations

import math
import re

from cudalock.errors import InputError
from cudalock.units import GIB

__all__ = [
    "MIN_BARE_PARAMS",
    "format_params",
    "kubernetes_quantity",
    "parse_bytes",
    "parse_param_count",
]

_BYTE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "p": 10**15,
    "pb": 10**15,
    "ki": 2**10,
    "kib": 2**10,
    "mi": 2**20,
    "mib": 2**20,
    "gi": 2**30,
    "gib": 2**30,
    "ti": 2**40,
    "tib": 2**40,
    "pi": 2**50,
    "pib": 2**50,
}

_PARAM_UNITS: dict[str, int] = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}

_NUMBER = r"(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)"
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>[A-Za-z]*)\s*$")


def _split(text: str, what: str, expected: str) -> tuple[float, str]:
    match = _SIZE_RE.match(text.replace("_", "").replace(",", ""))
    if not match:
        raise InputError(f"{what} {text!r} is not understood; expected {expected}")
    number = float(match.group("number"))
    if not math.isfinite(number):
        raise InputError(f"{what} {text!r} is not a finite number; expected {expected}")
    if number > _LARGEST:
        raise InputError(
            f"{what} {text!r} is larger than any machine or model; expected {expected}"
        )
    return number, match.group("unit").lower()


def _scaled(number: float, scale: int, text: str, what: str, expected: str) -> int:
    """``number`` × ``scale`` as an int; past :data:`_LARGEST` (or a float's range) a usage
    error, never an OverflowError."""
    product = number * scale
    if not math.isfinite(product) or product > _LARGEST:
        raise InputError(
            f"{what} {text!r} is larger than any machine or model; expected {expected}"
        )
    return round(product)


#: No size or parameter count of this world comes near it (a zettabyte, 10²¹ parameters).
_LARGEST = 10**21


#: Below this, a count typed without a unit is a shorthand that lost its unit (``--params 70``
#: for 70B), not an exact count such as 6738415616.
MIN_BARE_PARAMS = 10**6


def _shown(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


def parse_bytes(text: str, *, unit_required: bool = True) -> int:
    """``512GB`` → 512·10⁹, ``64GiB``/``64Gi`` → 64·2³⁰, ``2TiB``.

    A number without a unit is refused, with the units it may have meant (``512`` is far more
    often 512 GiB than 512 bytes); ``unit_required=False`` reads it as bytes, as Kubernetes
    quantities do."""
    expected = "a size such as 512GB, 64GiB, 64Gi or 2TiB"
    number, unit = _split(text, "size", expected)
    if unit not in _BYTE_UNITS:
        raise InputError(f"size {text!r} has an unknown unit {unit!r}; expected {expected}")
    if unit == "" and unit_required:
        shown = _shown(number)
        raise InputError(
            f"size {text!r} has no unit; give one, e.g. {shown}GiB or {shown}GB "
            f"({shown}Gi as in Kubernetes); expected {expected}"
        )
    value = _scaled(number, _BYTE_UNITS[unit], text, "size", expected)
    if value <= 0:
        raise InputError(f"size {text!r} must be more than zero; expected {expected}")
    return value


def parse_param_count(text: str) -> int:
    """``7B`` → 7·10⁹, ``7e9``, ``1.5T``, ``350M``, ``6738415616``."""
    expected = "a parameter count such as 7B, 7e9, 1.5T or 350M"
    number, unit = _split(text, "parameter count", expected)
    if unit not in _PARAM_UNITS:
        raise InputError(
            f"parameter count {text!r} has an unknown suffix {unit!r}; expected {expected}"
        )
    value = _scaled(number, _PARAM_UNITS[unit], text, "parameter count", expected)
    if unit == "" and 0 < value < MIN_BARE_PARAMS:
        shown = _shown(number)
        raise InputError(
            f"parameter count {text!r} has no unit: {value} parameters is no model; give "
            f"one, e.g. {shown}B ({shown}·10⁹) or {shown}M; expected {expected}"
        )
    if value <= 0:
        raise InputError(f"parameter count {text!r} must be more than zero; expected {expected}")
    return value


def format_params(count: int) -> str:
    """``6738415616`` → ``6738M`` (DeepSpeed's ``int(total_params/1e6)`` form)."""
    return f"{int(count / 1e6)}M"


def kubernetes_quantity(num_bytes: int) -> str:
    """The smallest whole ``Gi`` quantity that holds ``num_bytes`` (for requests/limits)."""
    return f"{max(1, math.ceil(num_bytes / GIB))}Gi"
