"""Probe files: the Targets ``cudalock probe --json`` wrote elsewhere, read back and checked.

``--probe FILE`` (repeatable) reads one Target per file, a fleet when there are several;
``--probe -`` reads a stream of probe documents from stdin, one Target each: the JSON lines
``srun --ntasks-per-node=1 cudalock probe --json-lines`` writes, one per node of an allocation.
Every field is checked against its type and grammar; unknown fields and schema versions are
refused (exit 2).
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from cudalock.errors import InputError, UsageError
from cudalock.fsutil import read_bounded, read_stream
from cudalock.model import TARGET_SCHEMA_VERSION, Gpu, Host, Target
from cudalock.platforms import PLATFORMS, is_platform_shaped
from cudalock.safetext import has_control, printable
from cudalock.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    format_cuda,
    parse_compute_capability,
    parse_cuda_version,
    parse_driver_version,
)

__all__ = [
    "GIVEN_BY_FLAGS",
    "MAX_STREAM_BYTES",
    "STDIN",
    "read_probe_file",
    "read_probe_files",
    "read_probe_stream",
    "target_from_json",
]


#: The name of a live probe once the Target flags replace its driver: it describes another machine.
GIVEN_BY_FLAGS = "given by flags"

#: ``--probe -``: the probe documents come on stdin.
STDIN = "-"
#: A fleet's stream: thousands of nodes at about 1 KiB each fit many times over.
MAX_STREAM_BYTES = 64 * 2**20
# srun --label puts "TASK: " before each line of a task's output.
_SRUN_LABEL = re.compile(r"^\s*\d+: (?=[\[{])", re.MULTILINE)


def read_probe_files(paths: tuple[Path, ...] | list[Path]) -> list[Target]:
    """One Target per file (``-``: per document on stdin), named after its recorded hostname
    (or the file, or its place in the stream, when absent or shared)."""
    if sum(1 for path in paths if str(path) == STDIN) > 1:
        raise UsageError("--probe - is given twice; stdin can be read once")
    parsed = _Parsed()
    targets: list[Target] = []
    labels: list[str] = []
    with _without_cyclic_gc():
        for path in paths:
            if str(path) == STDIN:
                stream = read_probe_stream(_read_stdin(), parsed=parsed)
                targets.extend(stream)
                labels.extend(f"stdin document {n}" for n in range(1, len(stream) + 1))
            else:
                targets.append(_read_probe_file(path, parsed))
                labels.append(path.name)
    counts: dict[str, int] = {}
    for target in targets:
        counts[target.name] = counts.get(target.name, 0) + 1
    return [
        replace(t, name=f"{t.name} ({label})") if counts[t.name] > 1 else t
        for t, label in zip(targets, labels, strict=True)
    ]


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """A fleet's probe documents make a hundred objects each and no reference cycles: the
    cyclic collector would walk the growing heap hundreds of times for nothing (half the time
    of reading 10,000 files). Reference counting still frees what is dropped."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_stdin() -> bytes:
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError(
            "--probe - reads probe documents from stdin, but stdin is a terminal",
            hint="Pipe them in ('srun --ntasks-per-node=1 cudalock probe --json-lines | "
            "cudalock resolve --probe -').",
        )
    data, cut = read_stream(sys.stdin.buffer, limit=MAX_STREAM_BYTES)
    if cut:
        raise InputError(
            f"stdin holds more than {MAX_STREAM_BYTES // 2**20} MiB of probe documents; "
            "expected at most that much"
        )
    return data


