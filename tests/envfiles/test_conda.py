"""The conda creator's pure parts: the client chosen, the command it is given, the user's
channel configuration read as conda reads it, and when an environment may be reused."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudalock.envfiles.conda import (
    Client,
    configured_channel_alias,
    configured_defaults,
    create_command,
    find_client,
    mark_prefix,
    reuse_problem,
)
from cudalock.envfiles.render import CondaPart
from cudalock.errors import EnvironmentFailure

PART = CondaPart(("conda-forge",), ("python=3.11", "pip", "cuda-nvcc", "cuda-version=12.1"))


def test_the_command_names_its_channels_and_overrides_the_configured_ones() -> None:
    command = create_command(Client("conda", "/opt/conda/bin/conda"), "ft", PART)
    assert command == [
        "/opt/conda/bin/conda",
        "create",
        "-y",
        "-n",
        "ft",
        "--override-channels",
        "-c",
        "conda-forge",
        "python=3.11",
        "pip",
        "cuda-nvcc",
        "cuda-version=12.1",
    ]
    # No file is handed to the client, so no path can be read from the wrong directory.
    assert not any("/" in arg for arg in command[1:])


def test_without_a_client_or_py_rattler_it_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnvironmentFailure) as raised:
        find_client(rattler_available=False)
    assert "cudalock[conda]" in (raised.value.hint or "")
    assert find_client(rattler_available=True) == Client("py-rattler")
    (tmp_path / "micromamba").write_text("#!/bin/sh\n")
    (tmp_path / "micromamba").chmod(0o755)
    assert find_client(rattler_available=True).name == "micromamba"


def test_defaults_in_a_condarc_is_found_where_conda_looks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".conda").mkdir(parents=True)
    (home / ".condarc").write_text("channels:\n  - defaults\n  - conda-forge\n")
    (home / ".conda" / ".condarc").write_text("channels: [conda-forge]\n")
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    (prefix / ".condarc").write_text("channel_alias: file:///mirror\n")
    environ = {"HOME": str(home), "CONDA_PREFIX": str(prefix)}
    assert configured_defaults(environ) == [home / ".condarc"]
    assert configured_defaults({"HOME": str(tmp_path), "CONDA_CHANNELS": "defaults"}) == [
        Path("$CONDA_CHANNELS")
    ]
    assert configured_channel_alias(environ, "https://conda.anaconda.org/") == "file:///mirror"
    assert configured_channel_alias(environ | {"CONDA_CHANNEL_ALIAS": "x"}, "d") == "x"
    assert configured_channel_alias({"HOME": str(tmp_path)}, "d") == "d"


def test_an_environment_is_reused_only_when_made_from_the_same_conda_part(tmp_path: Path) -> None:
    assert reuse_problem(tmp_path, PART, None, "3.11") == "it has no Python (the plan needs 3.11)"
    assert "it has Python 3.10" in reuse_problem(tmp_path, PART, "3.10", "3.11")
    assert "not made by cudalock" in reuse_problem(tmp_path, PART, "3.11", "3.11")
    mark_prefix(tmp_path, PART)
    assert reuse_problem(tmp_path, PART, "3.11", "3.11") == ""
    other = CondaPart(("conda-forge",), ("python=3.11", "pip"))
    assert "made from other conda packages" in reuse_problem(tmp_path, other, "3.11", "3.11")
