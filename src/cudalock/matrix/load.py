"""The compatibility matrix: typed view of the TOML files in ``compat_matrix/``.

Files, one concern each (all sharing ``schema_version``):

- ``matrix.toml``    — ``schema_version``, ``matrix_version`` (a date).
- ``cuda.toml``      — ``[[toolkit]]`` CUDA releases and their minimum drivers, ``[[major]]``
                       minor-version-compatibility floors, ``[[arch_support]]`` nvcc targets.
- ``torch.toml``     — ``[[release]]`` torch releases with ``[[release.build]]`` per variant.
- ``gpus.toml``      — ``[[gpu]]`` GPU models and compute capabilities, matched by NVML name.
- ``deepspeed.toml`` — ``[[release]]`` DeepSpeed releases, ``[[cuda_check]]`` op-builder rules.
- ``cuda_builds.toml`` (optional) — ``[[build]]`` the CUDA of CUDA-built PyPI wheels (vllm,
                       xformers, ...), for what is not read from the wheel itself.

Every entry has ``source`` (a URL or repo@commit:path, or a list of them) and ``status``
(``verified`` / ``unverified``); ``unverified = [field, ...]`` marks single fields of a verified
entry that rest on weaker evidence. Loading validates types and raises :class:`InputError` naming
the file and the entry; ``cudalock matrix check`` adds the cross-file rules.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib
import io
import json
import os
import pickle
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cudalock.errors import CudalockError, InputError
from cudalock.fsutil import (
    bound_directory,
    cache_disabled,
    cudalock_cache_dir,
    read_bounded,
    write_atomic,
)
from cudalock.matrix.model import (
    MATRIX_FILES,
    OPTIONAL_MATRIX_FILES,
    SCHEMA_VERSION,
    STATUSES,
    ArchSupport,
    CudaMajor,
    CudaToolkit,
    DeepSpeedCudaCheck,
    DeepSpeedRelease,
    GpuModel,
    Matrix,
    PackageBuild,
    Provenance,
    TorchBuild,
    TorchPairing,
    TorchRelease,
)
from cudalock.platforms import PLATFORMS
from cudalock.safetext import has_control, printable
from cudalock.shipped import shipped_dir
from cudalock.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    parse_compute_capability,
    parse_cuda_version,
    parse_python_version,
)

_PLATFORM_NAMES = frozenset(platform.name for platform in PLATFORMS)

# --------------------------------------------------------------------------------------------
# Loading


def default_matrix_dir() -> Path:
    """The matrix shipped with cudalock."""

    return shipped_dir("compat_matrix")


def matrix_dir_from(option: str | os.PathLike[str] | None) -> Path:
    """``--matrix DIR`` wins over ``CUDALOCK_MATRIX``, which wins over the shipped matrix."""
    chosen = option or os.environ.get("CUDALOCK_MATRIX") or None
    return Path(chosen) if chosen else default_matrix_dir()


def load_matrix(directory: str | os.PathLike[str] | None = None) -> Matrix:
    """Load and type-check a matrix directory (the shipped one by default)."""
    path = matrix_dir_from(directory)
    if not path.is_dir():
        raise InputError(f"matrix directory {str(path)!r} does not exist")
    files = {name: _read_matrix_file(path / name) for name in (*MATRIX_FILES, *_present(path))}
    key = _typed_key(path, files)
    matrix = _typed_before(key)
    if matrix is None:
        raw = {name: _parsed(path / name, data) for name, data in files.items()}
        matrix = build_matrix(raw, path, text_checked=True)
        _keep_typed(key, matrix)
    return matrix


def matrix_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/cudalock``, else ``~/.cache/cudalock``."""
    return cudalock_cache_dir()


def _present(path: Path) -> tuple[str, ...]:
    """The optional matrix files ``path`` holds."""
    return tuple(name for name in OPTIONAL_MATRIX_FILES if os.path.lexists(path / name))


#: The shipped torch.toml is 0.2 MB; a matrix file far larger is not one.
MAX_MATRIX_FILE_BYTES = 16 * 2**20


