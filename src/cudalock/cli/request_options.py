"""Options shared by every command that takes a Request, declared once.

``@request_options`` adds ``--torch``, ``--python``, ``--cuda``, ``--compat``, ``--with``,
``--framework``, ``--pytorch-index``, ``--pypi-index`` and ``--allow-insecure-index`` to a typer
command and hands it one :class:`RequestOptions` value as its ``request_opts`` argument. Values
not given are None, so a spec file (``cudalock.toml``) can fill them: see
:meth:`RequestOptions.to_request`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from cudalock.cli.options import add_options

if TYPE_CHECKING:
    from cudalock.model import Request

F = TypeVar("F", bound=Callable[..., Any])

REQUEST_PANEL = "Request (what to install)"


@dataclass(frozen=True)
class RequestOptions:
    """The Request flags as given (None: not given)."""

    torch: str | None = None
    python: str | None = None
    cuda: str | None = None
    compat: str | None = None
    #: As given: entries add to the default torchvision; "none" drops it.
    with_packages: tuple[str, ...] | None = None
    framework: str | None = None
    pytorch_index: str | None = None
    pypi_index: str | None = None
    allow_insecure_index: bool = False

    def to_request(self, base: Request | None = None) -> Request:
        """``base`` (e.g. from ``cudalock.toml``) overridden by the flags given, validated."""
        from cudalock.request import merge_request

        return merge_request(
            base,
            allow_insecure_index=self.allow_insecure_index,
            torch=self.torch,
            python=self.python,
            cuda=self.cuda,
            compat=self.compat,
            with_packages=self.with_packages,
            framework=self.framework,
            pytorch_index=self.pytorch_index,
            pypi_index=self.pypi_index,
        )


def _opt(hint: Any, *names: str, help: str, envvar: str | None = None) -> Any:
    return Annotated[hint, typer.Option(*names, help=help, envvar=envvar,
                                        rich_help_panel=REQUEST_PANEL)]


_PARAMETERS: dict[str, tuple[Any, Any]] = {
    "torch": (_opt(str | None, "--torch", help="torch version or specifier: 2.1.0, "
                   "'>=2.1,<2.4' (default: the newest that fits)."), None),
    "python": (_opt(str | None, "--python", help="Python version of the environment, e.g. "
                    "3.11 (default: the newest the chosen torch supports)."), None),
    "cuda": (_opt(str | None, "--cuda", help="Pin the CUDA build, e.g. 12.1 (default: the "
                  "newest the driver allows)."), None),
    "compat": (_opt(str | None, "--compat", help="strict (default: CUDA build <= driver CUDA) "
                    "or minor (NVIDIA minor-version compatibility)."), None),
    "with_": (_opt(list[str] | None, "--with", help="Companion package, e.g. torchaudio or "
                   "'deepspeed>=0.15' (repeatable; adds to torchvision; 'none' drops it)."), None),
    "framework": (_opt(str | None, "--framework", help="Fine-tuning framework: a requirement "
                       "(llamafactory==0.9.5), a local path (installed editable) or a VCS URL."),
                  None),
    "pytorch_index": (_opt(str | None, "--pytorch-index", envvar="CUDALOCK_PYTORCH_INDEX",
                           help="PyTorch index base URL (default https://download.pytorch.org/"
                           "whl); the build variant (/cu121) is appended."), None),
    "pypi_index": (_opt(str | None, "--pypi-index", envvar="CUDALOCK_PYPI_INDEX",
                        help="PyPI-compatible simple index URL for everything else "
                        "(default: pip's own)."), None),
    "allow_insecure_index": (_opt(bool, "--allow-insecure-index", help="Accept plain http "
                                  "index URLs to hosts other than loopback."), False),
}


def _request_options_from(values: dict[str, Any]) -> RequestOptions:
    with_packages = values["with_"]
    return RequestOptions(
        torch=values["torch"],
        python=values["python"],
        cuda=values["cuda"],
        compat=values["compat"],
        with_packages=tuple(with_packages) if with_packages else None,
        framework=values["framework"],
        pytorch_index=values["pytorch_index"],
        pypi_index=values["pypi_index"],
        allow_insecure_index=values["allow_insecure_index"],
    )


def request_options(func: F) -> F:
    """Add the Request flags to a command; it receives them as ``request_opts``."""
    return add_options(func, "request_opts", _PARAMETERS, _request_options_from)
