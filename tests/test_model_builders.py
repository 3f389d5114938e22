"""model.new_gpu / new_host / new_target build the same objects as the dataclass constructors.

They fill the instance dict directly (fleets build tens of thousands of Gpus); these tests are
what keeps them in step with the classes: a field added to Gpu, Host or Target and not to its
builder fails here.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from dataclasses import FrozenInstanceError, asdict, fields, replace
from typing import Any

import pytest

from cudalock.model import Gpu, Host, Target, new_gpu, new_host, new_target
from cudalock.versions import DriverVersion

GPU_ARGS: tuple[Any, ...] = ("NVIDIA A100-SXM4-80GB", (8, 0), 3, "GPU-0000", 80 << 30)
HOST_ARGS: tuple[Any, ...] = ("linux", "x86_64", "2.35", 512 << 30, 64 << 30, "node-07")
TARGET_ARGS: tuple[Any, ...] = (
    "linux-x86_64", DriverVersion("535.104.05"), (12, 2),
    (Gpu(*GPU_ARGS), Gpu("Tesla T4", None)), Host(*HOST_ARGS), "node-07",
    "file:/x/node-07.json", ("read from /x/node-07.json (probed there via nvml)",),
)
EMPTY_GPU: tuple[Any, ...] = ("x", None, None, None, None)
EMPTY_HOST: tuple[Any, ...] = (None,) * 6

# (builder, constructor, arguments): the same call to both.
CASES: list[tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...]]] = [
    (new_gpu, Gpu, GPU_ARGS),
    (new_gpu, Gpu, EMPTY_GPU),
    (new_host, Host, HOST_ARGS),
    (new_host, Host, EMPTY_HOST),
    (new_target, Target, TARGET_ARGS),
]


@pytest.mark.parametrize("cls", [Gpu, Host, Target])
def test_builders_take_every_field(cls: type) -> None:
    (arguments,) = {len(args) for _, constructor, args in CASES if constructor is cls}
    assert arguments == len(fields(cls))


@pytest.mark.parametrize(("builder", "constructor", "args"), CASES)
def test_built_objects_are_the_constructed_ones(
    builder: Callable[..., Any], constructor: Callable[..., Any], args: tuple[Any, ...]
) -> None:
    ours, theirs = builder(*args), constructor(*args)
    assert type(ours) is type(theirs)
    assert ours == theirs and hash(ours) == hash(theirs)
    assert repr(ours) == repr(theirs)
    assert list(vars(ours).items()) == list(vars(theirs).items())  # same fields, same order
    assert asdict(ours) == asdict(theirs)
    assert pickle.loads(pickle.dumps(ours)) == theirs
    assert copy.deepcopy(ours) == theirs
    assert replace(ours) == theirs
    with pytest.raises(FrozenInstanceError):
        ours.name = "changed"


def test_built_target_behaves_as_a_target() -> None:
    target = new_target(*TARGET_ARGS)
    assert target.has_driver
    assert target.compute_capabilities == ((8, 0),)
    assert target.to_json() == Target(*TARGET_ARGS).to_json()