def _read_matrix_file(path: Path) -> bytes:
    if not os.path.lexists(path):
        raise InputError(f"matrix file {str(path)!r} is missing")
    return read_bounded(path, limit=MAX_MATRIX_FILE_BYTES, what="matrix file")


def _parsed(path: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    parsed = _parsed_before(digest)
    if parsed is None:
        parsed = _parse_toml(path, data)
        # Checked once, when parsed: only a checked parse is kept, under its bytes' digest.
        check_text_values(path.name, parsed)
        _keep_parsed(digest, parsed)
    return parsed


#: The TOML of the shipped matrix takes 70 ms to parse, its JSON 2 ms: each file's parse is
#: kept as JSON, named by the sha256 of the file's bytes (so an edited file is a new name,
#: never a stale answer), and typed and checked from there as from the TOML.
_PARSED_FORMAT = 1
_PARSED_ENTRIES = 64


def _parsed_path(digest: str) -> Path:
    return cudalock_cache_dir() / "matrix" / f"{digest}.v{_PARSED_FORMAT}.json"


def _parsed_before(digest: str) -> dict[str, Any] | None:
    if cache_disabled():
        return None
    try:
        document = json.loads(
            read_bounded(_parsed_path(digest), limit=4 * MAX_MATRIX_FILE_BYTES, what="cache file")
        )
    except (InputError, OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def _keep_parsed(digest: str, parsed: dict[str, Any]) -> None:
    if cache_disabled():
        return
    try:
        text = json.dumps(parsed)
    except (TypeError, ValueError):
        return  # a TOML date or time (not in the shipped matrix) has no JSON form
    path = _parsed_path(digest)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, text)
        bound_directory(path.parent, _PARSED_ENTRIES, suffix=".json")
    except (OSError, CudalockError):
        pass  # an unwritable cache only costs the next command the parse


#: Typing the parsed matrix (30 torch releases, each with its builds and their architecture
#: lists) takes 20 ms, unpickling the result 6: the typed Matrix is kept too, named by the
#: digest of the directory and its files' bytes. Its header lists the source digest of every
#: module whose classes it holds, so a changed class is never filled from an old pickle.
_TYPED_FORMAT = 1
_TYPED_ENTRIES = 16


def _typed_key(directory: Path, files: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256(f"v{_TYPED_FORMAT}\0{directory.absolute()}".encode())
    for name, data in sorted(files.items()):
        digest.update(f"\0{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _typed_path(key: str) -> Path:
    return cudalock_cache_dir() / "matrix-typed" / f"{key}.pickle"


def _module_digest(name: str) -> str | None:
    """The sha256 of the source of module ``name`` (imported), or None when it has none."""
    try:
        module = sys.modules.get(name) or importlib.import_module(name)
    except ImportError:
        return None
    source = getattr(module, "__file__", None)
    if not source:
        return None
    try:
        return hashlib.sha256(Path(source).read_bytes()).hexdigest()
    except OSError:
        return None


def _typed_before(key: str) -> Matrix | None:
    """The typed matrix kept under ``key``, when the file is this user's own, unwritable by
    others (unpickling runs what the file says), and its classes' sources are unchanged."""
    if cache_disabled():
        return None
    path = _typed_path(key)
    try:
        with open(path, "rb") as handle:
            status = os.fstat(handle.fileno())
            if hasattr(os, "getuid") and (status.st_uid != os.getuid() or status.st_mode & 0o022):
                return None
            header = json.loads(handle.readline())
            modules = header["modules"]
            if any(_module_digest(name) != digest for name, digest in modules.items()):
                return None
            matrix = pickle.load(handle)  # the user's own cache, its owner checked above
    except (OSError, ValueError, LookupError, TypeError, AttributeError, EOFError, ImportError):
        return None
    except pickle.UnpicklingError:  # not a ValueError: a damaged file is only a miss
        return None
    return matrix if isinstance(matrix, Matrix) else None


class _ClassRecorder(pickle.Pickler):
    """A pickler that notes the module of every object's class it writes."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.modules: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        self.modules.add(type(obj).__module__)
        if isinstance(obj, type):
            self.modules.add(obj.__module__)
        return NotImplemented


def _keep_typed(key: str, matrix: Matrix) -> None:
    if cache_disabled():
        return
    payload = io.BytesIO()
    recorder = _ClassRecorder(payload)
    try:
        recorder.dump(matrix)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return
    modules = {}
    for name in sorted(recorder.modules - {"builtins"}):
        digest = _module_digest(name)
        if digest is None and name.startswith("cudalock"):
            return  # a class of ours without a source to check against: not kept
        modules[name] = digest
    header = json.dumps({"modules": modules}).encode() + b"\n"
    path = _typed_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, header + payload.getvalue(), mode=0o600)
        bound_directory(path.parent, _TYPED_ENTRIES, suffix=".pickle")
    except (OSError, CudalockError):
        pass  # an unwritable cache only costs the next command the typing


def _parse_toml(path: Path, data: bytes) -> dict[str, Any]:
    from cudalock.tomlfile import tomllib

    try:
        document: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise InputError(
            f"matrix file {str(path)!r} is not UTF-8 text (byte {err.start}); TOML files are UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"matrix file {str(path)!r} is not valid TOML: {err}") from None
    except RecursionError:
        raise InputError(
            f"matrix file {str(path)!r} is not valid TOML: nested too deeply"
        ) from None
    return document


class _Entry:
    """Typed access to one TOML table, with errors naming the file and the entry."""

    def __init__(self, file: str, where: str, table: Mapping[str, Any]) -> None:
        if not isinstance(table, Mapping):
            raise InputError(f"{file}: {where}: expected a table, got {type(table).__name__}")
        self.file, self.where, self.table = file, where, table

    def fail(self, problem: str) -> InputError:
        return InputError(f"{self.file}: {self.where}: {problem}")

    def str(self, key: builtins.str, *, optional: bool = False) -> builtins.str | None:
        value = self.table.get(key)
        if value is None:
            if optional:
                return None
            raise self.fail(f"missing {key!r}")
        if not isinstance(value, str):
            raise self.fail(f"{key!r} must be a string, got {value!r}")
        return value

    def req(self, key: builtins.str) -> builtins.str:
        value = self.str(key)
        assert value is not None
        return value

    def strs(self, key: builtins.str) -> tuple[builtins.str, ...]:
        value = self.table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"{key!r} must be a list of strings")
        return tuple(value)

    def int(self, key: builtins.str) -> builtins.int:
        value = self.table.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"{key!r} must be an integer, got {value!r}")
        return value

    def mapping(self, key: builtins.str) -> Mapping[builtins.str, Any]:
        value = self.table.get(key, {})
        if not isinstance(value, Mapping):
            raise self.fail(f"{key!r} must be a table")
        return value

    def version(self, key: builtins.str) -> builtins.str:
        """A required PEP 440 version, kept as its text.

        Checked on load: a release whose version does not parse would otherwise be skipped
        without a word. Looser fields (requires_python, dates) are left to ``matrix check``,
        which reports every such problem at once.
        """
        text = self.req(key)
        # Imported here: a cached Matrix is loaded without validating again.
        from packaging.version import InvalidVersion, Version

        try:
            Version(text)
        except InvalidVersion:
            raise self.fail(f"{key!r} is {text!r}, not a PEP 440 version like 2.1.0") from None
        return text

    def optional_version(self, key: builtins.str) -> builtins.str | None:
        """A PEP 440 version when the key is there (torchvision, cuDNN...)."""
        return self.version(key) if self.table.get(key) is not None else None

    def specifier(self, key: builtins.str, *, optional: bool = False) -> builtins.str | None:
        """A PEP 440 specifier (``>=3.9``, ``>=2.0,<2.6``; empty: any), kept as its text."""
        text = self.str(key, optional=optional)
        if text is None:
            return None
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            SpecifierSet(text)
        except InvalidSpecifier:
            raise self.fail(f"{key!r} is {text!r}, not a PEP 440 specifier like >=3.9") from None
        return text

    def variant(self, key: builtins.str, value: Any = None) -> builtins.str:
        """A build variant: cpu, cuXYZ or rocmX.Y (it becomes an index URL and a label)."""
        text = self.req(key) if value is None else value
        if not isinstance(text, str) or not VARIANT_RE.fullmatch(text):
            raise self.fail(f"{key!r} is {text!r}, not a build variant: cpu, cuXYZ, rocmX.Y or xpu")
        return text

    def platform_names(self, key: builtins.str, names: Any) -> None:
        unknown = [name for name in names if name not in _PLATFORM_NAMES]
        if unknown:
            raise self.fail(
                f"{key!r} names {unknown[0]!r}, not a platform: expected one of "
                f"{', '.join(sorted(_PLATFORM_NAMES))}"
            )

    def pythons(self, key: builtins.str) -> dict[builtins.str, tuple[builtins.str, ...]]:
        """``python.<platform> = ["3.10", "3.13t"]``, every version checked."""
        found: dict[builtins.str, tuple[builtins.str, ...]] = {}
        for platform, versions in self.mapping(key).items():
            if not isinstance(versions, list):
                continue
            self.platform_names(f"{key}.{platform}", [platform])
            try:
                found[platform] = tuple(parse_python_version(v) for v in versions)
            except InputError as err:
                raise self.fail(f"{key}.{platform}: {err.message}") from None
        return found

    def driver(self, key: builtins.str) -> DriverVersion | None:
        text = self.str(key, optional=True)
        if text is None:
            return None
        try:
            return DriverVersion(text)
        except InputError:
            raise self.fail(f"{key!r} is not a driver version: {text!r}") from None

    def cuda(self, key: builtins.str, *, optional: bool = False) -> CudaVersion | None:
        text = self.str(key, optional=optional)
        if text is None:
            return None
        try:
            return parse_cuda_version(text)
        except InputError:
            raise self.fail(f"{key!r} is not a CUDA version: {text!r}") from None

    def ccs(self, key: builtins.str) -> tuple[ComputeCapability, ...]:
        try:
            return tuple(parse_compute_capability(v) for v in self.strs(key))
        except InputError as err:
            raise self.fail(f"{key!r}: {err.message}") from None

    def provenance(self) -> Provenance:
        source = self.table.get("source")
        if isinstance(source, str):
            sources: tuple[str, ...] = (source,)
        elif isinstance(source, list) and source and all(isinstance(s, str) for s in source):
            sources = tuple(source)
        else:
            raise self.fail("missing 'source' (a URL or repo@commit:path, or a list of them)")
        if not all(s.strip() for s in sources):
            raise self.fail("'source' must not be empty")
        status = self.str("status")
        if status not in STATUSES:
            raise self.fail(f"'status' must be one of {', '.join(STATUSES)}, got {status!r}")
        return Provenance(
            source=sources,
            status=status,
            unverified_fields=self.strs("unverified"),
            note=self.str("note", optional=True),
        )


def _entries(file: str, data: Mapping[str, Any], key: str, label: str) -> Iterator[_Entry]:
    tables = data.get(key, [])
    if not isinstance(tables, list):
        raise InputError(f"{file}: {key!r} must be an array of tables ([[{key}]])")
    for position, table in enumerate(tables, start=1):
        name = table.get(label) if isinstance(table, Mapping) else None
        where = f"[[{key}]] #{position}" + (f" ({label} = {name!r})" if name else "")
        yield _Entry(file, where, table)


#: A torch build variant: the CPU build, a CUDA build (cu121), a ROCm build (rocm6.2.4), XPU.
VARIANT_RE = re.compile(r"cpu|cu\d{2,4}|rocm\d{1,2}(?:\.\d{1,2}){1,2}|xpu", re.ASCII)


def check_text_values(file: str, document: Mapping[str, Any]) -> None:
    """Refuse control characters (line breaks included) in every string of a matrix file:
    matrix values become lines of requirements files and scripts, where a line break in a
    version would be a line of its own (``-e /path``, built and run by pip)."""
    for key, value in document.items():
        if isinstance(value, list) and all(isinstance(item, Mapping) for item in value):
            for entry in _entries(file, document, key, _LABELS.get(key, "version")):
                _check_strings(entry, entry.table, "")
        else:
            _check_strings(_Entry(file, "top level", {}), value, key)


#: The field that names an entry of each array of tables in messages.
_LABELS = {
    "toolkit": "version",
    "major": "major",
    "arch_support": "cuda",
    "release": "version",
    "gpu": "name",
    "cuda_check": "deepspeed",
    "build": "package",
    "pairing": "package",
}


def _check_strings(entry: _Entry, value: Any, where: str) -> None:
    if isinstance(value, str):
        if has_control(value):
            shown = printable(value[:60], keep_lines=False)
            raise entry.fail(f"{where or 'a value'!r} holds control characters: '{shown}'")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_strings(entry, item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            _check_strings(entry, item, f"{where}[{position}]")


def build_matrix(
    raw: Mapping[str, Mapping[str, Any]],
    directory: Path | None = None,
    *,
    text_checked: bool = False,
) -> Matrix:
    """Turn the parsed TOML documents (file name → document) into a :class:`Matrix`, checking
    every value against its grammar (:class:`InputError` naming the file and the entry).
    ``text_checked``: the documents' strings were already checked for control characters."""
    if not text_checked:
        for name, document in raw.items():
            check_text_values(name, document)
    head = _Entry("matrix.toml", "top level", raw["matrix.toml"])
    schema = head.int("schema_version")
    if schema != SCHEMA_VERSION:
        raise head.fail(
            f"schema_version {schema} is not supported (this cudalock reads {SCHEMA_VERSION})"
        )
    for name in (*MATRIX_FILES[1:], *(n for n in OPTIONAL_MATRIX_FILES if n in raw)):
        declared = raw[name].get("schema_version")
        if declared is not None and declared != SCHEMA_VERSION:
            raise InputError(f"{name}: schema_version {declared} does not match matrix.toml")

    cuda_doc = raw["cuda.toml"]
    toolkits = tuple(_toolkit(e) for e in _entries("cuda.toml", cuda_doc, "toolkit", "version"))
    majors = tuple(
        CudaMajor(
            major=e.int("major"),
            minor_compat_linux=e.driver("minor_compat_linux"),
            minor_compat_windows=e.driver("minor_compat_windows"),
            provenance=e.provenance(),
        )
        for e in _entries("cuda.toml", cuda_doc, "major", "major")
    )
    arch_support = tuple(
        ArchSupport(cuda=_need(e.cuda("cuda")), sass=e.ccs("sass"), provenance=e.provenance())
        for e in _entries("cuda.toml", cuda_doc, "arch_support", "cuda")
    )

    releases = tuple(
        _torch_release(e) for e in _entries("torch.toml", raw["torch.toml"], "release", "version")
    )
    gpus = tuple(
        GpuModel(
            name=e.req("name"),
            match=e.strs("match") or (e.req("name"),),
            compute_capability=_need_cc(e),
            architecture=e.str("architecture", optional=True) or "",
            provenance=e.provenance(),
            aliases=e.strs("aliases") or (),
        )
        for e in _entries("gpus.toml", raw["gpus.toml"], "gpu", "name")
    )
    ds_doc = raw["deepspeed.toml"]
    deepspeed = tuple(
        DeepSpeedRelease(
            version=e.version("version"),
            date=e.str("date", optional=True),
            requires_python=e.specifier("requires_python", optional=True),
            torch=e.specifier("torch", optional=True) or "",
            provenance=e.provenance(),
        )
        for e in _entries("deepspeed.toml", ds_doc, "release", "version")
    )
    checks = tuple(
        _deepspeed_check(e) for e in _entries("deepspeed.toml", ds_doc, "cuda_check", "deepspeed")
    )
    return Matrix(
        schema_version=schema,
        matrix_version=head.req("matrix_version"),
        toolkits=toolkits,
        majors=majors,
        arch_support=arch_support,
        torch_releases=releases,
        gpus=gpus,
        deepspeed=deepspeed,
        deepspeed_cuda_checks=checks,
        directory=directory,
        package_builds=tuple(
            _package_build(e)
            for e in _entries(
                "cuda_builds.toml", raw.get("cuda_builds.toml", {}), "build", "package"
            )
        ),
        torch_pairings=tuple(
            _torch_pairing(e)
            for e in _entries(
                "torch_pairings.toml", raw.get("torch_pairings.toml", {}), "pairing", "package"
            )
        ),
    )


def _torch_pairing(e: _Entry) -> TorchPairing:
    torch = e.strs("torch")
    if not torch:
        raise e.fail("'torch' must list the torch releases it accepts")
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    for spec in torch:
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            raise e.fail(f"'torch' holds {spec!r}, not a PEP 440 specifier like ==2.10.0") from None
    return TorchPairing(
        package=e.req("package"),
        version=e.version("version"),
        torch=torch,
        read_from=e.req("read_from"),
        provenance=e.provenance(),
    )


#: A wheel's CUDA: "12.8", or the major alone where the wheel names only that.
_BUILD_CUDA_RE = re.compile(r"\d{1,2}(\.\d{1,2})?", re.ASCII)


def _package_build(e: _Entry) -> PackageBuild:
    cuda = e.req("cuda")
    if not _BUILD_CUDA_RE.fullmatch(cuda):
        raise e.fail(f"'cuda' must be MAJOR.MINOR or MAJOR, got {cuda!r}")
    return PackageBuild(
        package=e.req("package"),
        version=e.version("version"),
        cuda=cuda,
        torch=e.str("torch", optional=True),
        read_from=e.req("read_from"),
        provenance=e.provenance(),
    )


def _toolkit(e: _Entry) -> CudaToolkit:
    e.cuda("version")  # validates the form before it is stored as text
    return CudaToolkit(
        version=e.req("version"),
        label=e.str("label", optional=True) or e.req("version"),
        driver_linux=e.driver("driver_linux"),
        driver_windows=e.driver("driver_windows"),
        provenance=e.provenance(),
    )


def _need(value: CudaVersion | None) -> CudaVersion:
    assert value is not None
    return value


def _need_cc(entry: _Entry) -> ComputeCapability:
    text = entry.req("compute_capability")
    try:
        return parse_compute_capability(text)
    except InputError as err:
        raise entry.fail(err.message) from None


def _torch_release(e: _Entry) -> TorchRelease:
    version = e.version("version")
    python = e.pythons("python")
    pypi_default = {
        str(k): e.variant(f"pypi_default.{k}", v) for k, v in e.mapping("pypi_default").items()
    }
    e.platform_names("pypi_default", pypi_default)
    builds = []
    tables = e.table.get("build", [])
    if not isinstance(tables, list):
        raise e.fail("'build' must be an array of tables ([[release.build]])")
    for position, table in enumerate(tables, start=1):
        variant = table.get("variant") if isinstance(table, Mapping) else None
        b = _Entry(e.file, f"{e.where} build #{position} ({variant!r})", table)
        platforms = b.strs("platforms")
        b.platform_names("platforms", platforms)
        builds.append(
            TorchBuild(
                variant=b.variant("variant"),
                cuda=b.cuda("cuda", optional=True),
                cudnn=b.optional_version("cudnn"),
                nccl=b.optional_version("nccl"),
                sass=b.ccs("sass"),
                ptx=b.ccs("ptx"),
                platforms=platforms,
                provenance=b.provenance(),
            )
        )
    return TorchRelease(
        version=version,
        date=e.req("date"),
        requires_python=_need_text(e.specifier("requires_python")),
        python=python,
        pypi_default=pypi_default,
        torchvision=e.optional_version("torchvision"),
        torchaudio=e.optional_version("torchaudio"),
        builds=tuple(builds),
        provenance=e.provenance(),
    )


def _deepspeed_check(e: _Entry) -> DeepSpeedCudaCheck:
    allowed: dict[int, tuple[CudaVersion, ...]] = {}
    for major, versions in e.mapping("minor_mismatch_ok").items():
        if not str(major).isdigit() or not isinstance(versions, list):
            raise e.fail("'minor_mismatch_ok' maps a CUDA major to a list of versions")
        try:
            allowed[int(major)] = tuple(parse_cuda_version(v) for v in versions)
        except InputError as err:
            raise e.fail(err.message) from None
    return DeepSpeedCudaCheck(
        deepspeed=_need_text(e.specifier("deepspeed")),
        minor_mismatch_ok=allowed,
        provenance=e.provenance(),
    )


def _need_text(value: str | None) -> str:
    assert value is not None  # required keys raise before returning None
    return value
