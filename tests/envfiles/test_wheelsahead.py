"""When bootstrap gives the torch wheels a head start (only where uv's cache will hold them),
and how its throwaway directory links into that cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudalock.envfiles.wheelsahead import link_mode, wheels_ahead_wanted
from cudalock.lock.uv import find_uv
from tests.support.index import offline_env
from tests.support.tmpfs import mounted_tmpfs


@pytest.mark.parametrize("value", ["", "0", "false", "False", "no", "off"])
def test_a_flag_left_off_leaves_the_head_start_on(value: str) -> None:
    assert wheels_ahead_wanted({"UV_NO_CACHE": value, "UV_OFFLINE": value})


@pytest.mark.parametrize("name", ["UV_NO_CACHE", "UV_OFFLINE"])
@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_no_cache_or_offline_turns_it_off(name: str, value: str) -> None:
    assert not wheels_ahead_wanted({name: value})


def test_the_directory_links_into_uv_s_cache_by_hard_links_on_its_filesystem_only(
    tmp_path: Path,
) -> None:
    # Real uv says where its cache is (not made yet: its parent's filesystem counts).
    uv = find_uv()
    env = offline_env() | {"UV_CACHE_DIR": str(tmp_path / "cache" / "uv")}
    beside = tmp_path / "beside"
    beside.mkdir()
    assert link_mode(uv, beside, env) == "hardlink"
    with mounted_tmpfs(tmp_path / "elsewhere", "64k") as elsewhere:
        # A hard link to another filesystem would be a copy of every file.
        assert link_mode(uv, elsewhere, env) == "symlink"
