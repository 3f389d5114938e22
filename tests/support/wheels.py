"""Stand-in wheels: tiny, valid wheels with the real names, versions, labels and metadata.

A stand-in ``torch`` wheel carries ``torch/version.py`` with ``__version__``/``cuda`` like the real
one, and the real ``Requires-Dist`` lines, so pip, uv and cudalock's inspector treat it as they
would the real several-gigabyte file.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import io
import os
import re
import struct
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from packaging.tags import parse_tag


@dataclass(frozen=True)
class StandIn:
    """What goes into one stand-in wheel."""

    name: str
    version: str  # the distribution version, with its local label: "2.1.0+cu121"
    requires_dist: Sequence[str] = ()
    requires_python: str | None = None
    #: Extra files, path inside the wheel → text.
    files: Mapping[str, str] = field(default_factory=dict)
    #: Extra files as bytes (shared objects: :func:`elf_shared_object`).
    binary_files: Mapping[str, bytes] = field(default_factory=dict)
    #: Wheel tag, e.g. "cp311-cp311-manylinux_2_28_x86_64"; "py3-none-any" runs anywhere.
    tag: str = "py3-none-any"
    provides_extra: Sequence[str] = ()
    #: The file name as the real index spells it ("PyYAML-6.0.1-cp311-....whl"); None: derived.
    real_filename: str | None = None
    #: "sdist": a source archive with an in-tree build backend that needs nothing from an index.
    kind: Literal["wheel", "sdist"] = "wheel"
    #: Bytes of incompressible data the wheel carries (``<package>/_payload.bin``), so that
    #: downloading, caching and unpacking it cost what a real wheel of that size does.
    payload_bytes: int = 0
    #: Bytes of zeros the wheel carries, stored (``<package>/_sparse.bin``) and written as a hole
    #: in a sparse file: a wheel of a real large size (vllm's 321 MiB) that costs no disk, for
    #: reading its table of contents by HTTP range requests. Served from disk by the index.
    sparse_bytes: int = 0

    @property
    def normalized(self) -> str:
        return self.name.replace("-", "_").lower()

    @property
    def filename(self) -> str:
        if self.real_filename is not None:
            return self.real_filename
        if self.kind == "sdist":
            return f"{self.normalized}-{self.version}.tar.gz"
        return f"{self.normalized}-{self.version}-{self.tag}.whl"


def torch_version_file(version: str, cuda: str | None, git_version: str = "0" * 40) -> str:
    """``torch/version.py`` as the real wheels write it."""
    cuda_value = repr(cuda) if cuda else "None"
    return (
        "from typing import Optional\n\n"
        "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n"
        f"__version__ = '{version}'\n"
        "debug = False\n"
        f"cuda: Optional[str] = {cuda_value}\n"
        f"git_version = '{git_version}'\n"
        "hip: Optional[str] = None\n"
        "xpu: Optional[str] = None\n"
    )


def torch_standin(
    version: str, cuda: str | None, requires_dist: Sequence[str] = (), tag: str = "py3-none-any"
) -> StandIn:
    """A stand-in torch whose version file says ``version`` (e.g. "2.1.0+cu121") and ``cuda``."""
    return StandIn(
        name="torch",
        version=version,
        requires_dist=requires_dist,
        tag=tag,
        files={
            "torch/__init__.py": "from torch.version import __version__ as __version__\n",
            "torch/version.py": torch_version_file(version, cuda),
        },
    )


def elf_shared_object(needed: Sequence[str], soname: str | None = None) -> bytes:
    """A minimal x86-64 ELF shared object whose dynamic section names ``needed`` (DT_NEEDED),
    laid out as a linker lays one out: ELF header, program headers (one PT_LOAD mapping the
    file at a non-zero address, PT_DYNAMIC), then the string table and the dynamic section.
    ``readelf -d`` reads it as it reads a real extension module."""
    base = 0x400000  # a load address that is not the file offset, as in real files
    strings = bytearray(b"\0")
    offsets = []
    for name in [*needed, *([soname] if soname else [])]:
        offsets.append(len(strings))
        strings += name.encode() + b"\0"
    header_size, ph_size, ph_count = 64, 56, 2
    strtab_offset = header_size + ph_size * ph_count
    dynamic_offset = strtab_offset + len(strings) + (-len(strings)) % 8
    entries = [(1, offset) for offset in offsets[: len(needed)]]  # DT_NEEDED
    if soname:
        entries.append((14, offsets[-1]))  # DT_SONAME
    entries += [(5, base + strtab_offset), (10, len(strings)), (0, 0)]  # STRTAB, STRSZ, NULL
    dynamic = b"".join(struct.pack("<qQ", tag, value) for tag, value in entries)
    size = dynamic_offset + len(dynamic)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little endian, SysV
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, header_size, 0, 0, header_size, ph_size, ph_count, 64, 0, 0
    )
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)
    dyn = struct.pack(
        "<IIQQQQQQ",
        2,
        6,
        dynamic_offset,
        base + dynamic_offset,
        base + dynamic_offset,
        len(dynamic),
        len(dynamic),
        8,
    )
    padding = bytes(dynamic_offset - strtab_offset - len(strings))
    return header + load + dyn + bytes(strings) + padding + dynamic


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(spec: StandIn, directory: Path) -> Path:
    """Write ``spec`` as a wheel into ``directory`` and return its path (deterministic bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    if spec.kind == "sdist":
        raise ValueError(f"{spec.filename} is an sdist: use build_distribution")
    dist_info = f"{spec.normalized}-{spec.version}.dist-info"
    contents = _package_files(spec)
    contents[f"{dist_info}/METADATA"] = metadata_of(spec).encode()
    root_is_pure = "true" if spec.tag.endswith("-none-any") else "false"
    # A compressed tag set ("manylinux_2_17_x86_64.manylinux2014_x86_64") is one Tag line each.
    tag_lines = "".join(f"Tag: {tag}\n" for tag in sorted(str(t) for t in parse_tag(spec.tag)))
    contents[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: cudalock-tests\n"
        f"Root-Is-Purelib: {root_is_pure}\n{tag_lines}"
    ).encode()
    record = [_record_line(path, data) for path, data in contents.items()]
    if spec.sparse_bytes:
        record.insert(0, _sparse_record_line(f"{spec.normalized}/_sparse.bin", spec.sparse_bytes))
    record.append(f"{dist_info}/RECORD,,")
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = directory / spec.filename
    with (
        path.open("wb") as raw,
        zipfile.ZipFile(_SparseWriter(raw), "w", compression=zipfile.ZIP_DEFLATED) as archive,
    ):
        if spec.sparse_bytes:
            # First, as in a real wheel whose extension modules come before its dist-info: the
            # central directory and METADATA sit hundreds of MiB from the start.
            info = zipfile.ZipInfo(
                f"{spec.normalized}/_sparse.bin", date_time=(2020, 1, 1, 0, 0, 0)
            )
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_STORED
            zeros = bytes(_SPARSE_CHUNK)
            with archive.open(info, "w", force_zip64=True) as member:
                for start in range(0, spec.sparse_bytes, _SPARSE_CHUNK):
                    member.write(zeros[: min(_SPARSE_CHUNK, spec.sparse_bytes - start)])
        for name, data in contents.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            # Random bytes do not compress: stored, as the shared libraries of a real wheel
            # nearly are.
            if name.endswith("_payload.bin"):
                info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, data)
    return path