def read_probe_stream(
    data: bytes, where: str = "stdin", *, parsed: _Parsed | None = None
) -> list[Target]:
    """Every probe document in ``data``: JSON lines, documents one after another, or the list
    ``cudalock probe --json`` prints for several Targets; ``srun --label`` prefixes are dropped.
    Each Target is named after its recorded hostname; any problem is an :class:`InputError`
    naming the document."""
    parsed = parsed or _Parsed()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{where} is not UTF-8 text: {err.reason}") from None
    text = _SRUN_LABEL.sub("", text)
    decoder = json.JSONDecoder()
    documents: list[Any] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            break
        try:
            value, position = decoder.raw_decode(text, position)
        except (json.JSONDecodeError, RecursionError) as err:
            detail = (
                f"{err.msg} at line {err.lineno}"
                if isinstance(err, json.JSONDecodeError)
                else "nested too deeply"
            )
            raise InputError(
                f"{where}: probe document {len(documents) + 1} is not valid JSON: {detail}",
                hint="Write one document per line, as srun --ntasks-per-node=1 cudalock "
                "probe --json-lines does.",
            ) from None
        documents.extend(value if type(value) is list else [value])
    if not documents:
        raise InputError(
            f"{where} holds no probe document",
            hint="Pipe in one document per node ('srun --ntasks-per-node=1 cudalock probe "
            "--json-lines | cudalock resolve --probe -').",
        )
    targets: list[Target] = []
    for number, document in enumerate(documents, start=1):
        label = f"{where} document {number}"
        try:
            targets.append(_target(document, None, label, parsed, file=Path(f"{where}-{number}")))
        except InputError as err:
            raise InputError(f"{label}: {err.message}", hint=err.hint) from None
    return targets


def read_probe_file(path: Path) -> Target:
    """A Target from a probe JSON file; any problem is an :class:`InputError` naming the file."""
    return _read_probe_file(path, _Parsed())


#: A probe file describes one machine in a few kB; anything far larger is not one.
PROBE_FILE_LIMIT = 4 * 2**20


def _read_probe_file(path: Path, parsed: _Parsed) -> Target:
    shown = str(path)
    try:
        text = read_bounded(path, limit=PROBE_FILE_LIMIT, what="probe file").decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"probe file {shown!r} cannot be read: {err}") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:
        if isinstance(err, json.JSONDecodeError):
            detail = f"{err.msg} at line {err.lineno}"
        elif isinstance(err, RecursionError):
            detail = "nested too deeply"
        else:  # int() refuses more than sys.get_int_max_str_digits() digits
            detail = "it holds a number with thousands of digits"
        raise InputError(
            f"probe file {shown!r} is not valid JSON: {detail}",
            hint="Write it with 'cudalock probe --json > FILE'.",
        ) from None
    try:
        return _target(data, None, shown, parsed, file=path)
    except InputError as err:
        raise InputError(f"probe file {shown!r}: {err.message}", hint=err.hint) from None


#: Each object's fields and the JSON type of their values (null is allowed for every one;
#: ``object``: checked on its own, with its own wording).
_TOP_FIELDS: dict[str, type] = {
    "schema_version": int,
    "name": str,
    "platform": str,
    "driver_version": str,
    "driver_cuda": str,
    "gpus": object,
    "host": object,
    "source": str,
    "notes": object,
}
_GPU_FIELDS: dict[str, type] = {
    "index": int,
    "name": str,
    "uuid": str,
    "compute_capability": str,
    "memory_total_bytes": int,
}
_HOST_FIELDS: dict[str, type] = {
    "os": str,
    "arch": str,
    "glibc": str,
    "memory_total_bytes": int,
    "cgroup_memory_limit_bytes": int,
    "hostname": str,
    "cuda_toolkit": str,
    "cuda_toolkit_path": str,
}


def target_from_json(data: Any, name: str | None = None, *, read_from: str | None = None) -> Target:
    """The inverse of :meth:`Target.to_json`, validating every field (:class:`InputError`).

    Only ``schema_version`` and ``platform`` are required, so a hand-written file for a
    machine that cannot run cudalock can be short. ``name`` replaces the recorded name;
    ``read_from`` (a file) becomes the source, the recorded source a note.
    """
    return _target(data, name, read_from, _Parsed())


