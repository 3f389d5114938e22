"""Unit tests of the default Python's pure parts: which Pythons are tried, which sdists reject
a Python, what uv's failure proves, and the choice a lock records."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cudalock.lock.python import (
    RecordedPython,
    WheelGap,
    default_pythons,
    plan_for_recorded_python,
    recorded_python,
    taken_as_sdist,
    wheel_gap,
    wheel_gaps,
)
from cudalock.lock.uvfailures import no_wheels_for_python
from cudalock.lock.uvinput import LockInput
from cudalock.matrix import load_matrix
from cudalock.model import Plan
from cudalock.request import make_request
from cudalock.tomlfile import dumps
from tests.lock.test_lock import plan

LINUX_WHEEL = "manylinux_2_17_x86_64.manylinux2014_x86_64"


def _plan(torch: str, python: str) -> Plan:
    return replace(plan(python=python), torch_version=torch)


def test_pythons_tried_are_torchs_newest_first_without_free_threaded_builds() -> None:
    matrix = load_matrix()
    # torch 2.11.0 ships 3.10-3.14 and 3.13t/3.14t on linux-x86_64 (compat_matrix/torch.toml).
    assert default_pythons(matrix, _plan("2.11.0", "3.14")) == [
        "3.14",
        "3.13",
        "3.12",
        "3.11",
        "3.10",
    ]
    # None newer than the plan's own.
    assert default_pythons(matrix, _plan("2.11.0", "3.12")) == ["3.12", "3.11", "3.10"]


def test_a_version_with_wheels_for_other_pythons_is_the_pythons_gap() -> None:
    files = [
        f"sentencepiece-0.2.0-cp312-cp312-{LINUX_WHEEL}.whl",
        f"sentencepiece-0.2.0-cp313-cp313-{LINUX_WHEEL}.whl",
        "sentencepiece-0.2.0.tar.gz",
    ]
    gap = wheel_gap("sentencepiece", "0.2.0", files, "linux-x86_64")
    assert gap == WheelGap("sentencepiece", "0.2.0", for_other_pythons=True)


def test_a_version_without_any_wheel_is_a_gap_another_version_may_fill() -> None:
    files = [f"numpy-1.26.4-cp312-cp312-{LINUX_WHEEL}.whl", "numpy-1.27.0.tar.gz"]
    gap = wheel_gap("numpy", "1.27.0", files, "linux-x86_64")
    assert gap == WheelGap("numpy", "1.27.0", for_other_pythons=False)


@pytest.mark.parametrize(
    "files",
    [
        ["deepspeed-0.19.8.tar.gz"],  # an sdist only: built on every Python
        ["purekit-1.0-py3-none-any.whl", "purekit-2.0.tar.gz"],  # pure
        ["mackit-1.0-cp313-cp313-macosx_11_0_arm64.whl", "mackit-1.0.tar.gz"],  # not for Linux
    ],
)
def test_a_package_without_wheels_for_the_platform_rejects_no_python(files: list[str]) -> None:
    name = files[0].split("-", 1)[0]
    assert wheel_gap(name, "1.0", files, "linux-x86_64") is None


def test_gaps_are_the_binary_packages_uv_locked_as_sdists() -> None:
    uv_data = {
        "packages": [
            {"name": "torch", "version": "2.11.0", "wheels": [{"url": "u"}]},
            {"name": "SentencePiece", "version": "0.2.0", "sdist": {"url": "s"}},
            {"name": "deepspeed", "version": "0.19.8", "sdist": {"url": "d"}},
            {"name": "tokenkit", "version": "1.0", "sdist": {"url": "t"}, "wheels": [{}]},
        ]
    }
    assert taken_as_sdist(uv_data) == [("sentencepiece", "0.2.0"), ("deepspeed", "0.19.8")]
    pages = {
        "sentencepiece": [f"sentencepiece-0.2.0-cp313-cp313-{LINUX_WHEEL}.whl"],
        "deepspeed": ["deepspeed-0.19.8.tar.gz"],
    }
    assert wheel_gaps(uv_data, "linux-x86_64", pages.get) == [
        WheelGap("sentencepiece", "0.2.0", for_other_pythons=True)
    ]
    # A page that could not be read counts against no Python.
    assert wheel_gaps(uv_data, "linux-x86_64", lambda _name: None) == []


def _input(only_binary: tuple[str, ...] = ()) -> LockInput:
    return LockInput(
        requirements=(),
        routes=(),
        default_index="https://pypi.org/simple",
        python="3.14",
        platform="linux-x86_64",
        python_platform="x86_64-manylinux_2_28",
        only_binary=only_binary,
    )


#: uv 0.13.9's words, as it printed them for stand-ins on 127.0.0.1.
ABI = (
    "error: No solution found when resolving dependencies\n  cause: Because "
    "torch==2.11.0+cpu has no wheels with a matching Python ABI tag (e.g., `cp314`) and "
    "cudalock-lock-input depends on torch==2.11.0+cpu, we can conclude that your requirements "
    "are unsatisfiable.\n"
)
NO_USABLE = (
    "error: No solution found when resolving dependencies\n  cause: Because all versions of "
    "tokenkit have no usable wheels and you require tokenkit, we can conclude that your "
    "requirements are unsatisfiable.\n"
)
PLATFORM = (
    "  cause: Because winkit==1.0 has no wheels with a matching platform tag (e.g., "
    "`manylinux_2_28_x86_64`) and you require winkit==1.0, we can conclude that your "
    "requirements are unsatisfiable.\n"
)


def test_uv_proves_a_python_lacks_wheels_by_its_abi_tag() -> None:
    found = no_wheels_for_python(ABI, _input())
    assert found is not None
    assert found.package == "torch 2.11.0+cpu"
    assert found.message.startswith("uv found no wheel of torch 2.11.0+cpu for Python 3.14")
    assert found.exit_code == 1


def test_no_usable_wheels_counts_only_for_packages_asked_for_as_wheels() -> None:
    assert no_wheels_for_python(NO_USABLE, _input()) is None
    found = no_wheels_for_python(NO_USABLE, _input(("tokenkit",)))
    assert found is not None and found.package == "tokenkit"


def test_a_wheel_missing_for_the_platform_is_not_the_pythons_doing() -> None:
    assert no_wheels_for_python(PLATFORM, _input()) is None


def _lock_text(*, asked: str | None, python: str = "3.13", reason: str = "R.") -> str:
    request = {"torch": "==2.11.0", **({"python": asked} if asked else {})}
    record = {"python": python, "request": request, "plan": {"python_reason": reason}}
    return dumps({"lock-version": "1.0", "packages": [], "tool": {"cudalock": record}})


def test_a_lock_records_the_python_it_chose_not_one_it_was_asked_for() -> None:
    assert recorded_python(_lock_text(asked=None)) == RecordedPython("3.13", "R.")
    assert recorded_python(_lock_text(asked="3.12")) is None
    assert recorded_python("not toml [") is None
    assert recorded_python(None) is None


def test_check_plans_for_the_recorded_python_while_torch_ships_it() -> None:
    matrix = load_matrix()
    first = replace(
        _plan("2.11.0", "3.14"),
        python_reason="newest",
        explanation=("Chose torch.", "newest", "More."),
    )
    asked: list[str] = []

    def replan(python: str) -> Plan:
        asked.append(python)
        return replace(first, python=python, python_reason="as asked", explanation=("Chose.",))

    request = make_request(torch="==2.11.0")
    recorded = RecordedPython("3.13", "Python 3.13: the newest for which the whole stack installs.")
    kept = plan_for_recorded_python(first, request, replan, matrix, recorded)
    assert (kept.python, asked) == ("3.13", ["3.13"])
    assert kept.python_reason == recorded.reason
    assert kept.explanation == ("Chose.", recorded.reason)
    # A Python torch no longer ships is not kept: the lock is then stale, and --check says so.
    gone = plan_for_recorded_python(first, request, replan, matrix, RecordedPython("3.8", "R."))
    assert gone.python == "3.14"
    # Asked for a Python, the record does not matter.
    pinned = make_request(torch="==2.11.0", python="3.12")
    assert plan_for_recorded_python(first, pinned, replan, matrix, recorded) is first
