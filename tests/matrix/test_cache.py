"""load_matrix's precompiled cache: used when fresh, never when a file changed, optional."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from cudalock.matrix import load as matrix_module
from cudalock.matrix.load import default_matrix_dir, load_matrix, matrix_cache_dir

OLD = time.time() - 3600  # well outside the "racy" window in which files are not cached


@pytest.fixture
def matrix_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tmp_path / "matrix"
    shutil.copytree(default_matrix_dir(), target)
    for path in target.iterdir():
        os.utime(path, (OLD, OLD))
    return target


def shipped_version() -> str:
    """The shipped matrix's date, read from its file rather than from the loader under test."""
    text = (default_matrix_dir() / "matrix.toml").read_text()
    match = re.search(r'^matrix_version = "([^"]+)"', text, re.MULTILINE)
    assert match is not None
    return match.group(1)


def forbid_toml(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path) -> dict[str, object]:
        raise AssertionError(f"TOML read although the cache is fresh: {path}")

    monkeypatch.setattr(matrix_module, "_read_toml", refuse)


def test_second_load_comes_from_the_cache(
    matrix_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_matrix(matrix_copy)
    assert list(matrix_cache_dir().glob("matrix-*.pickle"))
    forbid_toml(monkeypatch)
    again = load_matrix(matrix_copy)
    assert again == first
    assert again.directory == matrix_copy
    # The same directory named through a symlink: still the cache, under the name given.
    link = matrix_copy.parent / "link"
    link.symlink_to(matrix_copy)
    assert load_matrix(link).directory == link


def test_a_changed_file_is_read_again(matrix_copy: Path) -> None:
    version = shipped_version()
    assert load_matrix(matrix_copy).matrix_version == version
    head = matrix_copy / "matrix.toml"
    # Same size, different content, and an mtime that is still in the past.
    other = "1999-01-01" if version != "1999-01-01" else "1999-01-02"
    head.write_text(head.read_text().replace(version, other))
    os.utime(head, (OLD + 60, OLD + 60))
    assert load_matrix(matrix_copy).matrix_version == other


def test_recently_written_files_are_not_cached(matrix_copy: Path) -> None:
    os.utime(matrix_copy / "gpus.toml", None)  # "now": could still change unseen
    load_matrix(matrix_copy)
    assert not list(matrix_cache_dir().glob("matrix-*.pickle"))


def test_unwritable_cache_dir_falls_back_silently(
    matrix_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert load_matrix(matrix_copy).matrix_version == shipped_version()
    assert load_matrix(matrix_copy).matrix_version == shipped_version()


def test_foreign_or_corrupt_cache_is_ignored(
    matrix_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_matrix(matrix_copy)
    (cached,) = matrix_cache_dir().glob("matrix-*.pickle")
    cached.write_bytes(b"not a pickle")
    assert load_matrix(matrix_copy).matrix_version == shipped_version()  # and rewrites the cache
    # A group-writable cache file is not trusted (it could have been planted): TOML is read.
    cached.chmod(0o666)
    forbid_toml(monkeypatch)
    with pytest.raises(AssertionError, match="TOML read"):
        load_matrix(matrix_copy)


def test_use_cache_false_reads_toml(matrix_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load_matrix(matrix_copy)
    forbid_toml(monkeypatch)
    with pytest.raises(AssertionError, match="TOML read"):
        load_matrix(matrix_copy, use_cache=False)
