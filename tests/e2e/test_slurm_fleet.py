"""The fleet recipe through a real Slurm: srun runs ``cudalock probe --json-lines`` on every node
of the partition and ``cudalock resolve --probe -`` plans for them, in one pipeline.

The cluster has one node, so the fleet has one member; the pipeline is the one docs/commands.md
gives for a whole partition. Without Slurm's packages this is skipped, except under CI=true.
"""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from tests.support.cli import CUDALOCK
from tests.support.index import offline_env
from tests.support.slurm import SlurmCluster

pytestmark = pytest.mark.slurm


def test_srun_probe_json_lines_into_resolve(slurm_cluster: SlurmCluster) -> None:
    cudalock = shlex.quote(str(CUDALOCK))
    # The node has no NVIDIA driver: the flags describe the GPU node it stands in for.
    pipeline = (
        "set -o pipefail; "
        f"srun -p debug -N 1 --ntasks-per-node=1 {cudalock} probe --json-lines "
        "--driver-version 535.104.05 --gpu A100 "
        f"| {cudalock} resolve --probe - --json"
    )
    done = subprocess.run(
        ["bash", "-c", pipeline],
        env=offline_env(slurm_cluster.env),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    (target,) = plan["targets"]
    # The flags describe a GPU node, so the probe keeps none of this node's host facts (its
    # RAM and name would judge the GPU node by the wrong machine): named by its place.
    assert target["name"] == "stdin-1"
    assert target["host"]["hostname"] is None and target["host"]["memory_total_bytes"] is None
    assert target["driver_version"] == "535.104.05"
    assert target["source"] == "file:stdin document 1"
    assert plan["torch"]["variant"].startswith("cu")
