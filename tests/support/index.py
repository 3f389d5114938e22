"""A local package index on 127.0.0.1: PEP 503 (HTML) + PEP 691 (JSON) + PEP 658 metadata.

Two indexes are served by one threaded HTTP server:

- a PyTorch-like one laid out like download.pytorch.org: ``/whl/<variant>/<project>/`` with the
  files at ``/whl/<variant>/<file name, "+" as %2B>`` (``pytorch_url`` is ``.../whl``, so
  ``pytorch_url + "/cu121"`` is what ``pip --index-url`` takes);
- a PyPI-like one at ``/pypi/simple/<project>/`` with the files under ``/pypi/files/``
  (or, with ``hashed_paths``, under ``/pypi/files/packages/ab/cd/<blake2b rest>/`` as
  files.pythonhosted.org lays them out, so URLs and lock files have their real length).

Every file link carries ``#sha256=``; every wheel a PEP 658 ``.metadata`` file next to it
(announced with both ``data-dist-info-metadata`` and ``data-core-metadata``). Sdists have none,
as on PyPI, so installers build them to learn their dependencies. Faults can be injected per
path for the reliability tests: HTTP 500, a truncated body, tampered bytes (the index keeps
advertising the original hash), a slow response, a body served at a set rate, or a connection
closed without an answer.

Usage (see also the ``serve_indexes`` fixture in ``tests/conftest.py``)::

    with serve_indexes(tmp_path, pytorch={"cu121": [torch_standin("2.1.0+cu121", "12.1")]},
                       pypi=[StandIn("finetunekit", "1.0", requires_dist=["torch>=2.0"])]) as srv:
        pytorch_base, pypi_url = srv            # ".../whl", ".../pypi/simple"
        srv.fail("/whl/cu121/torch/", status=500, times=2)
        srv.requests                            # [(method, path, status), ...]
        subprocess.run([...pip...], env=offline_env())   # no pip.conf, no PIP_* find-links
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import html
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal

from tests.support.wheels import StandIn, build_distribution, metadata_of

PEP691_JSON = "application/vnd.pypi.simple.v1+json"
PEP691_HTML = "application/vnd.pypi.simple.v1+html"

FaultKind = Literal["status", "truncate", "tamper", "slow", "drop", "throttle"]


def normalize(name: str) -> str:
    """PEP 503 project name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Fault:
    """Something to do wrong on requests whose path matches ``pattern`` (fnmatch)."""

    pattern: str
    kind: FaultKind
    status: int = 500
    delay: float = 0.0
    #: "throttle": the body goes out at this many bytes a second.
    bytes_per_second: int = 0
    #: How many matching requests to spoil; None: all of them.
    times: int | None = None
    hits: int = 0

    def matches(self, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return fnmatch.fnmatchcase(path, self.pattern)


@dataclass(frozen=True)
class _OnDisk:
    """A file served from disk, part by part (a sparse wheel of hundreds of MiB)."""

    path: Path
    size: int


@dataclass
class _File:
    filename: str
    #: The file's bytes; empty for one served from disk (``disk``).
    data: bytes
    sha256: str
    #: PEP 658 metadata; None for sdists.
    metadata: bytes | None
    metadata_sha256: str | None
    requires_python: str | None
    version: str
    #: The URL path the index serves the file at.
    path: str
    disk: _OnDisk | None = None

    @property
    def size(self) -> int:
        return self.disk.size if self.disk is not None else len(self.data)


@dataclass
class _Index:
    """One simple index: project pages at ``{prefix}/<project>/``, files at ``{files_prefix}``."""

    prefix: str
    files_prefix: str
    projects: dict[str, list[_File]] = field(default_factory=dict)
    #: Files under ``packages/ab/cd/<rest>/``, the blake2b-256 of their bytes, like PyPI's.
    hashed_paths: bool = False

    def file_url(self, filename: str, data: bytes = b"") -> str:
        if not self.hashed_paths:
            return f"{self.files_prefix}/{urllib.parse.quote(filename)}"
        digest = hashlib.blake2b(data, digest_size=32).hexdigest()
        return (
            f"{self.files_prefix}/packages/{digest[:2]}/{digest[2:4]}/{digest[4:]}/"
            f"{urllib.parse.quote(filename)}"
        )


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-transfer (pip and uv do, once they have what they need) is
    no error of the index's: no traceback for it, as a real index logs none."""

    # socketserver's default backlog is 5: uv opens dozens of connections at once, the kernel
    # drops the SYNs beyond the backlog and the client retries after 1, 3, 7, 15, 31 s, so a
    # warm uv install took 1.2 s or 32 s instead of 0.2 s. A real index accepts them all.
    request_queue_size = socket.SOMAXCONN

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class IndexServer:
    """The running server. Iterate it for ``(pytorch_url, pypi_url)``."""

    def __init__(
        self,
        wheel_dir: Path,
        pytorch: Mapping[str, Sequence[StandIn]],
        pypi: Sequence[StandIn],
        *,
        auth: tuple[str, str] | None = None,
        hashed_paths: bool = False,
    ) -> None:
        self.wheel_dir = wheel_dir
        self.auth = auth
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str, int]] = []
        #: Files whose PEP 658 metadata is not served (as for many large wheels on mirrors).
        self.no_metadata: set[str] = set()
        #: The Range header of each ranged request: (path, header).
        self.ranges: list[tuple[str, str]] = []
        #: Files served whole whatever Range asks, as by a server without range support.
        self.no_range: set[str] = set()
        self._lock = threading.Lock()
        self.indexes: list[_Index] = []
        for variant, specs in pytorch.items():
            index = _Index(prefix=f"/whl/{variant}", files_prefix=f"/whl/{variant}")
            self._fill(index, specs, wheel_dir / "whl" / variant)
            self.indexes.append(index)
        pypi_index = _Index(
            prefix="/pypi/simple", files_prefix="/pypi/files", hashed_paths=hashed_paths
        )
        self._fill(pypi_index, pypi, wheel_dir / "pypi")
        self.indexes.append(pypi_index)
        self._httpd = _QuietServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    # -- set-up ---------------------------------------------------------------------------

    @staticmethod
    def _fill(index: _Index, specs: Sequence[StandIn], directory: Path) -> None:
        for spec in specs:
            built = build_distribution(spec, directory)
            metadata = metadata_of(spec).encode() if spec.kind == "wheel" else None
            disk = _OnDisk(built, built.stat().st_size) if spec.sparse_bytes else None
            data = b"" if disk is not None else built.read_bytes()
            digest = _file_sha256(built) if disk is not None else hashlib.sha256(data).hexdigest()
            index.projects.setdefault(normalize(spec.name), []).append(
                _File(
                    filename=spec.filename,
                    data=data,
                    sha256=digest,
                    metadata=metadata,
                    metadata_sha256=hashlib.sha256(metadata).hexdigest() if metadata else None,
                    requires_python=spec.requires_python,
                    version=spec.version,
                    path=index.file_url(spec.filename, data or digest.encode()),
                    disk=disk,
                )
            )

    def start(self) -> IndexServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    # -- addresses ------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pytorch_url(self) -> str:
        """The download.pytorch.org-like base: append ``/cu121`` for pip's ``--index-url``."""
        return f"{self.base_url}/whl"

    @property
    def pypi_url(self) -> str:
        return f"{self.base_url}/pypi/simple"

    def __iter__(self) -> Iterator[str]:
        return iter((self.pytorch_url, self.pypi_url))

    def sha256(self, filename: str) -> str:
        """The hash the index advertises for ``filename``."""
        return self._find_file(filename).sha256

    def file_path(self, filename: str) -> str:
        """The URL path of ``filename`` (for fault patterns)."""
        for index in self.indexes:
            for files in index.projects.values():
                for entry in files:
                    if entry.filename == filename:
                        return entry.path
        raise KeyError(filename)

    def _find_file(self, filename: str) -> _File:
        for index in self.indexes:
            for files in index.projects.values():
                for entry in files:
                    if entry.filename == filename:
                        return entry
        raise KeyError(filename)

    # -- faults ---------------------------------------------------------------------------

    def fail(self, pattern: str, *, status: int = 500, times: int | None = None) -> Fault:
        """Answer requests matching ``pattern`` with HTTP ``status``."""
        return self._add(Fault(pattern, "status", status=status, times=times))

    def truncate(self, pattern: str, *, times: int | None = None) -> Fault:
        """Announce the full Content-Length, send half the body, close the connection."""
        return self._add(Fault(pattern, "truncate", times=times))

    def tamper(self, pattern: str, *, times: int | None = None) -> Fault:
        """Serve altered bytes while the index keeps advertising the original sha256."""
        return self._add(Fault(pattern, "tamper", times=times))

    def slow(self, pattern: str, seconds: float, *, times: int | None = None) -> Fault:
        """Wait ``seconds`` before answering."""
        return self._add(Fault(pattern, "slow", delay=seconds, times=times))

    def throttle(self, pattern: str, bytes_per_second: int, *, times: int | None = None) -> Fault:
        """Serve matching files slowly, as a far mirror does: the client sees the download
        take ``len(body) / bytes_per_second`` seconds."""
        return self._add(Fault(pattern, "throttle", bytes_per_second=bytes_per_second, times=times))

    def drop(self, pattern: str, *, times: int | None = None) -> Fault:
        """Close the connection without any answer."""
        return self._add(Fault(pattern, "drop", times=times))

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def _add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def _take_fault(self, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(path):
                    fault.hits += 1
                    return fault
        return None

    def requested(self, pattern: str) -> list[str]:
        """Paths requested so far that match ``pattern``."""
        with self._lock:
            return [p for _m, p, _s in self.requests if fnmatch.fnmatchcase(p, pattern)]

    # -- routing --------------------------------------------------------------------------

    def route(self, path: str, accept: str) -> tuple[int, str, bytes | _OnDisk]:
        """(status, content type, body) for a GET of ``path``."""
        for index in self.indexes:
            if path.rstrip("/") == index.prefix:
                return self._root_page(index, accept)
            if path.startswith(index.prefix + "/") and path.endswith("/"):
                project = path[len(index.prefix) + 1 : -1]
                if "/" not in project:
                    files = index.projects.get(normalize(project))
                    if files is None:
                        return 404, "text/plain", b"no such project\n"
                    return self._project_page(index, normalize(project), files, accept)
            if path.startswith(index.files_prefix + "/"):
                name = urllib.parse.unquote(path.rsplit("/", 1)[1])
                want_metadata = name.endswith(".metadata")
                filename = name.removesuffix(".metadata")
                for files in index.projects.values():
                    for entry in files:
                        if entry.filename == filename:
                            if not want_metadata:
                                return 200, "binary/octet-stream", entry.disk or entry.data
                            if entry.metadata is not None and filename not in self.no_metadata:
                                return 200, "binary/octet-stream", entry.metadata
        return 404, "text/plain", b"not found\n"

    @staticmethod
    def _wants_json(accept: str) -> bool:
        return PEP691_JSON in accept

    def _root_page(self, index: _Index, accept: str) -> tuple[int, str, bytes]:
        names = sorted(index.projects)
        if self._wants_json(accept):
            document = {
                "meta": {"api-version": "1.1"},
                "projects": [{"name": name} for name in names],
            }
            return 200, PEP691_JSON, json.dumps(document).encode()
        links = "".join(f'<a href="{name}/">{name}</a>\n' for name in names)
        page = f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"
        return 200, "text/html", page.encode()

    def _project_page(
        self, index: _Index, project: str, files: list[_File], accept: str
    ) -> tuple[int, str, bytes]:
        ordered = sorted(files, key=lambda f: f.filename)
        if self._wants_json(accept):
            document = {
                "meta": {"api-version": "1.1"},
                "name": project,
                "versions": sorted({f.version for f in ordered}),
                "files": [
                    {
                        "filename": f.filename,
                        "url": f.path,
                        "hashes": {"sha256": f.sha256},
                        "requires-python": f.requires_python,
                        "size": f.size,
                        **(
                            {
                                "core-metadata": {"sha256": f.metadata_sha256},
                                "dist-info-metadata": {"sha256": f.metadata_sha256},
                            }
                            if f.metadata_sha256 and f.filename not in self.no_metadata
                            else {}
                        ),
                    }
                    for f in ordered
                ],
            }
            return 200, PEP691_JSON, json.dumps(document).encode()
        links = []
        for f in ordered:
            attrs = [f'href="{f.path}#sha256={f.sha256}"']
            if f.requires_python:
                attrs.append(f'data-requires-python="{html.escape(f.requires_python)}"')
            if f.metadata_sha256 and f.filename not in self.no_metadata:
                attrs.append(f'data-dist-info-metadata="sha256={f.metadata_sha256}"')
                attrs.append(f'data-core-metadata="sha256={f.metadata_sha256}"')
            links.append(f"<a {' '.join(attrs)}>{html.escape(f.filename)}</a><br/>\n")
        page = (
            '<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" '
            f'content="1.1"></head><body>\n<h1>Links for {project}</h1>\n'
            + "".join(links)
            + "</body></html>\n"
        )
        return 200, "text/html", page.encode()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(2**20):
            digest.update(chunk)
    return digest.hexdigest()


def _disk_part(body: _OnDisk, start: int, end: int) -> bytes:
    with body.path.open("rb") as handle:
        handle.seek(start)
        return handle.read(end - start + 1)


def _byte_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a ``Range: bytes=a-b`` (or ``bytes=-n``) header; None: none."""
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", header.strip())
    if not match or not (match.group(1) or match.group(2)) or size == 0:
        return None
    if not match.group(1):
        return max(0, size - int(match.group(2))), size - 1
    start = int(match.group(1))
    end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
    return (start, end) if start <= end else None


def _make_handler(server: IndexServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes; with Nagle's algorithm the body then
        # waits for the client's delayed ACK, ~40 ms on every keep-alive request.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:
            return  # keep test output quiet; requests are recorded in server.requests

        def _authorised(self) -> bool:
            if server.auth is None:
                return True
            expected = base64.b64encode(":".join(server.auth).encode()).decode()
            return self.headers.get("Authorization", "") == f"Basic {expected}"

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, *, head: bool) -> None:
            path = urllib.parse.urlsplit(self.path).path
            if not self._authorised():
                self._send(
                    401,
                    "text/plain",
                    b"authentication required\n",
                    head=head,
                    extra={"WWW-Authenticate": 'Basic realm="cudalock-tests"'},
                )
                self._record(path, 401)
                return
            status, ctype, found = server.route(path, self.headers.get("Accept", ""))
            if isinstance(found, _OnDisk):
                self._answer_from_disk(path, ctype, found, head=head)
                return
            body = found
            fault = server._take_fault(path)
            if fault is not None:
                if fault.kind == "slow":
                    time.sleep(fault.delay)
                elif fault.kind == "status":
                    status, ctype, body = fault.status, "text/plain", b"injected failure\n"
                elif fault.kind == "drop":
                    self._record(path, 0)
                    self.close_connection = True
                    return
                elif fault.kind == "tamper" and status == 200:
                    body = body[:-1] + bytes([body[-1] ^ 0xFF]) if body else b"x"
                elif fault.kind == "truncate" and status == 200:
                    self._record(path, status)
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if not head:
                        self.wfile.write(body[: max(1, len(body) // 2)])
                        self.wfile.flush()
                    self.close_connection = True
                    return
            # Like PyPI: files never change, project pages may be reused for ten minutes, so
            # uv's cache behaves here as it does against the real indexes; pages carry an ETag
            # and answer a matching If-None-Match with 304.
            caching = (
                {"Cache-Control": "max-age=365000000, immutable, public"}
                if ctype == "binary/octet-stream"
                else {
                    "Cache-Control": "max-age=600",
                    "ETag": f'"{hashlib.sha256(body).hexdigest()[:32]}"',
                }
            )
            extra = dict(caching) if status == 200 else {}
            etag = extra.get("ETag")
            if status == 200 and etag is not None and etag == self.headers.get("If-None-Match"):
                self._record(path, 304)
                self._send(304, ctype, b"", head=True, extra=extra)
                return
            ranged = self.headers.get("Range", "")
            wanted = _byte_range(ranged, len(body))
            if status == 200 and ctype == "binary/octet-stream" and wanted is not None:
                # Like files.pythonhosted.org: a file is served in parts (HTTP Range), so a
                # wheel's table of contents can be read without the wheel.
                with server._lock:
                    server.ranges.append((path, ranged))
                start, end = wanted
                self._record(path, 206)
                extra["Content-Range"] = f"bytes {start}-{end}/{len(body)}"
                self._send(206, ctype, body[start : end + 1], head=head, extra=extra)
                return
            self._record(path, status)
            if fault is not None and fault.kind == "throttle" and status == 200 and not head:
                self._send_slowly(ctype, body, fault.bytes_per_second)
                return
            self._send(status, ctype, body, head=head, extra=extra or None)

        def _send(
            self,
            status: int,
            ctype: str,
            body: bytes,
            *,
            head: bool,
            extra: Mapping[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _answer_from_disk(self, path: str, ctype: str, body: _OnDisk, *, head: bool) -> None:
            """A file kept on disk: the asked part read from it (Range), or the whole file in
            chunks, also when the file is one of ``no_range``."""
            extra = {"Cache-Control": "max-age=365000000, immutable, public"}
            ranged = self.headers.get("Range", "")
            name = urllib.parse.unquote(path.rsplit("/", 1)[1])
            wanted = None if name in server.no_range else _byte_range(ranged, body.size)
            if name not in server.no_range:
                # As files.pythonhosted.org says it: uv reads a wheel's METADATA in parts only
                # from a server that announces ranges.
                extra["Accept-Ranges"] = "bytes"
            if wanted is not None:
                with server._lock:
                    server.ranges.append((path, ranged))
                start, end = wanted
                self._record(path, 206)
                extra["Content-Range"] = f"bytes {start}-{end}/{body.size}"
                self._send(206, ctype, _disk_part(body, start, end), head=head, extra=extra)
                return
            self._record(path, 200)
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(body.size))
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            if head:
                return
            try:
                with body.path.open("rb") as handle:
                    while chunk := handle.read(2**20):
                        self.wfile.write(chunk)
            except OSError:
                self.close_connection = True  # the client stopped reading

        def _send_slowly(self, ctype: str, body: bytes, bytes_per_second: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            chunk = max(bytes_per_second // 10, 1)
            try:
                for start in range(0, len(body), chunk):
                    self.wfile.write(body[start : start + chunk])
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                self.close_connection = True  # the client gave up: a stopped install

        def _record(self, path: str, status: int) -> None:
            with server._lock:
                server.requests.append((self.command, path, status))

    return Handler


@contextmanager
def serve_indexes(
    tmp_path: Path,
    pytorch: Mapping[str, Sequence[StandIn]] | None = None,
    pypi: Sequence[StandIn] = (),
    *,
    auth: tuple[str, str] | None = None,
    hashed_paths: bool = False,
) -> Iterator[IndexServer]:
    """Serve the given stand-ins until the block ends; wheels are built under ``tmp_path``."""
    server = IndexServer(
        tmp_path / "index", pytorch or {}, pypi, auth=auth, hashed_paths=hashed_paths
    ).start()
    try:
        yield server
    finally:
        server.stop()


def offline_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with pip and uv cut off from every configured index,
    and without the CUDALOCK_* and CUDA_VISIBLE_DEVICES variables that change what cudalock does.

    This machine's pip config and ``PIP_*`` variables add find-links, extra indexes and
    constraints; tests must see only the indexes they pass on the command line.
    """
    env = {
        k: v
        for k, v in (base if base is not None else os.environ).items()
        if not k.startswith(("PIP_", "UV_", "CUDALOCK_")) and k != "CUDA_VISIBLE_DEVICES"
    }
    env.update(
        {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
            "PIP_DEFAULT_TIMEOUT": "15",
            "UV_NO_CONFIG": "1",
            "UV_NO_CACHE": "1",
            "UV_PYTHON_DOWNLOADS": "never",
            # cudalock caches index pages by URL; a stand-in index's port can be reused.
            "CUDALOCK_NO_CACHE": "1",
        }
    )
    # Wheels built against torch are kept where the test's own fixture says (tests/conftest.py),
    # never in the user's ~/.cache.
    wheel_cache = os.environ.get("CUDALOCK_WHEEL_CACHE")
    if wheel_cache:
        env.setdefault("CUDALOCK_WHEEL_CACHE", wheel_cache)
    return env


def cached_offline_env(directory: Path) -> dict[str, str]:
    """:func:`offline_env` with uv's cache on, in ``directory`` (a test's own): the uv runs of
    one lock share what they built (an sdist's metadata), as they do for users."""
    env = {k: v for k, v in offline_env().items() if k != "UV_NO_CACHE"}
    env["UV_CACHE_DIR"] = str(directory / "uv-cache")
    env["XDG_CACHE_HOME"] = str(directory / "cache")
    return env
