"""HTTP GETs for ``cudalock matrix refresh``, with the standard library alone.

urllib instead of requests: the refresh is the only part of cudalock that reads the network
itself, and cudalock is installed into training environments, where every dependency is one more
pin that can conflict with a framework's. What requests gave here — timeouts, retries of
transient failures, credentials in the URL — is a few lines on top of ``urllib.request``.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from cudalock import httpget
from cudalock.errors import EnvironmentFailure, UsageError
from cudalock.urls import redact, strip_credentials

__all__ = [
    "MAX_BYTES",
    "PEP691_JSON",
    "Fetcher",
]

PEP691_JSON = "application/vnd.pypi.simple.v1+json"
#: The largest answer read (a DeepSpeed sdist is about 1 MiB; an index page far less).
MAX_BYTES = 64 * 1024 * 1024


class Fetcher:
    """GETs with a timeout and retries (see :mod:`cudalock.httpget` for the limits); 404 is an
    answer (None), any other failure is :class:`EnvironmentFailure` (exit 3), its message without
    the URL's credentials."""

    def __init__(self, *, timeout: float = 30.0, retries: int = 3, backoff: float = 0.3) -> None:
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        #: origin → the credentials an index URL there carried: its file links carry none, and
        #: are fetched with them, as pip does; other hosts get none.
        self._credentials: dict[tuple[str, str | None, int | None], str] = {}

    def get_bytes(self, url: str, accept: str = "*/*") -> bytes | None:
        authorization = httpget.basic_authorization(url)
        if authorization is not None:
            self._credentials[httpget.origin(url)] = authorization
        try:
            return httpget.get(
                url,
                timeout=self.timeout,
                limit=MAX_BYTES,
                retries=self.retries,
                backoff=self.backoff,
                credentials=self._credentials,
                headers={"Accept": accept, "User-Agent": "cudalock-matrix-refresh"},
            ).body
        except httpget.NotFound:
            return None
        except UsageError as err:
            raise EnvironmentFailure(f"the index links to {err.message}; not followed") from None

    def get(self, url: str, accept: str = "*/*") -> str | None:
        data = self.get_bytes(url, accept)
        return None if data is None else data.decode("utf-8", "replace")

    def json(self, url: str) -> Mapping[str, Any] | None:
        """A PEP 691 JSON page (None: 404)."""
        text = self.get(url, PEP691_JSON)
        if text is None:
            return None
        try:
            document = json.loads(text)
        except ValueError:
            raise EnvironmentFailure(f"{redact(url)} did not answer PEP 691 JSON") from None
        if not isinstance(document, dict):
            raise EnvironmentFailure(f"{redact(url)} did not answer PEP 691 JSON")
        # File URLs may be relative to the page (PEP 691): make them absolute here, once.
        files = document.get("files")
        if isinstance(files, list):
            page = strip_credentials(url)
            for entry in files:
                if isinstance(entry, dict) and isinstance(entry.get("url"), str):
                    entry["url"] = urllib.parse.urljoin(page, entry["url"])
        return document
