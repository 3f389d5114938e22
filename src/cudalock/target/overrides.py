"""Building the Targets a command works for: probe files, overrides, or the live probe.

``--probe FILE`` (repeatable) reads probe JSON written by ``cudalock probe --json`` elsewhere: one
Target per file, a fleet when there are several. The override flags (``--driver-version``,
``--driver-cuda``, ``--no-gpu``, ``--compute-capability``, ``--gpu``, ``--platform`` and the
``CUDALOCK_DRIVER_VERSION`` / ``CUDALOCK_DRIVER_CUDA`` variables) replace fields of the live
probe's Target, or of each file's Target. No flags: the live probe.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from cudalock.errors import InputError, UsageError
from cudalock.model import (
    TARGET_SCHEMA_VERSION,
    Gpu,
    Host,
    Target,
)
from cudalock.platforms import PLATFORMS, is_platform_shaped, platform_named
from cudalock.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    format_cc,
    format_cuda,
    parse_compute_capability,
    parse_cuda_version,
    parse_driver_version,
)

if TYPE_CHECKING:
    from cudalock.matrix.load import GpuModel, Matrix



@dataclass(frozen=True)
class TargetOptions:
    """The Target flags as given; :func:`targets_from_options` reads them."""

    probe_files: tuple[Path, ...] = ()
    driver_version: str | None = None
    driver_cuda: str | None = None
    no_gpu: bool = False
    compute_capabilities: tuple[str, ...] = ()
    gpu_names: tuple[str, ...] = ()
    platform: str | None = None
    matrix_dir: Path | None = None

    @property
    def overrides_given(self) -> bool:
        return bool(
            self.driver_version
            or self.driver_cuda
            or self.no_gpu
            or self.compute_capabilities
            or self.gpu_names
            or self.platform
        )



@dataclass(frozen=True)
class Overrides:
    """The override flags, validated."""

    driver_version: DriverVersion | None = None
    driver_cuda: CudaVersion | None = None
    no_gpu: bool = False
    gpus: tuple[Gpu, ...] = ()
    platform: str | None = None

    @property
    def given(self) -> bool:
        return bool(self.driver_version or self.driver_cuda or self.no_gpu or self.gpus
                    or self.platform)


def targets_from_options(
    options: TargetOptions,
    matrix: Matrix,
    *,
    probe: Callable[[], Target] | None = None,
) -> list[Target]:
    """The Targets the flags describe (see the module docstring for the precedence)."""
    overrides = overrides_from_options(options, matrix)
    if options.probe_files:
        targets = read_probe_files(options.probe_files)
        return [apply_overrides(t, overrides, matrix) for t in targets]
    live = probe() if probe is not None else _default_probe(matrix)
    return [apply_overrides(live, overrides, matrix)]


def _default_probe(matrix: Matrix) -> Target:
    from cudalock.target.probe import probe_machine

    return probe_machine(matrix=matrix)


def overrides_from_options(options: TargetOptions, matrix: Matrix) -> Overrides:
    """Parse and check the override flags; bad values are :class:`InputError` (exit 2)."""
    # An empty value (CUDALOCK_DRIVER_VERSION= in a shell profile) counts as not given.
    driver_version = (parse_driver_version(options.driver_version)
                      if options.driver_version and options.driver_version.strip() else None)
    driver_cuda = (parse_cuda_version(options.driver_cuda)
                   if options.driver_cuda and options.driver_cuda.strip() else None)
    gpus = [
        Gpu(name=f"GPU with compute capability {format_cc(cc)}", compute_capability=cc)
        for cc in (parse_compute_capability(text) for text in options.compute_capabilities)
    ]
    gpus.extend(_gpu_from_name(name, matrix) for name in options.gpu_names)
    platform = options.platform.strip() if options.platform is not None else None
    if platform is not None:
        platform = platform_named(platform).name
    if options.no_gpu:
        clashing = [flag for flag, value in (
            ("--driver-version", driver_version), ("--driver-cuda", driver_cuda),
            ("--compute-capability", options.compute_capabilities),
            ("--gpu", options.gpu_names)) if value]
        if clashing:
            raise UsageError(f"--no-gpu describes a machine without NVIDIA GPUs; it cannot be "
                             f"combined with {', '.join(clashing)}")
    return Overrides(driver_version=driver_version, driver_cuda=driver_cuda,
                     no_gpu=options.no_gpu, gpus=tuple(gpus), platform=platform)


#: Vendor prefixes NVML names carry and people leave out ("H100" for "NVIDIA H100 80GB HBM3").
_NAME_PREFIXES = ("", "NVIDIA ", "Tesla ", "NVIDIA GeForce ")


def nearest_gpu_names(name: str, matrix: Matrix, limit: int = 3) -> list[str]:
    """Up to ``limit`` GPU names of the matrix that look like ``name`` (typos, case, prefixes)."""
    # Imported here, not at the top: only an unknown --gpu name needs it, and every command
    # that builds a Target imports this module.
    import difflib

    known = sorted({g.name for g in matrix.gpus} | {m for g in matrix.gpus for m in g.match})
    # Compare without case and without the vendor prefixes, so 'h1oo' finds 'H100 80GB' as
    # readily as 'RTX 4O90' finds 'RTX 4090'.
    by_short: dict[str, str] = {}
    for display in known:
        by_short.setdefault(_without_vendor(display.lower()), display)
    wanted = _without_vendor(name.strip().lower())
    close = difflib.get_close_matches(wanted, list(by_short), n=limit, cutoff=0.5)
    if not close:
        close = [short for short in by_short if wanted and wanted in short][:limit]
    return [by_short[short] for short in close]


def _without_vendor(lowered: str) -> str:
    for prefix in ("nvidia geforce ", "nvidia ", "tesla ", "geforce "):
        lowered = lowered.removeprefix(prefix)
    return lowered


def _gpu_from_name(name: str, matrix: Matrix) -> Gpu:
    model = gpu_model_named(name, matrix)
    return Gpu(name=model.name, compute_capability=model.compute_capability)


def gpu_model_named(name: str, matrix: Matrix) -> GpuModel:
    """The matrix's GPU model for a name as people write it ("H100", "RTX 4090", NVML's name)."""
    # The GPU table matches NVML device names; try the name as NVML would spell it.
    model = next((found for prefix in _NAME_PREFIXES
                  if (found := matrix.gpu_by_name(prefix + name.strip())) is not None), None)
    if model is None:
        nearest = nearest_gpu_names(name, matrix)
        suggestion = f"; did you mean {', '.join(repr(n) for n in nearest)}?" if nearest else ""
        raise UsageError(
            f"unknown GPU {name!r}: not in the matrix's GPU table{suggestion}",
            hint="give its compute capability instead, e.g. --compute-capability 8.6 "
            "('cudalock matrix show --json' lists the GPUs the matrix knows)",
        )
    return model


def apply_overrides(target: Target, overrides: Overrides, matrix: Matrix) -> Target:
    """``target`` with the given fields replaced; the rest stays as probed."""
    if not overrides.given:
        return target
    notes: list[str] = []
    platform = overrides.platform or target.platform
    host = target.host
    if platform != target.platform:
        # The probed host details (glibc, RAM) belong to another OS/architecture.
        system, _, arch = platform.partition("-")
        host = Host(os=system, arch=arch)
        notes.append(f"platform {platform} given; host details of {target.name} dropped")

    if overrides.no_gpu:
        name = "given by flags" if target.name == "this machine" else target.name
        return replace(target, name=name, platform=platform, host=host, driver_version=None,
                       driver_cuda=None, gpus=(), source="override",
                       notes=("no NVIDIA GPU (--no-gpu): a CPU-only target", *notes))

    driver_version, driver_cuda = target.driver_version, target.driver_cuda
    # The driver's two fields are replaced together: a probed version next to a given CUDA
    # version (or the reverse) would describe neither machine.
    driver_given = overrides.driver_version is not None or overrides.driver_cuda is not None
    if driver_given:
        driver_version = overrides.driver_version
        driver_cuda = overrides.driver_cuda
    if overrides.driver_version is not None:
        from_table = matrix.max_cuda_for_driver(overrides.driver_version, platform)
        if driver_cuda is None:
            driver_cuda = from_table
            notes.append(_derived_note(overrides.driver_version, from_table))
        elif from_table is not None and driver_cuda > from_table:
            notes.append(f"--driver-cuda {format_cuda(driver_cuda)} is above the "
                         f"{format_cuda(from_table)} the matrix lists for driver "
                         f"{overrides.driver_version}; using the value given")
    gpus = overrides.gpus or target.gpus
    if gpus and driver_version is None and driver_cuda is None:
        notes.append("GPUs given but no driver: add --driver-version or --driver-cuda, or the "
                     "target is treated as CPU-only")

    # Probe notes about the driver or GPUs no longer apply once both are replaced.
    fully_replaced = driver_given and bool(overrides.gpus)
    kept = () if fully_replaced else target.notes
    # A live probe's "this machine" is no longer this machine once its driver is replaced.
    name = "given by flags" if driver_given and target.name == "this machine" else target.name
    return replace(
        target,
        name=name,
        platform=platform,
        host=host,
        driver_version=driver_version,
        driver_cuda=driver_cuda,
        gpus=gpus,
        source="override",
        notes=(*notes, *kept),
    )


def _derived_note(driver: DriverVersion, cuda: CudaVersion | None) -> str:
    if cuda is None:
        return (f"driver {driver} is older than every CUDA release in the matrix: its maximum "
                "CUDA version is unknown (give --driver-cuda)")
    return f"maximum CUDA {format_cuda(cuda)} for driver {driver} from the matrix's driver table"


# --------------------------------------------------------------------------------------------
# Probe files
#
# A fleet is thousands of files and tens of thousands of GPU entries, so a document is read in
# one of two ways. _plain_target makes one pass of exact-type checks over it (type(x) is str,
# key sets compared as sets), parses each distinct version string once per read (_Parsed:
# a fleet's files repeat the same few), and builds the Target. Anything it does not accept
# outright, every invalid document included, goes to _checked_target: field by field, in a
# fixed order, wording the first problem. _checked_target is the definition of what is valid
# and what it reads as; _plain_target accepts only documents it accepts and builds equal
# Targets (tests/test_targets_plain.py checks both on generated documents).


def read_probe_files(paths: tuple[Path, ...] | list[Path]) -> list[Target]:
    """One Target per file, named after its recorded hostname (or the file when absent)."""
    parsed = _Parsed()
    targets = [_read_probe_file(path, parsed) for path in paths]
    counts: dict[str, int] = {}
    for target in targets:
        counts[target.name] = counts.get(target.name, 0) + 1
    return [
        replace(t, name=f"{t.name} ({path.name})") if counts[t.name] > 1 else t
        for t, path in zip(targets, paths, strict=True)
    ]


def read_probe_file(path: Path) -> Target:
    """A Target from a probe JSON file; any problem is an :class:`InputError` naming the file."""
    return _read_probe_file(path, _Parsed())


def _read_probe_file(path: Path, parsed: _Parsed) -> Target:
    shown = str(path)
    try:
        text = _read_bytes(shown).decode("utf-8")  # bytes, then one decode: no text layer
    except FileNotFoundError:
        raise InputError(f"probe file {shown!r} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"probe file {shown!r} is a directory, not a JSON file") from None
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise InputError(f"probe file {shown!r} cannot be read: {reason}") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        detail = f"{err.msg} at line {err.lineno}" if isinstance(err, json.JSONDecodeError) \
            else "nested too deeply"
        raise InputError(f"probe file {shown!r} is not valid JSON: {detail}",
                         hint="write it with 'cudalock probe --json > FILE'") from None
    target = _plain_target(data, None, shown, parsed, file=path)
    if target is not None:
        return target
    hostname = _recorded_hostname(data)
    try:
        return _checked_target(data, hostname or path.stem, read_from=shown)
    except InputError as err:
        raise InputError(f"probe file {shown!r}: {err.message}", hint=err.hint) from None


#: os.open flags for reading a file's bytes as they are (O_BINARY: no newline translation on
#: Windows; it is 0 elsewhere).
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0)


def _read_bytes(path: str) -> bytes:
    """The file's bytes, as ``Path.read_bytes()`` reads them, with the same OSErrors.

    Plain os.open/os.read: the buffered file object ``read_bytes`` builds costs more than
    reading a small probe file, and a fleet means thousands of them. A directory fails as
    with ``open()``: IsADirectoryError (from os.read), PermissionError on Windows.
    """
    fd = os.open(path, _READ_FLAGS)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _recorded_hostname(data: Any) -> str | None:
    if isinstance(data, Mapping):
        host = data.get("host")
        if isinstance(host, Mapping):
            name = host.get("hostname")
            if isinstance(name, str) and name.strip():
                return name.strip()
    return None


_TOP_KEYS = ("schema_version", "name", "platform", "driver_version", "driver_cuda", "gpus",
             "host", "source", "notes")
_TOP_KEY_SET = frozenset(_TOP_KEYS)


def target_from_json(data: Any, name: str | None = None, *, read_from: str | None = None
                     ) -> Target:
    """The inverse of :meth:`Target.to_json`, validating every field (:class:`InputError`).

    Only ``schema_version`` and ``platform`` are required, so a hand-written file for a
    machine that cannot run cudalock can be short. ``name`` replaces the recorded name;
    ``read_from`` (a file) becomes the source, the recorded source a note.
    """
    target = _plain_target(data, name, read_from, _Parsed())
    if target is not None:
        return target
    return _checked_target(data, name, read_from=read_from)


class _Parsed:
    """The version strings and platforms met so far while reading one set of probe files.

    A fleet's files repeat the same few driver versions, CUDA versions, compute capabilities
    and platforms: each is parsed (or matched) once per read, not once per file or GPU. The
    values are immutable, so Targets may share them.
    """

    __slots__ = ("ccs", "cudas", "drivers", "platforms")

    def __init__(self) -> None:
        self.drivers: dict[str, DriverVersion] = {}
        self.cudas: dict[str, CudaVersion] = {}
        self.ccs: dict[str, ComputeCapability] = {}
        self.platforms: set[str] = set()


_Value = TypeVar("_Value")


def _parse_once(cache: dict[str, _Value], text: str, parse: Callable[[str], _Value]) -> _Value:
    """``parse(text)``, taken from ``cache`` when this read has met ``text`` before."""
    value = cache.get(text)
    if value is None:
        value = cache[text] = parse(text)
    return value


def _plain_target(data: Any, name: str | None, read_from: str | None, parsed: _Parsed,
                  *, file: Path | None = None) -> Target | None:
    """The Target of a valid document made of plain JSON values, in one pass; else None.

    None means "not accepted here", never "invalid": the caller then asks _checked_target,
    which reads what is valid but unusual (a Mapping that is not a dict, a str subclass) and
    words the first problem of what is not. Names and sources as in :func:`target_from_json`;
    with ``file``, the name is the recorded hostname (stripped, when not blank), else the
    file's stem, as :func:`read_probe_file` names Targets.
    """
    if type(data) is not dict or not data.keys() <= _TOP_KEY_SET:
        return None
    get = data.get
    version = get("schema_version")
    if type(version) is not int or version != TARGET_SCHEMA_VERSION:
        return None
    platform = get("platform")
    if type(platform) is not str:
        return None
    if platform not in parsed.platforms:
        if not is_platform_shaped(platform):
            return None
        parsed.platforms.add(platform)
    notes_raw = get("notes", [])
    if type(notes_raw) is not list:
        return None
    for note in notes_raw:
        if type(note) is not str:
            return None
    recorded_name = get("name")
    source = get("source")
    if (recorded_name is not None and type(recorded_name) is not str) \
            or (source is not None and type(source) is not str):
        return None
    driver_text = get("driver_version")
    cuda_text = get("driver_cuda")
    if (driver_text is not None and type(driver_text) is not str) \
            or (cuda_text is not None and type(cuda_text) is not str):
        return None
    try:
        driver_version = (None if driver_text is None
                          else _parse_once(parsed.drivers, driver_text, parse_driver_version))
        driver_cuda = (None if cuda_text is None
                       else _parse_once(parsed.cudas, cuda_text, parse_cuda_version))
        gpus = _plain_gpus(get("gpus", []), parsed.ccs)
    except InputError:  # a bad version string: _checked_target words it
        return None
    if gpus is None:
        return None
    host_raw = get("host")
    host = Host() if host_raw is None else _plain_host(host_raw)
    if host is None:
        return None
    if file is not None:
        # The stem only when needed: most probe files record their hostname.
        name = (host.hostname.strip() if host.hostname is not None else "") or file.stem
    source = source or "file"
    notes = tuple(notes_raw)
    if read_from is not None:
        notes = (f"read from {read_from} (probed there via {source})", *notes)
        source = f"file:{read_from}"
    return Target(platform=platform, driver_version=driver_version, driver_cuda=driver_cuda,
                  gpus=gpus, host=host, name=name or recorded_name or "this machine",
                  source=source, notes=notes)


def _plain_gpus(entries: Any, ccs: dict[str, ComputeCapability]
                ) -> tuple[Gpu, ...] | None:
    """The ``gpus`` list of :func:`_plain_target`: one pass per entry, None when it declines.

    Raises InputError for a compute capability that does not parse.
    """
    if type(entries) is not list:
        return None
    gpus: list[Gpu] = []
    for entry in entries:
        if type(entry) is not dict or not _fields_plain(entry, _GPU_FIELDS, "name"):
            return None
        cc_text = entry.get("compute_capability")
        cc = None if cc_text is None else _parse_once(ccs, cc_text, parse_compute_capability)
        gpus.append(Gpu(entry["name"], cc, entry.get("index"), entry.get("uuid"),
                        entry.get("memory_total_bytes")))
    return tuple(gpus)


def _plain_host(entry: Any) -> Host | None:
    """The ``host`` object of :func:`_plain_target` (not null), or None when it declines."""
    if type(entry) is not dict or not _fields_plain(entry, _HOST_FIELDS):
        return None
    get = entry.get
    return Host(get("os"), get("arch"), get("glibc"), get("memory_total_bytes"),
                get("cgroup_memory_limit_bytes"), get("hostname"))


def _checked_target(data: Any, name: str | None = None, *, read_from: str | None = None
                    ) -> Target:
    """:func:`target_from_json` field by field, wording the first problem (see above)."""
    document = _object(data, "the document")
    _no_unknown_keys(document, _TOP_KEYS, "the document")
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(f"'schema_version' must be the integer {TARGET_SCHEMA_VERSION}, "
                         f"got {version!r}")
    if version != TARGET_SCHEMA_VERSION:
        raise InputError(f"schema_version {version} is not supported (this cudalock reads "
                         f"{TARGET_SCHEMA_VERSION}): write the file with a matching cudalock")
    platform = _string(document, "platform", required=True)
    assert platform is not None
    if not is_platform_shaped(platform):
        raise InputError(f"'platform' {platform!r} is not a platform: expected one of "
                         f"{', '.join(p.name for p in PLATFORMS)}")
    driver_text = _string(document, "driver_version")
    cuda_text = _string(document, "driver_cuda")
    gpus_raw = document.get("gpus", [])
    if not isinstance(gpus_raw, list):
        raise InputError(f"'gpus' must be a list, got {_kind(gpus_raw)}")
    notes_raw = document.get("notes", [])
    if not isinstance(notes_raw, list) or not all(isinstance(n, str) for n in notes_raw):
        raise InputError("'notes' must be a list of strings")
    recorded_name = _string(document, "name")
    source = _string(document, "source") or "file"
    notes = tuple(notes_raw)
    if read_from is not None:
        notes = (f"read from {read_from} (probed there via {source})", *notes)
        source = f"file:{read_from}"
    return Target(
        platform=platform,
        driver_version=parse_driver_version(driver_text) if driver_text is not None else None,
        driver_cuda=parse_cuda_version(cuda_text) if cuda_text is not None else None,
        gpus=tuple(_gpu_from_json(g, position) for position, g in enumerate(gpus_raw)),
        host=_host_from_json(document.get("host")),
        name=name or recorded_name or "this machine",
        source=source,
        notes=notes,
    )


_GPU_FIELDS: dict[str, type] = {"index": int, "name": str, "uuid": str,
                                 "compute_capability": str, "memory_total_bytes": int}
_HOST_FIELDS: dict[str, type] = {"os": str, "arch": str, "glibc": str, "memory_total_bytes": int,
                                  "cgroup_memory_limit_bytes": int, "hostname": str}


def _gpu_from_json(data: Any, position: int) -> Gpu:
    entry = _object(data, f"gpus[{position}]") if type(data) is not dict else data
    _check_fields(entry, _GPU_FIELDS, position, required="name")
    cc_text = entry.get("compute_capability")
    cc: ComputeCapability | None = None
    if cc_text is not None:
        try:
            cc = parse_compute_capability(cc_text)
        except InputError as err:
            raise InputError(f"gpus[{position}]: {err.message}") from None
    return Gpu(
        name=entry["name"],
        compute_capability=cc,
        index=entry.get("index"),
        uuid=entry.get("uuid"),
        memory_total_bytes=entry.get("memory_total_bytes"),
    )


def _host_from_json(data: Any) -> Host:
    if data is None:
        return Host()
    entry = _object(data, "host")
    _check_fields(entry, _HOST_FIELDS, "host")
    return Host(
        os=entry.get("os"),
        arch=entry.get("arch"),
        glibc=entry.get("glibc"),
        memory_total_bytes=entry.get("memory_total_bytes"),
        cgroup_memory_limit_bytes=entry.get("cgroup_memory_limit_bytes"),
        hostname=entry.get("hostname"),
    )


def _check_fields(entry: Mapping[str, Any], fields: dict[str, type], where: str | int,
                  required: str | None = None) -> None:
    """Every field known, of its type (null allowed), integers non-negative; else InputError.

    The common case is one pass (:func:`_fields_plain`); only a bad entry takes the slower
    path that words the error.
    """
    if _fields_plain(entry, fields, required):
        return
    if isinstance(where, int):  # worded only now: a position in the 'gpus' list
        where = f"gpus[{where}]"
    _no_unknown_keys(entry, tuple(fields), where)
    for key, kind in fields.items():
        if kind is int:
            _count(entry, key, where)
        else:
            _string(entry, key, required=key == required, where=where)
    raise AssertionError(f"{where}: a field failed the fast check but passed the slow one")


def _fields_plain(entry: Mapping[str, Any], fields: dict[str, type],
                  required: str | None = None) -> bool:
    """Every key is one of ``fields`` and every value null or exactly of its type (integers
    non-negative), ``required`` a string: the one-pass check, no wording."""
    if required is not None and type(entry.get(required)) is not str:
        return False
    for key, value in entry.items():
        kind = fields.get(key)
        if kind is None:
            return False
        if value is not None and (type(value) is not kind
                                  or (kind is int and cast(int, value) < 0)):
            return False
    return True


def _object(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise InputError(f"{where} must be a JSON object, got {_kind(data)}")
    return data


def _no_unknown_keys(entry: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = [str(k) for k in entry if k not in known]
    if unknown:
        raise InputError(f"{where} has unknown field(s) {', '.join(map(repr, sorted(unknown)))}; "
                         f"expected {', '.join(known)}")


def _string(entry: Mapping[str, Any], key: str, *, required: bool = False,
            where: str | None = None) -> str | None:
    value = entry.get(key)
    label = f"{where}.{key}" if where else key
    if value is None:
        if required:
            raise InputError(f"{label!r} is missing")
        return None
    if not isinstance(value, str):
        raise InputError(f"{label!r} must be a string or null, got {_kind(value)}")
    return value


def _count(entry: Mapping[str, Any], key: str, where: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError(f"'{where}.{key}' must be a non-negative integer or null, "
                         f"got {value!r}")
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null", int: "a number", float: "a number"}.get(type(value),
                                                                          type(value).__name__)
