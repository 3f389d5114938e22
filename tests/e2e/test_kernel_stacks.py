"""CUDA-built packages next to torch, end to end: vllm, xformers and trl stacks.

Against the recorded real closures of ``tests/fixtures/closures/kernels-stack.json`` (vllm
0.6.6.post1 and 0.10.1.1, xformers, trl on torch 2.1.0: real names, versions and Requires-Dist
from PyPI) served on 127.0.0.1, with a stand-in PyTorch index whose variant pages serve the torch
family, xformers builds with the variant's label, and plain unlabelled copies of numpy and jinja2
as the real variant indexes do; the real cudalock CLI, real uv:

- a framework that pins torch chooses the torch: ``--framework vllm==0.6.6.post1`` on an A100
  with driver 530.30.02 (CUDA 12.1) gives torch 2.5.1+cu121, and ``resolve`` says so; plain
  ``--framework vllm`` passes over vllm 0.10.1.1 (a CUDA 12.8 build, which torch 2.7.1+cu118,
  the newest torch for that driver, cannot run beside) for 0.6.6.post1;
- every package the variant index builds is routed to it, in the first uv pass: vllm's xformers
  is 0.0.28.post3+cu121 from the cu121 index, numpy (a plain copy there) comes from PyPI, and uv
  runs once; ``--with xformers`` is accepted, ``--with numpy`` is refused;
- torch extras of the whole closure: vllm's transformers gets a version whose ``torch`` extra
  accepts torch 2.5.1; ``--torch 2.1.0 --framework trl==1.16.0`` is refused naming transformers
  and its torch extra, with a next step (an older trl, verified by uv) that works when followed;
- a framework pin no torch build fits is refused naming what it pins and the newest release that
  fits.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomlkit
from packaging.version import Version

from cudalock.matrix import default_matrix_dir
from tests.support.cli import cudalock
from tests.support.cli import locked_packages as locked
from tests.support.index import IndexServer, offline_env
from tests.support.realstack import (
    KERNELS_RECORDING,
    Recording,
    load_recording,
    serve_real_stack,
)

pytestmark = pytest.mark.slow

A100_CUDA_12_1 = ["--driver-version", "530.30.02", "--gpu", "A100", "--platform", "linux-x86_64"]


@pytest.fixture(scope="module")
def recording() -> Recording:
    return load_recording(KERNELS_RECORDING)


@pytest.fixture(scope="module")
def kernels(
    tmp_path_factory: pytest.TempPathFactory, recording: Recording
) -> Iterator[IndexServer]:
    # download.pytorch.org serves torch 2.5.1 for cu121 too; the recording has PyPI's cu124
    # build's metadata, served relabelled.
    cu121 = dataclasses.replace(recording.torch_build("2.5.1"), variant="cu121", cuda="12.1")
    with serve_real_stack(
        tmp_path_factory.mktemp("kernels"), recording, extra_builds=[cu121]
    ) as server:
        yield server


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    # uv's and cudalock's caches on, in this test's own directory.
    skip = ("UV_NO_CACHE", "CUDALOCK_NO_CACHE")
    environ = {k: v for k, v in offline_env().items() if k not in skip}
    environ["UV_CACHE_DIR"] = str(tmp_path / "uv-cache")
    environ["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return environ


def run(
    server: IndexServer, env: dict[str, str], command: str, *args: str, out: Path | None = None
) -> subprocess.CompletedProcess[str]:
    pytorch, pypi = server
    where = ["-o", str(out)] if out is not None else []
    return cudalock(
        command,
        *where,
        *A100_CUDA_12_1,
        "--python",
        "3.11",
        "--pytorch-index",
        pytorch,
        "--pypi-index",
        pypi,
        "--allow-insecure-index",
        *args,
        env=env,
        timeout=300,
    )


def transformers_torch_floor(recording: Recording, version: str) -> Version | None:
    """The torch floor of the recorded transformers release's 'torch' extra."""
    for line in recording.release("transformers", version).requires_dist:
        match = re.match(r"torch\s*>=\s*([\d.]+)\s*;.*extra\s*==\s*['\"]torch['\"]", line)
        if match:
            return Version(match[1])
    return None


