"""A fleet from one pipeline: ``cudalock probe --json-lines`` on every node, read back from stdin
by ``--probe -`` (resolve, bootstrap, lock, audit).

The real pipeline through a real ``srun`` is in tests/e2e/test_slurm_fleet.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cudalock.errors import InputError
from cudalock.machine.probefiles import read_probe_stream
from cudalock.model import Gpu, Host, Target
from cudalock.versions import DriverVersion
from tests.support.cli import CUDALOCK, cudalock
from tests.support.index import offline_env


def node(name: str, driver: str, gpu: str, cc: tuple[int, int]) -> Target:
    return Target(
        "linux-x86_64",
        DriverVersion(driver),
        None,
        (Gpu(gpu, cc, index=0),),
        host=Host(os="linux", arch="x86_64", hostname=name),
        name="this machine",
        source="nvml",
    )


NODE_A = node("node-a", "570.86.15", "NVIDIA GeForce RTX 4090", (8, 9))
NODE_B = node("node-b", "535.104.05", "Tesla V100-SXM2-32GB", (7, 0))


def line(target: Target) -> str:
    return json.dumps(target.to_json(), separators=(",", ":"))


def test_json_lines_make_one_target_per_node() -> None:
    stream = f"{line(NODE_A)}\n{line(NODE_B)}\n".encode()
    targets = read_probe_stream(stream)
    assert [t.name for t in targets] == ["node-a", "node-b"]
    assert targets[1].driver_version == DriverVersion("535.104.05")
    assert targets[0].source == "file:stdin document 1"
    assert targets[0].notes[0] == "read from stdin document 1 (probed there via nvml)"


def test_pretty_documents_a_list_and_srun_labels_are_read_too() -> None:
    pretty = json.dumps(NODE_A.to_json(), indent=2) + "\n" + json.dumps(NODE_B.to_json(), indent=2)
    assert [t.name for t in read_probe_stream(pretty.encode())] == ["node-a", "node-b"]
    listed = json.dumps([NODE_A.to_json(), NODE_B.to_json()], indent=2)
    assert len(read_probe_stream(listed.encode())) == 2
    labelled = f"1: {line(NODE_B)}\n0: {line(NODE_A)}\n"
    assert [t.name for t in read_probe_stream(labelled.encode())] == ["node-b", "node-a"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "stdin holds no probe document"),
        (b"  \n\n", "stdin holds no probe document"),
        (f"{line(NODE_A)}\n{{not json\n".encode(), "probe document 2 is not valid JSON"),
        (b'{"schema_version": 1, "platform": "linux-x86_64", "colour": 1}\n', "document 1: "),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
)
def test_bad_streams_name_the_document(data: bytes, message: str) -> None:
    with pytest.raises(InputError, match=message):
        read_probe_stream(data)


def test_resolve_reads_a_fleet_from_stdin() -> None:
    stream = f"{line(NODE_A)}\n{line(NODE_B)}\n".encode()
    result = cudalock("resolve", "--probe", "-", "--json", stdin=stream)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    # node-b's 535.104.05 (CUDA 12.2) and Volta, node-a's Ada: 2.5.1+cu121 (as from files).
    assert plan["packages"][0]["version"] == "2.5.1+cu121"
    assert plan["target"] is None and len(plan["targets"]) == 2
    assert any("535.104.05 on node-b limits CUDA to 12.2" in s for s in plan["explanation"])


def test_stdin_and_files_together_and_same_hostnames(tmp_path: Path) -> None:
    path = tmp_path / "node-b.json"
    path.write_text(json.dumps(NODE_B.to_json()), encoding="utf-8")
    stream = f"{line(NODE_B)}\n".encode()
    result = cudalock("resolve", "--probe", "-", "--probe", str(path), "--json", stdin=stream)
    assert result.returncode == 0, result.stderr
    names = [t["name"] for t in json.loads(result.stdout)["targets"]]
    assert names == ["node-b (stdin document 1)", "node-b (node-b.json)"]


def test_probe_prints_json_lines() -> None:
    result = cudalock("probe", "--json-lines", "--driver-version", "535.104.05", "--gpu", "A100")
    assert result.returncode == 0, result.stderr
    (only,) = result.stdout.splitlines()
    document = json.loads(only)
    assert document["driver_version"] == "535.104.05"
    assert document["gpus"][0]["compute_capability"] == "8.0"
    # Back in as a fleet of one.
    again = cudalock("resolve", "--probe", "-", "--json", stdin=result.stdout.encode())
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["torch"]["variant"].startswith("cu")


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["resolve", "--probe", "-"], b"", "stdin holds no probe document"),
        (["resolve", "--probe", "-", "--probe", "-"], b"{}", "--probe - is given twice"),
        (
            ["audit", "--report", "-", "--probe", "-"],
            b"",
            "--report - and --probe - both read stdin",
        ),
    ],
)
def test_stdin_misuse_is_a_usage_error(args: list[str], stdin: bytes, message: str) -> None:
    result = cudalock(*args, stdin=stdin)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_an_endless_stdin_is_read_up_to_its_limit() -> None:
    # /dev/zero as stdin never ends: the stream is read up to its limit, then refused (exit 2).
    with open("/dev/zero", "rb") as endless:
        result = subprocess.run(
            [str(CUDALOCK), "resolve", "--probe", "-"],
            stdin=endless,
            env=offline_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 2, result.stderr
    assert "stdin holds more than 64 MiB of probe documents" in result.stderr
    assert "Traceback" not in result.stderr
