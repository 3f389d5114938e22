"""A conda creator that needs no conda install: py-rattler (the engine of pixi, the optional
extra ``cudalock[conda]``) solves the conda part of environment.yml and installs it into a
prefix, as ``micromamba create -p PREFIX`` would.

Channel names resolve through ``channel_alias`` as conda's do (``CONDA_CHANNEL_ALIAS``, else
the conda configuration, else conda.anaconda.org), so a mirror configured for conda serves this
creator too. Virtual packages are this machine's, with conda's ``CONDA_OVERRIDE_CUDA`` and
friends honoured.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cudalock.envfiles.render import CondaPart
from cudalock.errors import EnvironmentFailure

__all__ = [
    "DEFAULT_CHANNEL_ALIAS",
    "create_prefix",
    "has_cuda_driver",
    "rattler_available",
]

#: conda's default ``channel_alias``.
DEFAULT_CHANNEL_ALIAS = "https://conda.anaconda.org/"


def rattler_available() -> bool:
    """Whether py-rattler is installed (``pip install 'cudalock[conda]'``)."""
    return importlib.util.find_spec("rattler") is not None


def has_cuda_driver(virtual_packages: list[Any]) -> bool:
    return any(str(getattr(p, "name", "")).startswith("__cuda") for p in virtual_packages)


def create_prefix(
    prefix: Path,
    part: CondaPart,
    *,
    subdir: str,
    channel_alias: str,
    environ: Mapping[str, str],
    echo: Callable[[str], None],
) -> list[str]:
    """Solve ``part`` for ``subdir`` and install it into ``prefix``; the packages installed
    (``name-version-build``). Any failure of the solve or the install: exit 3."""
    import rattler

    # conda takes the alias with or without its final slash; rattler joins names onto it.
    config = rattler.ChannelConfig(channel_alias=channel_alias.rstrip("/") + "/")
    channels = [rattler.Channel(channel, config) for channel in part.channels]
    try:
        overrides = rattler.VirtualPackageOverrides.from_env()
        virtual = rattler.VirtualPackage.detect(overrides)
    except Exception as err:  # a detector failing is the machine's problem
        raise EnvironmentFailure(f"py-rattler could not detect this machine: {err}") from None
    if part.cuda_version and not has_cuda_driver(virtual) and "CONDA_OVERRIDE_CUDA" not in environ:
        echo(
            "  note: no NVIDIA driver here (no __cuda): solving without it; to solve as on the "
            "target, set CONDA_OVERRIDE_CUDA to the target driver's CUDA"
        )

    async def solve_and_install() -> list[Any]:
        records = await rattler.solve(
            channels,
            list(part.specs),
            platforms=[rattler.Subdir(subdir), rattler.Subdir("noarch")],
            virtual_packages=virtual,
        )
        await rattler.install(records, target_prefix=prefix, show_progress=False)
        return list(records)

    import asyncio  # only here: py-rattler's API is async, and asyncio takes 20 ms to import

    try:
        records = asyncio.run(solve_and_install())
    except Exception as err:  # py-rattler raises its own exception types
        kind = type(err).__name__
        raise EnvironmentFailure(
            f"py-rattler could not create {prefix} from {' '.join(part.specs)} "
            f"({kind}: {' '.join(str(err).split())[:2000]})",
            hint="Check that the channels (" + ", ".join(part.channels) + f") can be reached "
            f"through channel_alias {channel_alias}.",
        ) from None
    return sorted(f"{record.name.normalized}-{record.version}-{record.build}" for record in records)
