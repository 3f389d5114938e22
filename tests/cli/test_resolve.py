"""`cudalock resolve` through the real console script: exit codes 0/1/2, JSON shape, output.

Expected plans are derived in tests/resolve/test_shipped_matrix.py; here they check the
command's wiring:
RTX 5090 (12.0) on 570.86.15 (CUDA 12.8) → torch 2.11.0+cu128 with torchvision 0.26.0+cu128.
Commands whose answer depends on which releases exist run with ``--matrix`` on the shipped
matrix up to the releases those expectations know (tests/support/known_matrix.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cudalock.model import Gpu, Target
from cudalock.versions import DriverVersion
from tests.support.cli import cudalock
from tests.support.index import offline_env

BLACKWELL = ("--driver-version", "570.86.15", "--gpu", "RTX 5090")


def test_json_plan(known_matrix_dir: Path) -> None:
    result = cudalock("resolve", "--matrix", known_matrix_dir, *BLACKWELL, "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert list(plan)[:6] == ["matrix_version", "python", "platform", "compat", "torch", "packages"]
    assert plan["python"] == "3.14"
    assert plan["torch"]["version"] == "2.11.0"
    assert plan["torch"]["variant"] == "cu128"
    assert plan["torch"]["cuda"] == "12.8"
    assert plan["torch"]["index_url"] == "https://download.pytorch.org/whl/cu128"
    assert plan["packages"] == [
        {
            "name": "torch",
            "version": "2.11.0+cu128",
            "index_url": "https://download.pytorch.org/whl/cu128",
        },
        {
            "name": "torchvision",
            "version": "0.26.0+cu128",
            "index_url": "https://download.pytorch.org/whl/cu128",
        },
    ]
    assert plan["target"]["driver_version"] == "570.86.15"
    assert plan["target"]["gpus"][0]["compute_capability"] == "12.0"
    assert plan["rejected"][0] == {
        "torch": "2.15.0",
        "variant": "cu132",
        "reason": "torch 2.15.0+cu132: CUDA 13.2 needs driver ≥ 595.45.04; "
        "driver 570.86.15 supports CUDA 12.8",
        "fix": "Upgrade to driver ≥ 595.45.04.",
        "fixes": [
            {
                "changes": [{"kind": "driver", "value": "595.45.04"}],
                "torch": "2.15.0",
                "variant": "cu132",
                "text": "upgrade to driver ≥ 595.45.04",
            }
        ],
    }


def test_text_summary_says_what_where_why_and_how_to_bootstrap(known_matrix_dir: Path) -> None:
    result = cudalock("resolve", "--matrix", known_matrix_dir, *BLACKWELL, "--with", "deepspeed")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("torch 2.11.0+cu128  (CUDA 12.8")
    assert "torch==2.11.0+cu128" in out and "from https://download.pytorch.org/whl/cu128" in out
    assert "deepspeed==" in out and "from PyPI" in out
    assert "Driver 570.86.15 limits CUDA to 12.8." in out
    assert "Not chosen (newest first):" in out
    assert (
        "cudalock bootstrap --driver-version 570.86.15 --gpu 'RTX 5090' "
        f"--matrix {known_matrix_dir} --with deepspeed"
    ) in out


def test_nothing_fits_json_exits_1(known_matrix_dir: Path) -> None:
    # torch ≥ 2.15 has only CUDA 13.x builds; 535.104.05 is below 13.0's 580.65.06.
    result = cudalock(
        "resolve",
        "--matrix",
        known_matrix_dir,
        "--driver-version",
        "535.104.05",
        "--compute-capability",
        "8.0",
        "--torch",
        ">=2.15",
        "--json",
    )
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["error"].startswith(
        "nothing in the matrix (1.13–2.15) fits this target with torch >=2.15"
    )
    assert [(r["torch"], r["variant"]) for r in document["rejected"]] == [
        ("2.15.0", "cu132"),
        ("2.15.0", "cu130"),
    ]
    assert "580.65.06" in document["hint"]
    assert "Traceback" not in result.stderr


def test_nothing_fits_text_exits_1_with_candidates(known_matrix_dir: Path) -> None:
    result = cudalock(
        "resolve",
        "--matrix",
        known_matrix_dir,
        "--driver-version",
        "535.104.05",
        "--compute-capability",
        "8.0",
        "--torch",
        ">=2.15",
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert "Nearest candidates (newest first):" in result.stderr
    assert (
        "cudalock: error: nothing in the matrix (1.13–2.15) fits this target with torch >=2.15"
        in result.stderr
    )
    assert "hint: Upgrade the driver to ≥ 595.45.04 for torch 2.15.0+cu132" in result.stderr
    assert "≥ 580.65.06, the smallest upgrade that opens a build" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--torch", ">=x"), "'>=x'"),
        (("--python", "three"), "'three'"),
        (("--cuda", "twelve"), "'twelve'"),
        (("--compat", "loose"), "'loose'"),
        (("--with", "numpy>>1"), "'numpy>>1'"),
        (("--pytorch-index", "ftp://mirror/whl"), "ftp://mirror/whl"),
    ],
)
def test_bad_values_exit_2_with_one_line(flags: tuple[str, ...], named: str) -> None:
    result = cudalock("resolve", "--no-gpu", *flags)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("cudalock: error: ")
    assert named in result.stderr
    assert "Traceback" not in result.stderr


def test_pytorch_index_from_the_environment(known_matrix_dir: Path) -> None:
    result = cudalock(
        "resolve",
        "--matrix",
        known_matrix_dir,
        *BLACKWELL,
        "--json",
        env=offline_env() | {"CUDALOCK_PYTORCH_INDEX": "https://mirror.example.org/whl"},
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["torch"]["index_url"] == "https://mirror.example.org/whl/cu128"


def test_no_driver_is_said_loudly() -> None:
    result = cudalock("resolve", "--no-gpu")
    assert result.returncode == 0, result.stderr
    assert "NO NVIDIA DRIVER" in result.stdout
    assert "+cpu" in result.stdout


def test_fleet_from_probe_files(tmp_path: Path, known_matrix_dir: Path) -> None:
    # node-b's 535.104.05 (CUDA 12.2) and Volta, node-a's Ada: 2.5.1+cu121, the newest build
    # for the driver's own CUDA major (see test_shipped_matrix).
    files = []
    for name, driver, gpu, cc in (
        ("node-a", "570.86.15", "NVIDIA GeForce RTX 4090", (8, 9)),
        ("node-b", "535.104.05", "Tesla V100-SXM2-32GB", (7, 0)),
    ):
        target = Target("linux-x86_64", DriverVersion(driver), None, (Gpu(gpu, cc),), name=name)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(target.to_json()), encoding="utf-8")
        files += ["--probe", str(path)]
    result = cudalock("resolve", "--matrix", known_matrix_dir, *files, "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["packages"][0]["version"] == "2.5.1+cu121"
    assert plan["target"] is None and len(plan["targets"]) == 2
    assert any("535.104.05 on node-b limits CUDA to 12.2" in s for s in plan["explanation"])


def test_resolve_stays_import_light() -> None:
    # The resolve path must not pay for the network, TOML writing or rich rendering.
    script = (
        "import sys\n"
        "from cudalock.cli.main import run\n"
        "try:\n"
        "    run(['resolve', '--driver-version', '570.86.15', '--gpu', 'RTX 5090', '--json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ['requests', 'tomlkit', 'rich', 'torch', 'urllib3', 'packaging.requirements']\n"
        "print([m for m in heavy if m in sys.modules], file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.stderr.strip().splitlines()[-1] == "[]", result.stderr


def test_v100_on_470_gives_the_practical_next_step(known_matrix_dir: Path) -> None:
    result = cudalock(
        "resolve",
        "--matrix",
        known_matrix_dir,
        "--driver-version",
        "470.82.01",
        "--gpu",
        "V100",
    )
    assert result.returncode == 1
    assert "cudalock: error: nothing in the matrix (1.13–2.15) fits this target" in result.stderr
    assert "hint: With --compat minor, torch 2.7.1+cu118 would run on this driver" in result.stderr
    assert "upgrade the driver to ≥ 560.28.03 for torch 2.14.1+cu126" in result.stderr
    assert "Traceback" not in result.stderr


def _toolkit_node(tmp_path: Path, toolkit: str | None) -> Path:
    """An H100 on 550.54.15 (CUDA 12.4) with a CUDA ``toolkit`` (None: no toolkit)."""
    path = tmp_path / f"node-{toolkit}.json"
    host: dict[str, object] = {"hostname": "gpu-1"}
    if toolkit is not None:
        host |= {"cuda_toolkit": toolkit, "cuda_toolkit_path": f"/opt/cuda-{toolkit}/bin/nvcc"}
    document = {
        "schema_version": 1,
        "platform": "linux-x86_64",
        "driver_version": "550.54.15",
        "driver_cuda": "12.4",
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}],
        "host": host,
    }
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("toolkit", "stack", "torch"),
    [
        # No toolkit: the driver's own major, newest minor ≤ 12.4: 2.6.0+cu124.
        (None, ["--with", "deepspeed"], "2.6.0+cu124"),
        # A 12.1 toolkit and nothing that compiles CUDA: the toolkit does not matter.
        ("12.1", [], "2.6.0+cu124"),
        # A 12.1 toolkit and DeepSpeed 0.19.8, whose op builder accepts 12.1 beside a 12.4 torch
        # (both in its cuda_minor_mismatch_ok list): the newer 2.6.0+cu124.
        ("12.1", ["--with", "deepspeed"], "2.6.0+cu124"),
        # DeepSpeed 0.14.0's list ends at 12.3: it refuses 12.1 beside 12.4, so 2.5.1+cu121.
        ("12.1", ["--with", "deepspeed==0.14.0"], "2.5.1+cu121"),
        # flash-attn builds with torch's cpp_extension, which checks the major only.
        ("12.1", ["--framework", "flash-attn"], "2.6.0+cu124"),
        # A 12.2 toolkit: no torch has cu122, so its major: the newest 12.x ≤ 12.4, 2.6.0+cu124.
        ("12.2", ["--with", "deepspeed"], "2.6.0+cu124"),
        # An 11.8 toolkit (older than the node's CUDA 12): 2.7.1+cu118, the newest it builds for.
        ("11.8", ["--with", "deepspeed"], "2.7.1+cu118"),
    ],
)
def test_the_toolkit_chooses_the_cuda_when_the_stack_compiles_cuda(
    known_matrix_dir: Path, tmp_path: Path, toolkit: str | None, stack: list[str], torch: str
) -> None:
    probe = _toolkit_node(tmp_path, toolkit)
    result = cudalock("resolve", "--matrix", known_matrix_dir, "--probe", probe, *stack, "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["packages"][0]["version"] == torch
    said = " ".join(plan["explanation"])
    if stack == ["--with", "deepspeed"] and toolkit == "12.1":
        assert (
            "the builds the CUDA 12.1 toolkit at /opt/cuda-12.1/bin/nvcc is compatible with for "
            "DeepSpeed's ops (DeepSpeed 0.19.8's op builder accepts another CUDA 12 minor when "
            "both are in its list: 12.0, 12.1, 12.2, 12.3, 12.4, 12.5, 12.6, 12.8, 12.9)"
        ) in said
    if stack == ["--with", "deepspeed==0.14.0"]:
        assert plan["alternative"]["torch"] == "2.6.0"
        assert plan["alternative"]["variant"] == "cu124"
        assert (
            "its CUDA 12.4 does not match the CUDA 12.1 toolkit, and DeepSpeed 0.14.0's op "
            "builder refuses that minor mismatch (unless DS_SKIP_CUDA_CHECK=1)"
        ) in plan["alternative"]["reason"]
    if stack == ["--framework", "flash-attn"]:
        assert (
            "torch's cpp_extension refuses a torch of another CUDA major and only warns on "
            "another minor"
        ) in said


@pytest.mark.parametrize(
    ("branch", "cuda", "first"),
    [
        # The branch's first release in the driver table: 570.26 (12.8), 550.54.14 (12.4).
        ("570", "12.8", "570.26"),
        ("550", "12.4", "550.54.14"),
    ],
)
def test_a_driver_branch_means_that_branch(
    known_matrix_dir: Path, branch: str, cuda: str, first: str
) -> None:
    for command in ("probe", "resolve"):
        result = cudalock(
            command, "--matrix", known_matrix_dir, "--driver-version", branch, "--json"
        )
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        target = document if command == "probe" else document["target"]
        assert (target["driver_version"], target["driver_cuda"]) == (branch, cuda)
        notes = " ".join(target["notes"])
        assert f"taken as the R{branch} branch" in notes and first in notes
        assert "no NVIDIA driver found" not in notes


def test_rtx_5090_on_the_570_branch_gets_cu128(known_matrix_dir: Path) -> None:
    # 570 → 12.8 (not 570.0 → 12.6, which has no sm_120 build): 2.11.0+cu128.
    result = cudalock(
        "resolve", "--matrix", known_matrix_dir, "--driver-version", "570", "--gpu", "RTX 5090"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("torch 2.11.0+cu128")
    assert "Assumed: driver 570 is taken as the R570 branch" in result.stdout
    assert "NO NVIDIA DRIVER" not in result.stdout and "no NVIDIA driver" not in result.stdout
