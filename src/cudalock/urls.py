"""Index URLs: which ones cudalock accepts, and how they are shown without their credentials.

cudalock writes index URLs into scripts people run and lockfiles they trust, so an index must be
https, except on the loopback interface (a local mirror, the test index) or when the user says
``--allow-insecure-index``. Credentials (``https://user:token@host/...``) may be needed in the
files, but are never shown in messages or logs: :func:`redact` replaces them.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from cudalock.errors import UsageError

#: Where torch's CUDA and CPU builds are published; a build's index is ``BASE/<variant>``.
DEFAULT_PYTORCH_INDEX = "https://download.pytorch.org/whl"
#: The Python Package Index's simple API.
DEFAULT_PYPI_INDEX = "https://pypi.org/simple"

#: The scheme's length is bounded: unbounded, every letter of a long run of letters (a line of
#: uv's or pip's output) starts a scan to the run's end, quadratic in the line's length. The
#: text outside a match is kept, so a longer "scheme" reads the same.
_CREDENTIALS_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,31}://)[^/@\s]+@")


def redact(text: str) -> str:
    """``text`` with every ``user:password@`` of a URL in it replaced by ``***@``."""
    return _CREDENTIALS_RE.sub(lambda m: f"{m.group('scheme')}***@", text)


def redact_json(document: Any) -> Any:
    """``document`` (JSON data) with :func:`redact` applied to every string in it, at any depth."""
    if isinstance(document, str):
        return redact(document)
    if isinstance(document, Mapping):
        return {key: redact_json(value) for key, value in document.items()}
    if isinstance(document, list):
        return [redact_json(item) for item in document]
    return document


def is_loopback_host(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def validate_index_url(url: str, *, flag: str, allow_insecure: bool = False) -> str:
    """Return ``url`` without a trailing slash, or raise :class:`UsageError` saying why not.

    ``flag`` names the option in the message (``--pytorch-index``).
    """
    shown = redact(url)
    if any(ch.isspace() for ch in url) or any(ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise UsageError(
            f"{flag} {shown!r} contains whitespace or control characters; "
            "expected a URL like https://mirror.example/whl"
        )
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018  (raises ValueError for a bad port)
    except ValueError:
        raise UsageError(f"{flag} {shown!r} is not a valid URL") from None
    if parts.scheme not in ("https", "http") or not host:
        raise UsageError(
            f"{flag} {shown!r} is not an http(s) URL; "
            "expected a URL like https://mirror.example/whl"
        )
    if parts.query or parts.fragment:
        raise UsageError(f"{flag} {shown!r} must not have a query or fragment")
    if parts.scheme == "http" and not allow_insecure and not is_loopback_host(host):
        raise UsageError(
            f"{flag} {shown!r} is plain http to a non-loopback host; packages fetched over it "
            "could be replaced in transit",
            hint="use https, or pass --allow-insecure-index if you trust this network",
        )
    return url.rstrip("/")


def strip_credentials(url: str) -> str:
    """``url`` without its ``user:password@`` part (for records that must not hold secrets)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=host))
