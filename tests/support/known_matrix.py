"""The shipped matrix as the hand-derived expectations know it.

Some tests resolve real targets against the shipped matrix and compare with plans derived by
hand from its facts ("an RTX 5090 on 570.86.15 gets torch 2.11.0+cu128"). Such a plan depends on
which releases exist: a torch 2.16.0 with a cu128 build would change it. These tests resolve
against this view instead: the shipped files without the torch releases newer than
:data:`KNOWN_TORCH` and the DeepSpeed releases newer than :data:`KNOWN_DEEPSPEED`. A release added
later cannot change their answers; a correction of a fact they rest on still does.
"""

from __future__ import annotations

import dataclasses
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import tomlkit
from packaging.version import Version

from cudalock.matrix import Matrix, default_matrix_dir, load_matrix

#: The newest torch and DeepSpeed releases the hand-derived expectations were written against.
KNOWN_TORCH = "2.15.0"
KNOWN_DEEPSPEED = "0.19.8"


def _known(version: str, newest: str) -> bool:
    return Version(version) <= Version(newest)


@cache
def known_matrix() -> Matrix:
    """The shipped matrix without the releases newer than the known ones."""
    shipped = load_matrix(default_matrix_dir())
    return dataclasses.replace(
        shipped,
        torch_releases=tuple(r for r in shipped.torch_releases if _known(r.version, KNOWN_TORCH)),
        deepspeed=tuple(d for d in shipped.deepspeed if _known(d.version, KNOWN_DEEPSPEED)),
    )


def write_known_matrix(directory: Path) -> Path:
    """The same view as a matrix directory, for commands run with ``--matrix``."""
    shutil.copytree(default_matrix_dir(), directory)
    for name, newest in (("torch.toml", KNOWN_TORCH), ("deepspeed.toml", KNOWN_DEEPSPEED)):
        path = directory / name
        document = tomlkit.parse(path.read_text())
        releases: Any = document["release"]
        for position in reversed(range(len(releases))):
            if not _known(str(releases[position]["version"]), newest):
                del releases[position]
        path.write_text(tomlkit.dumps(document))
    return directory
