"""The closure's CUDA check, the parts that need no index: which packages are read, what an
exclusion does to uv's input, the static metadata uv is given, and an offline check that
answers from the matrix and from what earlier locks read."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.pylock import Package, PackageWheel
from packaging.utils import canonicalize_name
from packaging.version import Version

from cudalock.lock.cudabuilt import (
    BuildCheck,
    _cache_read,
    _cache_write,
    built_against_torch_or_cuda,
)
from cudalock.lock.flashattn import prebuilt_wheel_names
from cudalock.lock.metadata import Metadata, marker_environment
from cudalock.lock.uvinput import compile_settings, lock_input
from cudalock.matrix import load_matrix
from cudalock.model import PackagePin, Plan, Target
from cudalock.request import make_request
from cudalock.resolve.cudabuilt import BuiltFor
from cudalock.tomlfile import tomllib
from cudalock.versions import DriverVersion
from cudalock.wheelbuild import read_wheel_build
from tests.conftest import ServeIndexes
from tests.support.wheels import StandIn, elf_shared_object

MATRIX = load_matrix()
ENVIRONMENT = marker_environment("3.11", "linux-x86_64")
CU118 = "https://download.pytorch.org/whl/cu118"


def plan(variant: str = "cu118", cuda: tuple[int, int] | None = (11, 8)) -> Plan:
    return Plan(
        matrix_version="2026-11-30",
        python="3.11",
        platform="linux-x86_64",
        compat="strict",
        torch_version="2.5.1",
        variant=variant,
        cuda=cuda,
        cudnn=None,
        index_url=f"https://download.pytorch.org/whl/{variant}",
        packages=(PackagePin("torch", f"2.5.1+{variant}", CU118),),
        targets=(Target(platform="linux-x86_64", driver_version=DriverVersion("525.125.06")),),
    )


def metadata(*requires: str) -> Metadata:
    return Metadata(name="x", version="1", requires_dist=requires, provides_extra=())


def test_a_package_counts_when_it_requires_torch_or_a_cuda_library() -> None:
    assert built_against_torch_or_cuda(metadata("numpy", "torch==2.5.1"), ENVIRONMENT)
    assert built_against_torch_or_cuda(metadata("nvidia-cublas-cu12"), ENVIRONMENT)
    assert not built_against_torch_or_cuda(metadata("numpy", "nvidia-ml-py"), ENVIRONMENT)
    # Only through an extra, or on another platform: not built against it here.
    assert not built_against_torch_or_cuda(metadata('torch; extra == "torch"'), ENVIRONMENT)
    assert not built_against_torch_or_cuda(metadata('torch; sys_platform == "darwin"'), ENVIRONMENT)


def test_an_exclusion_narrows_the_framework_uv_is_asked_for() -> None:
    request = make_request(torch="2.5.1", python="3.11", frameworks=("xformers>=0.0.28",))
    inp = lock_input(plan(), request, additions=("xformers!=0.0.29.post1,!=0.0.28.post3",))
    assert [r for r in inp.requirements if r.startswith("xformers")] == [
        "xformers!=0.0.28.post3,!=0.0.29.post1,>=0.0.28"
    ]


def test_uv_is_given_flash_attn_metadata_so_nothing_is_built_to_lock_it() -> None:
    settings = tomllib.loads(compile_settings())
    assert settings["dependency-metadata"] == [
        {"name": "flash-attn", "requires-dist": ["torch", "einops"]}
    ]


def test_flash_attn_prebuilt_wheel_names_follow_its_setup_py() -> None:
    assert prebuilt_wheel_names("2.8.3", "2.5.1+cu121", plan("cu121", (12, 1))) == (
        "flash_attn-2.8.3+cu12torch2.5cxx11abiTRUE-cp311-cp311-linux_x86_64.whl",
        "flash_attn-2.8.3+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl",
    )
    assert prebuilt_wheel_names("2.8.3", "2.5.1+cpu", plan("cpu", None)) == ()


def xformers_package(version: str, sha256: str) -> Package:
    wheel = PackageWheel(
        url=f"https://files.example/xformers-{version}-cp311-cp311-manylinux_2_28_x86_64.whl",
        hashes={"sha256": sha256},
    )
    return Package(name=canonicalize_name("xformers"), version=Version(version), wheels=[wheel])


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def check(offline: bool = True) -> BuildCheck:
    return BuildCheck(
        plan=plan(),
        matrix=MATRIX,
        environment=ENVIRONMENT,
        indexes=(),
        timeout_s=1,
        retries=0,
        offline=offline,
        metadata={},
    )


def test_offline_the_matrix_answers_and_the_version_is_excluded(cache_home: Path) -> None:
    builds = check()
    assert builds.review([xformers_package("0.0.28.post3", "a" * 64)])
    assert builds.exclusions == ("xformers!=0.0.28.post3",)
    assert builds.notes == [
        "xformers 0.0.28.post3 is built for CUDA 12.1 against torch 2.5.1+cu121; this torch is "
        "2.5.1+cu118 (cuda_builds.toml (xformers/cpp_lib.json)); another version is chosen"
    ]
    problem, hint = builds.refusal() or ("", "")
    assert problem.endswith("and no other xformers release fits the plan (excluded: 0.0.28.post3)")
    assert (
        hint == "Drop xformers, or run it on a driver ≥ 530.30.02, which runs its CUDA 12.1 build."
    )
    # Reviewing the same closure again excludes nothing new.
    assert not builds.review([xformers_package("0.0.28.post3", "a" * 64)])


def test_a_wheel_the_matrix_read_is_not_read_again(cache_home: Path) -> None:
    # The sha256 of the real xformers-0.0.31-cp39-abi3-manylinux_2_28_x86_64.whl, which
    # cuda_builds.toml names: online, no request is made for it.
    sha = "50aedaea82a38d7d28631f77617d1ed1f6f37c60bdc4bf167a69cbc0e39cee76"
    builds = check(offline=False)
    assert builds.review([xformers_package("0.0.31", sha)])
    assert "(cuda_builds.toml (xformers/cpp_lib.json))" in builds.notes[0]


def test_what_an_earlier_lock_read_is_used_without_the_wheel(cache_home: Path) -> None:
    sha = "b" * 64
    assert _cache_read(sha) == (False, None)
    said = BuiltFor("xformers", "0.0.99", "12.4", "2.5.1+cu124", "xformers/cpp_lib.json: cuda 1204")
    _cache_write(sha, said)
    assert _cache_read(sha) == (True, said)
    builds = check()
    assert builds.review([xformers_package("0.0.99", sha)])
    assert "xformers 0.0.99 is built for CUDA 12.4 against torch 2.5.1+cu124" in builds.notes[0]
    # A wheel that was read and said nothing is remembered too.
    _cache_write("c" * 64, None)
    assert _cache_read("c" * 64) == (True, None)
    assert not check().review([xformers_package("0.0.98", "c" * 64)])


def test_a_wheel_with_one_build_per_cuda_is_read_as_such(serve_indexes: ServeIndexes) -> None:
    bitsandbytes = StandIn(
        "bitsandbytes",
        "0.45.5",
        requires_dist=["torch<3,>=2.0"],
        tag="py3-none-manylinux_2_24_x86_64",
        binary_files={
            f"bitsandbytes/libbitsandbytes_cuda{cuda}.so": elf_shared_object(
                [f"libcudart.so.{cuda[:2]}"]
            )
            for cuda in ("117", "118", "121", "128")
        },
    )
    index = serve_indexes(pypi=[bitsandbytes])
    url = index.base_url + index.file_path(bitsandbytes.filename)
    package = Package(
        name=canonicalize_name("bitsandbytes"),
        version=Version("0.45.5"),
        wheels=[PackageWheel(url=url, hashes={"sha256": "0" * 64})],
    )
    built = read_wheel_build(
        str(package.name),
        str(package.version),
        metadata("torch<3,>=2.0").requires_dist,
        url,
        timeout_s=10,
        retries=0,
    )
    assert built is not None
    assert built.choices == ("11.7", "11.8", "12.1", "12.8")
    # Not "CUDA 11", which its smallest extension alone would say.
    assert built.evidence.startswith("bitsandbytes/libbitsandbytes_cuda117.so … ")
