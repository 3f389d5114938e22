"""`cudalock matrix refresh` against PyPI-like and PyTorch-like indexes served on 127.0.0.1.

The served pages are fake file lists (no wheel bodies are needed: refresh reads names, PEP 691
fields and PEP 658 metadata only). The scenario: PyPI has a new torch 2.16.0 (CUDA 13.2 PyPI
build, torchvision 0.30.0 pinning it) and a cp315 wheel for 2.14.1 that the matrix lacks; the
PyTorch index has 2.16.0 for cpu, cu130 and cu132, and a cu126 build of 2.15.0.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cudalock.errors import EnvironmentFailure
from cudalock.matrix import default_matrix_dir, load_matrix
from cudalock.matrix.check import check_matrix
from cudalock.matrix.refresh import (
    Fetcher,
    RefreshResult,
    cuda_variant_from_metadata,
    index_platforms,
    read_wheel_name,
    refresh_matrix,
    torch_pin,
)

PEP691 = "application/vnd.pypi.simple.v1+json"
TODAY = datetime.date(2026, 12, 12)
LINUX_CUDA = 'cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"'

PY = [
    "cp311-cp311",
    "cp312-cp312",
    "cp313-cp313",
    "cp314-cp314",
    "cp314-cp314t",
    "cp315-cp315",
    "cp315-cp315t",
]
PLATFORM_TAGS = {
    "manylinux_2_28_x86_64",
    "manylinux_2_28_aarch64",
    "win_amd64",
    "macosx_14_0_arm64",
}


@dataclass
class FakeIndex:
    """PEP 691 JSON under /pypi/simple/<project>/, PEP 503 HTML under /whl/<variant>/torch/."""

    pypi: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    whl: dict[str, list[str]] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    requests: list[tuple[str, str]] = field(default_factory=list)
    base: str = ""

    def add_pypi(
        self,
        project: str,
        filename: str,
        *,
        uploaded: str,
        requires_python: str,
        metadata: str | None = None,
    ) -> None:
        entry: dict[str, object] = {
            "filename": filename,
            "url": f"{self.base}/pypi/files/{filename}",
            "hashes": {"sha256": "0" * 64},
            "requires-python": requires_python,
            "upload-time": uploaded,
        }
        if metadata is not None:
            entry["core-metadata"] = {"sha256": "0" * 64}
            self.metadata[f"/pypi/files/{filename}.metadata"] = metadata
        self.pypi.setdefault(project, []).append(entry)

    def answer(self, path: str, accept: str) -> tuple[int, str, bytes]:
        self.requests.append((path, accept))
        if path in self.failing:
            return 500, "text/plain", b"boom"
        parts = path.strip("/").split("/")
        if parts[:2] == ["pypi", "simple"] and len(parts) == 3 and parts[2] in self.pypi:
            if PEP691 not in accept:
                return 406, "text/plain", b"JSON only here"
            doc = {"meta": {"api-version": "1.1"}, "name": parts[2], "files": self.pypi[parts[2]]}
            return 200, PEP691, json.dumps(doc).encode()
        if path in self.metadata:
            return 200, "binary/octet-stream", self.metadata[path].encode()
        if parts[0] == "whl" and len(parts) == 3 and parts[2] == "torch" and parts[1] in self.whl:
            links = "".join(
                f'<a href="/whl/{name.replace("+", "%2B")}#sha256={"0" * 64}">{name}</a><br/>\n'
                for name in self.whl[parts[1]]
            )
            return 200, "text/html", f"<html><body>\n{links}</body></html>\n".encode()
        return 404, "text/plain", b"not found"


@pytest.fixture
def index() -> Iterator[FakeIndex]:
    fake = FakeIndex()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            status, kind, body = fake.answer(self.path, self.headers.get("Accept", ""))
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def metadata(name: str, version: str, requires: list[str]) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    return "\n".join(lines) + "\n\n"


def scenario(index: FakeIndex) -> None:
    for tag in PY:
        for plat in sorted(PLATFORM_TAGS):
            requires = [LINUX_CUDA] if plat.startswith("manylinux") else []
            name = f"torch-2.16.0-{tag}-{plat}.whl"
            index.add_pypi(
                "torch",
                name,
                uploaded="2026-12-10T15:00:00.000000Z",
                requires_python=">=3.11",
                metadata=metadata("torch", "2.16.0", requires),
            )
    # 2.14.1 exists in the matrix with 3.10-3.14t; PyPI now also has a cp315 wheel.
    for tag in ["cp310-cp310", "cp314-cp314t", "cp315-cp315"]:
        index.add_pypi(
            "torch",
            f"torch-2.14.1-{tag}-manylinux_2_28_x86_64.whl",
            uploaded="2026-09-30T10:00:00.000000Z",
            requires_python=">=3.10",
        )
    index.add_pypi(
        "torch",
        "torch-2.16.0rc1-cp311-cp311-win_amd64.whl",
        uploaded="2026-11-20T10:00:00.000000Z",
        requires_python=">=3.11",
    )
    index.add_pypi(
        "torchvision",
        "torchvision-0.29.2-py3-none-any.whl",
        uploaded="2026-10-28T15:21:00Z",
        requires_python=">=3.10",
        metadata=metadata("torchvision", "0.29.2", ["torch>=2.14.0"]),
    )
    index.add_pypi(
        "torchvision",
        "torchvision-0.30.0-py3-none-any.whl",
        uploaded="2026-12-10T16:00:00Z",
        requires_python=">=3.11",
        metadata=metadata("torchvision", "0.30.0", ["torch==2.16.0", "numpy"]),
    )
    index.whl["cpu"] = [
        "torch-2.16.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.16.0+cpu-cp311-cp311-win_amd64.whl",
        "torch-2.16.0-cp311-none-macosx_14_0_arm64.whl",
    ]
    index.whl["cu130"] = ["torch-2.16.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl"]
    index.whl["cu132"] = [
        "torch-2.16.0+cu132-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.16.0+cu132-cp311-cp311-manylinux_2_28_aarch64.whl",
        "torch-2.16.0+cu132-cp311-cp311-win_amd64.whl",
        "torch-2.16.0.dev20261101+cu132-cp311-cp311-win_amd64.whl",
    ]
    index.whl["cu126"] = [
        "torch-2.15.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.14.1+cu126-cp312-cp312-manylinux_2_28_x86_64.whl",
    ]


@pytest.fixture
def matrix_copy(tmp_path: Path) -> Path:
    target = tmp_path / "matrix"
    shutil.copytree(default_matrix_dir(), target)
    return target


def run_refresh(index: FakeIndex, directory: Path, *, write: bool = True) -> RefreshResult:
    return refresh_matrix(
        directory,
        pypi_url=f"{index.base}/pypi/simple",
        pytorch_index=f"{index.base}/whl",
        write=write,
        fetcher=Fetcher(timeout=5, retries=1),
        today=TODAY,
    )


def test_wheel_names_and_metadata_readers() -> None:
    wheel = read_wheel_name("torch-2.15.0-cp314-cp314t-manylinux_2_28_aarch64.whl")
    assert wheel is not None and wheel.targets == {("linux-aarch64", "3.14t")}
    assert read_wheel_name("torch-2.1.0.tar.gz") is None
    assert (
        cuda_variant_from_metadata(
            metadata(
                "torch",
                "2.1.0",
                [
                    'nvidia-cuda-runtime-cu12==12.1.105; platform_system == "Linux" and '
                    'platform_machine == "x86_64"'
                ],
            ),
            "x86_64",
        )
        == "cu121"
    )
    # The same pin does not apply on aarch64 (2.1.0's aarch64 PyPI wheel is a CPU build).
    assert (
        cuda_variant_from_metadata(
            metadata(
                "torch",
                "2.1.0",
                [
                    'nvidia-cuda-runtime-cu12==12.1.105; platform_system == "Linux" and '
                    'platform_machine == "x86_64"'
                ],
            ),
            "aarch64",
        )
        == "cpu"
    )
    assert (
        cuda_variant_from_metadata(metadata("torch", "2.16.0", [LINUX_CUDA]), "aarch64") == "cu132"
    )
    assert torch_pin(metadata("torchvision", "0.16.0", ["torch (==2.1.0)"])) == "2.1.0"
    assert torch_pin(metadata("torchvision", "0.15.0", ["torch==2.0.0+cu117"])) is None
    assert torch_pin(metadata("torchvision", "0.29.1", ["torch>=2.14.0"])) is None
    page = '<a href="/whl/cu121/torch-2.1.0%2Bcu121-cp311-cp311-linux_x86_64.whl#sha256=1">x</a>'
    assert index_platforms(page, "cu121") == {"2.1.0": {"linux-x86_64"}}
    assert index_platforms(page, "cu118") == {}


def test_refresh_adds_release_builds_and_tags(index: FakeIndex, matrix_copy: Path) -> None:
    scenario(index)
    before = load_matrix(matrix_copy, use_cache=False)
    result = run_refresh(index, matrix_copy)
    assert result.written
    assert set(result.changes) == {
        "torch 2.14.1: python.linux-x86_64 += 3.15",
        "torch 2.15.0: new build cu126 on linux-x86_64",
        "torch 2.16.0: new release",
        "torch 2.16.0: new build cpu on linux-x86_64",
        "torch 2.16.0: new build cu130 on linux-x86_64",
        "torch 2.16.0: new build cu132 on windows-x86_64",
    }
    assert '+matrix_version = "2026-12-12"' in result.diff
    assert '+version = "2.16.0"' in result.diff

    after = load_matrix(matrix_copy, use_cache=False)
    assert after.matrix_version == "2026-12-12"
    new = after.torch_release("2.16.0")
    assert new is not None
    assert (new.date, new.requires_python, new.torchvision, new.torchaudio) == (
        "2026-12-10",
        ">=3.11",
        "0.30.0",
        None,
    )
    assert new.python["linux-x86_64"] == ("3.11", "3.12", "3.13", "3.14", "3.14t", "3.15", "3.15t")
    assert dict(new.pypi_default) == {
        "linux-x86_64": "cu132",
        "linux-aarch64": "cu132",
        "windows-x86_64": "cpu",
        "macos-arm64": "cpu",
    }
    builds = {(b.variant, p): b for b in new.builds for p in b.platforms}
    assert set(builds) == {
        ("cpu", "windows-x86_64"),
        ("cpu", "macos-arm64"),
        ("cpu", "linux-x86_64"),
        ("cu132", "linux-x86_64"),
        ("cu132", "linux-aarch64"),
        ("cu132", "windows-x86_64"),
        ("cu130", "linux-x86_64"),
    }
    # Arch lists are copied from the nearest older release's same build and marked unverified.
    previous = before.torch_release("2.15.0")
    assert previous is not None
    old_aarch64 = next(
        b for b in previous.builds if b.variant == "cu132" and "linux-aarch64" in b.platforms
    )
    assert (
        builds[("cu132", "linux-aarch64")].sass
        == old_aarch64.sass
        == ((8, 0), (9, 0), (10, 0), (11, 0), (12, 0))
    )
    assert builds[("cu132", "linux-aarch64")].provenance.unverified_fields == ("sass", "ptx")
    assert any(
        s.startswith(f"{index.base}/whl/cu130/torch/")
        for s in builds[("cu130", "linux-x86_64")].provenance.source
    )

    fifteen = after.torch_release("2.15.0")
    assert fifteen is not None
    cu126 = next(b for b in fifteen.builds if b.variant == "cu126")
    assert cu126.sass == ((5, 0), (6, 0), (7, 0), (7, 5), (8, 0), (8, 6), (9, 0))  # from 2.14.1
    fourteen = after.torch_release("2.14.1")
    assert fourteen is not None and fourteen.python["linux-x86_64"][-1] == "3.15"

    # Everything else is untouched, and the refreshed matrix passes the checks.
    assert len(after.torch_releases) == len(before.torch_releases) + 1
    assert check_matrix(after) == []
    text = (matrix_copy / "torch.toml").read_text()
    assert text.startswith("# torch releases and their published builds.")

    # A second run finds nothing new.
    again = run_refresh(index, matrix_copy)
    assert again.changes == () and again.diff == "" and not again.written


def test_dry_run_writes_nothing(index: FakeIndex, matrix_copy: Path) -> None:
    scenario(index)
    original = (matrix_copy / "torch.toml").read_bytes()
    result = run_refresh(index, matrix_copy, write=False)
    assert result.changes and not result.written
    assert (matrix_copy / "torch.toml").read_bytes() == original


def test_pypi_failure_is_an_environment_failure(index: FakeIndex, matrix_copy: Path) -> None:
    scenario(index)
    index.failing.add("/pypi/simple/torch/")
    with pytest.raises(EnvironmentFailure, match=r"cannot read .*/pypi/simple/torch/"):
        run_refresh(index, matrix_copy)
    hits = [p for p, _ in index.requests if p == "/pypi/simple/torch/"]
    assert len(hits) == 2  # one retry
    assert (matrix_copy / "torch.toml").read_text() == (
        default_matrix_dir() / "torch.toml"
    ).read_text()


def test_cli_refresh_dry_run_and_write(index: FakeIndex, matrix_copy: Path) -> None:
    scenario(index)
    args = [
        sys.executable,
        "-m",
        "cudalock",
        "matrix",
        "refresh",
        "--matrix",
        str(matrix_copy),
        "--pypi-url",
        f"{index.base}/pypi/simple",
        "--pytorch-index",
        f"{index.base}/whl",
    ]
    done = subprocess.run([*args, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "+++ b/torch.toml" in done.stdout and "would change: 6 change(s)" in done.stderr
    assert load_matrix(matrix_copy, use_cache=False).torch_release("2.16.0") is None
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "updated: 6 change(s)" in done.stderr
    assert load_matrix(matrix_copy, use_cache=False).torch_release("2.16.0") is not None
    index.failing.add("/pypi/simple/torch/")
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and "cannot read" in done.stderr and "Traceback" not in done.stderr
