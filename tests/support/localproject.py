"""A local project directory pip can install editable with no network: an in-tree PEP 517/660
build backend (no build requirements), so ``pip install -e DIR`` works against a bare index."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

_BACKEND = """
import base64, hashlib, os, zipfile

NAME, VERSION, REQUIRES = {name!r}, {version!r}, {requires!r}
ROOT = os.path.dirname(os.path.abspath(__file__))


def _metadata():
    lines = ["Metadata-Version: 2.1", "Name: " + NAME, "Version: " + VERSION]
    lines += ["Requires-Dist: " + r for r in REQUIRES]
    return "\\n".join(lines) + "\\n"


def _wheel(directory, files):
    dist = NAME.replace("-", "_") + "-" + VERSION
    name = dist + "-py3-none-any.whl"
    files = dict(files)
    files[dist + ".dist-info/METADATA"] = _metadata()
    files[dist + ".dist-info/WHEEL"] = (
        "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append(dist + ".dist-info/RECORD,,")
    files[dist + ".dist-info/RECORD"] = "\\n".join(record) + "\\n"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    module = NAME.replace("-", "_")
    with open(os.path.join(ROOT, module + ".py")) as handle:
        return _wheel(wheel_directory, {{module + ".py": handle.read()}})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    module = NAME.replace("-", "_")
    return _wheel(wheel_directory, {{"_" + module + "_editable.pth": ROOT + "\\n"}})
"""


def make_local_project(
    directory: Path, name: str, version: str, requires: Sequence[str] = ()
) -> Path:
    """Write a project at ``directory`` (any name, spaces and quotes included)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "inplace_backend"\nbackend-path = ["."]\n',
        encoding="utf-8",
    )
    (directory / "inplace_backend.py").write_text(
        _BACKEND.format(name=name, version=version, requires=list(requires)), encoding="utf-8"
    )
    (directory / f"{name.replace('-', '_')}.py").write_text(
        f"__version__ = {version!r}\n", encoding="utf-8"
    )
    return directory
