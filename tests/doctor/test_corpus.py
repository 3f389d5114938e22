"""doctor on the corpus of real cases: every ``command = "doctor"`` case of
tests/fixtures/corpus/ (a log as pasted into a public thread, with its source and the cause the
thread established) run through the real command, ``cudalock doctor --log PASTE ARGS --json``.

Each case must report the codes it expects and none of those it must not; a control (a run that
was not killed by an OOM) may report no error. Nothing of the machine the tests run on is
evidence about these runs: none of them ran here.
"""

from __future__ import annotations

import json

import pytest

from tests.support.cli import cudalock
from tests.support.corpus import Case, corpus_cases

CASES = corpus_cases("doctor")


def test_the_corpus_holds_enough_doctor_cases() -> None:
    assert len(CASES) >= 25
    assert sum(case.control for case in CASES) >= 5
    assert all(case.name.startswith("doctor-") for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_doctor_finds_the_established_cause(case: Case) -> None:
    result = cudalock("doctor", "--log", case.paste, *case.args, "--json")
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    document = json.loads(result.stdout)
    findings = document["findings"]
    codes = {finding["code"] for finding in findings}
    assert case.expect <= codes, f"{case.name} ({case.cause}): {sorted(codes)}"
    assert not case.absent & codes, f"{case.name}: false alarm {sorted(case.absent & codes)}"
    errors = [finding["code"] for finding in findings if finding["severity"] == "error"]
    assert result.returncode == (1 if errors else 0)
    if case.control:
        assert not errors, f"{case.name} is healthy, yet: {errors}"
    # A -9 with no evidence either way is undetermined, never "not an OOM".
    if "oom-undetermined" in codes:
        assert document["verdict"] in ("undetermined", "likely-host-oom")
        assert "sigkill-not-oom" not in codes
    # A memory check that ran is not also said to be skipped.
    assert not ("memory-check-skipped" in codes and document["memory"] is not None)
    # None of these runs ran on this machine: its kernel log is never read for them.
    assert document["evidence"]["run"]["ran_here"] is not True
    kernel = document["evidence"]["machine"]["kernel"]
    sources = [source["name"] for source in kernel["sources"]] if kernel else []
    assert all(name.startswith("--log") for name in sources), sources
