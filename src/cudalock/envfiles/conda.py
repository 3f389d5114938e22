"""The conda part of ``bootstrap --create``: which client creates the environment, the command
it is given, the user's channel configuration, and whether an existing environment may be
reused.

The client is given the channels and specs of environment.yml on its command line
(``create -n NAME --override-channels -c conda-forge python=3.11 pip ...``), the form conda
(older and >= 26, where ``nodefaults`` in a file is taken for a channel), mamba and micromamba
all take, so no path is handed to it and the user's ``defaults`` channel cannot be mixed in.
The pip part is installed by install.sh, from the lock. With no client on PATH, py-rattler
(``cudalock[conda]``) creates the prefix (:mod:`cudalock.envfiles.rattler`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cudalock import procs
from cudalock.envfiles.render import CondaPart
from cudalock.errors import EnvironmentFailure, InputError
from cudalock.fsutil import read_bounded, write_atomic

__all__ = [
    "CONDA_CLIENTS",
    "PLAN_MARKER",
    "Client",
    "CondaClient",
    "config_files",
    "configured_channel_alias",
    "configured_defaults",
    "create_command",
    "env_prefix",
    "find_client",
    "mark_prefix",
    "reuse_problem",
]

CondaClient = Literal["micromamba", "mamba", "conda", "py-rattler"]
#: The command-line clients, in the order they are preferred.
CONDA_CLIENTS: tuple[CondaClient, ...] = ("micromamba", "mamba", "conda")
#: The file in a prefix that says which conda part it was made from (the channels and specs).
PLAN_MARKER = "conda-meta/cudalock-part.txt"


@dataclass(frozen=True)
class Client:
    name: CondaClient
    #: The executable (None for py-rattler, which runs in this process).
    executable: str | None = None


def find_client(*, rattler_available: bool) -> Client:
    """micromamba, mamba or conda (the first on PATH), else py-rattler when installed; exit 3
    when there is none."""
    for name in CONDA_CLIENTS:
        found = shutil.which(name)
        if found:
            return Client(name, found)
    if rattler_available:
        return Client("py-rattler")
    raise EnvironmentFailure(
        "--create needs conda, mamba or micromamba on PATH, or py-rattler installed, to "
        "build a conda environment",
        hint="Install cudalock's conda extra (pip install 'cudalock[conda]': py-rattler, no "
        "conda install needed), or micromamba or conda, or use --format venv --create.",
    )


def create_command(client: Client, name: str, part: CondaPart) -> list[str]:
    """The command that creates environment ``name`` with the conda part, from its channels
    only: ``--override-channels`` keeps the user's configured channels (``defaults``) out."""
    if client.executable is None:
        raise ValueError(f"{client.name} has no command line")
    channels = [arg for channel in part.channels for arg in ("-c", channel)]
    return [
        client.executable,
        "create",
        "-y",
        "-n",
        name,
        "--override-channels",
        *channels,
        *part.specs,
    ]


def env_prefix(client: Client, name: str) -> Path | None:
    """The prefix of environment ``name`` as the client lists it, or None."""
    if client.executable is None:
        return None
    try:
        result = procs.run(
            [client.executable, "env", "list", "--json"],
            what=f"{client.name} env list",
            timeout=120,
        )
        prefixes = json.loads(result.stdout_text()).get("envs", [])
    except (OSError, EnvironmentFailure, ValueError, AttributeError):
        return None
    for prefix in prefixes:
        if isinstance(prefix, str) and Path(prefix).name == name:
            return Path(prefix)
    return None


# --------------------------------------------------------------------------------------------
# The user's channel configuration

