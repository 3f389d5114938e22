"""The parsed matrix kept as JSON by each file's sha256, and the typed Matrix kept by the
digest of the directory and all its files: reused while the bytes (and, for the typed one, the
sources of its classes) are the same, never once they change, and not at all with
CUDALOCK_NO_CACHE."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

import cudalock.matrix.load as matrix_load
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
    assert not typed_dir(parsed_dir).exists()


def typed_dir(parsed_dir: Path) -> Path:
    return parsed_dir.parent / "matrix-typed"


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A list that gains an item each time the matrix is typed from its parse."""
    built: list[bool] = []
    build = matrix_load.build_matrix

    def counting(*args: object, **kwargs: object) -> object:
        built.append(True)
        return build(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(matrix_load, "build_matrix", counting)
    return built


def test_the_typed_matrix_is_kept_and_reused_without_typing_again(
    matrix_copy: Path, parsed_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_matrix(matrix_copy)
    (kept,) = typed_dir(parsed_dir).glob("*.pickle")
    assert kept.stat().st_mode & 0o077 == 0
    built = count_builds(monkeypatch)
    assert load_matrix(matrix_copy) == first
    assert built == []


def test_an_edited_file_is_typed_again(matrix_copy: Path, parsed_dir: Path) -> None:
    load_matrix(matrix_copy)
    path = matrix_copy / "matrix.toml"
    version = load_matrix(matrix_copy).matrix_version
    path.write_text(
        path.read_text(encoding="utf-8").replace(f'"{version}"', '"2000-01-01"'),
        encoding="utf-8",
    )
    assert load_matrix(matrix_copy).matrix_version == "2000-01-01"
    assert len(list(typed_dir(parsed_dir).glob("*.pickle"))) == 2


def test_a_changed_class_source_is_not_filled_from_the_old_pickle(
    matrix_copy: Path, parsed_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_matrix(matrix_copy)
    real = matrix_load._module_digest
    monkeypatch.setattr(
        matrix_load,
        "_module_digest",
        lambda name: "0" * 64 if name == "cudalock.matrix.model" else real(name),
    )
    built = count_builds(monkeypatch)
    assert load_matrix(matrix_copy) == first
    assert built == [True]


def test_a_pickle_others_can_write_is_not_unpickled(
    matrix_copy: Path, parsed_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_matrix(matrix_copy)
    (kept,) = typed_dir(parsed_dir).glob("*.pickle")
    kept.chmod(0o666)
    built = count_builds(monkeypatch)
    assert load_matrix(matrix_copy) == first
    assert built == [True]


def test_a_damaged_pickle_is_typed_again(matrix_copy: Path, parsed_dir: Path) -> None:
    first = load_matrix(matrix_copy)
    (kept,) = typed_dir(parsed_dir).glob("*.pickle")
    header = kept.read_bytes().split(b"\n", 1)[0]
    kept.write_bytes(header + b"\nnot a pickle")
    assert load_matrix(matrix_copy) == first
