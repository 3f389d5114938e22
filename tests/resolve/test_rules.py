"""The resolver's rules on the small hand-built matrix (tests/support/small_matrix.py).

Small matrix: 2.1.0 (cu118, cu121, rocm5.6, cpu; Python 3.8–3.11), 2.4.1 (cu118/cu121/cu124;
3.8–3.12), 2.5.1 (cu118/cu121/cu124; 3.9–3.13), 2.11.0 (cu126, cu128, cu130; 3.10–3.14),
2.14.1 (cu126, cu130, cu132; no torchaudio), 2.15.0 (cu130 unverified, cu132; 3.11–3.15).
Drivers: 12.4 550.54.14, 12.6 560.28.03, 12.8 570.26, 13.0 580.65.06, 13.2 595.45.04.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudalock.errors import InputError, Unsatisfiable, UsageError
from cudalock.matrix import Matrix
from cudalock.model import Gpu, Target
from cudalock.resolve import make_request, parse_torch_spec, resolve
from cudalock.resolve.compat import driver_verdict, missing_archs
from cudalock.versions import DriverVersion, parse_compute_capability
from tests.support.small_matrix import LINUX, raw_documents, small_matrix

MATRIX = small_matrix()


def node(
    driver: str | None, *ccs: str, name: str = "this machine", platform: str = LINUX
) -> Target:
    return Target(
        platform=platform,
        driver_version=DriverVersion(driver) if driver else None,
        gpus=tuple(Gpu(f"GPU {cc}", parse_compute_capability(cc)) for cc in ccs),
        name=name,
    )


def test_newest_release_then_newest_allowed_build() -> None:
    # 580.65.06 → CUDA 13.0: 2.15.0 cu132 needs 595.45.04, cu130 fits (sm_89 via sm_86).
    plan = resolve(MATRIX, [node("580.65.06", "8.9")], make_request())
    assert plan.torch_pin.version == "2.15.0+cu130"
    assert plan.python == "3.15"  # newest non-free-threaded CPython of 2.15.0


def test_unverified_build_is_reported() -> None:
    # The 2.15.0 cu130 entry is marked unverified in the small matrix.
    plan = resolve(MATRIX, [node("580.65.06", "8.9")], make_request())
    assert any("2.15.0+cu130" in fact for fact in plan.unverified)
    assert any("unverified" in sentence for sentence in plan.explanation)


def test_rocm_and_cpu_are_not_fallbacks_for_a_gpu_target() -> None:
    # Only 2.1.0 matches; a 418 driver (CUDA 10.1) runs neither cu118 nor cu121. The rocm5.6 and
    # cpu builds exist, but neither is offered to an NVIDIA target.
    with pytest.raises(Unsatisfiable) as caught:
        resolve(MATRIX, [node("418.40", "7.0")], make_request(torch="==2.1.0"))
    variants = {r.variant for r in caught.value.rejected}  # type: ignore[attr-defined]
    assert variants == {"cu121", "cu118"}


def test_cuda_cpu_forces_the_cpu_build() -> None:
    plan = resolve(MATRIX, [node("580.65.06", "8.9")], make_request(cuda="cpu"))
    assert plan.variant == "cpu"
    assert plan.torch_pin.version == "2.15.0+cpu"


def test_cuda_pin_without_a_driver_is_refused() -> None:
    with pytest.raises(Unsatisfiable, match="no NVIDIA driver"):
        resolve(MATRIX, [node(None)], make_request(cuda="12.1"))


def test_free_threaded_python_is_matched_exactly() -> None:
    # 3.14t: 2.15.0 ships it (3.11–3.15t), so the CPU plan keeps 2.15.0.
    plan = resolve(MATRIX, [node(None)], make_request(python="3.14t"))
    assert (plan.torch_version, plan.python) == ("2.15.0", "3.14t")
    # 3.13t: only 2.11.0 lists it.
    plan = resolve(MATRIX, [node(None)], make_request(python="3.13t"))
    assert plan.torch_version == "2.11.0"


def test_companion_spec_limits_the_release() -> None:
    # torchvision < 0.20: 2.14.1 pairs 0.29.1, 2.11.0 0.26.0, 2.5.1 0.20.1, 2.4.1 0.19.1 → 2.4.1;
    # driver 560.28.03 (12.6) → its newest build cu124.
    plan = resolve(
        MATRIX, [node("560.28.03", "8.0")], make_request(with_packages=["torchvision<0.20"])
    )
    assert plan.torch_pin.version == "2.4.1+cu124"
    vision = plan.pin("torchvision")
    assert vision is not None and vision.version == "0.19.1+cu124"


def test_deepspeed_newest_release_for_the_chosen_torch() -> None:
    # 2.15.0 with Python 3.15: 0.19.8 needs Python ≥ 3.10 and torch ≥ 2.4 → 0.19.8.
    plan = resolve(MATRIX, [node(None)], make_request(with_packages=["deepspeed"]))
    deepspeed = plan.pin("deepspeed")
    assert deepspeed is not None
    assert (deepspeed.version, deepspeed.index_url) == ("0.19.8", None)
    # Its torch range is marked unverified in the small matrix: the plan says so.
    assert any("DeepSpeed 0.19.8" in fact for fact in plan.unverified)
    # Python 3.8 → torch 2.4.1; 0.19.8 and 0.16.9 need newer Pythons → 0.14.4.
    plan = resolve(MATRIX, [node(None)], make_request(python="3.8", with_packages=["deepspeed"]))
    deepspeed = plan.pin("deepspeed")
    assert deepspeed is not None and deepspeed.version == "0.14.4"


def test_deepspeed_spec_nothing_fits() -> None:
    with pytest.raises(Unsatisfiable) as caught:
        resolve(MATRIX, [node(None)], make_request(with_packages=["deepspeed<0.10"]))
    assert all("DeepSpeed" in r.reason for r in caught.value.rejected)  # type: ignore[attr-defined]


def test_torchaudio_explicitly_requested_skips_releases_without_it() -> None:
    plan = resolve(MATRIX, [node(None)], make_request(with_packages=["torchaudio", "none"]))
    assert plan.torch_version == "2.11.0"
    assert [p.name for p in plan.packages] == ["torch", "torchaudio"]
    assert any("no paired torchaudio" in r.reason for r in plan.rejected)


def test_no_release_matches_the_spec() -> None:
    with pytest.raises(Unsatisfiable, match=r"no torch release .* matches '==9\.9'"):
        resolve(MATRIX, [node(None)], make_request(torch="==9.9"))


def test_no_target_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        resolve(MATRIX, [], make_request())


def test_fleet_without_driver_nodes_still_gets_cuda_and_says_so() -> None:
    fleet = [node("570.86.15", "8.0", name="gpu-1"), node(None, name="login-1")]
    plan = resolve(MATRIX, fleet, make_request())
    assert plan.variant == "cu126"  # 2.14.1: cu13x need ≥ 580.65.06
    assert any("login-1" in s and "CPU only" in s for s in plan.explanation)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2.1", "==2.1.*"), ("2.1.0", "==2.1.0"), (">=2.1,<2.5", "<2.5,>=2.1")],
)
def test_parse_torch_spec(text: str, expected: str) -> None:
    assert str(parse_torch_spec(text).specifier) == expected


def test_no_torch_spec_is_no_constraint() -> None:
    # (Loading the matrix from its TOML files checks every specifier in it, so a plain resolve
    # compiles packaging's specifier grammar either way: that is no longer avoided here.)
    spec = parse_torch_spec("  ")
    assert not spec and spec.specifier is None and spec.admits("1.13.0")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("torch", ">=x"),
        ("python", "3"),
        ("cuda", "twelve"),
        ("compat", "loose"),
        ("with_packages", ["numpy>>1"]),
        ("with_packages", ["torch"]),
        ("with_packages", ["x[["]),
        ("pytorch_index", "download.pytorch.org/whl"),
    ],
)
def test_make_request_rejects_bad_values(field: str, value: object) -> None:
    with pytest.raises(UsageError):
        make_request(**{field: value})  # type: ignore[arg-type]


def test_make_request_companions() -> None:
    def companions(*given: str) -> list[str]:
        return [str(c) for c in make_request(with_packages=given or None).with_packages]

    assert companions() == ["torchvision"]
    assert companions("none") == []
    assert companions("deepspeed>=0.15") == ["torchvision", "deepspeed>=0.15"]
    assert companions("torchvision<0.20") == ["torchvision<0.20"]
    assert companions("deepspeed<0.15", "deepspeed>=0.10") == [
        "torchvision",
        "deepspeed<0.15,>=0.10",
    ]
    # A package of the variant index (checked against its project list when locking).
    assert companions("xformers") == ["torchvision", "xformers"]
    with pytest.raises(InputError):
        make_request(torch="2.x")


DRIVERS = [
    "450.80.02",
    "520.61.05",
    "525.60.13",
    "535.104.05",
    "550.54.14",
    "560.28.03",
    "570.86.15",
    "580.65.06",
    "595.45.04",
]
CCS = ["6.1", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "12.0"]

targets_strategy = st.lists(
    st.builds(
        lambda driver, ccs, index: node(driver, *ccs, name=f"n{index}"),
        st.sampled_from([*DRIVERS, None]),
        st.lists(st.sampled_from(CCS), max_size=3),
        st.integers(0, 999),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(fleet=targets_strategy, compat=st.sampled_from(["strict", "minor"]), data=st.data())
def test_fleet_plan_runs_on_every_node_and_ignores_order(
    fleet: list[Target], compat: str, data: st.DataObject
) -> None:
    request = make_request(compat=compat)
    try:
        plan = resolve(MATRIX, fleet, request)
    except Unsatisfiable:
        plan = None
    shuffled = data.draw(st.permutations(fleet))
    try:
        again = resolve(MATRIX, shuffled, request)
    except Unsatisfiable:
        again = None
    # Order of the nodes never changes the choice.
    assert (plan is None) == (again is None)
    if plan is None or again is None:
        return
    assert again.torch_pin == plan.torch_pin
    if plan.variant == "cpu":
        assert not any(t.has_driver for t in fleet)
        return
    release = MATRIX.torch_release(plan.torch_version)
    assert release is not None
    build = next(b for b in release.builds_for(LINUX) if b.variant == plan.variant)
    assert build.cuda is not None
    for target in fleet:
        if target.has_driver:
            assert driver_verdict(MATRIX, build.cuda, target, compat).allowed
        assert missing_archs(build, target.compute_capabilities) == ()


def test_resolving_ten_thousand_targets_is_fast() -> None:
    drivers = ["535.104", "550.54", "560.28", "570.86", "580.65"]
    fleet = [
        node(f"{drivers[i % 5]}.{i % 97:02d}", CCS[i % 5 + 1], name=f"n{i}") for i in range(10_000)
    ]
    started = time.perf_counter()
    plan = resolve(MATRIX, fleet, make_request())
    elapsed = time.perf_counter() - started
    # The lowest driver, 535.104.00, is ≥ 535.54.03 (12.2 GA) → CUDA 12.2; the GPUs are 7.0–8.9.
    # The newest release with a build ≤ 12.2 and sm_70: 2.5.1+cu121 (2.11.0 starts at cu126).
    assert plan.torch_pin.version == "2.5.1+cu121"
    assert any("535.104.00 on n0 limits CUDA to 12.2" in s for s in plan.explanation)
    assert elapsed < 1.0, elapsed


def _with_unverified_cu129() -> Matrix:
    """The small matrix with an unverified cu129 build of 2.11.0 beside its verified cu128."""
    documents = raw_documents()
    for release in documents["torch.toml"]["release"]:
        if release["version"] == "2.11.0":
            build = {
                "variant": "cu129",
                "cuda": "12.9",
                "sass": ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"],
                "ptx": ["12.0"],
                "platforms": [LINUX],
                "source": "https://download.pytorch.org/whl/cu129",
                "status": "unverified",
            }
            release["build"].insert(2, build)
    return small_matrix(torch_toml=documents["torch.toml"])


def test_a_verified_build_wins_over_a_newer_unverified_one_in_the_same_release() -> None:
    # 575.51.03 → CUDA 12.9: 2.11.0's cu129 would run, but it rests on an unverified entry, and
    # the verified cu128 runs too.
    matrix = _with_unverified_cu129()
    plan = resolve(matrix, [node("575.51.03", "8.0")], make_request(torch="2.11"))
    assert plan.torch_pin.version == "2.11.0+cu128"
    assert not plan.unverified
    said = " ".join(plan.explanation)
    assert "Chose the verified cu128 build over the newer cu129 build of torch 2.11.0" in said
    assert "--cuda 12.9 chooses it" in said
    # Passed over, not rejected: it would run.
    assert not any(r.variant == "cu129" for r in plan.rejected)


def test_cuda_pins_the_unverified_build_and_the_plan_says_so() -> None:
    matrix = _with_unverified_cu129()
    plan = resolve(matrix, [node("575.51.03", "8.0")], make_request(torch="2.11", cuda="12.9"))
    assert plan.torch_pin.version == "2.11.0+cu129"
    assert "that the 2.11.0+cu129 build exists for linux-x86_64 as listed" in plan.unverified
    assert (
        "that torchvision 0.26.0+cu129 is published on https://download.pytorch.org/whl/cu129"
        in plan.unverified
    )


def test_the_unverified_build_is_chosen_when_no_verified_one_fits() -> None:
    # 580.65.06: of 2.15.0 only the unverified cu130 runs (cu132 needs 595.45.04); the choice
    # stays within the newest release and lists what it rests on, the companion's file included.
    plan = resolve(MATRIX, [node("580.65.06", "8.0")], make_request())
    assert plan.torch_pin.version == "2.15.0+cu130"
    assert (
        "that torchvision 0.29.2+cu130 is published on https://download.pytorch.org/whl/cu130"
        in plan.unverified
    )
    assert not any("Chose the verified" in s for s in plan.explanation)


def test_an_unverified_pairing_is_listed_for_a_verified_build() -> None:
    documents = raw_documents()
    for release in documents["torch.toml"]["release"]:
        if release["version"] == "2.15.0":
            release["unverified"] = ["torchvision"]
    matrix = small_matrix(torch_toml=documents["torch.toml"])
    plan = resolve(matrix, [node("595.45.04", "8.0")], make_request())
    assert plan.torch_pin.version == "2.15.0+cu132"
    assert plan.unverified == (
        "that torch 2.15.0 pairs with torchvision 0.29.2",
        "that torchvision 0.29.2+cu132 is published on https://download.pytorch.org/whl/cu132",
    )
