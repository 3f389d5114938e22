"""Names and defaults the user sees, each spelled once: the spec file, the output formats, the
public indexes.

Standard library only (nothing at all), so the command line can show them in ``--help``
before it imports the core.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "DEFAULT_PYPI_INDEX",
    "DEFAULT_PYTORCH_INDEX",
    "OUTPUT_FORMATS",
    "SPEC_FILE",
    "OutputFormat",
]

#: The spec ``bootstrap`` writes beside its outputs and ``lock``, ``audit`` and ``doctor`` read.
SPEC_FILE = "cudalock.toml"
#: What ``bootstrap --format`` writes: conda's environment.yml, a venv's requirements, a uv
#: project.
OutputFormat = Literal["conda", "venv", "uv", "pixi"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = ("conda", "venv", "uv", "pixi")
#: Where torch's CUDA and CPU builds are published; a build's index is ``BASE/<variant>``.
DEFAULT_PYTORCH_INDEX = "https://download.pytorch.org/whl"
#: The Python Package Index's simple API.
DEFAULT_PYPI_INDEX = "https://pypi.org/simple"