def test_a_framework_that_pins_torch_chooses_it_and_its_variant_packages_route_in_one_pass(
    kernels: IndexServer, recording: Recording, env: dict[str, str], tmp_path: Path
) -> None:
    pytorch, pypi = kernels
    out = tmp_path / "vllm"
    out.mkdir()
    done = run(kernels, env, "lock", "--framework", "vllm==0.6.6.post1", out=out)
    assert done.returncode == 0, done.stderr
    pins = locked(out)
    assert pins["torch"] == ("2.5.1+cu121", f"{pytorch}/cu121")
    assert pins["xformers"] == ("0.0.28.post3+cu121", f"{pytorch}/cu121")
    assert pins["vllm"] == ("0.6.6.post1", pypi)
    # What the variant's torch pins exactly comes from its index too: triton carries no label.
    assert pins["triton"] == ("3.1.0", f"{pytorch}/cu121")
    assert pins["nvidia-cudnn-cu12"] == ("9.1.0.70", f"{pytorch}/cu121")
    assert "triton==3.1.0" in done.stderr and "torch 2.5.1+cu121 pins them exactly" in done.stderr
    # The variant index's plain copy of numpy is not PyPI's numpy with a label: PyPI's.
    assert pins["numpy"][1] == pypi
    # vllm's transformers: uv alone takes the newest (whose 'torch' extra needs torch >= 2.6).
    floor = transformers_torch_floor(recording, pins["transformers"][0])
    assert floor is None or floor <= Version("2.5.1"), pins["transformers"]
    assert "transformers 5.24.0 is in the closure" in done.stderr
    assert done.stderr.count("  uv: Resolved") == 1, done.stderr
    assert "resolving again" not in done.stderr


def test_the_newest_framework_release_whose_build_fits_chooses_the_torch(
    kernels: IndexServer, env: dict[str, str], tmp_path: Path
) -> None:
    pytorch, _pypi = kernels
    out = tmp_path / "vllm-any"
    out.mkdir()
    done = run(kernels, env, "lock", "--framework", "vllm", out=out)
    assert done.returncode == 0, done.stderr
    pins = locked(out)
    assert pins["vllm"][0] == "0.6.6.post1"
    assert pins["torch"] == ("2.5.1+cu121", f"{pytorch}/cu121")
    assert pins["xformers"] == ("0.0.28.post3+cu121", f"{pytorch}/cu121")
    assert "torchaudio" not in pins  # vllm 0.10.1.1 requires it; 0.6.6.post1 does not
    assert done.stderr.count("  uv: Resolved") == 1, done.stderr
    shown = run(kernels, env, "resolve", "--framework", "vllm")
    assert "vllm 0.10.1.1 is built for CUDA 12" in shown.stdout, shown.stdout