_SPARSE_CHUNK = 2**20


def _sparse_record_line(path: str, size: int) -> str:
    return f"{path},sha256={_zeros_digest(size)},{size}"


@functools.cache
def _zeros_digest(size: int) -> str:
    digest = hashlib.sha256()
    zeros = bytes(_SPARSE_CHUNK)
    for start in range(0, size, _SPARSE_CHUNK):
        digest.update(zeros[: min(_SPARSE_CHUNK, size - start)])
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


class _SparseWriter(io.RawIOBase):
    """A file whose writes of zeros only move the position: the file system keeps a hole."""

    def __init__(self, raw: io.BufferedWriter) -> None:
        super().__init__()
        self._raw = raw

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._raw.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._raw.seek(offset, whence)

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        size = len(data)
        if size >= 4096 and data == bytes(size):
            self._raw.seek(size, io.SEEK_CUR)
        else:
            self._raw.write(data)
        return size

    def flush(self) -> None:
        self._raw.flush()


def metadata_of(spec: StandIn) -> str:
    """The METADATA text (for PEP 658 ``.metadata`` files served next to the wheel)."""
    lines = ["Metadata-Version: 2.1", f"Name: {spec.name}", f"Version: {spec.version}"]
    if spec.requires_python:
        lines.append(f"Requires-Python: {spec.requires_python}")
    lines += [f"Provides-Extra: {extra}" for extra in spec.provides_extra]
    lines += [f"Requires-Dist: {req}" for req in spec.requires_dist]
    return "\n".join(lines) + "\n"


