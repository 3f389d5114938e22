"""DT_NEEDED read with the stdlib, checked against readelf on real and stand-in files."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudalock.sharedlibs import NotElf, cuda_majors, needed_libraries, needed_of_file
from tests.support.wheels import elf_shared_object


def readelf_needed(path: Path) -> list[str]:
    out = subprocess.run(
        ["readelf", "-d", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def real_extensions() -> list[Path]:
    """Extension modules of the running interpreter's standard library (real linker output)."""
    dynload = [Path(p) for p in sys.path if p.endswith("lib-dynload")]
    return sorted(path for d in dynload for path in d.glob("*.so"))[:8]


needs_readelf = pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf not installed")


@needs_readelf
def test_real_extension_modules_read_as_readelf_reads_them() -> None:
    files = real_extensions()
    assert files, "the interpreter has no lib-dynload extensions"
    for path in files:
        assert needed_of_file(str(path)) == readelf_needed(path), path


@needs_readelf
def test_the_stand_in_shared_object_reads_as_readelf_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "_C.so"
    names = ["libc10.so", "libtorch.so", "libcudart.so.12", "libstdc++.so.6", "libc.so.6"]
    path.write_bytes(elf_shared_object(names, soname="_C.so"))
    assert readelf_needed(path) == names
    assert needed_of_file(str(path)) == names


def test_cuda_libraries_and_their_majors() -> None:
    names = [
        "libcuda.so.1",
        "libcudart.so.12",
        "libcublasLt.so.11",
        "libtorch.so",
        "libnvrtc.so.13",
    ]
    assert cuda_majors(names) == [
        ("libcudart.so.12", 12),
        ("libcublasLt.so.11", 11),
        ("libnvrtc.so.13", 13),
    ]


@pytest.mark.parametrize(
    "data",
    [b"", b"MZ" + bytes(100), b"\x7fELF" + bytes(12), elf_shared_object(["libc.so.6"])[:100]],
)
def test_what_is_not_a_whole_elf_file_is_said_to_be_so(data: bytes) -> None:
    with pytest.raises(NotElf):
        needed_libraries(lambda offset, size: data[offset : offset + size])
