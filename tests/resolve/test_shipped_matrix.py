"""Targets × Requests → Plans on the shipped matrix, each expectation derived by hand.

The matrix is the shipped one up to the releases these expectations know
(tests/support/known_matrix.py): a release added later cannot change them.

Facts used (as the shipped matrix records them, with their sources):
- Linux driver minimums (cuda_driver_table.json): 11.8 520.61.05, 12.0 525.60.13, 12.1 530.30.02,
  12.2.2 535.104.05, 12.4 550.54.14, 12.5 555.42.02, 12.6 560.28.03, 12.8 570.26, 12.9 575.51.03,
  13.0 580.65.06, 13.2 595.45.04. Windows: 12.2.2 537.13. Minor-compat floors: 12.x 525.60.13,
  13.x 580.
- torch builds (pytorch_matrix.json): 2.15.0 cu130/cu132 (SASS 7.5…12.0); 2.12–2.14 cu126 (SASS
  5.0…9.0), cu130, cu132 (+cu129 on 2.12.1/2.13.0); 2.11.0 cu126, cu128 (7.5…12.0, Volta
  dropped), cu130; 2.8–2.10 cu126/cu128(/cu129)/cu130; 2.7.x cu118 (3.7…9.0), cu126, cu128;
  2.5.x cu118/cu121/cu124; 2.4.1 cu118/cu121/cu124. Python: 2.4.1 3.8–3.12; 2.5.0+ drops 3.8;
  2.7.x 3.9–3.13; 2.11–2.14 up to 3.14; 2.15.0 3.11–3.15. torchaudio: none for 2.12+.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from cudalock.errors import Unsatisfiable
from cudalock.matrix import Matrix
from cudalock.model import Gpu, Target
from cudalock.request import Request
from cudalock.resolve import make_request, resolve
from cudalock.versions import DriverVersion, parse_compute_capability
from tests.support.known_matrix import known_matrix

LINUX = "linux-x86_64"
INDEX = "https://download.pytorch.org/whl"


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return known_matrix()


def node(
    driver: str | None, *gpus: tuple[str, str], name: str = "this machine", platform: str = LINUX
) -> Target:
    return Target(
        platform=platform,
        driver_version=DriverVersion(driver) if driver else None,
        gpus=tuple(Gpu(gpu, parse_compute_capability(cc)) for gpu, cc in gpus),
        name=name,
    )


RTX_5090 = ("NVIDIA GeForce RTX 5090", "12.0")
RTX_4090 = ("NVIDIA GeForce RTX 4090", "8.9")
GTX_1080TI = ("NVIDIA GeForce GTX 1080 Ti", "6.1")
V100 = ("Tesla V100-SXM2-32GB", "7.0")
A100 = ("NVIDIA A100-SXM4-80GB", "8.0")


@dataclass(frozen=True)
class Case:
    targets: tuple[Target, ...]
    request: Request
    torch: str  # the torch pin, "2.11.0+cu128"
    python: str
    companions: dict[str, str] = field(default_factory=dict)
    says: tuple[str, ...] = ()  # phrases the explanation must contain


CASES = {
    # 570.86.15 → CUDA 12.8. cu13x needs ≥ 580.65.06, cu129 ≥ 575.51.03; cu126 has no sm_12x
    # and no PTX; 2.11.0 is the newest release with cu128 (sm_120). Python: 2.11.0 tops at 3.14.
    "blackwell-570": Case(
        (node("570.86.15", RTX_5090),),
        make_request(),
        "2.11.0+cu128",
        "3.14",
        {"torchvision": "0.26.0+cu128"},
        ("limits CUDA to 12.8", "rules out the cu126 build"),
    ),
    # Pascal 6.1 on 570: cu126 still ships sm_60; 2.15.0 has no cu126, 2.14.1 does.
    "pascal-570": Case(
        (node("570.86.15", GTX_1080TI),),
        make_request(),
        "2.14.1+cu126",
        "3.14",
        {"torchvision": "0.29.1+cu126"},
    ),
    # Volta 7.0 on 595.45.04 (13.2 GA): cu130/cu132 start at sm_75 with PTX 12.0 only, so the
    # newest build with sm_70 is 2.14.1+cu126.
    "volta-595": Case((node("595.45.04", V100),), make_request(), "2.14.1+cu126", "3.14"),
    # Exactly 12.6's minimum → CUDA 12.6 → 2.14.1+cu126 (2.15.0 has only 13.x builds).
    "driver-at-minimum": Case((node("560.28.03", A100),), make_request(), "2.14.1+cu126", "3.14"),
    # One below: CUDA 12.5. No 2.7+ release has a 12.x build ≤ 12.5 (2.7.1's cu118 is newer
    # but CUDA 11: the driver's own major comes first); 2.6.0 has cu124 (sm_80). Python: 2.6.0
    # tops at 3.13.
    "driver-one-below": Case(
        (node("560.28.02", A100),),
        make_request(),
        "2.6.0+cu124",
        "3.13",
        {"torchvision": "0.21.0+cu124"},
        ("the driver's own cuda major", "torch 2.7.1+cu118 is newer, but cuda 11.8"),
    ),
    # Same driver with --compat minor: 560.28.02 ≥ 525.60.13, so 12.6 is allowed → 2.14.1+cu126.
    "driver-one-below-minor": Case(
        (node("560.28.02", A100),),
        make_request(compat="minor"),
        "2.14.1+cu126",
        "3.14",
        says=("minor-version compatibility", "PTX JIT"),
    ),
    # Exactly at the 12.x floor: strict gives CUDA 12.0 → cu118 (2.7.1); minor allows 12.6.
    "floor-strict": Case((node("525.60.13", A100),), make_request(), "2.7.1+cu118", "3.13"),
    "floor-minor": Case(
        (node("525.60.13", A100),), make_request(compat="minor"), "2.14.1+cu126", "3.14"
    ),
    # One below the floor: CUDA 11.8 and no 12.x by minor compat either.
    "below-floor-minor": Case(
        (node("525.60.12", A100),), make_request(compat="minor"), "2.7.1+cu118", "3.13"
    ),
    # Python 3.8 only on ≤ 2.4.1; 535.104.05 → 12.2 → cu121 (cu124 needs 550.54.14).
    "python-3.8": Case(
        (node("535.104.05", A100),),
        make_request(python="3.8"),
        "2.4.1+cu121",
        "3.8",
        {"torchvision": "0.19.1+cu121"},
        ("Python 3.8 limits torch",),
    ),
    # No driver: the CPU build of the newest release, Python 3.15 (2.15.0), said loudly.
    "no-driver": Case(
        (node(None),),
        make_request(),
        "2.15.0+cpu",
        "3.15",
        {"torchvision": "0.29.2+cpu"},
        ("NO NVIDIA DRIVER",),
    ),
    # --cuda 12.1 on a 570 driver: the newest release with a cu121 build is 2.5.1 (Python 3.13).
    "cuda-pin": Case(
        (node("570.86.15", A100),),
        make_request(cuda="12.1"),
        "2.5.1+cu121",
        "3.13",
        {"torchvision": "0.20.1+cu121"},
    ),
    # torchaudio stops at 2.11.0; on 570 its newest allowed build with sm_80 is cu128.
    "torchaudio": Case(
        (node("570.86.15", A100),),
        make_request(with_packages=["torchaudio"]),
        "2.11.0+cu128",
        "3.14",
        {"torchvision": "0.26.0+cu128", "torchaudio": "2.11.0+cu128"},
        ("--with torchaudio limits torch",),
    ),
    # A100 on 570: 2.14.1+cu126 (newest release first); DeepSpeed 0.19.8 needs torch ≥ 2.0.0.
    "deepspeed": Case(
        (node("570.86.15", A100),),
        make_request(with_packages=["deepspeed"]),
        "2.14.1+cu126",
        "3.14",
        {"torchvision": "0.29.1+cu126", "deepspeed": "0.19.8"},
    ),
    # Windows: 537.13 is 12.2.2's Windows minimum → CUDA 12.2 → the newest Windows 12.x build
    # ≤ 12.2 is 2.5.1+cu121 (2.7.1+cu118 is newer but CUDA 11). 2.5.1's Windows wheels stop at
    # Python 3.12.
    "windows": Case(
        (node("537.13", A100, platform="windows-x86_64"),), make_request(), "2.5.1+cu121", "3.12"
    ),
    # GH200 (9.0) on linux-aarch64, driver 570.86.15 (12.8), torch < 2.9: 2.8.0's only aarch64
    # CUDA build is cu129 (needs 575.51.03); 2.7.1 has a cu128 aarch64 build with sm_90.
    "gh200-aarch64-2.7": Case(
        (node("570.86.15", ("NVIDIA GH200 480GB", "9.0"), platform="linux-aarch64"),),
        make_request(torch="<2.9"),
        "2.7.1+cu128",
        "3.13",
    ),
    # The same GPU on 575.51.03 (12.9's minimum) with torch 2.8.0: its aarch64 cu129 build.
    "gh200-aarch64-2.8": Case(
        (node("575.51.03", ("NVIDIA GH200 480GB", "9.0"), platform="linux-aarch64"),),
        make_request(torch="==2.8.0"),
        "2.8.0+cu129",
        "3.13",
    ),
    # A fleet: node-b's 535.104.05 limits CUDA to 12.2 and brings Volta; node-a brings 8.9.
    # Newest 12.x build ≤ 12.2 with sm_70 and sm_86: 2.5.1+cu121 (cu121 ships sm_50…sm_90).
    "fleet": Case(
        (node("570.86.15", RTX_4090, name="node-a"), node("535.104.05", V100, name="node-b")),
        make_request(),
        "2.5.1+cu121",
        "3.13",
        {},
        ("driver 535.104.05 on node-b limits CUDA to 12.2", "on node-a", "2 targets"),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan(matrix: Matrix, name: str) -> None:
    case = CASES[name]
    plan = resolve(matrix, case.targets, case.request)
    version, _, variant = case.torch.partition("+")
    assert (plan.torch_version, plan.variant) == (version, variant)
    assert plan.python == case.python
    assert plan.torch_pin.version == case.torch
    assert plan.index_url == f"{INDEX}/{variant}"
    assert plan.torch_pin.index_url == f"{INDEX}/{variant}"
    for companion, pinned in case.companions.items():
        pin = plan.pin(companion)
        assert pin is not None, companion
        assert pin.version == pinned
        expected_index = None if companion == "deepspeed" else f"{INDEX}/{variant}"
        assert pin.index_url == expected_index
    text = " ".join(plan.explanation).lower()
    for phrase in case.says:
        assert phrase.lower() in text, (phrase, text)


def test_rtx_5090_rejections_name_driver_and_arch(matrix: Matrix) -> None:
    plan = resolve(matrix, [node("570.86.15", RTX_5090)], make_request())
    by_candidate = {(r.torch, r.variant): r for r in plan.rejected}
    cu132 = by_candidate[("2.15.0", "cu132")]
    assert "needs driver ≥ 595.45.04" in cu132.reason
    assert "driver 570.86.15 supports CUDA 12.8" in cu132.reason
    assert cu132.fix == "Upgrade to driver ≥ 595.45.04."
    arch = next(r for r in plan.rejected if r.variant == "cu126")
    assert "no kernels for compute capability 12.0" in arch.reason


def test_plan_json_has_the_documented_fields(matrix: Matrix) -> None:
    plan = resolve(matrix, [node("570.86.15", RTX_5090)], make_request())
    document = plan.to_json()
    assert document["matrix_version"] == matrix.matrix_version
    assert document["python"] == "3.14"
    assert document["torch"] == {
        "version": "2.11.0",
        "variant": "cu128",
        "cuda": "12.8",
        "cudnn": document["torch"]["cudnn"],
        "index_url": f"{INDEX}/cu128",
    }
    assert document["packages"][0] == {
        "name": "torch",
        "version": "2.11.0+cu128",
        "index_url": f"{INDEX}/cu128",
    }
    assert document["target"]["driver_version"] == "570.86.15"
    assert {"torch", "variant", "reason", "fix"} <= set(document["rejected"][0])


def test_mixed_pascal_and_blackwell_fleet_has_no_common_build(matrix: Matrix) -> None:
    # sm_60 is only in cu126 and older (no PTX); sm_120 only in cu128+; no build has both.
    fleet = [
        node("580.65.06", RTX_5090, name="node-a"),
        node("580.65.06", GTX_1080TI, name="node-b"),
    ]
    with pytest.raises(Unsatisfiable) as caught:
        resolve(matrix, fleet, make_request())
    reasons = " ".join(r.reason for r in caught.value.rejected)  # type: ignore[attr-defined]
    assert "GTX 1080 Ti on node-b" in reasons
    assert "RTX 5090 on node-a" in reasons


def test_unsatisfiable_spec_names_the_driver_it_needs(matrix: Matrix) -> None:
    # torch ≥ 2.15 has only cu130 (≥ 580.65.06) and cu132 (≥ 595.45.04); 535 is below the 13.x
    # floor (580), so --compat minor cannot help either.
    with pytest.raises(Unsatisfiable) as caught:
        resolve(matrix, [node("535.104.05", A100)], make_request(torch=">=2.15"))
    error = caught.value
    rejected = error.rejected
    assert [(r.torch, r.variant) for r in rejected] == [  # type: ignore[attr-defined]
        ("2.15.0", "cu132"),
        ("2.15.0", "cu130"),
    ]
    assert rejected[1].fix == "Upgrade to driver ≥ 580.65.06."  # type: ignore[attr-defined]
    assert error.hint is not None and "580.65.06" in error.hint
    assert "--compat minor" not in error.hint


def test_strict_failure_says_what_compat_minor_would_give(matrix: Matrix) -> None:
    # --cuda 12.6 on 535.104.05 (12.2): strict refuses; minor (≥ 525.60.13) gives the newest
    # release with cu126, 2.14.1.
    with pytest.raises(Unsatisfiable) as caught:
        resolve(matrix, [node("535.104.05", A100)], make_request(cuda="12.6"))
    assert caught.value.hint is not None
    assert "With --compat minor, torch 2.14.1+cu126 would run" in caught.value.hint


def test_mixed_platforms_are_named(matrix: Matrix) -> None:
    fleet = [
        node("570.86.15", A100, name="node-a"),
        node("572.16", A100, name="win-1", platform="windows-x86_64"),
    ]
    with pytest.raises(Unsatisfiable, match=r"linux-x86_64 \(node-a\).*windows-x86_64 \(win-1\)"):
        resolve(matrix, fleet, make_request())


def test_macos_gets_the_pypi_wheel_without_a_label(matrix: Matrix) -> None:
    plan = resolve(matrix, [node(None, platform="macos-arm64")], make_request())
    assert plan.torch_pin.version == "2.15.0"
    assert plan.torch_pin.index_url is None
    vision = plan.pin("torchvision")
    assert vision is not None and vision.version == "0.29.2"


def test_pytorch_index_mirror_replaces_the_base(matrix: Matrix) -> None:
    request = make_request(pytorch_index="https://mirror.example.org/pytorch/whl/")
    plan = resolve(matrix, [node("570.86.15", RTX_5090)], request)
    assert plan.index_url == "https://mirror.example.org/pytorch/whl/cu128"
    assert {p.index_url for p in plan.packages} == {plan.index_url}


def test_rocm_builds_are_never_chosen(matrix: Matrix) -> None:
    for driver in ("450.80.02", "535.104.05", "595.45.04"):
        try:
            plan = resolve(matrix, [node(driver, A100)], make_request())
        except Unsatisfiable:
            continue
        assert plan.variant.startswith("cu")


def test_v100_on_470_nothing_fits_says_the_matrix_and_the_next_step(matrix: Matrix) -> None:
    # 470.82.01 → CUDA 11.4 (11.6 needs 510.39.01). Strict: nothing. --compat minor (11.x floor
    # 450.80.02) allows cu118: 2.7.1+cu118 still ships sm_70. The newest build with sm_70 is
    # 2.14.1+cu126 (needs 560.28.03); the smallest upgrade that opens a build is 11.6's
    # 510.39.01 (1.13.1+cu116).
    with pytest.raises(Unsatisfiable) as caught:
        resolve(matrix, [node("470.82.01", V100)], make_request())
    error = caught.value
    assert error.message.startswith("nothing in the matrix (1.13–2.15) fits this target (")
    assert error.hint is not None
    assert error.hint.startswith("With --compat minor, torch 2.7.1+cu118 would run on this driver")
    assert "no PTX JIT" in error.hint
    assert "upgrade the driver to ≥ 560.28.03 for torch 2.14.1+cu126" in error.hint
    assert "≥ 510.39.01, the smallest upgrade that opens a build, gives torch 1.13.1+cu116" in (
        error.hint
    )
    assert error.hint.endswith(".")


@pytest.mark.parametrize(
    ("driver", "gpu", "torch", "alternative"),
    [
        # 530.30.02 is CUDA 12.1's minimum: the newest 12.x build ≤ 12.1 is 2.5.1+cu121;
        # 2.7.1+cu118 is newer but CUDA 11.
        ("530.30.02", A100, "2.5.1+cu121", "2.7.1+cu118"),
        # 550.54.15 ≥ 550.54.14 (12.4): 2.6.0+cu124; 2.7.x's 12.x builds need 560/570.
        ("550.54.15", ("NVIDIA H100 80GB HBM3", "9.0"), "2.6.0+cu124", "2.7.1+cu118"),
    ],
)
def test_cuda_12_drivers_get_their_own_major(
    matrix: Matrix, driver: str, gpu: tuple[str, str], torch: str, alternative: str
) -> None:
    plan = resolve(matrix, [node(driver, gpu)], make_request())
    assert plan.torch_pin.version == torch
    assert plan.alternative is not None
    assert f"{plan.alternative.torch}+{plan.alternative.variant}" == alternative
    assert plan.alternative.reason.startswith(f"torch {alternative} is newer, but CUDA 11.8")
    assert "--cuda 11.8 chooses it" in plan.alternative.reason
    document = plan.to_json()
    assert document["alternative"] == plan.alternative.to_json()
    assert any("the driver's own CUDA major" in line for line in plan.explanation)
    # --cuda takes the older major when asked.
    pinned = resolve(matrix, [node(driver, gpu)], make_request(cuda="11.8"))
    assert pinned.torch_pin.version == alternative and pinned.alternative is None


def test_an_older_major_only_when_no_build_of_the_drivers_fits(matrix: Matrix) -> None:
    # 525.60.13 is CUDA 12.0's minimum; no torch has a cu120 build, so nothing of CUDA 12 runs
    # strictly: the newest build that does is 2.7.1+cu118, and the plan says why.
    plan = resolve(matrix, [node("525.60.13", A100)], make_request())
    assert plan.torch_pin.version == "2.7.1+cu118"
    assert plan.alternative is None
    text = " ".join(plan.explanation)
    assert "No build fits the preference for CUDA 12.x, the driver's own CUDA major" in text
    assert "Chose an older CUDA" in text
