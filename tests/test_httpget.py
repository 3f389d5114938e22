"""cudalock's own GETs against real servers on 127.0.0.1 that misbehave: trickling, cut short,
not HTTP, redirecting credentials elsewhere."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from cudalock import httpget
from cudalock.errors import EnvironmentFailure, UsageError

Handler = Callable[[socket.socket, bytes], None]


class RawServer:
    """A TCP server on 127.0.0.1 that hands each connection and its request head to ``handler``
    and records the request heads it got."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.stopped = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            self.requests.append(head)
            with contextlib.suppress(OSError):  # the client hung up
                self.handler(conn, head)

    def close(self) -> None:
        self.stopped = True
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], RawServer]]:
    servers: list[RawServer] = []

    def start(handler: Handler) -> RawServer:
        servers.append(RawServer(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def answer(body: bytes, extra: str = "") -> Handler:
    def handler(conn: socket.socket, _head: bytes) -> None:
        conn.sendall(
            f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}"
            "Connection: close\r\n\r\n".encode()
            + body
        )

    return handler


def test_a_body_trickled_one_byte_at_a_time_is_cut_at_the_whole_answer_deadline(
    serve: Callable[[Handler], RawServer],
) -> None:
    def trickle(conn: socket.socket, _head: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(100000):
            conn.sendall(b"x")
            time.sleep(0.3)

    server = serve(trickle)
    started = time.monotonic()
    with pytest.raises(EnvironmentFailure, match="no complete answer within 4 s"):
        httpget.get(server.url + "/a.metadata", timeout=1, limit=2**20, retries=3)
    assert time.monotonic() - started < 4 + 2


def test_headers_trickled_one_byte_at_a_time_are_cut_at_the_deadline_too(
    serve: Callable[[Handler], RawServer],
) -> None:
    def trickle(conn: socket.socket, _head: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while True:
            conn.sendall(b"X")
            time.sleep(0.3)

    server = serve(trickle)
    started = time.monotonic()
    with pytest.raises(EnvironmentFailure, match="cannot read"):
        httpget.get(server.url + "/a", timeout=1, limit=2**20, retries=2)
    assert time.monotonic() - started < 4 + 2


def test_a_body_cut_short_of_its_length_is_refused_not_taken_whole(
    serve: Callable[[Handler], RawServer],
) -> None:
    def short(conn: socket.socket, _head: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nName: peft\r\n")

    server = serve(short)
    with pytest.raises(EnvironmentFailure, match="cut short"):
        httpget.get(server.url + "/a.metadata", timeout=2, limit=2**20)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "did not answer HTTP"),
        (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n", "line too long"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "did not answer HTTP"),
    ],
)
def test_an_answer_that_is_not_http_is_one_line_exit_3(
    serve: Callable[[Handler], RawServer], reply: bytes, reason: str
) -> None:
    server = serve(lambda conn, _head: conn.sendall(reply))
    with pytest.raises(EnvironmentFailure, match=reason) as caught:
        httpget.get(server.url + "/a", timeout=2, limit=2**20)
    assert "\n" not in caught.value.message


def test_an_url_that_is_not_http_is_a_usage_error() -> None:
    for url in ("file:///etc/passwd", "ftp://127.0.0.1/x", "http://[::1/x"):
        with pytest.raises((UsageError, EnvironmentFailure)):
            httpget.get(url, timeout=1, limit=10)
    with pytest.raises(UsageError, match="not an http"):
        httpget.get("file:///etc/passwd", timeout=1, limit=10)


def test_credentials_do_not_follow_a_redirect_to_another_host(
    serve: Callable[[Handler], RawServer],
) -> None:
    elsewhere = serve(answer(b"ok"))
    index = serve(
        lambda conn, _head: conn.sendall(
            f"HTTP/1.1 302 Found\r\nLocation: {elsewhere.url}/a\r\n"
            "Content-Length: 0\r\n\r\n".encode()
        )
    )
    got = httpget.get(f"http://user:s3cret@127.0.0.1:{index.port}/a", timeout=2, limit=100)
    assert got.body == b"ok"
    assert b"authorization" in index.requests[0].lower()
    assert b"authorization" not in elsewhere.requests[0].lower()


def test_credentials_follow_a_redirect_on_the_same_host_and_port(
    serve: Callable[[Handler], RawServer],
) -> None:
    def redirect_once(conn: socket.socket, head: bytes) -> None:
        if head.startswith(b"GET /a "):
            conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /b\r\nContent-Length: 0\r\n\r\n")
        else:
            answer(b"ok")(conn, head)

    index = serve(redirect_once)
    got = httpget.get(f"http://user:s3cret@127.0.0.1:{index.port}/a", timeout=2, limit=100)
    assert got.body == b"ok"
    assert all(b"authorization: basic" in head.lower() for head in index.requests)


def test_a_redirect_to_a_file_url_is_not_followed(serve: Callable[[Handler], RawServer]) -> None:
    index = serve(
        lambda conn, _head: conn.sendall(
            b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\n\r\n"
        )
    )
    with pytest.raises(EnvironmentFailure, match="not http"):
        httpget.get(index.url + "/a", timeout=2, limit=2**20)
