"""Parsing and comparing the version-like values cudalock deals with.

Driver versions ("535.104.05"), CUDA versions ("12.1", NVML's 12020), compute capabilities
("8.6", "sm_86") and Python versions ("3.11"). Each parser raises :class:`InputError` with a
message naming the bad value and the expected form; nothing else escapes.
"""

from __future__ import annotations

import re
from functools import total_ordering

from cudalock.errors import InputError

# re.ASCII: \d would otherwise accept any Unicode digit ("٥٣٥.١"), which no tool writes.
_DRIVER_RE = re.compile(r"^\d{2,4}(\.\d{1,3}){0,2}$", re.ASCII)
_CUDA_RE = re.compile(r"^(\d{1,2})\.(\d{1,2})(?:\.\d{1,4})?$", re.ASCII)
_NVML_CUDA_RE = re.compile(r"^\d{4,5}$", re.ASCII)
_CC_RE = re.compile(r"^(?:sm_|compute_)?(\d{1,2})(?:\.(\d)|(\d))?([af]?)$", re.ASCII)
_PY_RE = re.compile(r"^(3)\.(\d{1,2})(t?)$", re.ASCII)


@total_ordering
class DriverVersion:
    """An NVIDIA driver version: compared numerically, component by component."""

    __slots__ = ("parts", "text")

    def __init__(self, text: str) -> None:
        cleaned = text.strip()
        if not _DRIVER_RE.match(cleaned):
            raise InputError(
                f"invalid NVIDIA driver version {text!r}: expected digits like 535.104.05"
            )
        self.text = cleaned
        self.parts: tuple[int, ...] = tuple(int(p) for p in cleaned.split("."))

    @property
    def branch(self) -> int:
        return self.parts[0]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: DriverVersion) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[int, int, int]:
        padded = (*self.parts, 0, 0)
        return (padded[0], padded[1], padded[2])

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"DriverVersion({self.text!r})"


def parse_driver_version(text: str) -> DriverVersion:
    return DriverVersion(text)


CudaVersion = tuple[int, int]
ComputeCapability = tuple[int, int]


def parse_cuda_version(text: str) -> CudaVersion:
    """``"12.1"``, ``"12.1.105"`` or NVML's integer form ``"12010"`` → ``(12, 1)``."""
    cleaned = str(text).strip()
    # Not str.isdigit(): it accepts "¹²³⁴", which int() then rejects with ValueError.
    if _NVML_CUDA_RE.match(cleaned):
        return cuda_from_nvml(int(cleaned))
    match = _CUDA_RE.match(cleaned)
    if not match:
        raise InputError(f"invalid CUDA version {text!r}: expected MAJOR.MINOR like 12.1")
    return int(match.group(1)), int(match.group(2))


#: A CUDA version as a flag takes it: MAJOR.MINOR, nothing more or less.
_CUDA_FLAG_RE = re.compile(r"^\d{1,2}\.\d{1,2}$", re.ASCII)


def parse_cuda_flag(text: str, flag: str) -> CudaVersion:
    """A CUDA version typed on a command line (``--cuda``, ``--driver-cuda``): exactly ``X.Y``.

    ``12`` and ``12.1.1`` are refused alike, and said why: builds and drivers go by
    MAJOR.MINOR (a patch level changes neither), and a bare major names no single version.
    """
    cleaned = str(text).strip()
    if _CUDA_FLAG_RE.match(cleaned):
        return parse_cuda_version(cleaned)
    if re.fullmatch(r"\d{1,2}", cleaned, re.ASCII):
        why = f"{cleaned} is a CUDA major, not a version"
    elif re.fullmatch(r"\d{1,2}\.\d{1,2}\.\d{1,4}", cleaned, re.ASCII):
        major_minor = ".".join(cleaned.split(".")[:2])
        why = f"a patch level does not change which builds run: give {major_minor}"
    else:
        raise InputError(
            f"invalid CUDA version {text!r} for {flag}: expected MAJOR.MINOR like 12.1"
        )
    raise InputError(
        f"invalid CUDA version {text!r} for {flag}: expected MAJOR.MINOR like 12.1; {why}"
    )


