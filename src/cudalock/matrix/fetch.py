"""HTTP GETs for ``cudalock matrix refresh``, with the standard library alone.

urllib instead of requests: the refresh is the only part of cudalock that reads the network
itself, and cudalock is installed into training environments, where every dependency is one more
pin that can conflict with a framework's. What requests gave here — timeouts, retries of
transient failures, credentials in the URL — is a few lines on top of ``urllib.request``.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from cudalock.errors import EnvironmentFailure
from cudalock.urls import redact, strip_credentials

PEP691_JSON = "application/vnd.pypi.simple.v1+json"
#: Statuses that say "try again later", retried like a dropped connection.
_TRANSIENT = (429, 500, 502, 503, 504)
#: The largest answer read (a DeepSpeed sdist is about 1 MiB; an index page far less).
MAX_BYTES = 64 * 1024 * 1024


class Fetcher:
    """GETs with a timeout and retries; 404 is an answer (None), any other failure is
    :class:`EnvironmentFailure` (exit 3), its message without the URL's credentials."""

    def __init__(self, *, timeout: float = 30.0, retries: int = 3, backoff: float = 0.3) -> None:
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._opener = urllib.request.build_opener()
        #: host → the credentials an index URL on it carried: its file links carry none, and
        #: are fetched with them, as pip does.
        self._credentials: dict[str, str] = {}

    def get_bytes(self, url: str, accept: str = "*/*") -> bytes | None:
        request = self._request(url, accept)
        attempt = 0
        while True:
            try:
                with self._opener.open(request, timeout=self.timeout) as response:
                    data: bytes = response.read(MAX_BYTES + 1)
                if len(data) > MAX_BYTES:
                    raise EnvironmentFailure(
                        f"cannot read {redact(url)}: larger than {MAX_BYTES // 2**20} MiB"
                    )
                return data
            except urllib.error.HTTPError as err:
                if err.code == 404:
                    return None
                if err.code not in _TRANSIENT or attempt >= self.retries:
                    raise EnvironmentFailure(
                        f"cannot read {redact(url)}: HTTP {err.code}"
                    ) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                if attempt >= self.retries:
                    reason = getattr(err, "reason", err)
                    raise EnvironmentFailure(
                        f"cannot read {redact(url)}: {_shorten(str(reason))}"
                    ) from None
            time.sleep(self.backoff * 2**attempt)
            attempt += 1

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

    def _request(self, url: str, accept: str) -> urllib.request.Request:
        """The request for ``url``, its ``user:password@`` turned into Basic authentication."""
        parts = urllib.parse.urlsplit(url)
        host = f"{parts.scheme}://{parts.hostname}:{parts.port}"
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            self._credentials[host] = f"Basic {token}"
        request = urllib.request.Request(
            strip_credentials(url),
            headers={"Accept": accept, "User-Agent": "cudalock-matrix-refresh"},
        )
        authorization = self._credentials.get(host)
        if authorization is not None:
            # Unredirected: a redirect (to a file host, say) does not carry them along.
            request.add_unredirected_header("Authorization", authorization)
        return request


def _shorten(text: str) -> str:
    return text if len(text) < 200 else text[:200] + "…"
