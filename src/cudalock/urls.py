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

__all__ = [
    "holds_credentials",
    "is_loopback_host",
    "redact",
    "redact_json",
    "strip_credentials",
    "strip_credentials_in",
    "validate_index_url",
]

#: A URL in free text: a scheme, then everything up to whitespace (a password may hold any
#: other character, so nothing else may end it early). The scheme's length is bounded:
#: unbounded, every letter of a long run of letters (a line of uv's or pip's output) would start
#: a scan to the run's end, quadratic in the line's length.
_URL_IN_TEXT_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://\S*")
#: Punctuation that ends a sentence or closes a quote rather than belonging to the URL.
_TRAILING = "'\")>,.;:]}"
#: An authority that is a host and nothing else: a dotted name, localhost or [IPv6], a port.
_HOST_ONLY_RE = re.compile(
    r"(?:(?:[A-Za-z0-9-]+\.)+[A-Za-z0-9-]+|localhost|\[[0-9A-Fa-f:.]+\])(?::\d*)?", re.ASCII
)


def _userinfo_end(rest: str) -> int:
    """In ``rest`` (a URL after ``scheme://``), where its user:password part ends (0: none).

    The standard case is an ``@`` before the first ``/``, ``?`` or ``#``. A password holding one
    of those characters unencoded (``user:ab/SECRET@host``) shifts that boundary, so an ``@``
    further on also counts, unless what precedes the path is plainly a host
    (``https://github.com/org/repo@v1`` names a revision, not a user).
    """
    boundary = next((i for i, ch in enumerate(rest) if ch in "/?#"), len(rest))
    authority = rest[:boundary]
    end = authority.rindex("@") + 1 if "@" in authority else 0
    if "@" in rest[boundary:] and not (
        _HOST_ONLY_RE.fullmatch(authority[end:]) and rest[boundary : boundary + 1] == "/"
    ):
        return rest.rindex("@") + 1
    return end


def _split_url(token: str) -> tuple[str, str, str, str]:
    """A URL token → (scheme://, user:password@ or "", the rest, trailing punctuation)."""
    stripped = token.rstrip(_TRAILING)
    trailing = token[len(stripped) :]
    scheme_end = stripped.index("://") + 3
    scheme, rest = stripped[:scheme_end], stripped[scheme_end:]
    end = _userinfo_end(rest)
    return scheme, rest[:end], rest[end:], trailing


#: What :func:`redact` puts in place of a secret.
_REDACTED = "***"


def redact(text: str) -> str:
    """``text`` with every URL's ``user:password@`` replaced by ``***@``, and its query and
    fragment by ``?***`` / ``#***`` (tokens travel there too)."""

    def hide(match: re.Match[str]) -> str:
        scheme, userinfo, rest, trailing = _split_url(match.group(0))
        for mark in ("#", "?"):
            if mark in rest:
                rest = rest.split(mark, 1)[0] + mark + _REDACTED
        return scheme + (_REDACTED + "@" if userinfo else "") + rest + trailing

    return _URL_IN_TEXT_RE.sub(hide, text)


def holds_credentials(text: str) -> bool:
    """Whether a URL in ``text`` carries a user:password part or a query (a file holding one
    is a secret: owner-only). What :func:`redact` left (``***@``, ``?***``) holds none."""
    for match in _URL_IN_TEXT_RE.finditer(text):
        _scheme, userinfo, rest, _trailing = _split_url(match.group(0))
        query = rest.split("#", 1)[0].partition("?")[2]
        if userinfo not in ("", _REDACTED + "@") or query not in ("", _REDACTED):
            return True
    return False


def strip_credentials_in(text: str) -> str:
    """``text`` with the user:password part of every URL in it removed (for files that are
    committed: ``cudalock.toml``, the lock)."""

    def strip(match: re.Match[str]) -> str:
        scheme, _userinfo, rest, trailing = _split_url(match.group(0))
        return scheme + rest + trailing

    return _URL_IN_TEXT_RE.sub(strip, text)


def redact_json(document: Any) -> Any:
    """``document`` (JSON data) with :func:`redact` applied to every string in it, at any depth."""
    if isinstance(document, str):
        return redact(document)
    if isinstance(document, Mapping):
        return {key: redact_json(value) for key, value in document.items()}
    if isinstance(document, list):
        return [redact_json(item) for item in document]
    return document


#: Every character RFC 3986 allows in a URL (unreserved, reserved, and % of an escape).
_URL_CHARACTERS_RE = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
_BAD_PERCENT_RE = re.compile(r"%(?![0-9A-Fa-f]{2})")


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
    # pip, uv and Python's urllib do not agree on every string: refuse what they could read
    # differently, so the host checked here is the host they connect to.
    if "\\" in url:
        raise UsageError(
            f"{flag} {shown!r} contains a backslash, which pip and uv read as '/' (the host "
            "would not be the one it seems); expected a URL like https://mirror.example/whl"
        )
    if not _URL_CHARACTERS_RE.fullmatch(url):
        raise UsageError(
            f"{flag} {shown!r} contains characters a URL cannot hold as they are (non-ASCII, "
            'or one of "<>^`{|}); percent-encode them'
        )
    if _BAD_PERCENT_RE.search(url):
        raise UsageError(f"{flag} {shown!r} has a '%' that is not a %XX escape")
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018  (raises ValueError for a bad port)
    except ValueError:
        raise UsageError(f"{flag} {shown!r} is not a valid URL") from None
    if parts.netloc.count("@") > 1:
        raise UsageError(
            f"{flag} {shown!r} has more than one '@' before its host; write an '@' in a user "
            "name or password as %40"
        )
    if "%" in parts.netloc.rpartition("@")[2]:
        raise UsageError(f"{flag} {shown!r} has a percent-encoded host; write the host as it is")
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
            hint="Use https, or pass --allow-insecure-index if you trust this network.",
        )
    return url.rstrip("/")


def strip_credentials(url: str) -> str:
    """``url`` without its ``user:password@`` part (for records that must not hold secrets)."""
    return strip_credentials_in(url)