def test_resolve_shows_the_framework_release_that_goes_with_the_torch(
    kernels: IndexServer, env: dict[str, str]
) -> None:
    done = run(kernels, env, "resolve", "--framework", "vllm==0.6.6.post1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("torch 2.5.1+cu121")
    assert "Frameworks: vllm 0.6.6.post1 goes with torch 2.5.1+cu121" in done.stdout
    assert "does not record the CUDA it was built for" not in done.stdout


def test_a_framework_release_whose_cuda_build_is_not_recorded_is_said_unverified(
    kernels: IndexServer, env: dict[str, str], tmp_path: Path
) -> None:
    # A release cuda_builds.toml lacks (one newer than the last refresh): the plan cannot have
    # judged its CUDA, and says so instead of presenting it as checked.
    matrix = tmp_path / "matrix"
    shutil.copytree(default_matrix_dir(), matrix)
    builds = matrix / "cuda_builds.toml"
    doc = tomlkit.parse(builds.read_text(encoding="utf-8"))
    kept = [
        entry
        for entry in doc["build"]
        if (entry["package"], entry["version"]) != ("vllm", "0.6.6.post1")
    ]
    doc["build"].clear()
    doc["build"].extend(kept)
    builds.write_text(tomlkit.dumps(doc), encoding="utf-8")
    done = run(kernels, env, "resolve", "--framework", "vllm==0.6.6.post1", "--matrix", str(matrix))
    assert done.returncode == 0, done.stderr
    assert (
        "vllm 0.6.6.post1 is built against torch, but the matrix does not record the CUDA it "
        "was built for (cuda_builds.toml): unverified until `cudalock lock` reads it"
    ) in done.stdout


def test_with_accepts_what_the_variant_index_builds_and_refuses_a_plain_copy(
    kernels: IndexServer, env: dict[str, str], tmp_path: Path
) -> None:
    pytorch, _pypi = kernels
    out = tmp_path / "xformers"
    out.mkdir()
    done = run(kernels, env, "lock", "--torch", "2.5.1", "--with", "xformers", out=out)
    assert done.returncode == 0, done.stderr
    assert locked(out)["xformers"] == ("0.0.28.post3+cu121", f"{pytorch}/cu121")
    # triton has no label, but it is what the variant's torch pins: accepted, from that index.
    done = run(kernels, env, "lock", "--torch", "2.5.1", "--with", "triton", out=out)
    assert done.returncode == 0, done.stderr
    assert locked(out)["triton"] == ("3.1.0", f"{pytorch}/cu121")
    refused = run(kernels, env, "lock", "--torch", "2.5.1", "--with", "numpy", out=out)
    assert refused.returncode == 2, refused.stderr
    assert f"--with numpy: {pytorch}/cu121 serves no numpy build for this plan (cu121)" in (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr


def test_a_closure_package_whose_torch_extra_rejects_the_torch_is_named_with_a_next_step(
    kernels: IndexServer, recording: Recording, env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "trl"
    out.mkdir()
    done = run(kernels, env, "lock", "--torch", "2.1.0", "--framework", "trl==1.16.0", out=out)
    assert done.returncode == 1, done.stderr
    assert "trl==1.16.0 does not fit torch 2.1.0+cu121" in done.stderr
    assert "transformers[torch] (torch>=2.6 (its 'torch' extra))" in done.stderr
    hint = re.search(r"hint: Give --framework '(trl==[^']+)'", done.stderr)
    assert hint is not None, done.stderr
    assert not list(out.iterdir())
    # The next step works when followed.
    done = run(kernels, env, "lock", "--torch", "2.1.0", "--framework", hint[1], out=out)
    assert done.returncode == 0, done.stderr
    pins = locked(out)
    assert pins["torch"][0] == "2.1.0+cu121"
    floor = transformers_torch_floor(recording, pins["transformers"][0])
    assert floor is None or floor <= Version("2.1.0"), pins["transformers"]


def test_a_framework_pin_that_conflicts_with_torch_names_the_newest_release_that_fits(
    kernels: IndexServer, env: dict[str, str], tmp_path: Path
) -> None:
    done = run(kernels, env, "lock", "--torch", "2.5.1", "--framework", "vllm==0.10.1.1")
    assert done.returncode == 1, done.stderr
    assert "vllm 0.10.1.1 requires torch==2.7.1" in done.stderr
    # torch 2.7.1 has a build this driver runs (cu118), but vllm's CUDA 12 build cannot run
    # beside it: said, with the driver a CUDA 12 torch 2.7.1 needs, not "--torch 2.7.1".
    assert (
        "torch 2.7.1+cu118 runs here, but vllm 0.10.1.1 is built for CUDA 12 against torch "
        "2.7.1; this torch is 2.7.1+cu118"
    ) in done.stderr
    assert (
        "the newest vllm that accepts torch 2.5.1+cu121 is 0.6.6.post1 (uv resolves its closure)"
    ) in done.stderr
    hint = re.search(
        r"hint: Give --framework '(vllm==[^']+)', or run vllm 0.10.1.1 on a driver ≥ ([\d.]+)",
        done.stderr,
    )
    assert hint is not None, done.stderr
    assert hint[1] == "vllm==0.6.6.post1"
    assert "--torch '==2.7.1'" not in done.stderr
    # The next step works when followed.
    out = tmp_path / "followed"
    out.mkdir()
    followed = run(kernels, env, "lock", "--torch", "2.5.1", "--framework", hint[1], out=out)
    assert followed.returncode == 0, followed.stderr
    assert locked(out)["vllm"][0] == "0.6.6.post1"


def test_a_variant_index_whose_project_list_cannot_be_read_is_said_not_dropped(
    kernels: IndexServer, env: dict[str, str], tmp_path: Path
) -> None:
    pytorch, _pypi = kernels
    out = tmp_path / "no-list"
    out.mkdir()
    kernels.fail("/whl/cu121/", status=404)
    try:
        done = run(kernels, env, "lock", "--torch", "2.5.1", "--with", "xformers", out=out)
    finally:
        kernels.clear_faults()
    assert done.returncode == 2, done.stderr
    assert (
        f"--with xformers: {pytorch}/cu121 serves no xformers build for this plan "
        "(its project list could not be read (404))"
    ) in done.stderr
    assert "Traceback" not in done.stderr


def test_a_framework_whose_large_wheel_has_no_pep_658_metadata_is_read_and_named(
    kernels: IndexServer, env: dict[str, str], tmp_path: Path
) -> None:
    """vllm 0.33.0's 321 MiB wheels have no PEP 658 file: their METADATA is read by range
    requests, and the refusal says what it pins and why that torch cannot run here."""
    out = tmp_path / "vllm-0.33"
    out.mkdir()
    done = run(kernels, env, "lock", "--framework", "vllm==0.33.0", out=out)
    assert done.returncode == 1, done.stderr
    assert "vllm 0.33.0 requires torch==2.14.0" in done.stderr
    assert "no such torch runs here" in done.stderr
    assert "driver 530.30.02 supports CUDA 12.1" in done.stderr
    assert "the newest vllm that accepts torch 2.5.1+cu121 is 0.6.6.post1 (uv resolves" in (
        done.stderr
    )
    # The lowest driver any torch 2.14.0 build needs (the cu126 one's), not the newest's.
    assert (
        "hint: Give --framework 'vllm==0.6.6.post1', or run vllm 0.33.0 on a driver ≥ 560.28.03"
        in done.stderr
    )
    wheel = kernels.file_path("vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    # Read in parts, by cudalock and by uv, never downloaded whole.
    assert {s for m, p, s in kernels.requests if p == wheel and m == "GET"} == {206}
    assert not list(out.iterdir())


@pytest.mark.parametrize(
    ("asked", "built", "driver", "next_release"),
    [
        (
            "vllm==0.10.1.1",
            "vllm 0.10.1.1 is built for CUDA 12 against torch 2.7.1",
            "560.28.03",
            "vllm==0.6.6.post1",
        ),
        (
            "xformers==0.0.31",
            "xformers 0.0.31 is built for CUDA 12.8 against torch 2.7.1+cu126",
            "570.26",
            "xformers==0.0.28.post3",
        ),
    ],
)
def test_a_release_built_for_a_cuda_this_target_cannot_run_names_a_resolved_next_step(
    kernels: IndexServer,
    env: dict[str, str],
    tmp_path: Path,
    asked: str,
    built: str,
    driver: str,
    next_release: str,
) -> None:
    """On driver 530.30.02 (CUDA 12.1) the torch such a release pins has a build that runs (cu118),
    but the release's own CUDA 12 build cannot run beside it: the refusal says so, names the
    newest release whose closure uv resolves, and the driver the asked one needs."""
    out = tmp_path / "asked"
    out.mkdir()
    done = run(kernels, env, "lock", "--framework", asked, out=out)
    assert done.returncode == 1, done.stderr
    name, version = asked.split("==")
    next_version = next_release.split("==")[1]
    assert f"{name} {version} requires torch==2.7.1" in done.stderr
    assert f"torch 2.7.1+cu118 runs here, but {built}; this torch is 2.7.1+cu118" in done.stderr
    assert f"is {next_version} (uv resolves its closure)" in done.stderr
    hint = (
        f"hint: Give --framework '{next_release}', or run {name} {version} on a driver ≥ {driver}"
    )
    assert hint in done.stderr
    assert not list(out.iterdir())
    # The next step works when followed (xformers from the variant index, with its label).
    followed = run(kernels, env, "lock", "--framework", next_release, out=out)
    assert followed.returncode == 0, followed.stderr
    assert locked(out)[name][0].split("+")[0] == next_version
