"""HTTP reads of index pages and wheel metadata: credentials from the index URL, retries, HTTP
range requests, and a cache of index pages kept with the index's own validators.

uv reads the same pages, but what cudalock needs from them (a variant index's project list, a
project page's labels, a wheel's core metadata) is not in uv's output, so it is read here.
Index pages are cached under ``$XDG_CACHE_HOME/cudalock/http`` with their ``ETag`` /
``Last-Modified`` and ``Cache-Control: max-age``: a page still fresh is not asked for again, a
stale one is asked for conditionally (a ``304`` reuses it). Core metadata is immutable once a
file is published, so it is cached by the file's sha256 (:mod:`cudalock.lock.metadata`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudalock.errors import EnvironmentFailure, UsageError
from cudalock.fsutil import cache_disabled, cudalock_cache_dir, write_atomic
from cudalock.urls import redact, strip_credentials

__all__ = [
    "PAGE_LIMIT",
    "Answer",
    "cache_disabled",
    "cached_page",
    "request",
]

#: An index page (a project list of a few thousand names) is well under this.
PAGE_LIMIT = 32 * 2**20
_CACHE_FORMAT = 1


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


def request(
    url: str,
    *,
    indexes: Sequence[str],
    timeout_s: float,
    retries: int,
    limit: int,
    headers: Mapping[str, str] | None = None,
) -> Answer:
    """GET ``url`` (:func:`cudalock.httpget.get`): a 404 raises ``FileNotFoundError``; 200, 206
    and 304 are answers; anything else, after the retries, is an :class:`EnvironmentFailure`."""
    from cudalock import httpget  # http.client and urllib: a warm lock fetches nothing

    try:
        answer = httpget.get(
            url,
            timeout=timeout_s,
            limit=limit,
            retries=retries,
            credentials=httpget.credentials_of(indexes),
            headers=headers,
            not_modified_ok=True,
        )
    except httpget.NotFound:
        raise FileNotFoundError(url) from None
    except UsageError as err:
        raise EnvironmentFailure(f"{err.message}; cudalock reads only http(s)") from None
    return Answer(answer.status, answer.headers, answer.body)


def _max_age(headers: Mapping[str, str]) -> float:
    control = headers.get("cache-control", "")
    if "no-store" in control or "no-cache" in control:
        return 0.0
    match = re.search(r"max-age=(\d+)", control)
    return float(match.group(1)) if match else 0.0


def _cache_path(url: str, accept: str) -> Path:
    key = hashlib.sha256(f"{strip_credentials(url)}\n{accept}".encode()).hexdigest()
    return cudalock_cache_dir() / "http" / f"{key}.json"


def cached_page(
    url: str,
    *,
    accept: str,
    indexes: Sequence[str],
    timeout_s: float,
    retries: int,
    offline: bool = False,
    use_cache: bool = True,
) -> tuple[str, bytes]:
    """(content type, body) of the index page ``url``, from the cache while it is fresh, else
    asked for again with its validators (``If-None-Match`` / ``If-Modified-Since``)."""
    path = _cache_path(url, accept)
    entry: dict[str, object] | None = None
    if use_cache:
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(loaded, dict) and loaded.get("format") == _CACHE_FORMAT:
                entry = loaded
        except (OSError, ValueError):
            entry = None
    now = time.time()
    if entry is not None:
        fetched = float(str(entry.get("fetched", 0)))
        if offline or now - fetched < float(str(entry.get("max_age", 0))):
            return str(entry.get("type", "")), base64.b64decode(str(entry.get("body", "")))
    elif offline:
        raise EnvironmentFailure(
            f"offline, and cudalock's cache does not hold {redact(url)}",
            hint="Run it again where the indexes can be reached (without --offline).",
        )
    headers = {"Accept": accept}
    if entry is not None:
        if entry.get("etag"):
            headers["If-None-Match"] = str(entry["etag"])
        if entry.get("last_modified"):
            headers["If-Modified-Since"] = str(entry["last_modified"])
    answer = request(
        url,
        indexes=indexes,
        timeout_s=timeout_s,
        retries=retries,
        limit=PAGE_LIMIT,
        headers=headers,
    )
    if answer.status == 304 and entry is not None:
        ctype, body = str(entry.get("type", "")), base64.b64decode(str(entry.get("body", "")))
    else:
        ctype, body = answer.headers.get("content-type", ""), answer.body
    if use_cache:
        from email.utils import formatdate

        record = {
            "format": _CACHE_FORMAT,
            "url": strip_credentials(url),
            "fetched": now,
            "max_age": _max_age(answer.headers),
            "etag": answer.headers.get("etag") or (entry or {}).get("etag"),
            "last_modified": answer.headers.get("last-modified")
            or (entry or {}).get("last_modified")
            or formatdate(now, usegmt=True),
            "type": ctype,
            "body": base64.b64encode(body).decode(),
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(path, json.dumps(record), secret=True)
        except (OSError, EnvironmentFailure):
            pass  # a cache that cannot be written only costs the next run a request
    return ctype, body
