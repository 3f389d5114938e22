"""``matrix refresh`` of ``cuda_builds.toml``: the listed packages' newer wheels on a PyPI-like
index on 127.0.0.1, read by range requests as on PyPI.

The scenario is "one more release" of each listed package, derived from the shipped table (the
next version after the newest recorded), its stand-in wheel carrying the build facts the real
ones carry: xformers' ``cpp_lib.json``, vllm's extension that needs ``libcudart.so.N`` and its
``torch==X`` pin.
"""

from __future__ import annotations

from pathlib import Path

import tomlkit
from packaging.version import Version

from cudalock.matrix import default_matrix_dir, load_matrix
from cudalock.matrix.fetch import Fetcher
from cudalock.matrix.refresh import _space_headers
from cudalock.matrix.refresh_cuda_builds import apply_cuda_builds, gather_cuda_builds, torch_pinned
from cudalock.matrix.releases import linux_x86_64_wheel
from tests.conftest import ServeIndexes
from tests.support.wheels import StandIn, cuda_extension_standin, xformers_cpp_lib

SHIPPED = load_matrix(default_matrix_dir())


def newest(package: str) -> tuple[str, str | None]:
    entry = max(
        (b for b in SHIPPED.package_builds if b.package == package),
        key=lambda b: Version(b.version),
    )
    return entry.version, entry.torch


def next_release(version: str) -> str:
    parts = Version(version).release
    return ".".join(map(str, (*parts[:-1], parts[-1] + 1)))


def fetcher() -> Fetcher:
    return Fetcher(timeout=10, retries=0, backoff=0.01)


def test_newer_wheels_are_read_and_recorded_with_their_source(
    serve_indexes: ServeIndexes, matrix_copy: Path
) -> None:
    xformers_version = next_release(newest("xformers")[0])
    vllm_version = next_release(newest("vllm")[0])
    torch = newest("vllm")[1] or "2.14.0"
    xformers = cuda_extension_standin(
        "xformers",
        xformers_version,
        requires_dist=["torch==2.10.0", "numpy"],
        cpp_lib=xformers_cpp_lib(1208, "2.10.0+cu128"),
        tag="py39-none-manylinux_2_28_x86_64",
        payload_bytes=4 * 2**20,
    )
    vllm = cuda_extension_standin(
        "vllm",
        vllm_version,
        requires_dist=[f"torch=={torch}", "transformers>=5.16.1", "zentorch; extra == 'zen'"],
        cuda_major=13,
        tag="cp38-abi3-manylinux_2_28_x86_64",
    )
    vllm_sdist_only = StandIn("vllm", next_release(vllm_version), kind="sdist")
    # Built against torch but naming no CUDA library, as a CPU build would.
    silent = cuda_extension_standin(
        "xformers", next_release(xformers_version), requires_dist=["torch"], cuda_major=None
    )
    index = serve_indexes(pypi=[xformers, vllm, vllm_sdist_only, silent])
    index.no_metadata.update({xformers.filename, vllm.filename})

    path = matrix_copy / "cuda_builds.toml"
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    gathered = gather_cuda_builds(doc, fetcher(), index.pypi_url)
    changes = apply_cuda_builds(doc, gathered)
    path.write_text(_space_headers(tomlkit.dumps(doc)), encoding="utf-8")

    assert changes == [
        f"cuda_builds: vllm {vllm_version} is built for CUDA 13 against torch {torch} "
        "(vllm/_C.so needs libcudart.so.13)",
        f"cuda_builds: xformers {xformers_version} is built for CUDA 12.8 against torch "
        "2.10.0+cu128 (xformers/cpp_lib.json: cuda 1208, torch 2.10.0+cu128)",
    ]
    # What could not be read gets no entry, and is said.
    assert gathered.unread == [
        f"vllm {next_release(vllm_version)}: no Linux x86_64 wheel on the index",
        f"xformers {next_release(xformers_version)}: its wheel {silent.filename} says no CUDA "
        "(no cpp_lib.json, no extension that needs a CUDA library, no nvidia-*-cuNN "
        "requirement)",
    ]
    refreshed = load_matrix(matrix_copy)
    entry = refreshed.package_build("xformers", xformers_version)
    assert entry is not None
    assert (entry.cuda, entry.torch) == ("12.8", "2.10.0+cu128")
    assert entry.provenance.verified
    url = index.base_url + index.file_path(xformers.filename)
    assert entry.provenance.source == (
        f"{url} (sha256:{index.sha256(xformers.filename)}): xformers/cpp_lib.json: cuda 1208, "
        "torch 2.10.0+cu128",
    )
    entry = refreshed.package_build("vllm", vllm_version)
    assert entry is not None
    assert (entry.cuda, entry.torch, entry.read_from) == (
        "13",
        torch,
        "vllm/_C.so needs libcudart.so.13",
    )
    assert entry.provenance.source[0].endswith(f"; METADATA Requires-Dist torch=={torch}")
    # Kept in order: the new vllm entry right after the newest recorded vllm.
    text = path.read_text(encoding="utf-8")
    assert (
        text.index(f'version = "{newest("vllm")[0]}"')
        < text.index(f'version = "{vllm_version}"')
        < text.index('package = "xformers"')
    )
    # The 4 MiB payload was never downloaded: members only, by range requests.
    wheel = index.file_path(xformers.filename)
    assert {s for m, p, s in index.requests if p == wheel and m == "GET"} == {206}


