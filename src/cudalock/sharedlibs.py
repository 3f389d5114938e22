"""The shared libraries an ELF file needs (its ``DT_NEEDED`` entries), read with the stdlib.

A CUDA extension names the CUDA runtime it was linked against: ``libcudart.so.12`` (CUDA 12.x),
``libcublas.so.11``. That is the CUDA major a wheel from PyPI was built for, read from the wheel
itself. Only the ELF header, the program headers, the dynamic segment and the string table are
read, through ``read(offset, size)``, so a local file is read with a few seeks and a zip member
only as far as its dynamic segment.

Standard library only and Python 3.7 compatible: the audit's inspection script loads this file
into the audited interpreter to read the extensions installed there (annotations are never
evaluated, so the builtin generics in them cost nothing on 3.7).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

__all__ = [
    "ELF_MAGIC",
    "NotElf",
    "cuda_majors",
    "needed_libraries",
    "needed_of_file",
]

ELF_MAGIC = b"\x7fELF"
_PT_LOAD = 1
_PT_DYNAMIC = 2
_DT_NULL = 0
_DT_NEEDED = 1
_DT_STRTAB = 5
_DT_STRSZ = 10
#: A dynamic segment or string table larger than this is not one a linker wrote.
_MAX_TABLE = 16 * 2**20
#: The CUDA libraries whose soname carries the CUDA major they belong to.
_CUDA_SONAME = re.compile(
    r"^lib(cudart|cublas|cublasLt|cusparse|cusolver|cufft|curand|nvrtc|nvJitLink|cupti)\.so\.(\d+)$"
)


class NotElf(ValueError):
    """The bytes are not an ELF shared object this reader understands."""


def _exact(read: Callable[[int, int], bytes], offset: int, size: int) -> bytes:
    data = read(offset, size)
    if len(data) != size:
        raise NotElf("truncated ELF file")
    return data


def needed_libraries(read: Callable[[int, int], bytes]) -> list[str]:
    """The ``DT_NEEDED`` sonames of the ELF file ``read`` reads, in the file's order."""
    ident = _exact(read, 0, 16)
    if ident[:4] != ELF_MAGIC or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise NotElf("not an ELF file")
    wide = ident[4] == 2
    order = "<" if ident[5] == 1 else ">"
    if wide:
        header = _exact(read, 0, 64)
        (phoff,) = struct.unpack(order + "Q", header[32:40])
        phentsize, phnum = struct.unpack(order + "HH", header[54:58])
        phformat, dynformat = order + "IIQQQQQQ", order + "qQ"
    else:
        header = _exact(read, 0, 52)
        (phoff,) = struct.unpack(order + "I", header[28:32])
        phentsize, phnum = struct.unpack(order + "HH", header[42:46])
        phformat, dynformat = order + "IIIIIIII", order + "iI"
    if phentsize < struct.calcsize(phformat) or phnum > 4096:
        raise NotElf("unreadable program headers")
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    table = _exact(read, phoff, phentsize * phnum)
    for index in range(phnum):
        entry = table[index * phentsize : index * phentsize + struct.calcsize(phformat)]
        if wide:
            kind, _flags, offset, vaddr, _paddr, filesz, _memsz, _align = struct.unpack(
                phformat, entry
            )
        else:
            kind, offset, vaddr, _paddr, filesz, _memsz, _flags, _align = struct.unpack(
                phformat, entry
            )
        if kind == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return []  # statically linked: it needs nothing
    if dynamic[1] > _MAX_TABLE:
        raise NotElf("implausible dynamic segment")
    step = struct.calcsize(dynformat)
    raw = _exact(read, dynamic[0], dynamic[1] - dynamic[1] % step)
    needed: list[int] = []
    strtab = strsz = None
    for at in range(0, len(raw), step):
        tag, value = struct.unpack(dynformat, raw[at : at + step])
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            needed.append(value)
        elif tag == _DT_STRTAB:
            strtab = value
        elif tag == _DT_STRSZ:
            strsz = value
    if not needed:
        return []
    if strtab is None or strsz is None or strsz > _MAX_TABLE:
        raise NotElf("a dynamic segment without its string table")
    # DT_STRTAB is an address: the PT_LOAD segment that maps it gives its place in the file.
    start = next(
        (off + strtab - vaddr for vaddr, off, size in loads if vaddr <= strtab < vaddr + size),
        None,
    )
    if start is None:
        raise NotElf("the string table is outside every loaded segment")
    strings = _exact(read, start, strsz)
    names = []
    for position in needed:
        end = strings.find(b"\0", position)
        if position >= len(strings) or end < 0:
            raise NotElf("a needed library's name is outside the string table")
        names.append(strings[position:end].decode("utf-8", "replace"))
    return names


def needed_of_file(path: str) -> list[str]:
    """:func:`needed_libraries` of a file on disk (OSError and :class:`NotElf` propagate)."""
    with open(path, "rb") as handle:

        def read(offset: int, size: int) -> bytes:
            handle.seek(offset)
            return handle.read(size)

        return needed_libraries(read)


def cuda_majors(sonames: list[str]) -> list[tuple[str, int]]:
    """The CUDA libraries among ``sonames`` and the CUDA major each names:
    ``libcudart.so.12`` → ``("libcudart.so.12", 12)``."""
    found = []
    for soname in sonames:
        match = _CUDA_SONAME.match(soname)
        if match:
            found.append((soname, int(match.group(2))))
    return found
