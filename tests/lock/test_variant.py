"""What a PyTorch variant index serves, read from the index: its project list (cached with the
index's validators), which projects it builds with the variant's label, and the core metadata
of a large wheel without a PEP 658 file, read by HTTP range requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudalock.errors import EnvironmentFailure
from cudalock.lock.metadata import cached_wheel_metadata
from cudalock.lock.variant import (
    Reader,
    labelled_versions,
    page_versions,
    parse_project_list,
    read_variant_index,
)
from tests.conftest import ServeIndexes
from tests.support.wheels import StandIn

CU121 = [
    StandIn("torch", "2.5.1+cu121"),
    StandIn("xformers", "0.0.28.post3+cu121", requires_dist=["torch==2.5.1"]),
    StandIn("numpy", "1.26.4"),
    StandIn("Jinja2", "3.1.4"),
]


def test_the_project_list_is_read_from_json_and_from_html() -> None:
    document = {
        "meta": {"api-version": "1.1"},
        "projects": [{"name": "Jinja2"}, {"name": "xformers"}],
    }
    body = json.dumps(document).encode()
    assert parse_project_list("application/vnd.pypi.simple.v1+json", body) == {"jinja2", "xformers"}
    page = b'<html><body><a href="Jinja2/">Jinja2</a>\n<a href="fbgemm_gpu/">fbgemm_gpu</a></body>'
    assert parse_project_list("text/html", page) == {"jinja2", "fbgemm-gpu"}


def test_a_project_pages_versions_come_from_its_file_names() -> None:
    page = (
        b'<a href="/whl/cu121/xformers-0.0.28.post3%2Bcu121-cp311-cp311-manylinux_2_28_x86_64.whl">'
        b"xformers-0.0.28.post3+cu121-cp311-cp311-manylinux_2_28_x86_64.whl</a>"
        b'<a href="x">xformers-0.0.27.tar.gz</a><a href="y">not-a-file</a>'
    )
    assert page_versions("text/html", page) == {"0.0.28.post3+cu121", "0.0.27"}


def test_the_variant_index_is_read_once_and_asked_again_with_its_validators(
    serve_indexes: ServeIndexes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    server = serve_indexes(pytorch={"cu121": CU121})
    url = f"{server.pytorch_url}/cu121"
    reader = Reader(indexes=(url,), retries=0)
    variant = read_variant_index(url, reader)
    assert variant.projects == {"torch", "xformers", "numpy", "jinja2"}
    assert variant.label == "cu121"
    # Fresh (max-age=600): not asked for again.
    assert read_variant_index(url, reader).projects == variant.projects
    assert server.requested("/whl/cu121/") == ["/whl/cu121/"]
    # Stale: asked for with its ETag, answered 304, the cached list used.
    for entry in (tmp_path / "cache" / "cudalock" / "http").iterdir():
        record = json.loads(entry.read_text())
        record["fetched"] = 0
        entry.write_text(json.dumps(record))
    assert read_variant_index(url, reader).projects == variant.projects
    assert [s for _m, p, s in server.requests if p == "/whl/cu121/"] == [200, 304]
    # Offline, the cache answers; without a cache, offline is an environment failure.
    offline = Reader(indexes=(url,), offline=True)
    assert read_variant_index(url, offline).projects == variant.projects
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty"))
    with pytest.raises(EnvironmentFailure, match="offline"):
        read_variant_index(url, offline)


def test_only_projects_with_the_variants_label_count_as_its_builds(
    serve_indexes: ServeIndexes,
) -> None:
    server = serve_indexes(pytorch={"cu121": CU121})
    url = f"{server.pytorch_url}/cu121"
    reader = Reader(indexes=(url,), retries=0, use_cache=False)
    variant = read_variant_index(url, reader)
    assert labelled_versions(variant, "xformers", reader) == ("0.0.28.post3+cu121",)
    assert labelled_versions(variant, "numpy", reader) == ()  # a plain copy of PyPI's
    assert labelled_versions(variant, "torchao", reader) == ()  # not on the list: not asked
    assert server.requested("/whl/cu121/torchao/") == []


def test_a_large_wheel_without_pep_658_metadata_is_read_by_range_requests(
    serve_indexes: ServeIndexes,
) -> None:
    big = StandIn(
        "vllm",
        "0.6.6.post1",
        requires_dist=["torch==2.5.1", "xformers==0.0.28.post3; platform_system == 'Linux'"],
        tag="cp38-abi3-manylinux1_x86_64",
        payload_bytes=8 * 2**20,
    )
    server = serve_indexes(pypi=[big])
    server.no_metadata.add(big.filename)
    url = server.base_url + server.file_path(big.filename)
    metadata = cached_wheel_metadata(url, None, indexes=(server.pypi_url,), retries=0)
    assert metadata is not None
    assert metadata.requires_dist == (
        "torch==2.5.1",
        "xformers==0.0.28.post3; platform_system == 'Linux'",
    )
    path = server.file_path(big.filename)
    statuses = [s for _m, p, s in server.requests if p == path]
    assert statuses and set(statuses) == {206}, statuses  # never the whole 8 MiB
    assert [s for _m, p, s in server.requests if p == path + ".metadata"] == [404]