def _package_files(spec: StandIn) -> dict[str, bytes]:
    contents = {path: text.encode() for path, text in sorted(spec.files.items())}
    contents.update(sorted(spec.binary_files.items()))
    if not any(p.endswith(".py") for p in contents):
        contents[f"{spec.normalized}/__init__.py"] = f"__version__ = '{spec.version}'\n".encode()
    if spec.payload_bytes:
        contents[f"{spec.normalized}/_payload.bin"] = os.urandom(spec.payload_bytes)
    return contents


#: The in-tree PEP 517 backend of every stand-in sdist. It needs no build requirements, so a
#: build works with or without isolation and with no index; a ``setup.py`` in the tree runs first,
#: in the source directory and the building interpreter, as setuptools runs it, and may set
#: ``requires_dist`` (the Requires-Dist of the wheel it builds), and sees which hook runs it in
#: ``STANDIN_BACKEND_HOOK``.
SDIST_BACKEND = '''"""Build backend of a stand-in sdist (cudalock tests): PKG-INFO + files."""
import base64
import email.parser
import hashlib
import os
import re
import runpy
import zipfile

_OWN = {"PKG-INFO", "pyproject.toml", "standin_backend.py", "setup.py"}


def _metadata(hook):
    # setup.py can tell a build of the wheel from a read of the metadata, as a test may ask.
    os.environ["STANDIN_BACKEND_HOOK"] = hook
    with open("PKG-INFO", encoding="utf-8") as handle:
        info = email.parser.HeaderParser().parsestr(handle.read())
    requires = info.get_all("Requires-Dist") or []
    if os.path.exists("setup.py"):
        requires = runpy.run_path("setup.py", run_name="__main__").get("requires_dist", requires)
    lines = ["Metadata-Version: 2.1", "Name: " + info["Name"], "Version: " + info["Version"]]
    if info["Requires-Python"]:
        lines.append("Requires-Python: " + info["Requires-Python"])
    lines += ["Provides-Extra: " + extra for extra in info.get_all("Provides-Extra") or []]
    lines += ["Requires-Dist: " + requirement for requirement in requires]
    dist = re.sub(r"[-_.]+", "_", info["Name"]).lower() + "-" + info["Version"]
    return dist, "\\n".join(lines) + "\\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist, metadata = _metadata("prepare_metadata_for_build_wheel")
    os.makedirs(os.path.join(metadata_directory, dist + ".dist-info"))
    with open(os.path.join(metadata_directory, dist + ".dist-info", "METADATA"), "w") as out:
        out.write(metadata)
    return dist + ".dist-info"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist, metadata = _metadata("build_wheel")
    files = {}
    for root, dirs, names in os.walk("."):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(names):
            path = os.path.relpath(os.path.join(root, name)).replace(os.sep, "/")
            if path not in _OWN:
                with open(path, "rb") as handle:
                    files[path] = handle.read()
    files[dist + ".dist-info/METADATA"] = metadata.encode()
    files[dist + ".dist-info/WHEEL"] = (b"Wheel-Version: 1.0\\nGenerator: cudalock-tests\\n"
                                        b"Root-Is-Purelib: true\\nTag: py3-none-any\\n")
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append(dist + ".dist-info/RECORD,,")
    files[dist + ".dist-info/RECORD"] = ("\\n".join(record) + "\\n").encode()
    name = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return name
'''

