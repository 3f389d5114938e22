"""Reading members of a wheel on an index by HTTP range requests (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cudalock.errors import EnvironmentFailure
from cudalock.lock.metadata import cached_wheel_metadata
from cudalock.sharedlibs import needed_libraries
from cudalock.wheelzip import WHEEL_LIMIT, MemberReader, open_wheel
from tests.conftest import ServeIndexes
from tests.support.wheels import StandIn, build_wheel, cuda_extension_standin, xformers_cpp_lib

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


#: vllm 0.33.0's x86_64 wheel as PyPI serves it: 336,361,138 bytes (321 MiB), no PEP 658 file
#: (tests/fixtures/closures/kernels-stack.json, recorded_by_hand).
VLLM_0_33_0 = StandIn(
    "vllm",
    "0.33.0",
    requires_dist=["torch==2.14.0", "torchaudio==2.11.0", "torchvision==0.29.0"],
    requires_python="<3.15,>=3.11",
    tag="cp38-abi3-manylinux_2_28_x86_64",
    sparse_bytes=336_361_138,
)


def test_a_wheel_past_the_whole_read_limit_is_read_by_range_requests(
    serve_indexes: ServeIndexes,
) -> None:
    index = serve_indexes(pypi=[VLLM_0_33_0])
    index.no_metadata.add(VLLM_0_33_0.filename)
    path = index.file_path(VLLM_0_33_0.filename)
    metadata = cached_wheel_metadata(
        index.base_url + path, None, indexes=(index.pypi_url,), retries=0
    )
    assert metadata is not None
    assert metadata.version == "0.33.0"
    assert "torch==2.14.0" in metadata.requires_dist
    statuses = [s for _m, p, s in index.requests if p == path]
    assert statuses and set(statuses) == {206}, statuses
    assert [s for _m, p, s in index.requests if p == path + ".metadata"] == [404]
    # The end record, the central directory and METADATA: a few blocks, not the wheel.
    assert len(statuses) <= 4
    assert WHEEL_LIMIT < 336_361_138


def test_a_large_wheel_on_a_server_without_range_support_is_refused_saying_why(
    serve_indexes: ServeIndexes,
) -> None:
    index = serve_indexes(pypi=[VLLM_0_33_0])
    index.no_metadata.add(VLLM_0_33_0.filename)
    index.no_range.add(VLLM_0_33_0.filename)
    url = index.base_url + index.file_path(VLLM_0_33_0.filename)
    with pytest.raises(EnvironmentFailure) as raised:
        cached_wheel_metadata(url, None, indexes=(index.pypi_url,), retries=0)
    message = raised.value.message
    assert "does not serve parts of files (it ignored an HTTP Range request)" in message
    assert "(321 MiB) is larger than the 256 MiB cudalock downloads whole" in message
    assert raised.value.hint is not None and "PEP 658" in raised.value.hint
    assert raised.value.exit_code == 3


def test_a_small_wheel_on_a_server_without_range_support_is_read_whole(
    serve_indexes: ServeIndexes,
) -> None:
    small = dataclasses.replace(VLLM_0_33_0, sparse_bytes=2 * 2**20)
    index = serve_indexes(pypi=[small])
    index.no_metadata.add(small.filename)
    index.no_range.add(small.filename)
    path = index.file_path(small.filename)
    metadata = cached_wheel_metadata(
        index.base_url + path, None, indexes=(index.pypi_url,), retries=0
    )
    assert metadata is not None and "torch==2.14.0" in metadata.requires_dist
    assert [s for _m, p, s in index.requests if p == path] == [200]