#: Where conda reads its configuration, in its order (conda's documented search path), and
#: mamba's own file.
_CONDARC_PLACES = (
    "/etc/conda/.condarc",
    "/etc/conda/condarc",
    "/etc/conda/condarc.d",
    "/var/lib/conda/.condarc",
    "/var/lib/conda/condarc",
    "/var/lib/conda/condarc.d",
    "$CONDA_ROOT/.condarc",
    "$CONDA_ROOT/condarc",
    "$CONDA_ROOT/condarc.d",
    "$XDG_CONFIG_HOME/conda/.condarc",
    "$XDG_CONFIG_HOME/conda/condarc",
    "$XDG_CONFIG_HOME/conda/condarc.d",
    "~/.config/conda/.condarc",
    "~/.config/conda/condarc",
    "~/.config/conda/condarc.d",
    "~/.conda/.condarc",
    "~/.conda/condarc",
    "~/.conda/condarc.d",
    "~/.condarc",
    "~/.mambarc",
    "$CONDA_PREFIX/.condarc",
    "$CONDA_PREFIX/condarc",
    "$CONDA_PREFIX/condarc.d",
    "$CONDARC",
    "$MAMBARC",
)


def config_files(environ: Mapping[str, str]) -> list[Path]:
    """The conda configuration files that exist, as conda would find them."""
    found: list[Path] = []
    home = environ.get("HOME") or os.path.expanduser("~")
    xdg = environ.get("XDG_CONFIG_HOME") or f"{home}/.config"
    for place in _CONDARC_PLACES:
        if place.startswith("$"):
            variable, _, rest = place[1:].partition("/")
            base = xdg if variable == "XDG_CONFIG_HOME" else environ.get(variable)
            if not base:
                continue
            text = f"{base}/{rest}" if rest else base
        else:
            text = place.replace("~", home, 1) if place.startswith("~") else place
        path = Path(text)
        if path.is_dir() and path.name.endswith(".d"):
            found += sorted(
                p for p in path.iterdir() if p.suffix in (".yml", ".yaml") and p.is_file()
            )
        elif path.is_file() and path not in found:
            found.append(path)
    return found


def configured_defaults(environ: Mapping[str, str]) -> list[Path]:
    """The configuration files whose ``channels`` name ``defaults`` (or CONDA_CHANNELS does)."""
    import yaml  # here: a venv bootstrap imports this module and never reads conda's files

    named: list[Path] = []
    if "defaults" in environ.get("CONDA_CHANNELS", "").split(","):
        named.append(Path("$CONDA_CHANNELS"))
    for path in config_files(environ):
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        channels = document.get("channels") if isinstance(document, dict) else None
        if isinstance(channels, list) and "defaults" in (str(c) for c in channels):
            named.append(path)
    return named


def configured_channel_alias(environ: Mapping[str, str], default: str) -> str:
    """conda's ``channel_alias``: ``CONDA_CHANNEL_ALIAS``, else the last configuration file
    that sets it (conda's precedence), else ``default``."""
    if environ.get("CONDA_CHANNEL_ALIAS"):
        return environ["CONDA_CHANNEL_ALIAS"]
    import yaml

    alias = default
    for path in config_files(environ):
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(document, dict) and isinstance(document.get("channel_alias"), str):
            alias = document["channel_alias"]
    return alias


# --------------------------------------------------------------------------------------------
# Reusing an environment


def mark_prefix(prefix: Path, part: CondaPart) -> None:
    """Record in the prefix the conda part it was made from."""
    marker = prefix / PLAN_MARKER
    marker.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(marker, part.fingerprint() + "\n")


def reuse_problem(prefix: Path, part: CondaPart, found_python: str | None, python: str) -> str:
    """Why the environment at ``prefix`` cannot be reused for ``part`` ('' when it can)."""
    if found_python is None:
        return f"it has no Python (the plan needs {python})"
    if found_python != python.rstrip("t"):
        return f"it has Python {found_python}, the plan needs {python}"
    marker = prefix / PLAN_MARKER
    if not marker.is_file():
        return "it was not made by cudalock bootstrap --create"
    try:
        recorded = read_bounded(marker, limit=64 * 1024, what="the environment's record").decode(
            "utf-8", "replace"
        )
    except InputError as err:
        return err.message
    recorded = recorded.strip()
    if recorded != part.fingerprint():
        return (
            f"it was made from other conda packages ({recorded}; this plan: {part.fingerprint()})"
        )
    return ""