def cuda_from_nvml(value: int) -> CudaVersion:
    """NVML reports CUDA as ``major * 1000 + minor * 10``: 12020 means 12.2."""
    if value <= 0:
        raise InputError(f"invalid CUDA driver version {value}: expected e.g. 12020")
    return value // 1000, (value % 1000) // 10


def format_cuda(version: CudaVersion) -> str:
    return f"{version[0]}.{version[1]}"


def cuda_from_variant(variant: str) -> CudaVersion | None:
    """``"cu121"`` → ``(12, 1)``, ``"cu118"`` → ``(11, 8)``, ``"cu92"`` → ``(9, 2)``; else None."""
    match = re.fullmatch(r"cu(\d{2,4})", variant)
    if not match:
        return None
    digits = match.group(1)
    # The last digit is the minor: cu92 = 9.2, cu102 = 10.2, cu121 = 12.1, cu130 = 13.0.
    return int(digits[:-1]), int(digits[-1])


def variant_for_cuda(version: CudaVersion) -> str:
    return f"cu{version[0]}{version[1]}"


#: The highest compute-capability major accepted. The GPUs in compat_matrix/gpus.toml reach 12.x;
#: this leaves room for a few generations and refuses typos such as 99.9, which would otherwise
#: lead to advice about an "sm_999" no compiler knows.
MAX_CC_MAJOR = 15


def parse_compute_capability(text: str) -> ComputeCapability:
    """``"8.6"``, ``"86"``, ``"sm_86"``, ``"sm_90a"`` → ``(8, 6)`` / ``(9, 0)``; the major is
    1 to :data:`MAX_CC_MAJOR`."""
    major, minor = _compute_capability(text)
    if not 1 <= major <= MAX_CC_MAJOR:
        raise InputError(
            f"invalid compute capability {text!r}: expected MAJOR.MINOR like 8.6, with a major "
            f"from 1 to {MAX_CC_MAJOR}"
        )
    return major, minor


def _compute_capability(text: str) -> ComputeCapability:
    cleaned = str(text).strip().lower()
    match = _CC_RE.match(cleaned)
    if not match:
        raise InputError(
            f"invalid compute capability {text!r}: expected MAJOR.MINOR like 8.6 (or sm_86)"
        )
    major_text, dotted_minor, packed_minor, _suffix = match.groups()
    if dotted_minor is not None:
        return int(major_text), int(dotted_minor)
    if packed_minor is not None:
        return int(major_text), int(packed_minor)
    if "." not in cleaned and len(major_text) >= 2:
        # "86" or "sm_120": the last digit is the minor.
        return int(major_text[:-1]), int(major_text[-1])
    raise InputError(
        f"invalid compute capability {text!r}: expected MAJOR.MINOR like 8.6 (or sm_86)"
    )


def format_cc(cc: ComputeCapability) -> str:
    return f"{cc[0]}.{cc[1]}"


def parse_python_version(text: str) -> str:
    """``"3.11"`` or ``"3.13t"`` (free-threaded) → the same, normalised.

    ``"3.11.7"`` → ``"3.11"``.
    """
    cleaned = str(text).strip()
    parts = cleaned.split(".")
    if len(parts) == 3 and parts[2].isdigit():
        cleaned = ".".join(parts[:2])
    if not _PY_RE.match(cleaned):
        raise InputError(f"invalid Python version {text!r}: expected MAJOR.MINOR like 3.11")
    return cleaned


def python_key(version: str) -> tuple[int, int, bool]:
    """Sort key for ``"3.9"`` < ``"3.10"`` < ``"3.13t"`` (free-threaded after its GIL build)."""
    free_threaded = version.endswith("t")
    major, minor = version.rstrip("t").split(".")
    return int(major), int(minor), free_threaded
