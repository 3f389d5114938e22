"""When bootstrap gives the torch wheels a head start: only where uv's cache will hold them."""

from __future__ import annotations

import pytest

from cudalock.envfiles.wheelsahead import wheels_ahead_wanted


@pytest.mark.parametrize("value", ["", "0", "false", "False", "no", "off"])
def test_a_flag_left_off_leaves_the_head_start_on(value: str) -> None:
    assert wheels_ahead_wanted({"UV_NO_CACHE": value, "UV_OFFLINE": value})


@pytest.mark.parametrize("name", ["UV_NO_CACHE", "UV_OFFLINE"])
@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_no_cache_or_offline_turns_it_off(name: str, value: str) -> None:
    assert not wheels_ahead_wanted({name: value})
