"""The README documents the interface: every finding code audit and doctor can emit."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudalock.audit.checks import CODES
from cudalock.doctor.diagnosis import FINDING_CODES

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("code", sorted({*CODES, *FINDING_CODES}))
def test_every_finding_code_is_documented(code: str) -> None:
    assert f"`{code}`" in README
