"""Reading members of a wheel on an index by HTTP range requests (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cudalock.errors import EnvironmentFailure
from cudalock.lock.wheelzip import MemberReader, open_wheel
from cudalock.sharedlibs import needed_libraries
from tests.conftest import ServeIndexes
from tests.support.wheels import build_wheel, cuda_extension_standin, xformers_cpp_lib

XFORMERS = cuda_extension_standin(
    "xformers",
    "0.0.31",
    requires_dist=["torch==2.7.1", "numpy"],
    cpp_lib=xformers_cpp_lib(1208, "2.7.1+cu126"),
    payload_bytes=8 * 2**20,
)


def test_members_are_read_without_the_rest_of_the_wheel(serve_indexes: ServeIndexes) -> None:
    index = serve_indexes(pypi=[XFORMERS])
    url = index.base_url + index.file_path(XFORMERS.filename)
    archive, remote = open_wheel(url)
    with archive:
        assert "xformers/cpp_lib.json" in archive.namelist()
        assert '"cuda": 1208' in archive.read("xformers/cpp_lib.json").decode()
        reader = MemberReader(archive, "xformers/_C.so", limit=2**20)
        assert "libcudart.so.12" in needed_libraries(reader)
    assert remote.size > 8 * 2**20
    assert remote.fetched < 2**20  # the 8 MiB payload was never fetched
    assert any(status == 206 for _m, _p, status in index.requests)


@pytest.fixture
def plain_server(tmp_path: Path) -> Iterator[str]:
    """http.server, which ignores Range and answers every GET with the whole file."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_without_range_support_is_read_whole(tmp_path: Path, plain_server: str) -> None:
    small = cuda_extension_standin("vllm", "0.10.1.1", extension="vllm/_flashmla_C.abi3.so")
    path = build_wheel(small, tmp_path)
    archive, remote = open_wheel(f"{plain_server}/{path.name}")
    with archive:
        reader = MemberReader(archive, "vllm/_flashmla_C.abi3.so", limit=2**20)
        assert "libcudart.so.12" in needed_libraries(reader)
    assert remote.size == path.stat().st_size == remote.fetched


def test_a_missing_or_foreign_file_is_said(tmp_path: Path, plain_server: str) -> None:
    with pytest.raises(FileNotFoundError):
        open_wheel(f"{plain_server}/nothing.whl")
    (tmp_path / "notes.whl").write_bytes(b"not a zip archive at all")
    with pytest.raises(EnvironmentFailure, match="is not a zip archive"):
        open_wheel(f"{plain_server}/notes.whl")
