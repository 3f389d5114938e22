"""The compatibility predicates, with expected values derived from the sourced facts.

Driver minimums: cuda_driver_table.json (NVIDIA release notes, Table 3); minor-version
compatibility floors: 11.x ≥ 450.80.02, 12.x ≥ 525.60.13, 13.x ≥ 580 (Linux).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudalock.matrix.model import arch_covers
from cudalock.model import Target
from cudalock.resolve.compat import (
    driver_verdict,
    minor_compat_floor,
    missing_archs,
    target_driver_cuda,
)
from cudalock.versions import DriverVersion, parse_compute_capability
from tests.support.small_matrix import LINUX, WINDOWS, small_matrix

MATRIX = small_matrix()


def cc(text: str) -> tuple[int, int]:
    return parse_compute_capability(text)


def ccs(*texts: str) -> tuple[tuple[int, int], ...]:
    return tuple(cc(t) for t in texts)


OLD_SASS = ccs("5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0")
SASS_128 = ccs("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")


@pytest.mark.parametrize(
    ("sass", "ptx", "gpu", "expected"),
    [
        (OLD_SASS, (), "6.1", True),  # sm_60 runs on 6.1 (same major, lower minor)
        (OLD_SASS, (), "8.9", True),  # sm_86 runs on an RTX 4090 (8.9)
        (OLD_SASS, (), "12.0", False),  # no sm_12x and no PTX: an RTX 5090 is not covered
        (OLD_SASS, (), "3.7", False),  # Kepler K80 is gone from these builds
        (SASS_128, (), "6.1", False),  # Pascal dropped from cu128
        (SASS_128, (), "7.0", False),  # Volta dropped from 2.11 cu128
        (SASS_128, (), "12.0", True),
        (SASS_128, (), "12.1", True),  # sm_120 SASS runs on 12.1
        (ccs("9.0"), (), "10.0", False),  # SASS never crosses a major
        (ccs("8.0"), ccs("9.0"), "10.0", True),  # PTX JIT forward to a newer GPU
        (ccs("8.0"), ccs("9.0"), "8.6", True),  # SASS sm_80 covers 8.6
        ((), ccs("9.0"), "8.9", False),  # PTX is never JIT-compiled backward
        ((), ccs("12.0"), "12.0", True),  # PTX at exactly the GPU's capability
    ],
)
def test_arch_covers(
    sass: tuple[tuple[int, int], ...], ptx: tuple[tuple[int, int], ...], gpu: str, expected: bool
) -> None:
    assert arch_covers(sass, ptx, cc(gpu)) is expected


@given(
    sass=st.lists(st.tuples(st.integers(3, 12), st.integers(0, 9)), max_size=6),
    ptx=st.lists(st.tuples(st.integers(3, 12), st.integers(0, 9)), max_size=3),
    gpu=st.tuples(st.integers(3, 12), st.integers(0, 9)),
    extra=st.tuples(st.integers(3, 12), st.integers(0, 9)),
)
def test_arch_covers_only_grows_with_more_code(
    sass: list[tuple[int, int]],
    ptx: list[tuple[int, int]],
    gpu: tuple[int, int],
    extra: tuple[int, int],
) -> None:
    # Adding kernels to a build can never make a GPU it ran on stop working.
    if arch_covers(sass, ptx, gpu):
        assert arch_covers([*sass, extra], ptx, gpu)
        assert arch_covers(sass, [*ptx, extra], gpu)
    # Exact SASS always runs; PTX always runs on the same or a newer GPU.
    assert arch_covers([gpu], [], gpu)
    assert arch_covers([], [gpu], (gpu[0] + 1, 0))


def test_missing_archs_lists_uncovered_gpus_once_sorted() -> None:
    release = MATRIX.torch_release("2.11.0")
    assert release is not None
    cu126 = next(b for b in release.builds_for(LINUX) if b.variant == "cu126")
    cu128 = next(b for b in release.builds_for(LINUX) if b.variant == "cu128")
    gpus = ccs("12.0", "6.1", "8.6", "12.0")
    assert missing_archs(cu126, gpus) == ccs("12.0")
    assert missing_archs(cu128, gpus) == ccs("6.1")
    assert missing_archs(cu128, ()) == ()


def target(
    driver: str | None = None, driver_cuda: tuple[int, int] | None = None, platform: str = LINUX
) -> Target:
    return Target(
        platform=platform,
        driver_version=DriverVersion(driver) if driver else None,
        driver_cuda=driver_cuda,
    )


def test_driver_cuda_is_derived_from_the_version_when_not_reported() -> None:
    # 535.104.05 is exactly CUDA 12.2 Update 2's minimum → the driver supports 12.2.
    assert target_driver_cuda(MATRIX, target("535.104.05")) == (12, 2)
    # One below 12.4's GA minimum 550.54.14 → still 12.2.
    assert target_driver_cuda(MATRIX, target("550.54.13")) == (12, 2)
    # Windows column: 537.13 is 12.2.2 on Windows; on Linux 537.13 ≥ 535.104.05 also 12.2.
    assert target_driver_cuda(MATRIX, target("537.13", platform=WINDOWS)) == (12, 2)
    # NVML's answer wins over the table.
    assert target_driver_cuda(MATRIX, target("535.104.05", (12, 3))) == (12, 3)
    assert target_driver_cuda(MATRIX, target()) is None


@pytest.mark.parametrize(
    ("driver", "cuda", "compat", "status", "required", "possible"),
    [
        # Exactly at 12.1's GA minimum 530.30.02: ok.
        ("530.30.02", (12, 1), "strict", "ok", "530.30.02", False),
        # One below: 530.30.01 supports 12.0 (≥ 525.60.13) → 12.1 is a newer minor of 12.x.
        ("530.30.01", (12, 1), "strict", "too-old", "530.30.02", True),
        ("530.30.01", (12, 1), "minor", "minor-compat", "530.30.02", True),
        # 535.104.05 (12.2) runs every older CUDA by backward compatibility, also 11.8.
        ("535.104.05", (11, 8), "strict", "ok", "520.61.05", False),
        ("535.104.05", (12, 4), "strict", "too-old", "550.54.14", True),
        ("535.104.05", (12, 4), "minor", "minor-compat", "550.54.14", True),
        # A new major is never reached by minor compatibility: 13.x needs ≥ 580.
        ("570.86.15", (13, 0), "minor", "too-old", "580.65.06", False),
        # 580.65.06 is 13.0 GA; 13.2 (595.45.04) runs on it only by minor compatibility.
        ("580.65.06", (13, 2), "strict", "too-old", "595.45.04", True),
        ("580.65.06", (13, 2), "minor", "minor-compat", "595.45.04", True),
        # 520.61.05 is 11.8 GA: below the 12.x floor (525.60.13), so 12.1 is out in any mode.
        ("520.61.05", (12, 1), "minor", "too-old", "530.30.02", False),
    ],
)
def test_driver_verdict(
    driver: str, cuda: tuple[int, int], compat: str, status: str, required: str, possible: bool
) -> None:
    verdict = driver_verdict(MATRIX, cuda, target(driver), compat)
    assert verdict.status == status
    assert verdict.required_driver == DriverVersion(required)
    assert verdict.minor_compat_possible is possible
    assert verdict.allowed is (status in ("ok", "minor-compat"))
    assert driver in verdict.reason


def test_verdict_reason_names_the_numbers() -> None:
    verdict = driver_verdict(MATRIX, (13, 2), target("535.104.05"), "strict")
    assert verdict.reason == (
        "CUDA 13.2 needs driver ≥ 595.45.04; driver 535.104.05 supports CUDA 12.2"
    )
    assert verdict.floor == DriverVersion("580")
    minor = driver_verdict(MATRIX, (12, 4), target("535.104.05"), "minor")
    assert "minor-version compatibility" in minor.reason
    assert "PTX JIT" in minor.reason


def test_no_driver() -> None:
    verdict = driver_verdict(MATRIX, (12, 1), target(), "strict")
    assert verdict.status == "no-driver"
    assert not verdict.allowed


def test_only_the_driver_cuda_known() -> None:
    # --driver-cuda 12.2 without a version: the driver is at least 12.2's minimum, which is
    # above the 12.x floor, so minor compatibility to 12.4 holds.
    only_cuda = target(driver_cuda=(12, 2))
    assert driver_verdict(MATRIX, (12, 1), only_cuda).status == "ok"
    assert driver_verdict(MATRIX, (12, 4), only_cuda, "minor").status == "minor-compat"
    assert driver_verdict(MATRIX, (12, 4), only_cuda, "strict").status == "too-old"


def test_floors_by_platform() -> None:
    assert minor_compat_floor(MATRIX, 12, LINUX) == DriverVersion("525.60.13")
    assert minor_compat_floor(MATRIX, 12, WINDOWS) == DriverVersion("527.41")
    assert minor_compat_floor(MATRIX, 10, LINUX) is None  # no minor compatibility before 11
