"""Every fix the resolver suggests does what it says, and none is suggested that would not.

A fix is data (changes to the targets or the request, and the candidate that then fits). The
property: apply each suggested fix to the targets and the request mechanically
(``resolve.fixes.apply_fix``), and the candidate it names is one the changed request admits and
fits (resolving for exactly that candidate succeeds), and the changed request resolves. It is
checked over generated targets and requests on the small matrix and on the shipped one (up to
the releases known to tests). The message families the resolver once got wrong each have their
own test below.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudalock.errors import Unsatisfiable
from cudalock.matrix import Matrix
from cudalock.model import Fix, Gpu, Plan, Rejection, Target
from cudalock.request import Request, parse_cuda_pin
from cudalock.resolve import apply_fix, make_request, parse_torch_spec, resolve
from cudalock.versions import ComputeCapability, DriverVersion, cuda_from_variant, format_cuda
from tests.support.known_matrix import known_matrix
from tests.support.small_matrix import small_matrix

SMALL = small_matrix()
LINUX = "linux-x86_64"

DRIVERS = [
    None,
    "418.39",
    "450.80.02",
    "520.61.05",
    "525.60.13",
    "535.104.05",
    "550.54.14",
    "560.28.03",
    "570.86.15",
    "575.51.03",
    "580.65.06",
    "595.45.04",
]
CCS: list[ComputeCapability] = [(6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (12, 0)]


def node(
    driver: str | None, *ccs: ComputeCapability, name: str = "this machine", source: str = "none"
) -> Target:
    return Target(
        platform=LINUX,
        driver_version=DriverVersion(driver) if driver else None,
        gpus=tuple(Gpu(f"GPU with compute capability {cc[0]}.{cc[1]}", cc) for cc in ccs),
        name=name,
        source=source,
    )


def outcome(
    matrix: Matrix, targets: list[Target], request: Request
) -> tuple[Plan | None, tuple[Rejection, ...], str | None]:
    try:
        plan = resolve(matrix, targets, request)
    except Unsatisfiable as error:
        rejected = tuple(r for r in error.rejected if isinstance(r, Rejection))
        return None, rejected, error.hint
    return plan, plan.rejected, None


def check_fix(matrix: Matrix, targets: list[Target], request: Request, fix: Fix) -> None:
    """The fix, applied, admits its candidate, the candidate fits, and the request resolves."""
    assert fix.changes, fix
    changed_targets, changed = apply_fix(matrix, targets, request, fix)
    assert changed.torch.admits(fix.torch), (fix, changed.torch)
    cuda = cuda_from_variant(fix.variant)
    pinned_cuda = parse_cuda_pin(format_cuda(cuda) if cuda else "cpu")
    if changed.cuda is not None:
        assert changed.cuda == pinned_cuda, (fix, changed.cuda)
    exactly = replace(changed, torch=parse_torch_spec(f"=={fix.torch}"), cuda=pinned_cuda)
    plan = resolve(matrix, list(changed_targets), exactly)
    assert (plan.torch_version, plan.variant) == (fix.torch, fix.variant), fix
    resolve(matrix, list(changed_targets), changed)


def check_all_fixes(matrix: Matrix, targets: list[Target], request: Request) -> int:
    _plan, rejected, _hint = outcome(matrix, targets, request)
    checked = 0
    for rejection in rejected:
        for fix in rejection.fixes:
            check_fix(matrix, targets, request, fix)
            checked += 1
        if "no kernels for" in rejection.reason:
            # No change gives a build kernels it lacks: its fixes name other builds.
            assert all(
                (f.torch, f.variant) != (rejection.torch, rejection.variant)
                for f in rejection.fixes
            ), rejection
    return checked


nodes = st.builds(
    lambda driver, ccs: (driver, tuple(ccs)),
    st.sampled_from(DRIVERS),
    st.lists(st.sampled_from(CCS), max_size=2),
)
requests = st.builds(
    lambda torch, python, cuda, compat, companions: make_request(
        torch=torch, python=python, cuda=cuda, compat=compat, with_packages=companions
    ),
    st.sampled_from(["", "2.1", "<2.5", ">=2.11", "2.14.1", ">=2.15", "2.13"]),
    st.sampled_from([None, "3.8", "3.10", "3.12", "3.15"]),
    st.sampled_from([None, "11.8", "12.1", "12.6", "12.8", "13.0", "cpu"]),
    st.sampled_from(["strict", "minor"]),
    st.lists(
        st.sampled_from(["torchaudio", "torchvision<0.20", "deepspeed", "deepspeed>=0.19"]),
        max_size=2,
        unique=True,
    ),
)


def targets_of(picked: list[tuple[str | None, tuple[ComputeCapability, ...]]]) -> list[Target]:
    return [node(driver, *ccs, name=f"node-{i}") for i, (driver, ccs) in enumerate(picked)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(nodes, min_size=1, max_size=3), requests)
def test_every_fix_on_the_small_matrix_makes_its_candidate_fit(
    picked: list[tuple[str | None, tuple[ComputeCapability, ...]]], request: Request
) -> None:
    check_all_fixes(SMALL, targets_of(picked), request)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(nodes, min_size=1, max_size=2), requests)
def test_every_fix_on_the_shipped_matrix_makes_its_candidate_fit(
    picked: list[tuple[str | None, tuple[ComputeCapability, ...]]], request: Request
) -> None:
    check_all_fixes(known_matrix(), targets_of(picked), request)


def test_the_property_checks_fixes() -> None:
    # Cases with fixes of every kind, so that the property above is not vacuous.
    cases = [
        ([node("535.104.05", (8, 0))], make_request(torch=">=2.14")),  # driver
        ([node("570.86.15", (12, 0))], make_request(torch=">=2.14")),  # another build
        ([node("595.45.04", (8, 0))], make_request(python="3.10")),  # python
        ([node("570.86.15", (8, 0))], make_request(with_packages=["torchaudio"])),  # without
        ([node("570.86.15", (8, 0))], make_request(torch="2.11", cuda="12.1")),  # cuda
    ]
    kinds = set()
    for targets, request in cases:
        assert check_all_fixes(SMALL, targets, request) > 0, request
        _plan, rejected, _hint = outcome(SMALL, targets, request)
        kinds |= {c.kind for r in rejected for f in r.fixes for c in f.changes}
    assert kinds >= {"driver", "torch", "python", "without", "cuda"}
    # A fix that does not do what it says fails the check.
    wrong = Fix((), "2.14.1", "cu132", "nothing")
    with pytest.raises(AssertionError):
        check_fix(SMALL, [node("535.104.05", (8, 0))], make_request(), wrong)


# --------------------------------------------------------------------------------------------
# The message families


def test_a_kernel_gap_is_never_fixed_by_a_driver_upgrade() -> None:
    # Volta on a 535 driver (CUDA 12.2), torch ≥ 2.14: 2.15.0+cu132 lacks sm_70 and needs a newer
    # driver. A driver upgrade would not give it kernels; its fixes name the builds that have
    # them: 2.14.1+cu126 (with the driver that build needs) and 2.5.1+cu121 (runs as it is).
    targets = [node("535.104.05", (7, 0))]
    _plan, rejected, _hint = outcome(SMALL, targets, make_request(torch=">=2.14"))
    cu132 = next(r for r in rejected if (r.torch, r.variant) == ("2.15.0", "cu132"))
    assert "no kernels for compute capability 7.0" in cu132.reason
    assert [(f.torch, f.variant, f.text) for f in cu132.fixes] == [
        (
            "2.14.1",
            "cu126",
            "torch 2.14.1+cu126 has kernels for compute capability 7.0 and needs driver ≥ "
            "560.28.03: upgrade the driver",
        ),
        (
            "2.5.1",
            "cu121",
            "use --torch 2.5.1: torch 2.5.1+cu121 is the newest build with kernels for "
            "compute capability 7.0 that fits this target",
        ),
    ]
    assert "builds and newer have it" not in (cu132.fix or "")
    check_all_fixes(SMALL, targets, make_request(torch=">=2.14"))


def test_the_newest_build_with_kernels_is_the_newest_that_fits() -> None:
    # RTX 5090 on 570 (CUDA 12.8), torch ≥ 2.14: cu13x need ≥ 580, cu126 has no sm_120. The
    # newest build with sm_120 this driver allows is 2.11.0+cu128 (2.15.0+cu130 has sm_120 too).
    targets = [node("570.86.15", (12, 0))]
    _plan, rejected, _hint = outcome(SMALL, targets, make_request(torch=">=2.14"))
    cu126 = next(r for r in rejected if r.variant == "cu126")
    texts = [f.text for f in cu126.fixes]
    assert texts == [
        "torch 2.15.0+cu130 has kernels for compute capability 12.0 and needs driver ≥ "
        "580.65.06: upgrade the driver",
        "use --torch 2.11.0: torch 2.11.0+cu128 is the newest build with kernels for compute "
        "capability 12.0 that fits this target",
    ]
    assert not any("is the newest build with sm_120" in t for t in texts)


def test_a_fleet_no_build_can_serve_says_why_and_splits_it(tmp_path: Path) -> None:
    # RTX 5090 (12.0) and GTX 1080 Ti (6.1): sm_60 ends with cu126, sm_120 starts with cu128.
    fleet = [
        node("580.65.06", (12, 0), name="node-a", source=f"file:{tmp_path}/a.json"),
        node("580.65.06", (6, 1), name="node-b", source=f"file:{tmp_path}/b.json"),
        node("580.65.06", (8, 0), (12, 0), name="node-c", source=f"file:{tmp_path}/c.json"),
    ]
    with pytest.raises(Unsatisfiable) as caught:
        resolve(SMALL, fleet, make_request())
    error = caught.value
    assert "no build in the matrix has kernels for all of 6.1" in error.message
    assert error.hint == (
        "Make one environment per GPU generation (8.0, 12.0: cudalock resolve "
        f"--probe {tmp_path}/a.json --probe {tmp_path}/c.json; "
        f"6.1: cudalock resolve --probe {tmp_path}/b.json)."
    )
    rejected = [r for r in error.rejected if isinstance(r, Rejection)]
    assert all("--torch" not in (r.fix or "") for r in rejected)


def test_a_single_target_with_both_generations_is_told_to_split_its_gpus() -> None:
    with pytest.raises(Unsatisfiable) as caught:
        resolve(SMALL, [node("580.65.06", (6, 1), (12, 0))], make_request())
    assert "kernels for both 6.1" in caught.value.message
    # One clean sentence, not an empty list of environments before it.
    assert caught.value.hint == (
        "This target has GPUs of several generations: resolve once per generation "
        "(--compute-capability 6.1 and --compute-capability 12.0, one at a time) and run each "
        "environment on its own GPUs with CUDA_VISIBLE_DEVICES."
    )


def test_no_python_fix_for_a_release_the_driver_cannot_run() -> None:
    # Driver 450.80.02 runs no build of the small matrix (cu118 needs 520.61.05). Python 3.8
    # has no wheels of 2.5.1 and newer, but another Python would not make them fit.
    targets = [node("450.80.02", (8, 0))]
    _plan, rejected, hint = outcome(SMALL, targets, make_request(python="3.8"))
    for rejection in rejected:
        assert "--python" not in (rejection.fix or ""), rejection
    fifteen = next(r for r in rejected if r.torch == "2.15.0")
    assert "with Python 3.15 it would not fit either" in fifteen.reason
    assert "needs driver ≥ 595.45.04" in fifteen.reason or "580.65.06" in fifteen.reason
    # The upgrade that opens the newest build, and the smallest one that opens any.
    assert hint is not None
    assert hint.startswith("Upgrade the driver to ≥ 550.54.14 for torch 2.4.1+cu124")
    assert "≥ 520.61.05, the smallest upgrade that opens a build, gives torch 2.4.1+cu118" in hint


def test_a_python_fix_is_offered_when_it_gives_a_plan() -> None:
    targets = [node("595.45.04", (8, 0))]
    _plan, rejected, _hint = outcome(SMALL, targets, make_request(python="3.10"))
    fifteen = next(r for r in rejected if r.torch == "2.15.0")
    assert fifteen.fix == "Use --python 3.15."


def test_one_candidate_is_one_candidate() -> None:
    with pytest.raises(Unsatisfiable) as caught:
        resolve(SMALL, [node("535.104.05", (8, 0))], make_request(torch="2.15.0", cuda="13.0"))
    assert caught.value.message.endswith(": 1 candidate rejected")


def test_companion_hints_come_from_the_matrix() -> None:
    # torch 2.14.1 has no torchaudio in the small matrix; 2.11.0 is the newest paired one that
    # fits an A100 on 570. Give 2.14.1 a torchaudio and the same request resolves to it.
    targets = [node("570.86.15", (8, 0))]
    request = make_request(torch="2.14.1", with_packages=["torchaudio"])
    _plan, rejected, hint = outcome(SMALL, targets, request)
    (only,) = rejected
    assert [f.text for f in only.fixes] == [
        "drop --with torchaudio",
        "use --torch 2.11.0: torch 2.11.0 pairs with torchaudio 2.11.0",
    ]
    assert "2.12 and newer" not in (only.fix or "") and "2.12" not in str(hint)
    from tests.support.small_matrix import raw_documents

    documents = raw_documents()
    for release in documents["torch.toml"]["release"]:
        if release["version"] == "2.14.1":
            release["torchaudio"] = "2.11.1"
    paired = small_matrix(torch_toml=documents["torch.toml"])
    plan = resolve(paired, targets, request)
    audio = plan.pin("torchaudio")
    assert audio is not None and audio.version == "2.11.1+cu126"
