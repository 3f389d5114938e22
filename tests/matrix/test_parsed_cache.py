"""The parsed matrix kept as JSON by each file's sha256: reused while the bytes are the same,
never once they change, and not at all with CUDALOCK_NO_CACHE."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from cudalock.matrix.load import default_matrix_dir, load_matrix


@pytest.fixture
def matrix_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "compat_matrix"
    shutil.copytree(default_matrix_dir(), copy)
    return copy


@pytest.fixture
def parsed_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDALOCK_NO_CACHE")
    return tmp_path / "cache" / "cudalock" / "matrix"


def digests(directory: Path) -> set[str]:
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.glob("*.toml")}


def test_each_files_parse_is_kept_by_its_hash_and_reused(
    matrix_copy: Path, parsed_dir: Path
) -> None:
    first = load_matrix(matrix_copy)
    kept = {p.name.split(".")[0] for p in parsed_dir.iterdir()}
    assert kept == digests(matrix_copy)
    assert load_matrix(matrix_copy) == first


def test_an_edited_file_is_parsed_again(matrix_copy: Path, parsed_dir: Path) -> None:
    version = load_matrix(matrix_copy).matrix_version
    assert version != "2000-01-01"
    path = matrix_copy / "matrix.toml"
    path.write_text(
        path.read_text(encoding="utf-8").replace(f'"{version}"', '"2000-01-01"'),
        encoding="utf-8",
    )
    assert load_matrix(matrix_copy).matrix_version == "2000-01-01"


def test_no_cache_keeps_nothing(
    matrix_copy: Path, parsed_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDALOCK_NO_CACHE", "1")
    load_matrix(matrix_copy)
    assert not parsed_dir.exists()
