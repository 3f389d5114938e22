"""Sizes and parameter counts as people type them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudalock.errors import InputError
from cudalock.memory.sizes import kubernetes_quantity, parse_bytes, parse_param_count
from cudalock.units import format_gib


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512GB", 512 * 10**9),
        ("512G", 512 * 10**9),
        ("64GiB", 64 * 2**30),
        ("64Gi", 64 * 2**30),
        ("64gib", 64 * 2**30),
        ("2TiB", 2 * 2**40),
        ("1.5TB", 1_500_000_000_000),
        ("  256 MiB ", 256 * 2**20),
        ("1024B", 1024),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(("text", "suggested"), [("512", "512GiB or 512GB"), ("1.5", "1.5GiB")])
def test_a_size_without_a_unit_is_refused_with_the_units_it_may_mean(
    text: str, suggested: str
) -> None:
    with pytest.raises(InputError) as info:
        parse_bytes(text)
    assert f"size {text!r} has no unit" in info.value.message
    assert suggested in info.value.message
    # Kubernetes quantities are bytes without a unit.
    assert parse_bytes("17179869184", unit_required=False) == 16 * 2**30


@pytest.mark.parametrize(("text", "suggested"), [("70", "70B"), ("7", "7B"), ("350000", "350000M")])
def test_a_small_count_without_a_unit_is_refused(text: str, suggested: str) -> None:
    with pytest.raises(InputError) as info:
        parse_param_count(text)
    assert "has no unit" in info.value.message and suggested in info.value.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7B", 7 * 10**9),
        ("7b", 7 * 10**9),
        ("7e9", 7 * 10**9),
        ("1.5T", 1_500_000_000_000),
        ("350M", 350 * 10**6),
        ("6738415616", 6_738_415_616),
        ("6,738,415,616", 6_738_415_616),
        ("0.5B", 500_000_000),
    ],
)
def test_parse_param_count(text: str, expected: int) -> None:
    assert parse_param_count(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "12XB", "-4GB", "0", "nan", "1e999GB", "4 4GB"])
def test_bad_sizes_name_the_value(text: str) -> None:
    with pytest.raises(InputError) as info:
        parse_bytes(text)
    assert repr(text) in info.value.message
    assert "expected" in info.value.message


@pytest.mark.parametrize("text", ["7Q", "seven", "-7B", "0B", "7GiB"])
def test_bad_param_counts(text: str) -> None:
    with pytest.raises(InputError, match="parameter count"):
        parse_param_count(text)


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_bytes, "9e307 TB"),
        (parse_bytes, "1e300PiB"),
        (parse_bytes, "1e308"),
        (parse_param_count, "9e307T"),
        (parse_param_count, "2e21"),
    ],
)
def test_numbers_past_any_machine_are_refused_not_overflowed(
    parse: Callable[[str], int], text: str
) -> None:
    with pytest.raises(InputError, match="larger than any machine or model"):
        parse(text)


def test_format_and_kubernetes_quantity() -> None:
    assert format_gib(136_848_000_000) == "127.45GiB"
    assert kubernetes_quantity(2**30) == "1Gi"
    assert kubernetes_quantity(2**30 + 1) == "2Gi"
    assert kubernetes_quantity(1) == "1Gi"


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(["Gi", "GiB", "Mi", "Ti"]))
def test_binary_units_round_trip(number: int, unit: str) -> None:
    factor = {"Gi": 2**30, "GiB": 2**30, "Mi": 2**20, "Ti": 2**40}[unit]
    assert parse_bytes(f"{number}{unit}") == number * factor