def test_a_listed_package_the_index_lacks_is_said(
    serve_indexes: ServeIndexes, matrix_copy: Path
) -> None:
    index = serve_indexes(pypi=[StandIn("numpy", "2.2.6")])
    doc = tomlkit.parse((matrix_copy / "cuda_builds.toml").read_text(encoding="utf-8"))
    gathered = gather_cuda_builds(doc, fetcher(), index.pypi_url)
    assert gathered.facts == []
    assert gathered.unread == [
        f"vllm: {index.pypi_url}/vllm/ has no such project (HTTP 404)",
        f"xformers: {index.pypi_url}/xformers/ has no such project (HTTP 404)",
    ]
    assert apply_cuda_builds(doc, gathered) == []


def test_the_linux_x86_64_wheel_and_the_torch_pin_are_chosen_as_documented() -> None:
    files: list[dict[str, object]] = [
        {"filename": "vllm-0.33.0.tar.gz"},
        {"filename": "vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl"},
        {"filename": "vllm-0.33.0-cp38-abi3-manylinux_2_31_x86_64.whl"},
        {"filename": "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"},
        {"filename": "vllm-0.33.0-cp38-abi3-manylinux_2_24_x86_64.whl", "yanked": True},
    ]
    chosen = linux_x86_64_wheel(files, Version("0.33.0"))
    assert chosen is not None
    assert chosen["filename"] == "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert linux_x86_64_wheel(files, Version("0.32.0")) is None
    assert torch_pinned(["numpy", "torch==2.14.0", "zentorch==2.14.0.1; extra == 'zen'"]) == (
        "2.14.0"
    )
    assert torch_pinned(["torch>=2.6; extra == 'torch'", "torch==1.0; extra == 'old'"]) is None


def test_a_release_between_recorded_ones_is_read_and_recorded_ones_are_not(
    serve_indexes: ServeIndexes, matrix_copy: Path
) -> None:
    # A release a refresh passed over (between two recorded ones) would be chosen by the
    # resolver with its CUDA unjudged: it is read like a newer one; recorded ones are not.
    recorded = sorted(
        (Version(b.version) for b in SHIPPED.package_builds if b.package == "xformers"),
    )
    older, newer = str(recorded[0]), str(recorded[1])
    between = ".".join(map(str, (*Version(older).release, 9)))
    assert Version(older) < Version(between) < Version(newer)
    gap = cuda_extension_standin(
        "xformers",
        between,
        requires_dist=["torch==2.1.0", "numpy"],
        cpp_lib=xformers_cpp_lib(1201, "2.1.0+cu121"),
        tag="py39-none-manylinux_2_28_x86_64",
    )
    already = cuda_extension_standin(
        "xformers",
        newer,
        requires_dist=["torch"],
        cpp_lib=xformers_cpp_lib(1201, "2.1.0+cu121"),
        tag="py39-none-manylinux_2_28_x86_64",
    )
    index = serve_indexes(pypi=[gap, already])
    doc = tomlkit.parse((matrix_copy / "cuda_builds.toml").read_text(encoding="utf-8"))
    gathered = gather_cuda_builds(doc, fetcher(), index.pypi_url)
    assert [(f.package, f.version) for f in gathered.facts] == [("xformers", between)]
    assert all(already.filename not in path for _method, path, _status in index.requests)
    assert apply_cuda_builds(doc, gathered) == [
        f"cuda_builds: xformers {between} is built for CUDA 12.1 against torch 2.1.0+cu121 "
        "(xformers/cpp_lib.json: cuda 1201, torch 2.1.0+cu121)"
    ]
    text = tomlkit.dumps(doc)
    assert (
        text.index(f'version = "{older}"')
        < text.index(f'version = "{between}"')
        < text.index(f'version = "{newer}"')
    )
