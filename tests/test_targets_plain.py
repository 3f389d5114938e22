"""The one-pass reader of probe documents agrees with the careful one.

targets._plain_target reads plain, valid documents in one pass and declines (None) everything
else; targets._checked_target is the definition of what is valid, what it reads as and which
error is reported. These tests check that the first never accepts what the second rejects and
builds the same Target whenever it accepts, on generated documents, and that fleets (which
share one _Parsed between files) report errors as a file read alone does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudalock.errors import InputError
from cudalock.model import Gpu, Host, Target
from cudalock.target.overrides import (
    _checked_target,
    _Parsed,
    _plain_target,
    _read_bytes,
    _recorded_hostname,
    read_probe_file,
    read_probe_files,
    target_from_json,
)
from cudalock.versions import DriverVersion
from tests.test_probe_properties import json_values, near_documents, version_like

NODE = Target(
    platform="linux-x86_64",
    driver_version=DriverVersion("535.104.05"),
    driver_cuda=(12, 2),
    gpus=tuple(Gpu("NVIDIA A100-SXM4-80GB", (8, 0), i, f"GPU-{i}", 80 << 30) for i in range(4)),
    host=Host(os="linux", arch="x86_64", glibc="2.35", memory_total_bytes=1 << 40,
              hostname="node00000"),
    name="node00000",
    source="nvml",
)


def checked(document: Any, name: str | None, read_from: str | None) -> Target | None:
    try:
        return _checked_target(document, name, read_from=read_from)
    except InputError:
        return None


def assert_same(ours: Target | None, reference: Target | None) -> None:
    """``ours`` is None (declined) or the reference Target, down to each value's repr."""
    if ours is None:
        return
    assert reference is not None, "the plain reader accepted a document the careful one rejects"
    assert ours == reference
    assert repr(ours) == repr(reference)  # also the driver version's text, the tuples' types
    assert ours.to_json() == reference.to_json()


