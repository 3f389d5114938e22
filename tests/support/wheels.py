"""Stand-in wheels: tiny, valid wheels with the real names, versions, labels and metadata.

A stand-in ``torch`` wheel carries ``torch/version.py`` with ``__version__``/``cuda`` like the real
one, and the real ``Requires-Dist`` lines, so pip, uv and cudalock's inspector treat it as they
would the real several-gigabyte file.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class StandIn:
    """What goes into one stand-in wheel."""

    name: str
    version: str  # the distribution version, with its local label: "2.1.0+cu121"
    requires_dist: Sequence[str] = ()
    requires_python: str | None = None
    #: Extra files, path inside the wheel → text.
    files: Mapping[str, str] = field(default_factory=dict)
    #: Wheel tag, e.g. "cp311-cp311-manylinux_2_28_x86_64"; "py3-none-any" runs anywhere.
    tag: str = "py3-none-any"

    @property
    def normalized(self) -> str:
        return self.name.replace("-", "_").lower()

    @property
    def filename(self) -> str:
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


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def build_wheel(spec: StandIn, directory: Path) -> Path:
    """Write ``spec`` as a wheel into ``directory`` and return its path (deterministic bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = f"{spec.normalized}-{spec.version}.dist-info"
    metadata_lines = ["Metadata-Version: 2.1", f"Name: {spec.name}", f"Version: {spec.version}"]
    if spec.requires_python:
        metadata_lines.append(f"Requires-Python: {spec.requires_python}")
    metadata_lines += [f"Requires-Dist: {req}" for req in spec.requires_dist]
    contents: dict[str, bytes] = {path: text.encode() for path, text in sorted(spec.files.items())}
    if not any(p.endswith(".py") for p in contents):
        contents[f"{spec.normalized}/__init__.py"] = f"__version__ = '{spec.version}'\n".encode()
    contents[f"{dist_info}/METADATA"] = ("\n".join(metadata_lines) + "\n").encode()
    root_is_pure = "true" if spec.tag.endswith("-none-any") else "false"
    contents[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: cudalock-tests\n"
        f"Root-Is-Purelib: {root_is_pure}\nTag: {spec.tag}\n"
    ).encode()
    record = [_record_line(path, data) for path, data in contents.items()]
    record.append(f"{dist_info}/RECORD,,")
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = directory / spec.filename
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in contents.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return path


def metadata_of(spec: StandIn) -> str:
    """The METADATA text (for PEP 658 ``.metadata`` files served next to the wheel)."""
    lines = ["Metadata-Version: 2.1", f"Name: {spec.name}", f"Version: {spec.version}"]
    if spec.requires_python:
        lines.append(f"Requires-Python: {spec.requires_python}")
    lines += [f"Requires-Dist: {req}" for req in spec.requires_dist]
    return "\n".join(lines) + "\n"
