"""`cudalock matrix refresh` against PyPI-like and PyTorch-like indexes served on 127.0.0.1.

The served pages are file lists with the real file names, PEP 691 fields and PEP 658 metadata
(refresh reads names and metadata, never a wheel body); DeepSpeed's sdists are real tar.gz files
with the PKG-INFO and op_builder/builder.py refresh reads. The scenario is derived from the
shipped matrix, so it stays a scenario of "one more release" however the matrix grows: the next
torch minor after the newest one (its PyPI build on the newest CUDA, torchvision one minor up
pinning it), and the next DeepSpeed patch release.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from packaging.version import Version

from cudalock.errors import EnvironmentFailure, UsageError
from cudalock.matrix import Matrix, TorchRelease, default_matrix_dir, load_matrix
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
from cudalock.matrix.refresh_deepspeed import cuda_rule, read_sdist, torch_requirement
from cudalock.tomlfile import tomllib
from cudalock.versions import format_cuda
from tests.support.cli import cudalock
from tests.support.invariants import violations
from tests.support.known_matrix import KNOWN_DEEPSPEED, KNOWN_TORCH

PEP691 = "application/vnd.pypi.simple.v1+json"
TODAY = datetime.date(2099, 1, 2)
LINUX_TAGS = ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64")
OTHER_TAGS = ("win_amd64", "macosx_14_0_arm64")

SHIPPED = load_matrix(default_matrix_dir())


def _newest(matrix: Matrix) -> TorchRelease:
    return max(matrix.torch_releases, key=lambda r: Version(r.version))


def _next_minor(version: str) -> str:
    release = Version(version).release
    return f"{release[0]}.{release[1] + 1}.0"


def _next_python(python: str) -> str:
    major, minor = python.rstrip("t").split(".")
    return f"{major}.{int(minor) + 1}"


@dataclass(frozen=True)
class Scenario:
    """One more torch release, derived from the newest the matrix has."""

    previous: TorchRelease
    version: str
    torchvision: str
    python: tuple[str, ...]  # CPython versions with wheels ("3.15t" free-threaded)
    requires_python: str
    #: The CUDA builds of the previous release on Linux x86_64, newest last: the new release's
    #: PyPI build is the newest, and the index has all of them.
    variants: tuple[str, ...]

    @property
    def pypi_variant(self) -> str:
        return self.variants[-1]


def scenario_of(matrix: Matrix) -> Scenario:
    previous = _newest(matrix)
    linux = sorted(
        (b for b in previous.builds_for("linux-x86_64") if b.kind == "cuda" and b.cuda),
        key=lambda b: b.cuda or (0, 0),
    )
    gil = [p for p in previous.python["linux-x86_64"] if not p.endswith("t")]
    newest_python = max(gil, key=lambda p: Version(p))
    python = (*gil[1:], _next_python(newest_python))
    vision = Version(previous.torchvision or "0.0.0").release
    return Scenario(
        previous=previous,
        version=_next_minor(previous.version),
        torchvision=f"{vision[0]}.{vision[1] + 1}.0",
        python=tuple(python),
        requires_python=f">={python[0]}",
        variants=tuple(b.variant for b in linux[-2:]),
    )


@dataclass
class FakeIndex:
    """PEP 691 JSON under /pypi/simple/<project>/, PEP 503 HTML under /whl/<variant>/torch/,
    files under /pypi/files/."""

    pypi: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    whl: dict[str, list[str]] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    auth: tuple[str, str] | None = None
    base: str = ""

    def add_pypi(
        self,
        project: str,
        filename: str,
        *,
        uploaded: str,
        requires_python: str | None,
        metadata: str | None = None,
        body: bytes = b"",
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
            self.files[f"/pypi/files/{filename}.metadata"] = metadata.encode()
        self.files[f"/pypi/files/{filename}"] = body
        self.pypi.setdefault(project, []).append(entry)

    def answer(self, path: str, accept: str, authorization: str) -> tuple[int, str, bytes]:
        self.requests.append((path, accept, authorization))
        if self.auth is not None:
            expected = "Basic " + base64.b64encode(":".join(self.auth).encode()).decode()
            if authorization != expected:
                return 401, "text/plain", b"who are you"
        if path in self.failing:
            return 500, "text/plain", b"boom"
        parts = path.strip("/").split("/")
        if parts[:2] == ["pypi", "simple"] and len(parts) == 3 and parts[2] in self.pypi:
            if PEP691 not in accept:
                return 406, "text/plain", b"JSON only here"
            doc = {"meta": {"api-version": "1.1"}, "name": parts[2], "files": self.pypi[parts[2]]}
            return 200, PEP691, json.dumps(doc).encode()
        if path in self.files:
            return 200, "binary/octet-stream", self.files[path]
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
            status, kind, body = fake.answer(
                self.path, self.headers.get("Accept", ""), self.headers.get("Authorization", "")
            )
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


def cuda_requirement(variant: str) -> str:
    """The CUDA runtime pin a PyPI torch wheel of ``variant`` carries (cu132 → 13.2.x)."""
    cuda = SHIPPED_VARIANT_CUDA[variant]
    return f'cuda-toolkit[cublas,cudart]=={cuda}.0; platform_system == "Linux"'


SHIPPED_VARIANT_CUDA = {
    b.variant: format_cuda(b.cuda) for r in SHIPPED.torch_releases for b in r.builds if b.cuda
}


def serve_new_torch(index: FakeIndex, new: Scenario) -> None:
    """The new release on PyPI (all platforms), its torchvision, and its index builds."""
    for python in new.python:
        tag = f"cp{python.replace('.', '')}-cp{python.replace('.', '')}"
        for plat in LINUX_TAGS + OTHER_TAGS:
            requires = [cuda_requirement(new.pypi_variant)] if plat in LINUX_TAGS else []
            index.add_pypi(
                "torch",
                f"torch-{new.version}-{tag}-{plat}.whl",
                uploaded="2098-12-30T15:00:00.000000Z",
                requires_python=new.requires_python,
                metadata=metadata("torch", new.version, requires),
            )
    index.add_pypi(
        "torch",
        f"torch-{new.version}rc1-cp311-cp311-win_amd64.whl",
        uploaded="2098-12-20T10:00:00.000000Z",
        requires_python=new.requires_python,
    )
    index.add_pypi(
        "torchvision",
        f"torchvision-{new.torchvision}-py3-none-any.whl",
        uploaded="2098-12-30T16:00:00Z",
        requires_python=new.requires_python,
        metadata=metadata("torchvision", new.torchvision, [f"torch=={new.version}", "numpy"]),
    )
    cp = f"cp{new.python[0].replace('.', '')}"
    index.whl["cpu"] = [
        f"torch-{new.version}+cpu-{cp}-{cp}-manylinux_2_28_x86_64.whl",
        f"torch-{new.version}+cpu-{cp}-{cp}-win_amd64.whl",
        f"torch-{new.version}-{cp}-none-macosx_14_0_arm64.whl",
    ]
    for variant in new.variants:
        index.whl[variant] = [f"torch-{new.version}+{variant}-{cp}-{cp}-manylinux_2_28_x86_64.whl"]
    index.whl[new.pypi_variant] += [
        f"torch-{new.version}+{new.pypi_variant}-{cp}-{cp}-manylinux_2_28_aarch64.whl",
        f"torch-{new.version}+{new.pypi_variant}-{cp}-{cp}-win_amd64.whl",
        f"torch-{new.version}.dev20981101+{new.pypi_variant}-{cp}-{cp}-win_amd64.whl",
    ]


def builder_source(allowed: dict[int, list[str]]) -> str:
    lines = [f"    {major}: {versions!r}," for major, versions in allowed.items()]
    return (
        "# list compatible minor CUDA versions\n"
        "cuda_minor_mismatch_ok = {\n" + "\n".join(lines) + "\n}\n\n\n"
        "def assert_no_cuda_mismatch(name=''):\n    pass\n"
    )


def deepspeed_sdist(version: str, torch: str, allowed: dict[int, list[str]]) -> bytes:
    """A DeepSpeed sdist as PyPI serves it, with the files refresh reads."""
    pkg_info = metadata("deepspeed", version, ["einops", torch, f'{torch}; extra == "all"'])
    members = {
        f"deepspeed-{version}/PKG-INFO": pkg_info,
        f"deepspeed-{version}/deepspeed.egg-info/PKG-INFO": metadata("deepspeed", version, []),
        f"deepspeed-{version}/op_builder/builder.py": builder_source(allowed),
        f"deepspeed-{version}/requirements/requirements.txt": f"einops\n{torch}\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def newest_rule(matrix: Matrix) -> dict[int, list[str]]:
    from packaging.specifiers import SpecifierSet

    newest = max(matrix.deepspeed, key=lambda d: Version(d.version)).version
    (rule,) = [
        c for c in matrix.deepspeed_cuda_checks if SpecifierSet(c.deepspeed).contains(newest)
    ]
    return {
        major: [format_cuda(v) for v in versions]
        for major, versions in rule.minor_mismatch_ok.items()
    }


def next_deepspeed(matrix: Matrix) -> str:
    release = Version(max(matrix.deepspeed, key=lambda d: Version(d.version)).version).release
    return f"{release[0]}.{release[1]}.{release[2] + 1}"


def serve_nothing_new(index: FakeIndex) -> None:
    """Project pages for torch and its companions that hold nothing the matrix lacks."""
    for project in ("torch", "torchvision", "torchaudio"):
        index.pypi.setdefault(project, [])


def serve_new_deepspeed(
    index: FakeIndex, version: str, allowed: dict[int, list[str]], torch: str = "torch>=2.0.0"
) -> None:
    index.add_pypi(
        "deepspeed",
        f"deepspeed-{version}.tar.gz",
        uploaded="2098-12-30T17:00:00.000000Z",
        requires_python=None,
        body=deepspeed_sdist(version, torch, allowed),
    )


def run_refresh(
    index: FakeIndex, directory: Path, *, write: bool = True, credentials: str = ""
) -> RefreshResult:
    base = index.base.replace("http://", f"http://{credentials}") if credentials else index.base
    return refresh_matrix(
        directory,
        pypi_url=f"{base}/pypi/simple",
        pytorch_index=f"{base}/whl",
        write=write,
        fetcher=Fetcher(timeout=5, retries=1, backoff=0.01),
        today=TODAY,
    )


# --------------------------------------------------------------------------------------------


def test_wheel_names_and_metadata_readers() -> None:
    wheel = read_wheel_name("torch-2.15.0-cp314-cp314t-manylinux_2_28_aarch64.whl")
    assert wheel is not None and wheel.targets == {("linux-aarch64", "3.14t")}
    assert read_wheel_name("torch-2.1.0.tar.gz") is None
    x86_only = (
        'nvidia-cuda-runtime-cu12==12.1.105; platform_system == "Linux" and '
        'platform_machine == "x86_64"'
    )
    assert cuda_variant_from_metadata(metadata("torch", "2.1.0", [x86_only]), "x86_64") == "cu121"
    # The same pin does not apply on aarch64 (2.1.0's aarch64 PyPI wheel is a CPU build).
    assert cuda_variant_from_metadata(metadata("torch", "2.1.0", [x86_only]), "aarch64") == "cpu"
    toolkit = 'cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"'
    assert cuda_variant_from_metadata(metadata("torch", "2.15.0", [toolkit]), "aarch64") == "cu132"
    assert torch_pin(metadata("torchvision", "0.16.0", ["torch (==2.1.0)"])) == "2.1.0"
    assert torch_pin(metadata("torchvision", "0.15.0", ["torch==2.0.0+cu117"])) is None
    assert torch_pin(metadata("torchvision", "0.29.1", ["torch>=2.14.0"])) is None
    page = '<a href="/whl/cu121/torch-2.1.0%2Bcu121-cp311-cp311-linux_x86_64.whl#sha256=1">x</a>'
    assert index_platforms(page, "cu121") == {"2.1.0": {"linux-x86_64"}}
    assert index_platforms(page, "cu118") == {}


def test_deepspeed_readers() -> None:
    assert torch_requirement(metadata("deepspeed", "0.19.8", ["torch>=2.0.0", "tqdm"])) == ">=2.0.0"
    assert torch_requirement(metadata("deepspeed", "0.14.0", ["torch", "tqdm"])) == ""
    only_extra = metadata("deepspeed", "0.1", ['torch; extra == "all"'])
    assert torch_requirement(only_extra) is None
    allowed = {11: ["11.0", "11.8"], 12: ["12.0", "12.9"]}
    assert cuda_rule(builder_source(allowed)) == allowed
    assert cuda_rule("cuda_minor_mismatch_ok = make()\n") is None
    assert cuda_rule("def broken(:\n") is None
    read = read_sdist(deepspeed_sdist("0.20.0", "torch>=2.1", allowed))
    assert (read.torch, read.cuda_rule) == (">=2.1", allowed)
    assert read_sdist(b"not a tarball") == type(read)(None, None)


def test_refresh_adds_release_builds_and_tags(index: FakeIndex, matrix_copy: Path) -> None:
    new = scenario_of(SHIPPED)
    serve_new_torch(index, new)
    previous = new.previous
    # The newest release gains a wheel for the next CPython on PyPI, and an index build of a
    # variant an older release has and it lacks (when there is one).
    extra_python = _next_python(
        max(previous.python["linux-x86_64"], key=lambda p: Version(p.rstrip("t")))
    )
    tag = f"cp{extra_python.replace('.', '')}"
    index.add_pypi(
        "torch",
        f"torch-{previous.version}-{tag}-{tag}-manylinux_2_28_x86_64.whl",
        uploaded=f"{previous.date}T10:00:00.000000Z",
        requires_python=previous.requires_python,
    )
    own = {b.variant for b in previous.builds_for("linux-x86_64")}
    older = [
        (r, b)
        for r in sorted(SHIPPED.torch_releases, key=lambda r: Version(r.version), reverse=True)
        for b in r.builds_for("linux-x86_64")
        if b.kind == "cuda" and b.variant not in own
    ]
    expected = {
        f"torch {previous.version}: python.linux-x86_64 += {extra_python}",
        f"torch {new.version}: new release",
        f"torch {new.version}: new build cpu on linux-x86_64",
        f"torch {new.version}: new build {new.pypi_variant} on windows-x86_64",
    }
    expected |= {
        f"torch {new.version}: new build {v} on linux-x86_64"
        for v in new.variants
        if v != new.pypi_variant
    }
    if older:
        _release, source_build = older[0]
        index.whl.setdefault(source_build.variant, []).append(
            f"torch-{previous.version}+{source_build.variant}-cp312-cp312-manylinux_2_28_x86_64.whl"
        )
        expected.add(f"torch {previous.version}: new build {source_build.variant} on linux-x86_64")
    before = load_matrix(matrix_copy)
    result = run_refresh(index, matrix_copy)
    assert result.written
    assert set(result.changes) == expected
    assert '+matrix_version = "2099-01-02"' in result.diff
    assert f'+version = "{new.version}"' in result.diff

    after = load_matrix(matrix_copy)
    assert after.matrix_version == "2099-01-02"
    added = after.torch_release(new.version)
    assert added is not None
    assert (added.date, added.requires_python, added.torchvision, added.torchaudio) == (
        "2098-12-30",
        new.requires_python,
        new.torchvision,
        None,
    )
    assert added.python["linux-x86_64"] == new.python
    assert dict(added.pypi_default) == {
        "linux-x86_64": new.pypi_variant,
        "linux-aarch64": new.pypi_variant,
        "windows-x86_64": "cpu",
        "macos-arm64": "cpu",
    }
    builds = {(b.variant, p): b for b in added.builds for p in added.python if p in b.platforms}
    assert set(builds) == {
        ("cpu", "windows-x86_64"),
        ("cpu", "macos-arm64"),
        ("cpu", "linux-x86_64"),
        (new.pypi_variant, "linux-aarch64"),
        (new.pypi_variant, "windows-x86_64"),
        *((v, "linux-x86_64") for v in new.variants),
    }
    # Arch lists come from the same build of the nearest older release, marked unverified.
    old_aarch64 = next(
        b
        for b in previous.builds
        if b.variant == new.pypi_variant and "linux-aarch64" in b.platforms
    )
    copied = builds[(new.pypi_variant, "linux-aarch64")]
    assert (copied.sass, copied.ptx) == (old_aarch64.sass, old_aarch64.ptx)
    assert copied.provenance.unverified_fields == ("sass", "ptx")
    assert f"copied from torch {previous.version}" in str(copied.provenance.note)
    assert any(
        s.startswith(f"{index.base}/whl/{new.variants[0]}/torch/")
        for s in builds[(new.variants[0], "linux-x86_64")].provenance.source
    )
    grown = after.torch_release(previous.version)
    assert grown is not None and grown.python["linux-x86_64"][-1] == extra_python
    if older:
        _release, source_build = older[0]
        added_build = next(b for b in grown.builds if b.variant == source_build.variant)
        assert added_build.sass == source_build.sass

    # Everything else is untouched, and the refreshed matrix passes the checks.
    assert len(after.torch_releases) == len(before.torch_releases) + 1
    assert check_matrix(after) == []
    text = (matrix_copy / "torch.toml").read_text()
    assert text.startswith("# torch releases and their published builds.")

    # A second run finds nothing new.
    again = run_refresh(index, matrix_copy)
    assert again.changes == () and again.diff == "" and not again.written
    # The optional tables' packages were asked for too (this index has none of them: said).
    for project in ("vllm", "xformers", "torchao"):
        assert any(path == f"/pypi/simple/{project}/" for path, _, _ in index.requests)
        assert f"{project}: {index.base}/pypi/simple/{project}/ has no such project (HTTP 404)" in (
            again.unread
        )


def test_new_releases_keep_every_invariant_and_change_no_known_release(
    index: FakeIndex, matrix_copy: Path
) -> None:
    # What a weekly refresh does when PyTorch and DeepSpeed have each released once more: the
    # matrix grows, every rule tests/matrix/test_invariants.py checks on the shipped matrix
    # still holds, and the releases the hand-derived expectations rest on are unchanged.
    new = scenario_of(SHIPPED)
    serve_new_torch(index, new)
    deepspeed = next_deepspeed(SHIPPED)
    serve_new_deepspeed(index, deepspeed, newest_rule(SHIPPED))
    result = run_refresh(index, matrix_copy)
    assert f"torch {new.version}: new release" in result.changes
    assert f"DeepSpeed {deepspeed}: new release" in result.changes

    after = load_matrix(matrix_copy)
    assert violations(after) == {}
    assert after.torch_release(new.version) is not None
    assert any(d.version == deepspeed for d in after.deepspeed)

    def known(matrix: Matrix) -> Matrix:
        return replace(
            matrix,
            matrix_version="",
            torch_releases=tuple(
                r for r in matrix.torch_releases if Version(r.version) <= Version(KNOWN_TORCH)
            ),
            deepspeed=tuple(
                d for d in matrix.deepspeed if Version(d.version) <= Version(KNOWN_DEEPSPEED)
            ),
        )

    assert known(after) == known(SHIPPED)


def test_deepspeed_release_with_the_same_op_builder_list(
    index: FakeIndex, matrix_copy: Path
) -> None:
    serve_nothing_new(index)
    version = next_deepspeed(SHIPPED)
    serve_new_deepspeed(index, version, newest_rule(SHIPPED))
    result = run_refresh(index, matrix_copy)
    assert result.changes == (f"DeepSpeed {version}: new release",)
    after = load_matrix(matrix_copy)
    release = next(d for d in after.deepspeed if d.version == version)
    assert (release.date, release.torch, release.requires_python) == ("2098-12-30", ">=2.0.0", None)
    assert release.provenance.verified and not release.provenance.unverified_fields
    sources = " ".join(release.provenance.source)
    assert f"deepspeed-{version}.tar.gz sha256:{'0' * 64}: PKG-INFO Requires-Dist torch" in sources
    assert "op_builder/builder.py cuda_minor_mismatch_ok" in sources
    assert after.deepspeed_cuda_checks == SHIPPED.deepspeed_cuda_checks
    assert check_matrix(after) == []
    # The plan for --with deepspeed takes it, as the newest release supporting the torch.
    assert run_refresh(index, matrix_copy).changes == ()


def test_deepspeed_release_that_changes_the_op_builder_list_starts_a_rule(
    index: FakeIndex, matrix_copy: Path
) -> None:
    serve_nothing_new(index)
    version = next_deepspeed(SHIPPED)
    allowed = newest_rule(SHIPPED) | {13: ["13.0", "13.2"]}
    serve_new_deepspeed(index, version, allowed)
    result = run_refresh(index, matrix_copy)
    assert f"DeepSpeed cuda_check >={version}: new rule" in result.changes
    after = load_matrix(matrix_copy)
    assert check_matrix(after) == []
    assert violations(after) == {}
    from packaging.specifiers import SpecifierSet

    (rule,) = [
        c for c in after.deepspeed_cuda_checks if SpecifierSet(c.deepspeed).contains(version)
    ]
    assert rule.deepspeed == f">={version}"
    assert rule.minor_mismatch_ok[13] == ((13, 0), (13, 2))
    newest_known = max(SHIPPED.deepspeed, key=lambda d: Version(d.version)).version
    (old,) = [
        c for c in after.deepspeed_cuda_checks if SpecifierSet(c.deepspeed).contains(newest_known)
    ]
    assert old.deepspeed.endswith(f",<{version}")


def test_deepspeed_without_readable_metadata_is_unverified(
    index: FakeIndex, matrix_copy: Path
) -> None:
    serve_nothing_new(index)
    version = next_deepspeed(SHIPPED)
    index.add_pypi(
        "deepspeed",
        f"deepspeed-{version}.tar.gz",
        uploaded="2099-01-01T17:00:00Z",
        requires_python=None,
        body=b"truncated download",
    )
    run_refresh(index, matrix_copy)
    after = load_matrix(matrix_copy)
    release = next(d for d in after.deepspeed if d.version == version)
    assert release.provenance.unverified_fields == ("torch",)
    assert "builder.py was not read" in str(release.provenance.note)
    assert violations(after) == {}


def test_a_companion_pinning_an_existing_release_fills_its_pair(
    index: FakeIndex, matrix_copy: Path
) -> None:
    # A release without torchaudio in the matrix; PyPI now has one pinning it exactly.
    unpaired = next(r for r in reversed(SHIPPED.torch_releases) if r.torchaudio is None)
    serve_nothing_new(index)
    index.add_pypi(
        "torchaudio",
        "torchaudio-9.9.9-py3-none-any.whl",
        uploaded="2099-01-01T10:00:00Z",
        requires_python=None,
        metadata=metadata("torchaudio", "9.9.9", [f"torch=={unpaired.version}"]),
    )
    result = run_refresh(index, matrix_copy)
    assert result.changes == (f"torch {unpaired.version}: torchaudio 9.9.9",)
    after = load_matrix(matrix_copy)
    release = after.torch_release(unpaired.version)
    assert release is not None and release.torchaudio == "9.9.9"
    assert release.provenance.field_verified("torchaudio")
    assert any("torchaudio 9.9.9 Requires-Dist torch==" in s for s in release.provenance.source)


def test_a_new_cuda_version_gets_a_toolkit_without_a_driver(
    index: FakeIndex, matrix_copy: Path
) -> None:
    new = scenario_of(SHIPPED)
    serve_new_torch(index, new)
    newest_cuda = max(tk.cuda for tk in SHIPPED.toolkits)
    fresh = f"cu{newest_cuda[0]}{newest_cuda[1] + 1}"
    cp = f"cp{new.python[0].replace('.', '')}"
    index.whl[fresh] = [f"torch-{new.version}+{fresh}-{cp}-{cp}-manylinux_2_28_x86_64.whl"]
    # The refresh reads variants of CUDA versions newer than any build; cuda.toml lists the
    # newest toolkit, so that page is read only because a build names it. Make the PyPI build
    # name it.
    for entry in index.pypi["torch"]:
        path = f"/pypi/files/{entry['filename']}.metadata"
        if path in index.files and "manylinux" in str(entry["filename"]):
            cuda = f"{newest_cuda[0]}.{newest_cuda[1] + 1}"
            index.files[path] = metadata(
                "torch",
                new.version,
                [f'cuda-toolkit[cudart]=={cuda}.0; platform_system == "Linux"'],
            ).encode()
    result = run_refresh(index, matrix_copy)
    version = f"{newest_cuda[0]}.{newest_cuda[1] + 1}"
    assert f"CUDA {version}: new toolkit, driver minimum unknown" in result.changes
    after = load_matrix(matrix_copy)
    toolkit = next(tk for tk in after.toolkits if tk.cuda == (newest_cuda[0], newest_cuda[1] + 1))
    assert (toolkit.driver_linux, toolkit.driver_windows) == (None, None)
    assert not toolkit.provenance.verified and "driver minimums" in str(toolkit.provenance.note)
    # No older build of that variant to copy arch lists from: they stay empty, and the check
    # says so, as the invariant does about the driver minimum. A person fills both in on the
    # pull request the weekly refresh opens, whose CI fails until then.
    problems = check_matrix(after)
    assert {p.problem for p in problems} == {"CUDA build without sass or ptx architectures"}
    assert all(f"build '{fresh}'" in p.entry for p in problems)
    assert "linux_cuda_builds_have_a_driver_minimum" in violations(after)


def test_dry_run_writes_nothing(index: FakeIndex, matrix_copy: Path) -> None:
    serve_new_torch(index, scenario_of(SHIPPED))
    original = {p.name: p.read_bytes() for p in matrix_copy.iterdir()}
    result = run_refresh(index, matrix_copy, write=False)
    assert result.changes and not result.written
    assert {p.name: p.read_bytes() for p in matrix_copy.iterdir()} == original


def test_pypi_failure_is_an_environment_failure(index: FakeIndex, matrix_copy: Path) -> None:
    serve_new_torch(index, scenario_of(SHIPPED))
    index.failing.add("/pypi/simple/torch/")
    with pytest.raises(EnvironmentFailure, match=r"cannot read .*/pypi/simple/torch/"):
        run_refresh(index, matrix_copy)
    hits = [p for p, _, _ in index.requests if p == "/pypi/simple/torch/"]
    assert len(hits) == 2  # one retry
    assert (matrix_copy / "torch.toml").read_text() == (
        default_matrix_dir() / "torch.toml"
    ).read_text()


def test_credentials_are_sent_but_never_written(index: FakeIndex, matrix_copy: Path) -> None:
    new = scenario_of(SHIPPED)
    serve_new_torch(index, new)
    index.auth = ("reader", "s3cret")
    result = run_refresh(index, matrix_copy, credentials="reader:s3cret@")
    assert f"torch {new.version}: new release" in result.changes
    assert all(auth for _path, _accept, auth in index.requests)
    written = "".join(p.read_text() for p in matrix_copy.iterdir())
    assert "s3cret" not in written and "s3cret" not in result.diff
    index.auth = ("reader", "other")
    with pytest.raises(EnvironmentFailure) as caught:
        run_refresh(index, matrix_copy, credentials="reader:s3cret@")
    assert "s3cret" not in caught.value.message and "***@" in caught.value.message


def test_index_urls_follow_the_index_rule(matrix_copy: Path) -> None:
    with pytest.raises(UsageError, match=r"--pypi-url 'http://pypi\.example/simple' is plain http"):
        refresh_matrix(matrix_copy, pypi_url="http://pypi.example/simple", write=False)
    with pytest.raises(UsageError, match=r"--pytorch-index .* must not have a query"):
        refresh_matrix(matrix_copy, pytorch_index="https://mirror.example/whl?x=1", write=False)


def test_cli_refresh_dry_run_and_write(index: FakeIndex, matrix_copy: Path) -> None:
    new = scenario_of(SHIPPED)
    serve_new_torch(index, new)
    args = [
        "matrix",
        "refresh",
        "--matrix",
        str(matrix_copy),
        "--pypi-url",
        f"{index.base}/pypi/simple",
        "--pytorch-index",
        f"{index.base}/whl",
    ]
    done = cudalock(*args, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "+++ b/torch.toml" in done.stdout and "would change: " in done.stderr
    assert load_matrix(matrix_copy).torch_release(new.version) is None
    done = cudalock(*args)
    assert done.returncode == 0, done.stderr
    assert "updated: " in done.stderr
    assert load_matrix(matrix_copy).torch_release(new.version) is not None
    done = cudalock(*args)
    assert done.returncode == 0 and "the matrix is up to date" in done.stdout
    index.failing.add("/pypi/simple/torch/")
    done = cudalock(*args)
    assert done.returncode == 3 and "cannot read" in done.stderr and "Traceback" not in done.stderr
    done = cudalock("matrix", "refresh", "--pypi-url", "http://pypi.example/simple", "--dry-run")
    assert done.returncode == 2 and "plain http" in done.stderr


def test_an_sdist_of_endless_empty_members_is_given_up_on_member_by_member() -> None:
    import gzip
    import tarfile

    from cudalock.matrix.refresh_deepspeed import MAX_SDIST_MEMBERS

    def sdist(empty_members: int) -> bytes:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as archive:
            for number in range(empty_members):
                archive.addfile(tarfile.TarInfo(f"d/{number}"), io.BytesIO(b""))
            info = b"Metadata-Version: 2.1\nName: deepspeed\nRequires-Dist: torch>=2.1\n"
            member = tarfile.TarInfo("deepspeed-0.20.0/PKG-INFO")
            member.size = len(info)
            archive.addfile(member, io.BytesIO(info))
        return gzip.compress(raw.getvalue())

    assert read_sdist(sdist(10)).torch == ">=2.1"
    # Past the budget the archive is given up on, before a member further on is reached.
    assert read_sdist(sdist(MAX_SDIST_MEMBERS + 10)).torch is None


def test_a_builder_nested_past_the_parsers_stack_has_no_rule() -> None:
    assert cuda_rule("cuda_minor_mismatch_ok = " + "(" * 200_000 + ")" * 200_000 + "\n") is None
    assert cuda_rule("cuda_minor_mismatch_ok = " + "[" * 100 + "]" * 100 + "\n") is None
    assert cuda_rule("x = 1\0\n") is None


def matrix_files(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(directory.glob("*.toml"))}


@pytest.mark.parametrize("requires_python", [">=3.10,<<4", ">=3.10; rm -rf ~", "x" * 300])
def test_values_the_loader_refuses_stop_the_refresh_with_nothing_written(
    index: FakeIndex, matrix_copy: Path, requires_python: str
) -> None:
    new = dataclasses.replace(scenario_of(SHIPPED), requires_python=requires_python)
    serve_new_torch(index, new)
    before = matrix_files(matrix_copy)
    with pytest.raises(EnvironmentFailure, match="values the matrix loader refuses"):
        run_refresh(index, matrix_copy)
    assert matrix_files(matrix_copy) == before
    load_matrix(matrix_copy)  # every command still runs


def test_a_release_read_from_the_index_stays_unverified(
    index: FakeIndex, matrix_copy: Path
) -> None:
    new = scenario_of(SHIPPED)
    serve_new_torch(index, new)
    run_refresh(index, matrix_copy)
    added = tomllib.loads((matrix_copy / "torch.toml").read_text())
    release = next(r for r in added["release"] if r["version"] == new.version)
    assert release["status"] == "unverified"
    assert run_refresh(index, matrix_copy).changes == ()  # and a second refresh changes nothing
