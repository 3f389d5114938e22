"""The toolkit rule: which torch CUDA builds a machine's nvcc can build the stack's extensions
against, by the checks those builds make.

By hand from the sources the policy cites: torch's cpp_extension raises on another CUDA major
and warns on another minor; DeepSpeed's op builder accepts another minor only when both versions
are in its cuda_minor_mismatch_ok list, per release in compat_matrix/deepspeed.toml (0.14.0:
12.0–12.3; 0.19.8: 12.0–12.6, 12.8, 12.9).
"""

from __future__ import annotations

import pytest

from cudalock.matrix import Matrix
from cudalock.request import make_request
from cudalock.resolve.policy import ToolkitRule, cuda_preferences, toolkit_rule
from cudalock.versions import CudaVersion
from tests.support.known_matrix import known_matrix


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return known_matrix()


@pytest.mark.parametrize(
    ("cuda", "accepted"),
    [((12, 1), True), ((12, 4), True), ((12, 9), True), ((11, 8), False), ((13, 0), False)],
)
def test_extension_builds_take_any_minor_of_the_toolkits_major(
    cuda: CudaVersion, accepted: bool
) -> None:
    assert ToolkitRule((12, 1), "flash-attn").accepts(cuda) is accepted


@pytest.mark.parametrize(
    ("deepspeed", "toolkit", "cuda", "accepted"),
    [
        # 0.19.8 lists 12.0–12.6, 12.8, 12.9: 12.1 beside 12.4 or 12.8 is accepted.
        ("deepspeed", (12, 1), (12, 4), True),
        ("deepspeed", (12, 1), (12, 8), True),
        ("deepspeed", (12, 1), (11, 8), False),
        # 0.14.0 lists 12.0–12.3: 12.1 beside 12.4 is refused, beside 12.1 it is not.
        ("deepspeed==0.14.0", (12, 1), (12, 4), False),
        ("deepspeed==0.14.0", (12, 1), (12, 1), True),
        # A toolkit its list does not name accepts only its own CUDA.
        ("deepspeed==0.14.0", (12, 4), (12, 1), False),
        ("deepspeed==0.14.0", (12, 4), (12, 4), True),
    ],
)
def test_deepspeeds_op_builder_takes_another_minor_only_from_its_list(
    matrix: Matrix, deepspeed: str, toolkit: CudaVersion, cuda: CudaVersion, accepted: bool
) -> None:
    rule = toolkit_rule(toolkit, "DeepSpeed's ops", make_request(with_packages=[deepspeed]), matrix)
    assert rule.accepts(cuda) is accepted


def test_the_rule_follows_the_newest_deepspeed_the_request_allows(matrix: Matrix) -> None:
    request = make_request(with_packages=["deepspeed"])
    rule = toolkit_rule((12, 1), "DeepSpeed's ops", request, matrix)
    assert rule.deepspeed is not None and rule.deepspeed[0] == "0.19.8"
    assert (12, 7) not in rule.deepspeed[1] and (12, 9) in rule.deepspeed[1]
    # No DeepSpeed in the stack: cpp_extension's rule alone.
    assert toolkit_rule((12, 1), "flash-attn", make_request(), matrix).deepspeed is None


def test_preferences_with_a_toolkit_and_deepspeed(matrix: Matrix) -> None:
    from cudalock.model import Host, Target

    node = Target(
        platform="linux-x86_64",
        driver_cuda=(12, 4),
        host=Host(os="linux", arch="x86_64", cuda_toolkit="12.1"),
    )
    request = make_request(with_packages=["deepspeed==0.14.0"])
    first, major = cuda_preferences((12, 4), [node], request, matrix)
    assert first.accepts_cuda((12, 1)) and not first.accepts_cuda((12, 4))
    assert "DeepSpeed 0.14.0's op builder" in first.why
    # Then any build of the toolkit's major (other extensions build), which is also the
    # driver's own here: not repeated.
    assert major.accepts_cuda((12, 4)) and not major.accepts_cuda((11, 8))
    # flash-attn alone: one preference for the toolkit's major, then the driver's own major
    # (the same major here, so not repeated).
    (only,) = cuda_preferences((12, 4), [node], make_request(frameworks=["flash-attn"]), matrix)
    assert only.accepts_cuda((12, 4)) and only.rule is not None