class _Parsed:
    """The version strings met so far while reading one set of probe files.

    A fleet's files repeat the same few driver versions, CUDA versions and compute
    capabilities: each is parsed once per read, not once per file or GPU. The values are
    immutable, so Targets may share them.
    """

    __slots__ = ("ccs", "cudas", "drivers")

    def __init__(self) -> None:
        self.drivers: dict[str, DriverVersion] = {}
        self.cudas: dict[str, CudaVersion] = {}
        self.ccs: dict[str, ComputeCapability] = {}


_Value = TypeVar("_Value")


def _parse_once(cache: dict[str, _Value], text: str, parse: Callable[[str], _Value]) -> _Value:
    """``parse(text)``, taken from ``cache`` when this read has met ``text`` before."""
    value = cache.get(text)
    if value is None:
        value = cache[text] = parse(text)
    return value


def _target(
    data: Any, name: str | None, read_from: str | None, parsed: _Parsed, *, file: Path | None = None
) -> Target:
    """The Target of a probe document, or :class:`InputError` worded for its first problem.

    With ``file``, the name is the recorded hostname (stripped, when not blank), else the
    file's stem, as :func:`read_probe_file` names Targets.
    """
    version = data.get("schema_version") if type(data) is dict else None
    if type(data) is dict and type(version) is not int:
        raise InputError(
            f"'schema_version' must be the integer {TARGET_SCHEMA_VERSION}, got {version!r}"
        )
    document = _fields(data, _TOP_FIELDS, "the document")
    get = document.get
    if version != TARGET_SCHEMA_VERSION:
        raise InputError(
            f"schema_version {version} is not supported (this cudalock reads "
            f"{TARGET_SCHEMA_VERSION}): write the file with a matching cudalock"
        )
    platform = get("platform")
    if platform is None:
        raise InputError("'platform' is missing")
    if not is_platform_shaped(platform):
        raise InputError(
            f"'platform' {platform!r} is not a platform: expected one of "
            f"{', '.join(p.name for p in PLATFORMS)}"
        )
    notes_entry = get("notes") or []
    if type(notes_entry) is not list or not all(type(note) is str for note in notes_entry):
        raise InputError("'notes' must be a list of strings")
    notes = tuple(notes_entry)
    driver_text, cuda_text = get("driver_version"), get("driver_cuda")
    driver_version = (
        None
        if driver_text is None
        else _parse_once(parsed.drivers, driver_text, parse_driver_version)
    )
    driver_cuda = (
        None if cuda_text is None else _parse_once(parsed.cudas, cuda_text, parse_cuda_version)
    )
    gpus_entry = get("gpus") or []
    if type(gpus_entry) is not list:
        raise InputError(f"'gpus' must be a list, got {_kind(gpus_entry)}")
    gpus = tuple(
        [_gpu_from_json(entry, position, parsed) for position, entry in enumerate(gpus_entry)]
    )
    host_entry = get("host")
    host = Host() if host_entry is None else _host_from_json(host_entry)
    if (
        get("source") == "override"
        and get("name") == GIVEN_BY_FLAGS
        and (host.memory_total_bytes is not None or host.hostname is not None)
    ):
        # Written with the Target flags for another machine by an older cudalock: the RAM and
        # name recorded are the writing machine's, not the target's.
        host = replace(host, memory_total_bytes=None, cgroup_memory_limit_bytes=None, hostname=None)
        notes = (
            *notes,
            "RAM, cgroup limit and hostname left out: this probe was written with the Target "
            "flags for another machine, so they were the writing machine's",
        )
    if file is not None:
        name = (host.hostname.strip() if host.hostname is not None else "") or file.stem
    source = get("source") or "file"
    if read_from is not None:
        notes = (f"read from {read_from} (probed there via {source})", *notes)
        source = f"file:{read_from}"
    return Target(
        platform=platform,
        driver_version=driver_version,
        driver_cuda=driver_cuda,
        gpus=gpus,
        host=host,
        name=name or get("name") or "this machine",
        source=source,
        notes=notes,
    )


