"""Property tests: the parsers and the probe-file reader fail only with InputError.

Whatever a user types into a flag or a probe file, cudalock answers with a one-line InputError
(exit 2), never with a traceback from a ValueError, KeyError or TypeError deep inside.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cudalock.errors import InputError
from cudalock.machine import read_probe_file, target_from_json
from cudalock.model import Gpu, Host, Target
from cudalock.versions import (
    DriverVersion,
    parse_compute_capability,
    parse_cuda_version,
    parse_driver_version,
)

# Text biased towards the characters version strings are made of, plus anything at all.
version_like = st.one_of(
    st.text(alphabet="0123456789._-smcompute_af ", max_size=16),
    st.text(max_size=16),
    st.sampled_from(["¹²³⁴", "١٢.١", "٥٣٥.١", "12020\n", "sm_", "sm_120a", "0000", "1e3"]),
)


@given(version_like)
def test_parse_driver_version_only_raises_input_error(text: str) -> None:
    try:
        version = parse_driver_version(text)
    except InputError as err:
        assert repr(text) in err.message
    else:
        assert all(isinstance(p, int) for p in version.parts)
        assert str(version).isascii()


@given(version_like)
def test_parse_cuda_version_only_raises_input_error(text: str) -> None:
    try:
        major, minor = parse_cuda_version(text)
    except InputError:
        pass
    else:
        assert 0 <= minor <= 99 and 0 <= major <= 99


@given(version_like)
def test_parse_compute_capability_only_raises_input_error(text: str) -> None:
    try:
        major, minor = parse_compute_capability(text)
    except InputError as err:
        assert repr(text) in err.message
    else:
        assert 0 <= major <= 99 and 0 <= minor <= 9


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
# Documents close to the real schema, with fields swapped for arbitrary values.
field_values: dict[str, Any] = {
    "schema_version": st.one_of(st.just(1), json_values),
    "platform": st.one_of(st.sampled_from(["linux-x86_64", "macos-arm64"]), json_values),
    "driver_version": st.one_of(st.none(), version_like, json_values),
    "driver_cuda": st.one_of(st.none(), version_like, json_values),
    "gpus": st.one_of(
        st.lists(
            st.fixed_dictionaries(
                {"name": st.one_of(st.text(max_size=8), json_values)},
                optional={
                    "compute_capability": st.one_of(version_like, json_values),
                    "index": json_values,
                    "memory_total_bytes": json_values,
                    "uuid": json_values,
                },
            ),
            max_size=3,
        ),
        json_values,
    ),
    "host": st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["os", "glibc", "memory_total_bytes", "hostname", "x"]),
            json_values,
            max_size=3,
        ),
        json_values,
    ),
    "notes": st.one_of(st.lists(st.text(max_size=8), max_size=2), json_values),
    "name": json_values,
    "source": json_values,
}
near_documents = st.fixed_dictionaries({}, optional=field_values)


@given(st.one_of(json_values, near_documents))
@settings(max_examples=300)
def test_target_from_json_only_raises_input_error(document: Any) -> None:
    try:
        target = target_from_json(document, "x")
    except InputError:
        return
    assert isinstance(target, Target)
    # Whatever was accepted writes back out as a valid document that reads the same.
    assert target_from_json(json.loads(json.dumps(target.to_json())), "x") == target


@given(st.binary(max_size=64))
@settings(max_examples=100)
def test_read_probe_file_only_raises_input_error(tmp_path_factory: Any, content: bytes) -> None:
    path: Path = tmp_path_factory.mktemp("probe") / "probe.json"
    path.write_bytes(content)
    try:
        read_probe_file(path)
    except InputError as err:
        assert str(path) in err.message


probe_targets = st.builds(
    Target,
    platform=st.sampled_from(
        ["linux-x86_64", "linux-aarch64", "windows-x86_64", "macos-arm64", "linux-ppc64le"]
    ),
    driver_version=st.one_of(
        st.none(),
        st.sampled_from(["535.104.05", "470.57.02", "580.65.06", "537.13"]).map(DriverVersion),
    ),
    driver_cuda=st.one_of(st.none(), st.sampled_from([(12, 2), (11, 4), (13, 0)])),
    gpus=st.lists(
        st.builds(
            Gpu,
            name=st.sampled_from(["NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA GeForce RTX 5090"]),
            compute_capability=st.one_of(st.none(), st.sampled_from([(8, 0), (7, 5), (12, 0)])),
            index=st.one_of(st.none(), st.integers(min_value=0, max_value=7)),
            uuid=st.one_of(st.none(), st.just("GPU-0")),
            memory_total_bytes=st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 40)),
        ),
        max_size=4,
    ).map(tuple),
    host=st.builds(
        Host,
        os=st.sampled_from(["linux", None]),
        glibc=st.sampled_from(["2.35", None]),
        memory_total_bytes=st.one_of(st.none(), st.integers(min_value=0, max_value=2**63 - 1)),
        hostname=st.sampled_from(["node-07", None]),
    ),
    name=st.sampled_from(["node-07", "this machine"]),
    source=st.sampled_from(["nvml", "procfs", "override"]),
    notes=st.lists(st.text(max_size=20), max_size=2).map(tuple),
)


@given(probe_targets)
def test_probe_documents_round_trip(target: Target) -> None:
    """Whatever 'cudalock probe --json' writes reads back as the same Target."""
    assert target_from_json(json.loads(json.dumps(target.to_json()))) == target
