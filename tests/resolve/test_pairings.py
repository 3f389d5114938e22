"""Which torchao releases fit a torch, from the shipped compat_matrix/torch_pairings.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from cudalock.errors import InputError
from cudalock.matrix import load_matrix
from cudalock.matrix.check import check_matrix_dir
from cudalock.matrix.load import default_matrix_dir
from cudalock.resolve.pairings import fitting_releases, pairing_fit

MATRIX = load_matrix()
TORCHAO = ["0.11.0", "0.12.0", "0.13.0", "0.13.0.post1", "0.14.0", "0.14.1", "0.15.0"]
TORCHAO += ["0.16.0", "0.17.0", "0.18.0", "0.19.0"]


@pytest.mark.parametrize(
    ("torch", "spec", "chosen"),
    [
        # The case: uv alone takes 0.18.0 (torch >= 2.11) for torch 2.7.1.
        ("2.7.1+cu118", "<0.13.0", "0.12.0"),
        ("2.9.0+cu126", "<0.15.0,!=0.12.0.*,!=0.13.0.*,!=0.14.0.*", "0.14.1"),
        ("2.10.0", "<0.17.0,!=0.12.0.*,!=0.13.0.*,!=0.14.0.*,!=0.14.1.*,!=0.15.0.*", "0.16.0"),
        # No recorded release fits: only those older than the records remain.
        ("2.5.1+cu121", "<0.12.0", "0.11.0"),
    ],
)
def test_the_newest_release_uv_may_take_is_one_that_accepts_the_torch(
    torch: str, spec: str, chosen: str
) -> None:
    fit = pairing_fit(MATRIX, "torchao", "0.18.0", torch)
    assert fit is not None
    assert fit.specifier == spec
    # The newest release the specifier lets through, of real and later ones, with labels too.
    allowed = [v for v in TORCHAO if SpecifierSet(spec).contains(v)]
    assert allowed[-1] == chosen
    assert SpecifierSet(spec).contains(f"{chosen}+cu118")


def test_a_release_that_accepts_the_torch_or_is_not_recorded_needs_nothing() -> None:
    assert pairing_fit(MATRIX, "torchao", "0.18.0", "2.11.0") is None
    assert pairing_fit(MATRIX, "torchao", "0.18.0", "2.12.0+cu130") is None
    assert pairing_fit(MATRIX, "torchao", "0.11.0", "2.7.1") is None
    assert pairing_fit(MATRIX, "xformers", "0.0.31", "2.7.1") is None


def test_the_second_upload_of_a_release_is_that_release() -> None:
    # torchao 0.13.0-1-py3-none-any.whl is version 0.13.0.post1.
    pairing = MATRIX.pairing("torchao", "0.13.0.post1")
    assert pairing is not None and pairing.version == "0.13.0"
    assert fitting_releases(MATRIX, "torchao", "2.8.0+cu126") == ["0.14.0", "0.13.0"]


def test_every_row_cites_a_source_and_unverified_rows_say_so() -> None:
    assert MATRIX.torch_pairings
    for pairing in MATRIX.torch_pairings:
        assert pairing.provenance.source
        assert pairing.provenance.verified == (pairing.version != "0.12.0")


def test_the_file_is_checked_for_order_and_its_specifiers(tmp_path: Path) -> None:
    copy = tmp_path / "matrix"
    shutil.copytree(default_matrix_dir(), copy)
    path = copy / "torch_pairings.toml"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('version = "0.14.0"', 'version = "0.19.0"'), encoding="utf-8")
    problems = [p for p in check_matrix_dir(copy) if p.file == "torch_pairings.toml"]
    assert problems and "0.19.0" in str(problems[0])
    path.write_text(text.replace('torch = ["==2.8.0"]', 'torch = ["2.8.0"]', 1), encoding="utf-8")
    with pytest.raises(InputError, match=r"torch_pairings.toml.*not a PEP 440 specifier"):
        load_matrix(copy)
