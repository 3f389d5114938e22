"""Which extras of a framework declare its torch requirement, read from real metadata.

The recording (``tests/fixtures/closures/finetune-stack.json``) holds the real Requires-Dist and
Provides-Extra of transformers, datasets, llamafactory, peft, ...: the rule is checked on those.
"""

from __future__ import annotations

import pytest

from cudalock.lock.metadata import (
    Metadata,
    describe,
    family_requirements,
    marker_environment,
    torch_extras,
)
from tests.support.realstack import load_recording

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
