"""``cudalock.toml``: the Request, a Target summary and the output choices, kept with comments.

``cudalock bootstrap`` writes it next to its outputs and ``cudalock lock`` regenerates lockfiles
from it. Both read it the same way (:func:`read_inputs`: flags override its values) and bootstrap
updates it in place with tomlkit, so the user's comments and layout survive. Credentials in
index URLs are not recorded here (the file is meant to be committed): pass them again with the
flag or its environment variable.

Layout::

    spec_version = 1
    [request]   torch, python, cuda, compat, with, frameworks, pytorch_index, pypi_index
    [target]    driver_version, driver_cuda, compute_capabilities, platform, gpu
    [output]    format, name
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudalock.defaults import OUTPUT_FORMATS, SPEC_FILE
from cudalock.errors import InputError, UsageError
from cudalock.fsutil import read_bounded
from cudalock.machine import TargetOptions
from cudalock.model import Plan
from cudalock.request import Request, RequestOptions, parse_compat
from cudalock.tomlfile import tomllib
from cudalock.urls import strip_credentials
from cudalock.versions import format_cc, format_cuda

if TYPE_CHECKING:
    import tomlkit

__all__ = [
    "MAX_SPEC_BYTES",
    "SPEC_VERSION",
    "Inputs",
    "OutputSpec",
    "Spec",
    "TargetSummary",
    "parse_spec",
    "read_inputs",
    "read_spec",
    "spec_values",
    "update_spec",
    "update_spec_text",
]

SPEC_VERSION = 1

_HEADER = (
    "cudalock.toml: what `cudalock bootstrap` and `cudalock lock` regenerate their files from.",
    "Edit it freely: cudalock keeps your comments. Flags on the command line override it.",
)


@dataclass(frozen=True)
class TargetSummary:
    """The machine(s) the files were made for, as flags could describe it again.

    ``gpu`` False records a CPU-only target (no driver).
    """

    driver_version: str | None = None
    driver_cuda: str | None = None
    compute_capabilities: tuple[str, ...] = ()
    platform: str | None = None
    gpu: bool = True

    @classmethod
    def of(cls, plan: Plan) -> TargetSummary | None:
        """One summary for the plan's fleet: every GPU architecture, and the driver of the node
        the plan was made for (the fleet's lowest, as resolve reduced it), its version and its
        CUDA together: never one node's driver with another's CUDA."""
        targets = plan.targets
        if not targets:
            return None
        lowest = plan.driver_node
        driver_version = lowest.driver_version if lowest is not None else None
        driver_cuda = lowest.driver_cuda if lowest is not None else None
        ccs = sorted({cc for t in targets for cc in t.compute_capabilities})
        return cls(
            driver_version=str(driver_version) if driver_version is not None else None,
            driver_cuda=format_cuda(driver_cuda) if driver_cuda is not None else None,
            compute_capabilities=tuple(format_cc(cc) for cc in ccs),
            platform=targets[0].platform,
            gpu=any(t.has_driver for t in targets),
        )


@dataclass(frozen=True)
class OutputSpec:
    format: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Spec:
    #: The Request as the file records it: strings, None where a key is absent.
    request: RequestOptions = field(default_factory=RequestOptions)
    target: TargetSummary | None = None
    output: OutputSpec = field(default_factory=OutputSpec)
    #: The text the spec was read from (None for one built in memory): updating the file keeps
    #: its comments without reading it again.
    text: str | None = field(default=None, compare=False, repr=False)


# --------------------------------------------------------------------------------------------
# Reading


#: A spec is a few dozen lines; anything far larger is not one.
MAX_SPEC_BYTES = 1 * 2**20


def read_spec(path: Path) -> Spec | None:
    """The spec in ``path``, or None if there is no such file. Bad content: :class:`InputError`."""
    text = _read_spec_text(path)
    return None if text is None else parse_spec(text, str(path))


def _read_spec_text(path: Path) -> str | None:
    """The text of a regular file (never a FIFO or a device), None when there is none."""
    if not os.path.lexists(path):
        return None
    try:
        return read_bounded(path, limit=MAX_SPEC_BYTES, what="spec file").decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"cannot read {path}: it is not UTF-8 text") from None


def parse_spec(text: str, where: str = SPEC_FILE) -> Spec:
    """Parse spec text; ``where`` names the file in error messages."""
    data = _parse(text, where)
    version = data.get("spec_version", SPEC_VERSION)
    if version != SPEC_VERSION:
        raise InputError(
            f"{where}: spec_version {version!r} is not supported "
            f"(this cudalock reads {SPEC_VERSION})"
        )
    unknown = set(data) - {"spec_version", "request", "target", "output"}
    if unknown:
        raise InputError(
            f"{where}: unknown key {sorted(unknown)[0]!r}; expected [request], "
            "[target] and [output] tables"
        )
    request_table = _Table(where, "request", data.get("request", {}))
    target_table = _Table(where, "target", data.get("target")) if "target" in data else None
    output_table = _Table(where, "output", data.get("output", {}))
    return Spec(
        request=_request(request_table),
        target=_target(target_table) if target_table is not None else None,
        output=_output(output_table),
        text=text,
    )


#: tomllib's "… (at line L, column C)".
_TOMLLIB_POSITION_RE = re.compile(r" \(at line (\d{1,9}), column (\d{1,9})\)\Z")


def _parse(text: str, where: str) -> dict[str, Any]:
    """The spec as plain data, read by tomllib: linear in the text, whatever it holds (tomlkit
    is cubic in the number of dotted keys, and is used only to rewrite a spec read here first)."""
    try:
        document: dict[str, Any] = tomllib.loads(text)
        return document
    except tomllib.TOMLDecodeError as err:
        # Said the compiler way: FILE:LINE:COL.
        found = _TOMLLIB_POSITION_RE.search(str(err))
        if found is None:
            raise InputError(f"{where}: invalid TOML: {err}") from None
        message, (line, column) = str(err)[: found.start()], found.groups()
        raise InputError(f"{where}:{line}:{column}: invalid TOML: {message}") from None
    except RecursionError:
        raise InputError(f"{where}: invalid TOML: nested too deeply") from None


class _Table:
    """Typed access to one table, errors naming the file, the table and the key."""

    def __init__(self, where: str, name: str, table: Any) -> None:
        if not isinstance(table, Mapping):
            raise InputError(f"{where}: [{name}] must be a table")
        self.where, self.name, self.table = where, name, table

    def check_keys(self, known: Sequence[str]) -> None:
        for key in self.table:
            if key not in known:
                raise InputError(
                    f"{self.where}: [{self.name}] unknown key {key!r}; "
                    f"expected one of {', '.join(known)}"
                )

    def _value(self, key: str, fits: Callable[[Any], bool], expected: str) -> Any:
        """The key's value (None if absent), or an error saying it must be ``expected``."""
        value = self.table.get(key)
        if value is not None and not fits(value):
            raise InputError(f"{self.where}: [{self.name}] {key} must be {expected}, got {value!r}")
        return value

    def text(self, key: str) -> str | None:
        value: str | None = self._value(key, lambda v: isinstance(v, str), "a string")
        return value

    def texts(self, key: str) -> tuple[str, ...] | None:
        value = self._value(
            key,
            lambda v: isinstance(v, list) and all(isinstance(item, str) for item in v),
            "a list of strings",
        )
        return None if value is None else tuple(value)

    def flag(self, key: str) -> bool | None:
        value: bool | None = self._value(key, lambda v: isinstance(v, bool), "true or false")
        return value


_REQUEST_KEYS = (
    "torch",
    "python",
    "cuda",
    "compat",
    "with",
    "frameworks",
    "framework",
    "pytorch_index",
    "pypi_index",
)
_TARGET_KEYS = ("driver_version", "driver_cuda", "compute_capabilities", "platform", "gpu")
_OUTPUT_KEYS = ("format", "name")


def _request(table: _Table) -> RequestOptions:
    """The recorded Request, as strings: parsed with the flags laid over it
    (:meth:`RequestOptions.to_request`), so each value is parsed once."""
    table.check_keys(_REQUEST_KEYS)
    compat = table.text("compat")
    if compat is not None:
        try:
            parse_compat(compat)
        except UsageError:
            raise InputError(
                f"{table.where}: [request] compat must be strict or minor, got {compat!r}"
            ) from None
    with_packages = table.texts("with")
    frameworks = table.texts("frameworks")
    if frameworks is None:
        # Written before --framework could be repeated: one string.
        single = table.text("framework")
        frameworks = (single,) if single else None
    return RequestOptions(
        torch=table.text("torch") or None,
        python=table.text("python"),
        cuda=table.text("cuda"),
        compat=compat,
        # The recorded list is complete: "none" first keeps a dropped torchvision out.
        with_packages=("none", *with_packages) if with_packages is not None else None,
        frameworks=frameworks,
        pytorch_index=table.text("pytorch_index") or None,
        pypi_index=table.text("pypi_index"),
    )


def _target(table: _Table) -> TargetSummary:
    table.check_keys(_TARGET_KEYS)
    gpu = table.flag("gpu")
    return TargetSummary(
        driver_version=table.text("driver_version"),
        driver_cuda=table.text("driver_cuda"),
        compute_capabilities=table.texts("compute_capabilities") or (),
        platform=table.text("platform"),
        gpu=True if gpu is None else gpu,
    )


def _output(table: _Table) -> OutputSpec:
    table.check_keys(_OUTPUT_KEYS)
    output_format = table.text("format")
    if output_format is not None and output_format not in OUTPUT_FORMATS:
        raise InputError(
            f"{table.where}: [output] format must be one of "
            f"{', '.join(OUTPUT_FORMATS)}, got {output_format!r}"
        )
    return OutputSpec(format=output_format, name=table.text("name"))


# --------------------------------------------------------------------------------------------
# Writing


def spec_values(spec: Spec) -> dict[str, dict[str, Any]]:
    """The tables as they are recorded (None: the key is left out)."""
    # Index and VCS URLs may carry a password or token: never recorded.
    request = spec.request

    def recorded(url: str | None) -> str | None:
        return strip_credentials(url) if url else None

    tables: dict[str, dict[str, Any]] = {
        "request": {
            "torch": request.torch or None,
            "python": request.python,
            "cuda": request.cuda,
            "compat": request.compat,
            "with": (
                [p for p in request.with_packages if p.strip().lower() != "none"]
                if request.with_packages is not None
                else None
            ),
            "frameworks": [strip_credentials(f) for f in request.frameworks or ()],
            "framework": None,  # the single-framework key of older files gives way to the list
            "pytorch_index": recorded(request.pytorch_index),
            "pypi_index": recorded(request.pypi_index),
        },
    }
    if spec.target is not None:
        target = spec.target
        tables["target"] = {
            "driver_version": target.driver_version,
            "driver_cuda": target.driver_cuda,
            "compute_capabilities": list(target.compute_capabilities),
            "platform": target.platform,
            "gpu": None if target.gpu else False,
        }
    tables["output"] = {"format": spec.output.format, "name": spec.output.name}
    return tables


def update_spec(path: Path, spec: Spec, read: Inputs | None = None) -> str:
    """The new text of ``path`` holding ``spec``: its comments and layout kept where it exists.
    When ``read`` (what :func:`read_inputs` read) is that file, its text is not read again."""
    if read is not None and read.spec is not None and read.spec_path == path:
        existing = read.spec.text
    else:
        existing = _read_spec_text(path)
    return update_spec_text(existing, spec, str(path))


def update_spec_text(existing: str | None, spec: Spec, where: str = SPEC_FILE) -> str:
    # Only a spec cudalock accepts (tomllib, then every key and value checked) reaches
    # tomlkit, which keeps its comments: what it is slow on never gets that far. A spec that
    # already records these values is kept as it is (no tomlkit at all: a second lock).
    if existing is not None:
        parse_spec(existing, where)
        if _records(_parse(existing, where), spec):
            return existing
    import tomlkit

    if existing is None:
        document = tomlkit.document()
        for line in _HEADER:
            document.add(tomlkit.comment(line))
        document.add(tomlkit.nl())
        document["spec_version"] = SPEC_VERSION
    else:
        document = tomlkit.parse(existing)
    for name, values in spec_values(spec).items():
        if name not in document:
            document[name] = tomlkit.table()
        table = document[name]
        assert isinstance(table, tomlkit.items.Table)
        _update_table(table, values)
    if "target" in document and spec.target is None:
        del document["target"]
    return tomlkit.dumps(document)


def _left_out(key: str, value: Any) -> bool:
    """Whether ``key`` is left out of the file for ``value`` (an empty list says nothing,
    except ``with = []``: no companions)."""
    return value is None or (isinstance(value, list) and not value and key != "with")


def _records(data: Mapping[str, Any], spec: Spec) -> bool:
    """Whether the spec file read as ``data`` already holds ``spec`` as it would be written."""
    if "target" in data and spec.target is None:
        return False
    for name, values in spec_values(spec).items():
        table = data.get(name)
        if not isinstance(table, dict):
            return False
        for key, value in values.items():
            if (key in table) if _left_out(key, value) else table.get(key) != value:
                return False
    return True


def _update_table(table: tomlkit.items.Table, values: Mapping[str, Any]) -> None:
    """Set changed values only, so untouched keys keep their comments and formatting."""
    from tomlkit.items import Item

    for key, value in values.items():
        if _left_out(key, value):
            if key in table:
                del table[key]
            continue
        current = table.get(key)
        plain = current.unwrap() if isinstance(current, Item) else current
        if plain != value:
            table[key] = value


# --------------------------------------------------------------------------------------------
# Flags over the spec: the one rule bootstrap and lock share


@dataclass(frozen=True)
class Inputs:
    """The Request and Target flags after the spec file has filled in what they leave out."""

    spec_path: Path
    spec: Spec | None
    request: Request
    target_options: TargetOptions
    #: Whether the spec's ``[target]`` describes (part of) the target.
    recorded_target: bool


def read_inputs(
    request_options: RequestOptions,
    target_options: TargetOptions,
    *,
    spec_file: Path | None,
    output_dir: Path,
    cwd: Path | None = None,
) -> Inputs:
    """Read ``spec_file`` (``--spec``), else ``output_dir/cudalock.toml`` if it exists, and lay
    the flags over it: each Request flag replaces its value; the Target flags replace the
    recorded target by part (the driver, the GPUs, the platform), and ``--probe`` replaces it
    whole. A ``--spec`` that does not exist is an :class:`InputError`. Relative framework
    paths count from ``cwd`` (default: the current directory)."""
    path = spec_file if spec_file is not None else output_dir / SPEC_FILE
    spec = read_spec(path)
    if spec is None and spec_file is not None:
        raise InputError(f"spec file {spec_file} does not exist")
    request = request_options.to_request(spec.request if spec else None, cwd=cwd)
    recorded = spec.target if spec is not None else None
    if recorded is None or target_options.probe_files:
        return Inputs(path, spec, request, target_options, recorded_target=False)
    return Inputs(
        path, spec, request, _over_recorded(target_options, recorded), recorded_target=True
    )


def _over_recorded(options: TargetOptions, recorded: TargetSummary) -> TargetOptions:
    """The recorded target with each part the flags give replaced: so a lock made for another
    machine is regenerated, and checked in CI, for that machine, and ``--driver-version
    550.54.14`` alone asks "and if its driver were upgraded?"."""
    driver_given = bool(options.driver_version or options.driver_cuda or options.no_gpu)
    gpus_given = bool(options.compute_capabilities or options.gpu_names)
    return dataclasses.replace(
        options,
        driver_version=options.driver_version if driver_given else recorded.driver_version,
        driver_cuda=options.driver_cuda if driver_given else recorded.driver_cuda,
        no_gpu=options.no_gpu if driver_given else not recorded.gpu,
        compute_capabilities=(
            options.compute_capabilities if gpus_given else tuple(recorded.compute_capabilities)
        ),
        platform=options.platform or recorded.platform,
    )
