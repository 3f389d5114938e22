"""Options shared by every command that takes a Target (and the matrix), declared once.

``@target_options`` adds ``--probe``, ``--driver-version``, ``--driver-cuda``, ``--no-gpu``,
``--compute-capability``, ``--gpu``, ``--platform`` and ``--matrix`` to a typer command and hands
the command one :class:`TargetOptions` value as its ``target_opts`` argument.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])

TARGET_PANEL = "Target (which machine)"


@dataclass(frozen=True)
class TargetOptions:
    """The Target flags as given; :func:`cudalock.targets.targets_from_options` reads them."""

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


_PARAMETERS: dict[str, tuple[Any, Any]] = {
    "probe": (
        Annotated[
            list[Path] | None,
            typer.Option(
                "--probe",
                help="Probe JSON written by 'cudalock probe --json' on another machine "
                "(repeat for a fleet).",
                rich_help_panel=TARGET_PANEL,
            ),
        ],
        None,
    ),
    "driver_version": (
        Annotated[
            str | None,
            typer.Option(
                "--driver-version",
                envvar="CUDALOCK_DRIVER_VERSION",
                help="Target NVIDIA driver version, e.g. 535.104.05.",
                rich_help_panel=TARGET_PANEL,
            ),
        ],
        None,
    ),
    "driver_cuda": (
        Annotated[
            str | None,
            typer.Option(
                "--driver-cuda",
                envvar="CUDALOCK_DRIVER_CUDA",
                help="Highest CUDA version the target driver supports, e.g. 12.2.",
                rich_help_panel=TARGET_PANEL,
            ),
        ],
        None,
    ),
    "no_gpu": (
        Annotated[
            bool,
            typer.Option(
                "--no-gpu", help="Target a machine without NVIDIA GPUs.",
                rich_help_panel=TARGET_PANEL,
            ),
        ],
        False,
    ),
    "compute_capability": (
        Annotated[
            list[str] | None,
            typer.Option(
                "--compute-capability",
                help="A target GPU's compute capability, e.g. 8.6 (repeatable).",
                rich_help_panel=TARGET_PANEL,
            ),
        ],
        None,
    ),
    "gpu": (
        Annotated[
            list[str] | None,
            typer.Option(
                "--gpu",
                help="A target GPU by name, e.g. 'H100' or 'RTX 4090' (repeatable).",
                rich_help_panel=TARGET_PANEL,
            ),
        ],
        None,
    ),
    "platform": (
        Annotated[
            str | None,
            typer.Option(
                "--platform",
                help="linux-x86_64, linux-aarch64, windows-x86_64 or macos-arm64.",
                rich_help_panel=TARGET_PANEL,
            ),
        ],
        None,
    ),
    "matrix": (
        Annotated[
            Path | None,
            typer.Option(
                "--matrix",
                envvar="CUDALOCK_MATRIX",
                help="Use this compatibility matrix directory instead of the shipped one.",
                rich_help_panel=TARGET_PANEL,
            ),
        ],
        None,
    ),
}


def add_options(func: F, argument: str, parameters: Mapping[str, tuple[Any, Any]],
                build: Callable[[dict[str, Any]], object]) -> F:
    """Add ``parameters`` (name: (Annotated hint, default)) to a typer command as keyword-only
    options; the command receives ``build(values by name)`` as its ``argument``.

    The options come after the command's own, so shared flags sit in the same place everywhere.
    """
    signature = inspect.signature(func)
    # Resolved in the command's own module: string annotations (PEP 563) would otherwise be
    # evaluated later in this module's namespace, where the command's names do not exist.
    annotations = {k: v for k, v in typing.get_type_hints(func, include_extras=True).items()
                   if k != argument}
    kept = [p.replace(annotation=annotations.get(name, p.annotation))
            for name, p in signature.parameters.items() if name != argument]
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        for name, (hint, default) in parameters.items()
    ]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in parameters}
        return func(*args, **{argument: build(values)}, **kwargs)

    positional = [p for p in kept if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    keyword = [p for p in kept if p.kind is inspect.Parameter.KEYWORD_ONLY]
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*positional, *keyword, *added]
    )
    annotations.update({name: hint for name, (hint, _default) in parameters.items()})
    wrapper.__annotations__ = annotations
    del wrapper.__wrapped__  # typer must see the new signature, not the wrapped one
    return wrapper  # type: ignore[return-value]


def _target_options_from(values: dict[str, Any]) -> TargetOptions:
    return TargetOptions(
        probe_files=tuple(values["probe"] or ()),
        driver_version=values["driver_version"],
        driver_cuda=values["driver_cuda"],
        no_gpu=values["no_gpu"],
        compute_capabilities=tuple(values["compute_capability"] or ()),
        gpu_names=tuple(values["gpu"] or ()),
        platform=values["platform"],
        matrix_dir=values["matrix"],
    )


def target_options(func: F) -> F:
    """Add the Target flags to a command; it receives them as ``target_opts: TargetOptions``."""
    return add_options(func, "target_opts", _PARAMETERS, _target_options_from)