def often(good: st.SearchStrategy[Any], *odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``good`` (nine times in ten), else null, any JSON value or one of ``odd``."""
    other = st.one_of(st.none(), json_values, *odd)
    return st.integers(min_value=0, max_value=9).flatmap(lambda n: other if n == 0 else good)


gpu_entries = st.fixed_dictionaries(
    {"name": often(st.sampled_from(["NVIDIA A100-SXM4-80GB", "Tesla T4", "", " x "]))},
    optional={
        "index": often(st.integers(min_value=0, max_value=8), st.just(-1)),
        "uuid": often(st.sampled_from(["GPU-0", ""])),
        "compute_capability": often(st.sampled_from(["8.0", "9.0", "sm_90a", "86", " 8.6 ",
                                                     "12.0"]),
                                    st.just("9.x"), version_like),
        "memory_total_bytes": often(st.integers(min_value=0, max_value=1 << 45),
                                    st.just(-1), st.floats(), st.booleans()),
    },
)
hosts = st.fixed_dictionaries({}, optional={
    "os": often(st.just("linux")),
    "arch": often(st.just("x86_64")),
    "glibc": often(st.just("2.35")),
    "memory_total_bytes": often(st.integers(min_value=0, max_value=1 << 45), st.just(-1)),
    "cgroup_memory_limit_bytes": often(st.integers(min_value=0, max_value=1 << 45),
                                       st.just(-1)),
    "hostname": often(st.sampled_from(["node-07", "", "  ", " node-08 "])),
})
# Documents close to what `cudalock probe --json` writes, each field sometimes off.
plain_documents = st.fixed_dictionaries(
    {
        "schema_version": often(st.just(1), st.sampled_from([True, 1.0, 2, "1"])),
        "platform": often(st.sampled_from(["linux-x86_64", "macos-arm64", "linux-riscv64",
                                           "linux-x86_64\n"]),
                          st.just("Linux x86")),
    },
    optional={
        "name": often(st.sampled_from(["node-07", ""])),
        "driver_version": often(st.sampled_from(["535.104.05", "550.54.15", " 550.54.15"]),
                                st.just("535.x"), version_like),
        "driver_cuda": often(st.sampled_from(["12.2", "12020", "12.4.1"]),
                             st.just("twelve"), version_like),
        "gpus": often(st.lists(gpu_entries, max_size=4),
                      st.lists(gpu_entries.map(lambda g: {**g, "ram": 1}), min_size=1,
                               max_size=2)),
        "host": often(hosts, hosts.map(lambda h: {**h, "ram": 1})),
        "source": often(st.sampled_from(["nvml", ""])),
        "notes": often(st.lists(st.text(max_size=8), max_size=2)),
        "driver_verison": st.just("535.104.05"),  # an unknown field
    },
)
documents = st.one_of(plain_documents, near_documents, json_values)
names = st.sampled_from([None, "", "given"])
sources = st.sampled_from([None, "/fleet/a.json"])


@given(documents, names, sources)
@settings(max_examples=600)
def test_plain_reader_agrees_with_the_careful_one(document: Any, name: str | None,
                                                   read_from: str | None) -> None:
    assert_same(_plain_target(document, name, read_from, _Parsed()),
                checked(document, name, read_from))


@given(documents)
@settings(max_examples=300)
def test_probe_files_are_named_as_before(document: Any) -> None:
    # read_probe_file names a Target after its recorded hostname, else after the file.
    reference = checked(document, _recorded_hostname(document) or "stem", "/fleet/stem.json")
    assert_same(_plain_target(document, None, "/fleet/stem.json", _Parsed(),
                              file=Path("/fleet/stem.json")), reference)


@given(st.lists(plain_documents, max_size=6))
@settings(max_examples=200)
def test_one_parsed_shared_by_a_fleet(fleet: list[Any]) -> None:
    parsed = _Parsed()
    for document in fleet:
        assert_same(_plain_target(document, None, None, parsed), checked(document, None, None))


def test_plain_documents_take_the_plain_path() -> None:
    # What `cudalock probe --json` writes, however many GPUs, and a bare hand-written file.
    for target in (NODE, Target(platform="linux-aarch64")):
        document = json.loads(json.dumps(target.to_json()))
        ours = _plain_target(document, None, None, _Parsed())
        assert ours is not None
        assert_same(ours, checked(document, None, None))
    assert _plain_target({"schema_version": 1, "platform": "linux-x86_64"}, None, None,
                         _Parsed()) is not None


def test_target_from_json_reads_mappings_that_are_not_dicts() -> None:
    # Declined by the plain reader, read by the careful one.
    class Document(dict[str, Any]):
        pass

    document = Document(NODE.to_json())
    assert _plain_target(document, None, None, _Parsed()) is None
    assert target_from_json(document) == NODE


def write(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def node_document(**changes: Any) -> dict[str, Any]:
    return {**NODE.to_json(), **changes}


@pytest.mark.parametrize(("bad", "problem"), [
    # The first file has parsed these values already: the second must still be checked.
    ({"driver_version": "535.x"}, "invalid NVIDIA driver version '535.x'"),
    ({"gpus": [{"name": "x", "compute_capability": "9.x"}]},
     "gpus[0]: invalid compute capability '9.x'"),
    ({"notes": [1]}, "'notes' must be a list of strings"),
    ({"driver_version": "535.x", "notes": [1]}, "'notes' must be a list of strings"),
    ({"platform": "Linux x86"}, "'platform' 'Linux x86' is not a platform"),
    ({"host": {"hostname": 7}}, "'host.hostname' must be a string or null, got a number"),
])
def test_fleet_errors_are_those_of_the_file_alone(tmp_path: Path, bad: dict[str, Any],
                                                  problem: str) -> None:
    good = write(tmp_path / "good.json", node_document())
    worse = write(tmp_path / "bad.json", node_document(**bad))
    with pytest.raises(InputError) as alone:
        read_probe_file(worse)
    with pytest.raises(InputError) as in_fleet:
        read_probe_files([good, good, worse])
    assert alone.value.message == in_fleet.value.message
    assert alone.value.message.startswith(f"probe file {str(worse)!r}: {problem}")


def test_fleet_reads_as_each_file_alone(tmp_path: Path) -> None:
    paths = [write(tmp_path / f"n{i}.json",
                   node_document(host={"hostname": f"node{i % 3}"}, driver_cuda=f"12.{i % 2}"))
             for i in range(6)]
    fleet = read_probe_files(paths)
    assert [t.name for t in fleet] == [f"node{i % 3} (n{i}.json)" for i in range(6)]
    for target, path in zip(fleet, paths, strict=True):
        assert target == replace(read_probe_file(path), name=target.name)


@pytest.mark.parametrize("size", [0, 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 300_000])
def test_read_bytes_reads_whole_files(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(((bytes(range(256)) + b"\r\n\n") * (size // 259 + 1))[:size])
    assert _read_bytes(str(path)) == path.read_bytes()


def test_read_bytes_errors_are_those_of_path_read_bytes(tmp_path: Path) -> None:
    for path in (tmp_path / "absent.json", tmp_path):
        with pytest.raises(OSError) as ours:
            _read_bytes(str(path))
        with pytest.raises(OSError) as theirs:
            path.read_bytes()
        assert type(ours.value) is type(theirs.value)
        assert ours.value.strerror == theirs.value.strerror


def test_difflib_is_imported_only_for_suggestions() -> None:
    code = "import sys, cudalock.target.overrides; print('difflib' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True)
    assert shown.stdout.strip() == "False"
