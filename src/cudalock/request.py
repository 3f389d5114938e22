"""Building a :class:`Request` from flags and a spec file, validating every value.

Flags win over the spec file (``cudalock.toml``), which wins over the defaults. The version
fields follow :func:`cudalock.resolve.make_request` (``--with`` adds to the default torchvision,
``--with none`` drops it); index URLs follow :mod:`cudalock.urls` (https, or loopback). Each bad
value raises :class:`UsageError` naming it and what is expected.
"""

from __future__ import annotations

from collections.abc import Sequence

from cudalock.errors import UsageError
from cudalock.model import Request
from cudalock.urls import validate_index_url


def merge_request(
    base: Request | None,
    *,
    allow_insecure_index: bool = False,
    torch: str | None = None,
    python: str | None = None,
    cuda: str | None = None,
    compat: str | None = None,
    with_packages: Sequence[str] | None = None,
    framework: str | None = None,
    pytorch_index: str | None = None,
    pypi_index: str | None = None,
) -> Request:
    """``base`` (or the defaults) with every value given (not None) applied, validated."""
    from cudalock.resolve import make_request

    current = base if base is not None else Request()
    if with_packages is None:
        # The base list is complete as recorded: "none" first stops make_request re-adding
        # the default torchvision when the user had dropped it.
        with_packages = ["none", *current.with_packages]
    request = make_request(
        torch=torch if torch is not None else current.torch,
        python=python if python is not None else current.python,
        cuda=cuda if cuda is not None else current.cuda,
        compat=compat if compat is not None else current.compat,
        with_packages=list(with_packages),
        framework=check_framework(framework if framework is not None else current.framework),
        pytorch_index=validate_index_url(
            pytorch_index if pytorch_index is not None else current.pytorch_index,
            flag="--pytorch-index", allow_insecure=allow_insecure_index),
        pypi_index=_optional_index(pypi_index if pypi_index is not None else current.pypi_index,
                                   allow_insecure_index),
    )
    return request


def _optional_index(url: str | None, allow_insecure: bool) -> str | None:
    if not url:
        return None
    return validate_index_url(url, flag="--pypi-index", allow_insecure=allow_insecure)


def check_framework(text: str | None) -> str | None:
    """A framework requirement, path or VCS URL on one line (shell quoting happens later)."""
    if text is None:
        return None
    cleaned = text.strip()
    if not cleaned or any(ch in cleaned for ch in "\n\r\0"):
        raise UsageError(f"invalid --framework {text!r}: expected a requirement "
                         "(llamafactory==0.9.5), a local path or a VCS URL, on one line")
    return cleaned
