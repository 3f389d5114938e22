"""cudalock's own HTTP GETs (framework metadata for ``lock``, index pages for ``matrix refresh``):
bounded in time and size, credentials only for the host they were given for.

Three limits hold for every GET, whatever the server does:

- each read waits at most ``timeout`` seconds (the socket timeout);
- the whole answer — status line, headers, body, every redirect and retry — arrives within
  ``WHOLE_ANSWER_FACTOR × timeout`` seconds: a watchdog shuts the connection down at that
  deadline, so a server that trickles one byte every second cannot keep a read going;
- the body is at most ``limit`` bytes, and a body cut short of its ``Content-Length`` is an
  error, never a shorter answer taken for the whole.

Credentials go as ``Authorization`` to the scheme, host and port they were given for and
nowhere else: a redirect to another host carries none. Only http and https are followed. What
the server answers that the standard library cannot parse (a bad status line, a header line past
64 KiB, a URL it refuses) is an :class:`~cudalock.errors.EnvironmentFailure` with one line.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, cast

from cudalock.errors import EnvironmentFailure, UsageError
from cudalock.urls import redact, strip_credentials

__all__ = [
    "WHOLE_ANSWER_FACTOR",
    "Answer",
    "NotFound",
    "TooLarge",
    "basic_authorization",
    "credentials_of",
    "get",
    "origin",
]

#: One answer, redirects and retries included, may take this many per-read timeouts in all.
WHOLE_ANSWER_FACTOR = 4
#: Statuses that say "try again later", retried like a dropped connection.
TRANSIENT_STATUSES = (429, 500, 502, 503, 504)
_CHUNK = 64 * 2**10
_SCHEMES = ("http", "https")


class NotFound(Exception):
    """The server answered 404."""


class TooLarge(EnvironmentFailure):
    """The answer's body is larger than the limit: ``size`` is its announced length (None when
    the server announced none and the body ran past the limit)."""

    def __init__(self, message: str, *, status: int, size: int | None) -> None:
        super().__init__(message)
        self.status = status
        self.size = size


@dataclass(frozen=True)
class Answer:
    url: str
    body: bytes
    #: 200, 206 for a part of a file asked for with ``Range``, or 304 (``not_modified_ok``).
    status: int = 200
    #: The answer's ``Content-Range`` header (None: none).
    content_range: str | None = None
    #: Every header of the answer, names in lower case (caching reads ETag, Cache-Control).
    headers: Mapping[str, str] = field(default_factory=dict)


def origin(url: str) -> tuple[str, str | None, int | None]:
    """(scheme, host, port) of ``url``, the unit credentials belong to (port made explicit)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    host = parts.hostname.lower() if parts.hostname else None
    return (scheme, host, port)


def basic_authorization(url: str) -> str | None:
    """``Basic …`` from ``url``'s ``user:password@`` part, or None when it has none."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return None
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def credentials_of(indexes: Sequence[str]) -> dict[tuple[str, str | None, int | None], str]:
    """Basic authorisation per origin, from the index URLs that carry credentials: a file on the
    same host as an index is read with that index's credentials, any other host with none."""
    found: dict[tuple[str, str | None, int | None], str] = {}
    for index in indexes:
        authorization = basic_authorization(index)
        if authorization is not None:
            found.setdefault(origin(index), authorization)
    return found


class _Watchdog:
    """Shuts down every connection opened under it once its deadline passes."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def adopt(self, sock: socket.socket) -> None:
        with self._lock:
            if self.fired:
                _shut(sock)
            self._sockets.append(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                _shut(sock)

    def stop(self) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _connection_classes(watchdog: _Watchdog) -> tuple[type[Any], type[Any]]:
    class Plain(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            watchdog.adopt(self.sock)

    class Secure(http.client.HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            watchdog.adopt(self.sock)

    return Plain, Secure


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects within http(s) only; ``Authorization`` kept only where the origin stays."""

    def __init__(self, credentials: Mapping[tuple[str, str | None, int | None], str]) -> None:
        self.credentials = credentials

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        try:
            scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        except ValueError:
            scheme = ""
        if scheme not in _SCHEMES:
            raise EnvironmentFailure(
                f"{redact(req.full_url)} redirects to {redact(newurl)!r}, which is not http(s); "
                "not followed"
            )
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        for name in list(new.headers):
            if name.lower() == "authorization":
                del new.headers[name]
        authorization = self.credentials.get(origin(newurl))
        if authorization is not None:
            new.add_unredirected_header("Authorization", authorization)
        return new


