"""Options shared by every command that takes a Request, declared once.

``--torch``, ``--python``, ``--cuda``, ``--compat``, ``--with``, ``--framework``,
``--pytorch-index``, ``--pypi-index`` and ``--allow-insecure-index``: a command adds
:data:`REQUEST_FLAGS` to its own and reads their values as one :class:`RequestOptions` with
:func:`request_options_from`. Standard library only. Values not given are None, so a spec file
(``cudalock.toml``) can fill them: see :meth:`RequestOptions.to_request`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cudalock.cli.flags import Flag, FlagGroup
from cudalock.resolve.request import RequestOptions

if TYPE_CHECKING:
    from cudalock.cli.flags import Kind

REQUEST_PANEL = "Request (what to install)"


def _flag(dest: str, name: str, kind: Kind, help: str, envvar: str | None = None,
          default: Any = None) -> Flag:
    return Flag(dest, (name,), kind, help=help, envvar=envvar, default=default,
                panel=REQUEST_PANEL)


REQUEST_FLAGS: tuple[Flag, ...] = (
    _flag("torch", "--torch", "str", "torch version or specifier: 2.1.0, '>=2.1,<2.4' "
          "(default: the newest that fits)."),
    _flag("python", "--python", "str", "Python version of the environment, e.g. 3.11 "
          "(default: the newest the chosen torch supports)."),
    _flag("cuda", "--cuda", "str", "Pin the CUDA build, e.g. 12.1 (default: the newest the "
          "driver allows)."),
    _flag("compat", "--compat", "str", "strict (default: CUDA build <= driver CUDA) or minor "
          "(NVIDIA minor-version compatibility)."),
    _flag("with_", "--with", "strs", "Companion package, e.g. torchaudio or 'deepspeed>=0.15' "
          "(repeatable; adds to torchvision; 'none' drops it)."),
    _flag("framework", "--framework", "str", "Fine-tuning framework: a requirement "
          "(llamafactory==0.9.5), a local path (installed editable) or a VCS URL."),
    _flag("pytorch_index", "--pytorch-index", "str", "PyTorch index base URL (default "
          "https://download.pytorch.org/whl); the build variant (/cu121) is appended.",
          envvar="CUDALOCK_PYTORCH_INDEX"),
    _flag("pypi_index", "--pypi-index", "str", "PyPI-compatible simple index URL for "
          "everything else (default: pip's own).", envvar="CUDALOCK_PYPI_INDEX"),
    _flag("allow_insecure_index", "--allow-insecure-index", "bool", "Accept plain http index "
          "URLs to hosts other than loopback.", default=False),
)


def request_options_from(values: Mapping[str, Any]) -> RequestOptions:
    """The :class:`RequestOptions` for the values of :data:`REQUEST_FLAGS` (by ``dest``)."""
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


#: The Request flags, handed to a command as ``request_opts: RequestOptions``.
REQUEST_OPTIONS = FlagGroup("request_opts", REQUEST_FLAGS, request_options_from)
