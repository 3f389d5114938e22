"""Which extras of a framework declare its torch requirement, read from real metadata.

The recording (``tests/fixtures/closures/finetune-stack.json``) holds the real Requires-Dist and
Provides-Extra of transformers, datasets, llamafactory, peft, ...: the rule is checked on those.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from packaging.pylock import Package, PackageWheel
from packaging.utils import canonicalize_name
from packaging.version import Version

from cudalock.fsutil import bound_directory
from cudalock.lock.metadata import (
    Metadata,
    describe,
    family_requirements,
    fetch_metadata,
    marker_environment,
    stored_metadata,
    torch_extras,
)
from tests.conftest import ServeIndexes
from tests.support.realstack import load_recording
from tests.support.wheels import StandIn

LINUX_311 = marker_environment("3.11", "linux-x86_64")


def recorded(name: str, version: str) -> Metadata:
    release = load_recording().release(name, version)
    return Metadata(
        name=release.name,
        version=release.version,
        requires_dist=release.requires_dist,
        provides_extra=release.provides_extra,
    )


@pytest.mark.parametrize(
    ("name", "version", "extras"),
    [
        # transformers' own "torch" extra; never all/dev/testing/serving, which also name torch
        # but bring TensorFlow, JAX and test tools.
        ("transformers", "5.24.0", ("torch",)),
        ("transformers", "4.57.1", ("torch",)),
        ("datasets", "3.6.0", ("torch",)),
        # llamafactory 0.9.3 declares torch and torchvision in its "torch" extra.
        ("llamafactory", "0.9.3", ("torch",)),
        # Frameworks that require torch directly have nothing to add.
        ("llamafactory", "0.9.5", ()),
        ("peft", "0.17.1", ()),
        ("accelerate", "1.11.0", ()),
    ],
)
def test_the_extras_that_declare_torch(name: str, version: str, extras: tuple[str, ...]) -> None:
    assert torch_extras(recorded(name, version), LINUX_311) == extras


def test_the_torch_requirement_applies_only_with_its_extra() -> None:
    metadata = recorded("transformers", "5.24.0")
    assert family_requirements(metadata, LINUX_311) == []
    found = family_requirements(metadata, LINUX_311, ("torch",))
    assert [describe(r) for r in found] == ["torch>=2.6 (its 'torch' extra)"]
    direct = family_requirements(recorded("llamafactory", "0.9.5"), LINUX_311)
    assert sorted(describe(r) for r in direct) == [
        "torch>=2.4.0",
        "torchaudio>=2.4.0",
        "torchvision>=0.19.0",
    ]


def test_markers_are_read_for_the_target_not_this_machine() -> None:
    metadata = Metadata(
        name="fw",
        version="1",
        requires_dist=(
            'torch>=2.4; sys_platform == "linux"',
            'torch>=2.9; sys_platform == "darwin"',
        ),
        provides_extra=(),
    )
    assert [str(r.specifier) for r in family_requirements(metadata, LINUX_311)] == [">=2.4"]
    mac = marker_environment("3.11", "macos-arm64")
    assert [str(r.specifier) for r in family_requirements(metadata, mac)] == [">=2.9"]


def test_metadata_is_read_from_core_metadata_text() -> None:
    text = (
        "Metadata-Version: 2.1\nName: Transformers\nVersion: 5.19.0\n"
        "Provides-Extra: Torch\nRequires-Dist: torch>=2.5; extra == 'torch'\n"
    )
    metadata = Metadata.parse(text)
    assert metadata.provides_extra == ("torch",)
    assert torch_extras(metadata, LINUX_311) == ("torch",)


# --------------------------------------------------------------------------------------------
# The metadata cache (real HTTP on 127.0.0.1)

PEFT = StandIn("peft", "0.17.1", requires_dist=["torch>=1.13.0", "numpy"])


def peft_package(url: str, sha256: str) -> Package:
    return Package(
        name=canonicalize_name("peft"),
        version=Version("0.17.1"),
        wheels=[PackageWheel(url=url, hashes={"sha256": sha256})],
    )


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cudalock" / "metadata"


def test_a_wheels_metadata_is_read_once_then_from_the_cache(
    serve_indexes: ServeIndexes, cache_home: Path
) -> None:
    index = serve_indexes(pypi=[PEFT])
    package = peft_package(
        index.base_url + index.file_path(PEFT.filename), index.sha256(PEFT.filename)
    )
    assert stored_metadata(package) is None
    fetched = fetch_metadata(package, indexes=[index.pypi_url])
    assert fetched is not None and "numpy" in fetched.requires_dist
    assert len(index.requested("*.metadata")) == 1
    assert stored_metadata(package) == fetched
    assert fetch_metadata(package, indexes=[index.pypi_url]) == fetched
    assert len(index.requested("*.metadata")) == 1  # the second answer came from the cache
    assert [p.name for p in cache_home.iterdir()] == [f"{index.sha256(PEFT.filename)}.json"]


def test_no_cache_reads_the_index_every_time_and_keeps_nothing(
    serve_indexes: ServeIndexes, cache_home: Path
) -> None:
    index = serve_indexes(pypi=[PEFT])
    package = peft_package(
        index.base_url + index.file_path(PEFT.filename), index.sha256(PEFT.filename)
    )
    for _ in range(2):
        assert fetch_metadata(package, indexes=[index.pypi_url], use_cache=False) is not None
    assert len(index.requested("*.metadata")) == 2
    assert not cache_home.exists()


def test_a_cache_entry_for_another_hash_is_never_used(
    serve_indexes: ServeIndexes, cache_home: Path
) -> None:
    index = serve_indexes(pypi=[PEFT])
    url = index.base_url + index.file_path(PEFT.filename)
    fetch_metadata(peft_package(url, index.sha256(PEFT.filename)), indexes=[index.pypi_url])
    assert stored_metadata(peft_package(url, "0" * 64)) is None
    assert stored_metadata(peft_package(url, "not a hash")) is None


def test_the_cache_keeps_the_newest_entries_up_to_its_bound(tmp_path: Path) -> None:
    for number in range(5):
        entry = tmp_path / f"{number:064x}.json"
        entry.write_text("{}", encoding="utf-8")
        os.utime(entry, (1_000_000 + number, 1_000_000 + number))
    (tmp_path / "other.txt").write_text("not an entry", encoding="utf-8")
    bound_directory(tmp_path, 3, suffix=".json")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{2:064x}.json",
        f"{3:064x}.json",
        f"{4:064x}.json",
        "other.txt",
    ]