def get(
    url: str,
    *,
    timeout: float,
    limit: int,
    retries: int = 0,
    credentials: Mapping[tuple[str, str | None, int | None], str] | None = None,
    headers: Mapping[str, str] | None = None,
    backoff: float = 0.3,
    not_modified_ok: bool = False,
) -> Answer:
    """GET ``url`` within the limits above; ``credentials`` maps an :func:`origin` to the
    ``Authorization`` value for it (credentials in ``url`` itself count for its origin).
    ``not_modified_ok``: a 304 (to a conditional GET) is an answer with an empty body.

    Raises :class:`NotFound` on 404, :class:`~cudalock.errors.UsageError` for a URL that is not
    http(s), and :class:`~cudalock.errors.EnvironmentFailure` for everything else that fails.
    """
    try:
        scheme = urllib.parse.urlsplit(url).scheme.lower()
    except ValueError:
        raise UsageError(f"{redact(url)!r} is not a URL") from None
    if scheme not in _SCHEMES:
        raise UsageError(f"{redact(url)!r} is not an http(s) URL")
    known = dict(credentials or {})
    own = basic_authorization(url)
    if own is not None:
        known[origin(url)] = own
    bare = strip_credentials(url)
    watchdog = _Watchdog(WHOLE_ANSWER_FACTOR * timeout)
    plain, secure = _connection_classes(watchdog)

    class PlainHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(cast(Any, plain), req)

    class SecureHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(cast(Any, secure), req, context=getattr(self, "_context", None))

    opener = urllib.request.OpenerDirector()
    for handler in (
        PlainHandler(),
        SecureHandler(),
        _SameOriginRedirects(known),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    attempt = 0
    try:
        while True:
            request = urllib.request.Request(bare, headers=dict(headers or {}))
            authorization = known.get(origin(bare))
            if authorization is not None:
                request.add_unredirected_header("Authorization", authorization)
            try:
                return _read(opener, request, watchdog, timeout, limit, url)
            except urllib.error.HTTPError as err:
                if err.code == 404:
                    raise NotFound(url) from None
                if err.code == 304 and not_modified_ok:
                    # A conditional GET answered "still the same": the caller's copy stands.
                    found = {k.lower(): v for k, v in err.headers.items()}
                    return Answer(url, b"", 304, None, found)
                reason = f"HTTP {err.code}"
                if 300 <= err.code < 400:
                    # urllib refuses a redirect to anything but http(s)/ftp before asking us.
                    target = redact(str(err.headers.get("Location", "")))[:200]
                    reason += f", a redirect to {target!r}, which is not http(s); not followed"
                if err.code not in TRANSIENT_STATUSES:
                    raise _failure(url, reason, watchdog) from None
            except (OSError, http.client.HTTPException, ValueError) as err:
                # URLError, timeouts, resets; BadStatusLine, LineTooLong, InvalidURL, IncompleteRead
                reason = _reason(err)
            if attempt >= retries or watchdog.fired or watchdog.left() <= backoff * 2**attempt:
                raise _failure(url, reason, watchdog)
            time.sleep(backoff * 2**attempt)
            attempt += 1
    finally:
        watchdog.stop()


def _read(
    opener: urllib.request.OpenerDirector,
    request: urllib.request.Request,
    watchdog: _Watchdog,
    timeout: float,
    limit: int,
    url: str,
) -> Answer:
    per_read = max(0.001, min(timeout, watchdog.left()))
    with opener.open(request, timeout=per_read) as response:
        announced = getattr(response, "length", None)
        if isinstance(announced, int) and announced > limit:
            # Said before a byte of the body is read: a 300 MiB answer is not downloaded to
            # learn that it is too large.
            raise TooLarge(
                f"cannot read {redact(url)}: {_size(announced)}, larger than {_size(limit)}",
                status=response.status,
                size=announced,
            )
        body = bytearray()
        while chunk := response.read1(_CHUNK):
            body += chunk
            if len(body) > limit:
                raise TooLarge(
                    f"cannot read {redact(url)}: larger than {_size(limit)}",
                    status=response.status,
                    size=None,
                ) from None
        if watchdog.fired:
            raise TimeoutError("the whole answer took too long")
        left = getattr(response, "length", None)
        if isinstance(left, int) and left > 0:
            raise http.client.IncompleteRead(bytes(body), left)
        return Answer(
            response.geturl(),
            bytes(body),
            response.status,
            response.headers.get("Content-Range"),
            {k.lower(): v for k, v in response.headers.items()},
        )


def _reason(err: BaseException) -> str:
    if isinstance(err, http.client.IncompleteRead):
        return f"the answer was cut short ({len(err.partial)} bytes, {err.expected} missing)"
    if isinstance(err, http.client.LineTooLong):
        return "the server sent a line too long to be HTTP"
    if isinstance(err, http.client.BadStatusLine):
        return "the server did not answer HTTP"
    reason = getattr(err, "reason", None) or err
    text = str(reason) or type(reason).__name__
    return text if len(text) < 200 else text[:200] + "…"


def _failure(url: str, reason: str, watchdog: _Watchdog) -> EnvironmentFailure:
    if watchdog.fired:
        reason = f"no complete answer within {watchdog.seconds:g} s"
    return EnvironmentFailure(f"cannot read {redact(url)}: {redact(reason)}")


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit // 2**10} KiB"