def _gpu_from_json(data: Any, position: int, parsed: _Parsed) -> Gpu:
    entry = _fields(data, _GPU_FIELDS, f"gpus[{position}]")
    get = entry.get
    gpu_name = get("name")
    if gpu_name is None:
        raise InputError(f"'gpus[{position}].name' is missing")
    cc_text = get("compute_capability")
    cc: ComputeCapability | None = None
    if cc_text is not None:
        try:
            cc = _parse_once(parsed.ccs, cc_text, parse_compute_capability)
        except InputError as err:
            raise InputError(f"gpus[{position}]: {err.message}") from None
    return Gpu(gpu_name, cc, get("index"), get("uuid"), get("memory_total_bytes"))


#: glibc as ``platform.libc_ver()`` reports it: 2.35, 2.17.1.
_GLIBC_RE = re.compile(r"\d{1,3}\.\d{1,4}(?:\.\d{1,4})?", re.ASCII)


def _host_from_json(data: Any) -> Host:
    entry = _fields(data, _HOST_FIELDS, "host")
    get = entry.get
    glibc = get("glibc")
    if glibc is not None and not _GLIBC_RE.fullmatch(glibc):
        raise InputError(f"'host.glibc' is {glibc[:40]!r}; expected a version like 2.35")
    toolkit = get("cuda_toolkit")
    if toolkit is not None:
        try:
            toolkit = format_cuda(parse_cuda_version(toolkit))
        except InputError as err:
            raise InputError(f"'host.cuda_toolkit': {err.message}") from None
    return Host(
        os=get("os"),
        arch=get("arch"),
        glibc=get("glibc"),
        memory_total_bytes=get("memory_total_bytes"),
        cgroup_memory_limit_bytes=get("cgroup_memory_limit_bytes"),
        hostname=get("hostname"),
        cuda_toolkit=toolkit,
        cuda_toolkit_path=get("cuda_toolkit_path"),
    )


#: Integers in a probe file count bytes or GPUs: a value past this is not a measurement.
_MAX_INT = 2**63 - 1


def _fields(data: Any, fields: dict[str, type], where: str) -> dict[str, Any]:
    """``data`` when it is a JSON object whose every field is one of ``fields`` and null or
    exactly of its type (integers non-negative and below 2^63, strings without control
    characters); else :class:`InputError` naming the first problem. One pass of exact-type
    checks, as a fleet is thousands of documents; :func:`_field_problem` words what fails."""
    if type(data) is not dict:
        raise InputError(f"{where} must be a JSON object, got {_kind(data)}")
    for key, value in data.items():
        kind = fields.get(key)
        if kind is None:
            unknown = sorted(str(k) for k in data if k not in fields)
            raise InputError(
                f"{where} has unknown field(s) {', '.join(map(repr, unknown))}; "
                f"expected {', '.join(fields)}"
            )
        if value is None or kind is object:
            continue
        if kind is str:
            if type(value) is str and not has_control(value):
                continue
        elif kind is int:
            if type(value) is int and 0 <= value <= _MAX_INT:
                continue
        elif type(value) is kind:
            continue
        label = key if where == "the document" else f"{where}.{key}"
        raise InputError(_field_problem(label, kind, value))
    return data


def _field_problem(label: str, kind: type, value: Any) -> str:
    if kind is str and type(value) is str:
        return (
            f"{label!r} contains control characters ({printable(value[:60], keep_lines=False)}"
            "); a probe file's names and versions never do"
        )
    if kind is int:
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}..."
        return f"{label!r} must be a non-negative integer below 2^63 or null, got {shown}"
    return f"{label!r} must be {_kind(kind())} or null, got {_kind(value)}"


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)