SDIST_PYPROJECT = """[build-system]
requires = []
build-backend = "standin_backend"
backend-path = ["."]
"""


def build_sdist(spec: StandIn, directory: Path) -> Path:
    """Write ``spec`` as an sdist (``.tar.gz``, or ``.zip`` when the real name says so)."""
    directory.mkdir(parents=True, exist_ok=True)
    base = re.sub(r"\.(tar\.gz|zip)$", "", spec.filename)
    contents = {
        "PKG-INFO": metadata_of(spec).encode(),
        "pyproject.toml": SDIST_PYPROJECT.encode(),
        "standin_backend.py": SDIST_BACKEND.encode(),
        **_package_files(spec),
    }
    path = directory / spec.filename
    if spec.filename.endswith(".zip"):
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, data in contents.items():
                member = zipfile.ZipInfo(f"{base}/{name}", date_time=(2020, 1, 1, 0, 0, 0))
                member.external_attr = 0o644 << 16
                archive.writestr(member, data)
        return path
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in contents.items():
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 1577836800
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(buffer.getvalue(), mtime=0))
    return path


def build_distribution(spec: StandIn, directory: Path) -> Path:
    """The wheel or sdist ``spec`` describes, written into ``directory``."""
    return build_sdist(spec, directory) if spec.kind == "sdist" else build_wheel(spec, directory)


def xformers_cpp_lib(cuda: int, torch: str) -> str:
    """``xformers/cpp_lib.json`` as xformers' wheels write it (``cuda`` 1208 = CUDA 12.8)."""
    return (
        f'{{"version": {{"cuda": {cuda}, "hip": null, "torch": "{torch}", "python": "3.9.23", '
        '"flash": "v2.8.0.post2-3-g3ba6f82", "use_torch_flash": false}, "env": '
        '{"TORCH_CUDA_ARCH_LIST": "7.5 8.0+PTX 9.0a", "PYTORCH_ROCM_ARCH": null}}'
    )


def cuda_extension_standin(
    name: str,
    version: str,
    *,
    requires_dist: Sequence[str] = (),
    cuda_major: int | None = 12,
    cpp_lib: str | None = None,
    extension: str | None = None,
    tag: str = "cp39-abi3-manylinux_2_28_x86_64",
    payload_bytes: int = 0,
) -> StandIn:
    """A stand-in of a CUDA-built wheel: an extension module that needs ``libcudart.so.N`` and
    torch's libraries, as the real ``_C.so`` files do, and ``cpp_lib.json`` where given."""
    package = name.replace("-", "_").lower()
    needed = ["libc10.so", "libtorch.so", "libtorch_cpu.so"]
    if cuda_major is not None:
        needed += [f"libcudart.so.{cuda_major}", "libc10_cuda.so", "libtorch_cuda.so"]
    needed += ["libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6"]
    files = {f"{package}/__init__.py": f"__version__ = '{version}'\n"}
    if cpp_lib is not None:
        files[f"{package}/cpp_lib.json"] = cpp_lib
    so = extension or f"{package}/_C.so"
    return StandIn(
        name=name,
        version=version,
        requires_dist=requires_dist,
        tag=tag,
        files=files,
        binary_files={so: elf_shared_object(needed)},
        payload_bytes=payload_bytes,
    )
